// Package eventtrace is ejcloud's event trace database (SPEC §9): the JOB_EXECUTION_LOG and
// JOB_STATUS_TRACE_LOG of Elastic-Job-Cloud, its statistics tables, the searches and statistics
// the REST API answers with, and the retention purge. Only the scheduler writes, through Writer,
// which batches events asynchronously so that no database latency reaches the offer cycle.
//
//	status update recorded → Writer.Offer (never blocks) → batch → one transaction
//	leader: Statistics.Run (minute/hour/day rows, gaps filled with zeros), Purge (retention)
//	API: Executions, StatusTraces, statistics queries
//
// SQL is built from fixed fragments and whitelisted column names only; every value is a
// placeholder.
package eventtrace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)

// Table names, as Elastic-Job-Cloud names them.
const (
	ExecutionLog       = "JOB_EXECUTION_LOG"
	StatusTraceLog     = "JOB_STATUS_TRACE_LOG"
	taskResultPrefix   = "TASK_RESULT_STATISTICS_"
	TaskRunningStats   = "TASK_RUNNING_STATISTICS"
	JobRunningStats    = "JOB_RUNNING_STATISTICS"
	JobRegisterStats   = "JOB_REGISTER_STATISTICS"
	timeLayoutSQLite   = "2006-01-02 15:04:05.000"
	defaultMaxOpenConn = 4
)

// dialect is what differs between the databases: the driver, placeholders, column types and
// the batched delete.
type dialect struct {
	name        string // sqlite, postgres, mysql
	driver      string
	dsn         string
	serial      string // an auto-increment primary key column
	stamp       string // a timestamp column type
	text        string // a long text column type
	dollar      bool   // placeholders are $1, $2… rather than ?
	tableOpts   string // after CREATE TABLE's columns
	deleteLimit bool   // DELETE … LIMIT n (MySQL); else DELETE … WHERE id IN (SELECT … LIMIT n)
}

// parseDSN reads an --event-trace-db DSN: sqlite:///path/file.db, postgres://…, postgresql://…,
// mysql://user:pass@tcp(host:port)/db or mysql://user:pass@host:port/db.
func parseDSN(dsn string) (dialect, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dialect{}, fmt.Errorf("%q is not a DSN: want sqlite:///path/file.db, postgres://… or mysql://…", redact(dsn))
	}
	switch scheme {
	case "sqlite":
		path := rest
		if q := strings.IndexByte(path, '?'); q >= 0 {
			path = path[:q]
		}
		if !strings.HasPrefix(path, "/") || len(path) < 2 {
			return dialect{}, fmt.Errorf("sqlite DSN %q: want sqlite:///absolute/path/file.db", dsn)
		}
		// WAL lets the API read while the writer writes; busy_timeout makes writers wait for
		// each other instead of failing with SQLITE_BUSY, and immediate transactions take the
		// write lock at BEGIN, where that wait applies (a read-then-write upgrade fails at once).
		return dialect{name: "sqlite", driver: "sqlite", dsn: "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_txlock=immediate",
			serial: "INTEGER PRIMARY KEY AUTOINCREMENT", stamp: "TIMESTAMP", text: "TEXT"}, nil
	case "postgres", "postgresql":
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" && u.Query().Get("host") == "" {
			return dialect{}, fmt.Errorf("postgres DSN %q: want postgres://user:password@host:port/database", redact(dsn))
		}
		return dialect{name: "postgres", driver: "pgx", dsn: dsn, serial: "BIGSERIAL PRIMARY KEY", stamp: "TIMESTAMP", text: "TEXT", dollar: true}, nil
	case "mysql":
		cfg, err := mysqlConfig(rest)
		if err != nil {
			return dialect{}, fmt.Errorf("mysql DSN %q: %w", redact(dsn), err)
		}
		return dialect{name: "mysql", driver: "mysql", dsn: cfg.FormatDSN(), serial: "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
			stamp: "DATETIME(3)", text: "VARCHAR(4000)", deleteLimit: true,
			// Whatever the server's default (latin1 on older ones), so that a message in any
			// language, or U+FFFD where cut cleaned one, is not refused.
			tableOpts: " DEFAULT CHARSET=utf8mb4"}, nil
	}
	return dialect{}, fmt.Errorf("%q: unknown database %q: want sqlite:///path/file.db, postgres://… or mysql://…", redact(dsn), scheme)
}

