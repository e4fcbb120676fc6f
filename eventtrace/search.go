package eventtrace

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// Query is a search of one of the two logs: paging, order, time range and filters, as the
// REST API's query parameters give them.
type Query struct {
	PerPage, Page int               // default 10 and 1
	Sort, Order   string            // a field of the log (camelCase or column name); asc or desc
	Start, End    time.Time         // on start_time (executions) or creation_time (traces); zero: open
	Filters       map[string]string // parameter name → value; unknown names are ignored, as 2.1.5 does
}

// Page is one page of a search: the rows and how many match in all.
type Page[T any] struct {
	Total int `json:"total"`
	Rows  []T `json:"rows"`
}

// Execution is a row of JOB_EXECUTION_LOG with Elastic-Job-Cloud 2.1.5's JSON field names. Its
// times are milliseconds since the epoch and its failureCause a string, where 2.1.5's Gson wrote
// date strings in the server's time zone and an object {"plainText": …}: numbers and text are
// what a client can use without knowing the server's zone (README, "Event trace"). A run
// that has not completed has no completeTime and running true: it is not a failure.
type Execution struct {
	ID           string `json:"id"`
	JobName      string `json:"jobName"`
	TaskID       string `json:"taskId"`
	Hostname     string `json:"hostname"`
	IP           string `json:"ip"`
	ShardingItem int    `json:"shardingItem"`
	Source       string `json:"source"`
	FailureCause string `json:"failureCause"`
	Success      bool   `json:"success"`
	Running      bool   `json:"running"`
	StartTime    *int64 `json:"startTime"`
	CompleteTime *int64 `json:"completeTime"`
}

// Trace is a row of JOB_STATUS_TRACE_LOG with 2.1.5's JSON fields.
type Trace struct {
	ID             string `json:"id"`
	JobName        string `json:"jobName"`
	OriginalTaskID string `json:"originalTaskId"`
	TaskID         string `json:"taskId"`
	SlaveID        string `json:"slaveId"`
	Source         string `json:"source"`
	ExecutionType  string `json:"executionType"`
	ShardingItems  string `json:"shardingItems"`
	State          string `json:"state"`
	Message        string `json:"message"`
	CreationTime   *int64 `json:"creationTime"`
}

// column is a searchable or sortable field: its column and how its filter values are checked
// (nil: not a filter), and the condition a filter on it makes ("" for name = ?).
type column struct {
	name  string
	check func(string) (any, error)
	cond  string
}

// endedWithSuccess filters on is_success among the ended runs only: a running row holds
// is_success 0, as Elastic-Job wrote it (and its tables may insist on a value).
const endedWithSuccess = "is_success = ? AND complete_time IS NOT NULL"

type logTable struct {
	table    string
	timeCol  string
	columns  map[string]column // by parameter name and by column name
	selected string
}

var executionTable = logTable{
	table: ExecutionLog, timeCol: "start_time",
	selected: "id, job_name, task_id, hostname, ip, sharding_item, execution_source, failure_cause, is_success, start_time, complete_time",
	columns: withColumnNames(map[string]column{
		"id":              {name: "id"},
		"jobName":         {name: "job_name", check: checkName},
		"taskId":          {name: "task_id", check: checkTaskID},
		"hostname":        {name: "hostname", check: checkHostname},
		"ip":              {name: "ip", check: checkIP},
		"shardingItem":    {name: "sharding_item", check: checkItem},
		"executionSource": {name: "execution_source", check: oneOf("NORMAL_TRIGGER", "MISFIRE", "FAILOVER")},
		"source":          {name: "execution_source", check: oneOf("NORMAL_TRIGGER", "MISFIRE", "FAILOVER")},
		"failureCause":    {name: "failure_cause"}, // a sort only, as in 2.1.5
		"isSuccess":       {name: "is_success", check: checkBool, cond: endedWithSuccess},
		"success":         {name: "is_success", check: checkBool, cond: endedWithSuccess},
		"startTime":       {name: "start_time"},
		"completeTime":    {name: "complete_time"},
	}),
}

var traceTable = logTable{
	table: StatusTraceLog, timeCol: "creation_time",
	selected: "id, job_name, original_task_id, task_id, slave_id, source, execution_type, sharding_item, state, message, creation_time",
	columns: withColumnNames(map[string]column{
		"id":             {name: "id"},
		"jobName":        {name: "job_name", check: checkName},
		"originalTaskId": {name: "original_task_id", check: checkTaskID},
		"taskId":         {name: "task_id", check: checkTaskID},
		"slaveId":        {name: "slave_id", check: checkAgentID},
		"source":         {name: "source", check: oneOf("CLOUD_SCHEDULER", "CLOUD_EXECUTOR", "LITE_EXECUTOR")},
		"executionType":  {name: "execution_type", check: oneOf("READY", "FAILOVER")},
		"shardingItems":  {name: "sharding_item"},
		"state": {name: "state", check: oneOf("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING", "TASK_FINISHED", "TASK_KILLED",
			"TASK_LOST", "TASK_FAILED", "TASK_ERROR", "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNREACHABLE", "TASK_UNKNOWN")},
		"message":      {name: "message"},
		"creationTime": {name: "creation_time"},
	}),
}

