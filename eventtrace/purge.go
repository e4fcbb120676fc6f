package eventtrace

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
)

// purgeBatch is how many rows one DELETE removes: small, so that no statement holds locks
// long enough to slow the writer.
const purgeBatch = 1000

// Purge deletes the rows older than before, purgeBatch rows per statement, and returns how
// many it deleted. The day rows of task results and the registered jobs are kept: a row a day,
// and what "since online" (and a week longer than the retention) is counted from.
func (t *DB) Purge(ctx context.Context, before time.Time) (int64, error) {
	if err := t.Ready(ctx); err != nil {
		return 0, err
	}
	tables := [][2]string{{ExecutionLog, "start_time"}, {StatusTraceLog, "creation_time"},
		{TaskRunningStats, "statistics_time"}, {JobRunningStats, "statistics_time"}}
	for _, iv := range intervals {
		if iv != Day {
			tables = append(tables, [2]string{iv.table(), "statistics_time"})
		}
	}
	var total int64
	for _, tc := range tables {
		table, col := tc[0], tc[1]
		stmt := t.q("DELETE FROM " + table + " WHERE id IN (SELECT id FROM " + table + " WHERE " + col + " < ? LIMIT ?)")
		if t.d.deleteLimit {
			stmt = "DELETE FROM " + table + " WHERE " + col + " < ? LIMIT ?"
		}
		for ctx.Err() == nil {
			release, err := t.writeTurn(ctx)
			if err != nil {
				break
			}
			res, err := t.db.ExecContext(ctx, stmt, t.ts(before), purgeBatch)
			release()
			if err != nil {
				return total, fmt.Errorf("purge %s: %w", table, err)
			}
			n, _ := res.RowsAffected()
			total += n
			if n < purgeBatch {
				break
			}
		}
	}
	return total, ctx.Err()
}

// RunPurge purges rows older than retention at once and then every interval, until ctx ends.
func (t *DB) RunPurge(ctx context.Context, retention, interval time.Duration, log logrus.FieldLogger) {
	for {
		n, err := t.Purge(ctx, time.Now().Add(-retention))
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.WithError(err).Warn("event trace retention: purge failed; retrying at the next period")
		case n > 0:
			log.WithFields(logrus.Fields{"rows": n, "retention": retention}).Info("event trace retention: old rows purged")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