// mysqlConfig accepts the driver's own form (user:pass@tcp(host:port)/db?params) and the usual
// URL form (user:pass@host:port/db?params). Times are read and written in UTC.
func mysqlConfig(rest string) (*mysqldrv.Config, error) {
	var cfg *mysqldrv.Config
	if strings.Contains(rest, "@tcp(") || strings.Contains(rest, "@unix(") {
		c, err := mysqldrv.ParseDSN(rest)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		u, err := url.Parse("mysql://" + rest)
		if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return nil, errors.New("want mysql://user:password@host:port/database or mysql://user:password@tcp(host:port)/database")
		}
		cfg = mysqldrv.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.Trim(u.Path, "/")
		if u.User != nil {
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
		}
		for k, v := range u.Query() {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = v[0]
		}
	}
	if cfg.DBName == "" {
		return nil, errors.New("no database named")
	}
	// The driver sends and reads times in UTC (Loc); the session must take them so too, or the
	// TIMESTAMP columns of tables 2.1.5 made convert them from the server's zone: other instants
	// for anyone else reading them, and an hour lost or doubled at its daylight saving changes.
	// DATETIME columns (the tables ejcloud makes) do not convert. A DSN's own time_zone stands.
	cfg.ParseTime, cfg.Loc = true, time.UTC
	for k := range cfg.Params {
		if strings.EqualFold(k, "time_zone") {
			return cfg, nil
		}
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg, nil
}

// redact hides a DSN's password in messages: the user information's, and a query parameter
// that carries one (PostgreSQL's password and sslpassword).
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		u.RawQuery = redactQuery(u.RawQuery)
		return u.String()
	}
	// Not a URL to Go (MySQL's tcp(host:port) address): the user information runs from the
	// scheme to the last '@', and the password from its first ':' (a user has none).
	start := strings.Index(dsn, "://") + 3
	if at := strings.LastIndexByte(dsn, '@'); start >= 3 && at > start {
		if colon := strings.IndexByte(dsn[start:at], ':'); colon >= 0 {
			return dsn[:start+colon+1] + "xxxxx" + dsn[at:]
		}
	}
	return dsn
}

// redactQuery masks the value of every query parameter whose name says pass, reading the raw
// pairs: url.ParseQuery drops a pair it cannot unescape (password=sec%zzret), and a pair
// dropped is a pair not masked. The other pairs are kept as given.
func redactQuery(raw string) string {
	if raw == "" {
		return raw
	}
	pairs := strings.Split(raw, "&")
	for i, p := range pairs {
		k, _, ok := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if ok && strings.Contains(strings.ToLower(name), "pass") {
			pairs[i] = k + "=xxxxx"
		}
	}
	return strings.Join(pairs, "&")
}