// withColumnNames lets sort name a column as the table does too (job_name as well as jobName);
// filters are only by parameter name.
func withColumnNames(m map[string]column) map[string]column {
	out := map[string]column{}
	for k, c := range m {
		out[k] = c
		if _, ok := m[c.name]; !ok {
			out[c.name] = column{name: c.name}
		}
	}
	return out
}

// Executions searches JOB_EXECUTION_LOG.
func (t *DB) Executions(ctx context.Context, q Query) (Page[Execution], error) {
	p := Page[Execution]{Rows: []Execution{}}
	err := t.search(ctx, executionTable, q, &p.Total, func(rows *sql.Rows) error {
		var e Execution
		var cause sql.NullString
		var success sql.NullInt64
		var start, complete nullTime
		if err := rows.Scan(&e.ID, &e.JobName, &e.TaskID, &e.Hostname, &e.IP, &e.ShardingItem, &e.Source, &cause, &success, &start, &complete); err != nil {
			return err
		}
		e.FailureCause = cause.String
		e.Success = success.Valid && success.Int64 == 1
		// Elastic-Job wrote is_success 0 at the start: without a complete time it is running.
		e.Running = !complete.Valid
		e.StartTime, e.CompleteTime = millis(start), millis(complete)
		p.Rows = append(p.Rows, e)
		return nil
	})
	return p, err
}

// StatusTraces searches JOB_STATUS_TRACE_LOG.
func (t *DB) StatusTraces(ctx context.Context, q Query) (Page[Trace], error) {
	p := Page[Trace]{Rows: []Trace{}}
	err := t.search(ctx, traceTable, q, &p.Total, func(rows *sql.Rows) error {
		var r Trace
		var msg sql.NullString
		var created nullTime
		if err := rows.Scan(&r.ID, &r.JobName, &r.OriginalTaskID, &r.TaskID, &r.SlaveID, &r.Source, &r.ExecutionType, &r.ShardingItems, &r.State, &msg, &created); err != nil {
			return err
		}
		r.Message, r.CreationTime = msg.String, millis(created)
		p.Rows = append(p.Rows, r)
		return nil
	})
	return p, err
}

func millis(n nullTime) *int64 {
	if !n.Valid {
		return nil
	}
	ms := n.Time.UnixMilli()
	return &ms
}

// MaxPerPage bounds a page.
const MaxPerPage = 10000

// where builds the WHERE clause of a query from whitelisted columns, with every value bound.
// A bad parameter is a *config.FieldError naming it; nothing is run then.
func (lt logTable) where(q Query) (string, []any, error) {
	var conds []string
	var args []any
	names := make([]string, 0, len(q.Filters))
	for k := range q.Filters {
		names = append(names, k)
	}
	sort.Strings(names) // one statement text per set of filters
	for _, k := range names {
		v := q.Filters[k]
		c, ok := lt.columns[k]
		if !ok || c.check == nil || v == "" {
			continue
		}
		val, err := c.check(v)
		if err != nil {
			return "", nil, &config.FieldError{Field: k, Message: k + " " + err.Error()}
		}
		cond := c.name + " = ?"
		if c.cond != "" {
			cond = c.cond
		}
		conds = append(conds, cond)
		args = append(args, val)
	}
	if !q.Start.IsZero() {
		conds = append(conds, lt.timeCol+" >= ?")
		args = append(args, q.Start)
	}
	if !q.End.IsZero() {
		conds = append(conds, lt.timeCol+" <= ?")
		args = append(args, q.End)
	}
	if len(conds) == 0 {
		return "", args, nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args, nil
}

// order builds ORDER BY from the whitelist: newest first unless asked otherwise.
func (lt logTable) order(q Query) (string, error) {
	col := lt.timeCol
	if q.Sort != "" {
		c, ok := lt.columns[q.Sort]
		if !ok {
			return "", &config.FieldError{Field: "sort", Message: "sort must name a field of " + lt.table + ", got " + strconv.Quote(q.Sort)}
		}
		col = c.name
	}
	dir := "DESC"
	switch strings.ToLower(q.Order) {
	case "", "desc":
		if q.Order == "" && q.Sort != "" {
			dir = "ASC" // 2.1.5 sorts ascending when only sort is given
		}
	case "asc":
		dir = "ASC"
	default:
		return "", &config.FieldError{Field: "order", Message: "order must be asc or desc, got " + strconv.Quote(q.Order)}
	}
	return " ORDER BY " + col + " " + dir + ", id " + dir, nil
}

func (t *DB) search(ctx context.Context, lt logTable, q Query, total *int, scan func(*sql.Rows) error) error {
	perPage, page := q.PerPage, q.Page
	if perPage == 0 {
		perPage = 10
	}
	if page == 0 {
		page = 1
	}
	if perPage < 1 || perPage > MaxPerPage {
		return &config.FieldError{Field: "per_page", Message: fmt.Sprintf("per_page must be from 1 to %d, got %d", MaxPerPage, perPage)}
	}
	if page < 1 {
		return &config.FieldError{Field: "page", Message: fmt.Sprintf("page must be at least 1, got %d", page)}
	}
	where, args, err := lt.where(q)
	if err != nil {
		return err
	}
	order, err := lt.order(q)
	if err != nil {
		return err
	}
	for i, a := range args {
		if tm, ok := a.(time.Time); ok {
			args[i] = t.ts(tm)
		}
	}
	ctx, cancel := reading(ctx)
	defer cancel()
	if err := t.Ready(ctx); err != nil {
		return err
	}
	if err := t.db.QueryRowContext(ctx, t.q("SELECT COUNT(*) FROM "+lt.table+where), args...).Scan(total); err != nil {
		return fmt.Errorf("count %s: %w", lt.table, err)
	}
	rows, err := t.db.QueryContext(ctx, t.q("SELECT "+lt.selected+" FROM "+lt.table+where+order+" LIMIT ? OFFSET ?"), append(args, perPage, (page-1)*perPage)...)
	if err != nil {
		return fmt.Errorf("search %s: %w", lt.table, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("read %s: %w", lt.table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", lt.table, err)
	}
	return nil
}

// The filter checks: a value that cannot be one of the column's is refused, so that a filter
// never carries anything but a plausible value (it is bound as a parameter all the same).

func checkName(v string) (any, error) {
	if len(v) > 100 {
		return nil, fmt.Errorf("must be at most 100 characters")
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return nil, fmt.Errorf("may contain only letters, digits, '_', '.' and '-', got %q", r)
		}
	}
	return v, nil
}

func checkTaskID(v string) (any, error) {
	if _, err := taskid.Parse(v); err != nil {
		return nil, fmt.Errorf("must be a task id jobName@-@item@-@READY|FAILOVER@-@agentId@-@uuid, got %q", v)
	}
	return v, nil
}

func checkAgentID(v string) (any, error) {
	if v == "" || len(v) > 255 || strings.ContainsFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) {
		return nil, fmt.Errorf("must be a Mesos agent id, got %q", v)
	}
	return v, nil
}

func checkHostname(v string) (any, error) {
	if _, err := checkAgentID(v); err != nil {
		return nil, fmt.Errorf("must be a host name, got %q", v)
	}
	return v, nil
}

func checkIP(v string) (any, error) {
	if net.ParseIP(v) == nil {
		return nil, fmt.Errorf("must be an IP address, got %q", v)
	}
	return v, nil
}

// checkItem bounds an item to sharding_item's INT: PostgreSQL refuses to bind a larger one
// (a failed search, answered 503), the others find nothing.
func checkItem(v string) (any, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("must be a sharding item (an integer from 0 to %d), got %q", math.MaxInt32, v)
	}
	return int(n), nil
}

func checkBool(v string) (any, error) {
	switch strings.ToLower(v) {
	case "true", "1":
		return 1, nil
	case "false", "0":
		return 0, nil
	}
	return nil, fmt.Errorf("must be true or false, got %q", v)
}

func oneOf(allowed ...string) func(string) (any, error) {
	return func(v string) (any, error) {
		for _, a := range allowed {
			if v == a {
				return v, nil
			}
		}
		return nil, fmt.Errorf("must be one of %s, got %q", strings.Join(allowed, ", "), v)
	}
}

// CheckQuery checks a query's paging, sort, order and filters as a search would, without a
// database: the API refuses a bad parameter whether or not one is configured.
func CheckQuery(executions bool, q Query) error {
	lt := traceTable
	if executions {
		lt = executionTable
	}
	if q.PerPage < 0 || q.PerPage > MaxPerPage {
		return &config.FieldError{Field: "per_page", Message: fmt.Sprintf("per_page must be from 1 to %d, got %d", MaxPerPage, q.PerPage)}
	}
	if q.Page < 0 {
		return &config.FieldError{Field: "page", Message: fmt.Sprintf("page must be at least 1, got %d", q.Page)}
	}
	if _, _, err := lt.where(q); err != nil {
		return err
	}
	_, err := lt.order(q)
	return err
}