// CheckDSN checks the form of a DSN without opening anything.
func CheckDSN(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

// DB is an open event trace database.
type DB struct {
	// db serves the API's reads, the statistics and the purge; w is the event writer's own, a
	// connection that slow reads cannot take from it (a pool they share starved the writer,
	// and its queue overflowed, while a few history searches ran).
	db, w *sql.DB
	d     dialect
	name  string // the DSN without its password, for errors
	// ready says the tables are there; making is the attempt under way at making them, if
	// any (Ready), guarded by mu; ctx ends with Close, and any making with it.
	ready  atomic.Bool
	mu     sync.Mutex
	making *making
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the making under way
	// turn, for SQLite only, is the turn to write: one token, which every write of this
	// process holds while it writes (writeTurn).
	turn chan struct{}
}

// writeTurn waits for this process's turn to write to SQLite; for the other databases it
// returns at once. SQLite lets one connection write at a time, and its busy handler polls for
// the lock with sleeps: the event writer, which begins its next batch as soon as one commits,
// could keep a statistics write waiting past busy_timeout, which then failed with SQLITE_BUSY
// (TestConcurrentWritersDoNotFail, about 1 run in 30 under -race). A channel serves its waiters
// in the order they came.
func (t *DB) writeTurn(ctx context.Context) (release func(), err error) {
	if t.turn == nil {
		return func() {}, nil
	}
	select {
	case t.turn <- struct{}{}:
		return func() { <-t.turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readTimeout bounds each read the API makes (a search, a statistics query): a slow one gives
// up with a 503 rather than holding a connection for as long as its client waits.
var readTimeout = 30 * time.Second

// reading is ctx bounded by readTimeout.
func reading(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, readTimeout)
}

// Open connects to the database of dsn and creates the tables and indexes that are absent
// (Connect, then Ready): for a caller that needs the database now.
func Open(ctx context.Context, dsn string) (*DB, error) {
	t, err := Connect(dsn)
	if err != nil {
		return nil, err
	}
	if err := t.Ready(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Connect returns the database of dsn without reaching it: its tables are created when it first
// answers (Ready, which every read and write calls first). A scheduler started while its
// database is down (a host rebooted with it, a deploy during its maintenance) schedules as it
// would without one, its events waiting in the writer's queue, instead of not starting: the
// history must not stop the jobs (2.1.5 logged a listener that failed and went on, too).
func Connect(dsn string) (*DB, error) {
	d, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		return nil, fmt.Errorf("open the event trace database %s: %w", redact(dsn), err)
	}
	db.SetMaxOpenConns(defaultMaxOpenConn)
	db.SetConnMaxIdleTime(5 * time.Minute)
	w, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open the event trace database %s: %w", redact(dsn), err)
	}
	w.SetMaxOpenConns(1) // one goroutine writes, one transaction at a time
	w.SetConnMaxIdleTime(5 * time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	t := &DB{db: db, w: w, d: d, name: redact(dsn), ctx: ctx, cancel: cancel}
	if d.name == "sqlite" {
		t.turn = make(chan struct{}, 1)
	}
	return t, nil
}

// Ready reaches the database and creates the tables and indexes that are absent, once; until
// that has succeeded it fails with an error that NotReady recognises.
//
// The making runs on its own, bounded by schemaTimeout rather than by the caller: indexing a
// large table that 2.1.5 made (an upgrade) can take minutes, longer than any caller waits (a
// read 30 s, a write attempt 30 s, the start-up 10 s), and cut short by each caller in turn it
// would start again from nothing every time and never end. A caller waits for it as long as
// its ctx allows; a making that failed is tried again by the next caller.
func (t *DB) Ready(ctx context.Context) error {
	if t.ready.Load() {
		return nil
	}
	t.mu.Lock()
	if err := t.ctx.Err(); err != nil { // closed
		t.mu.Unlock()
		return notReady{fmt.Errorf("the event trace database %s is closed: %w", t.name, err)}
	}
	m := t.making
	if m == nil {
		m = &making{done: make(chan struct{})}
		t.making = m
		t.wg.Add(1)
		go t.make(m)
	}
	t.mu.Unlock()
	select {
	case <-m.done:
		if m.err != nil {
			return notReady{m.err}
		}
		return nil
	case <-ctx.Done():
		return notReady{fmt.Errorf("make the event trace tables in %s: still under way: %w", t.name, ctx.Err())}
	}
}

// making is one attempt at reaching the database and making its tables.
type making struct {
	done chan struct{}
	err  error // set before done is closed
}

// schemaTimeout bounds one making; pingTimeout (writer.go) its first contact.
const schemaTimeout = 10 * time.Minute

func (t *DB) make(m *making) {
	defer t.wg.Done()
	defer close(m.done)
	ctx, cancel := context.WithTimeout(t.ctx, schemaTimeout)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
	err := t.db.PingContext(pctx)
	pcancel()
	switch {
	case err != nil:
		m.err = fmt.Errorf("cannot reach the event trace database %s: %w", t.name, err)
	default:
		if err := t.createSchema(ctx); err != nil {
			m.err = fmt.Errorf("create the event trace tables in %s: %w", t.name, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.err == nil {
		t.ready.Store(true)
	}
	t.making = nil // a failed making is tried again by the next Ready
}

// notReady is Ready's failure: the database has not answered, or its tables could not be made.
// The writer holds its events through it as through any outage, whatever the cause (a refused
// CREATE, too, may be granted once an operator sees the log), rather than drop them one by one.
type notReady struct{ err error }

func (e notReady) Error() string { return e.err.Error() }
func (e notReady) Unwrap() error { return e.err }

// NotReady says that err is a database not reached yet, or whose tables could not be made.
func NotReady(err error) bool { return errors.As(err, new(notReady)) }

// Close closes the connections.
func (t *DB) Close() error {
	t.mu.Lock() // no making starts once it is cancelled (Ready)
	t.cancel()
	t.mu.Unlock()
	t.wg.Wait()
	return errors.Join(t.db.Close(), t.w.Close())
}

// Dialect names the database: sqlite, postgres or mysql.
func (t *DB) Dialect() string { return t.d.name }

func (t *DB) createSchema(ctx context.Context) error {
	d := t.d
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + ExecutionLog + ` (
			id VARCHAR(40) NOT NULL PRIMARY KEY,
			job_name VARCHAR(100) NOT NULL,
			task_id VARCHAR(255) NOT NULL,
			hostname VARCHAR(255) NOT NULL,
			ip VARCHAR(50) NOT NULL,
			sharding_item INT NOT NULL,
			execution_source VARCHAR(20) NOT NULL,
			failure_cause ` + d.text + ` NULL,
			is_success INT NULL,
			start_time ` + d.stamp + ` NULL,
			complete_time ` + d.stamp + ` NULL)` + d.tableOpts,
		`CREATE TABLE IF NOT EXISTS ` + StatusTraceLog + ` (
			id VARCHAR(40) NOT NULL PRIMARY KEY,
			job_name VARCHAR(100) NOT NULL,
			original_task_id VARCHAR(255) NOT NULL,
			task_id VARCHAR(255) NOT NULL,
			slave_id VARCHAR(255) NOT NULL,
			source VARCHAR(50) NOT NULL,
			execution_type VARCHAR(20) NOT NULL,
			sharding_item VARCHAR(100) NOT NULL,
			state VARCHAR(` + strconv.Itoa(stateWidth) + `) NOT NULL,
			message ` + d.text + ` NULL,
			creation_time ` + d.stamp + ` NULL)` + d.tableOpts,
	}
	for _, iv := range intervals {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+iv.table()+` (
			id `+d.serial+`,
			success_count INT,
			failed_count INT,
			statistics_time `+d.stamp+` NOT NULL,
			creation_time `+d.stamp+` NOT NULL)`+d.tableOpts)
	}
	for table, col := range map[string]string{TaskRunningStats: "running_count", JobRunningStats: "running_count", JobRegisterStats: "registered_count"} {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+table+` (
			id `+d.serial+`,
			`+col+` INT,
			statistics_time `+d.stamp+` NOT NULL,
			creation_time `+d.stamp+` NOT NULL)`+d.tableOpts)
	}
	// The searches filter on these and order by time; the purge deletes by time.
	type index struct{ name, table, cols, where string }
	indexes := []index{
		{"TASK_ID_STATE_INDEX", StatusTraceLog, "task_id, state", ""},
		{"STATUS_TRACE_TIME_INDEX", StatusTraceLog, "creation_time", ""},
		{"STATUS_TRACE_JOB_INDEX", StatusTraceLog, "job_name, creation_time", ""},
		{"EXECUTION_TIME_INDEX", ExecutionLog, "start_time", ""},
		{"EXECUTION_JOB_INDEX", ExecutionLog, "job_name, start_time", ""},
		{"EXECUTION_TASK_INDEX", ExecutionLog, "task_id", ""},
	}
	for _, iv := range intervals {
		indexes = append(indexes, index{iv.table() + "_TIME_INDEX", iv.table(), "statistics_time", ""})
	}
	for _, table := range []string{TaskRunningStats, JobRunningStats, JobRegisterStats} {
		indexes = append(indexes, index{table + "_TIME_INDEX", table, "statistics_time", ""})
	}
	// The orphan sweep looks for the open executions every 10 minutes; without an index it read
	// all the retention's rows (a month at 20 runs a minute: 0.3 s in PostgreSQL, 1.4 s in
	// MariaDB, with the writer held meanwhile; BENCHMARKS.md). PostgreSQL and SQLite index the
	// open rows alone, so that a completion only takes its row out; MySQL and MariaDB have no
	// partial index, and find the NULLs of a whole one.
	if d.name == "mysql" {
		indexes = append(indexes, index{"EXECUTION_OPEN_ROWS_INDEX", ExecutionLog, "complete_time, start_time", ""})
	} else {
		indexes = append(indexes, index{"EXECUTION_OPEN_ROWS_INDEX", ExecutionLog, "start_time", "complete_time IS NULL"})
	}
	for _, s := range stmts {
		if _, err := t.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	if err := t.widenState(ctx); err != nil {
		return err
	}
	for _, ix := range indexes {
		s := "CREATE INDEX IF NOT EXISTS " + ix.name + " ON " + ix.table + " (" + ix.cols + ")"
		if d.name == "mysql" {
			// MySQL has no CREATE INDEX IF NOT EXISTS (MariaDB has): a duplicate name is fine.
			s = "CREATE INDEX " + ix.name + " ON " + ix.table + " (" + ix.cols + ")"
		}
		if ix.where != "" {
			s += " WHERE " + ix.where
		}
		if _, err := t.db.ExecContext(ctx, s); err != nil {
			var me *mysqldrv.MySQLError
			if errors.As(err, &me) && me.Number == 1061 { // ER_DUP_KEYNAME
				continue
			}
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// stateWidth fits every Mesos task state: Elastic-Job's VARCHAR(20) refuses
// TASK_GONE_BY_OPERATOR, and with it the whole batch the trace was written in.
const stateWidth = 32

// widenState widens the state column of a status trace table made narrower, by Elastic-Job or
// an older ejcloud. SQLite does not enforce a VARCHAR's length.
func (t *DB) widenState(ctx context.Context) error {
	var find, alter string
	switch t.d.name {
	case "postgres":
		find = `SELECT character_maximum_length FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'state'`
		alter = `ALTER TABLE ` + StatusTraceLog + ` ALTER COLUMN state TYPE VARCHAR(` + strconv.Itoa(stateWidth) + `)`
	case "mysql":
		find = `SELECT character_maximum_length FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'state'`
		alter = `ALTER TABLE ` + StatusTraceLog + ` MODIFY state VARCHAR(` + strconv.Itoa(stateWidth) + `) NOT NULL`
	default:
		return nil
	}
	name := StatusTraceLog
	if t.d.name == "postgres" {
		name = strings.ToLower(name) // unquoted names are folded to lower case
	}
	var width sql.NullInt64
	if err := t.db.QueryRowContext(ctx, find, name).Scan(&width); err != nil {
		return fmt.Errorf("read the width of %s.state: %w", StatusTraceLog, err)
	}
	if !width.Valid || width.Int64 >= stateWidth {
		return nil
	}
	if _, err := t.db.ExecContext(ctx, alter); err != nil {
		return fmt.Errorf("widen %s.state from %d: %w", StatusTraceLog, width.Int64, err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(strings.TrimSuffix(s, "("))
}

// q rewrites ? placeholders into the dialect's. Statements never hold a literal '?'.
func (t *DB) q(s string) string {
	if !t.d.dollar {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ts is a time as a bound value. SQLite keeps it as fixed-width UTC text, so that its string
// comparisons order times; the other databases get a UTC time.Time.
func (t *DB) ts(v time.Time) any {
	v = v.UTC().Truncate(time.Millisecond)
	if t.d.name == "sqlite" {
		return v.Format(timeLayoutSQLite)
	}
	return v
}

// nullTime scans a timestamp column whatever form the driver gives it in.
type nullTime struct {
	Time  time.Time
	Valid bool
}

func (n *nullTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		n.Valid = false
		return nil
	case time.Time:
		n.Time, n.Valid = x.UTC(), true
		return nil
	case []byte:
		return n.parse(string(x))
	case string:
		return n.parse(x)
	}
	return fmt.Errorf("cannot read a time from %T", v)
}

func (n *nullTime) parse(s string) error {
	for _, layout := range []string{timeLayoutSQLite, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			n.Time, n.Valid = t.UTC(), true
			return nil
		}
	}
	return fmt.Errorf("cannot read a time from %q", s)
}
