package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/cron"
)

// Job types, execution types, placements and sharding strategies of SPEC §3.2.
const (
	Simple   = "SIMPLE"
	Dataflow = "DATAFLOW"
	Script   = "SCRIPT"

	Transient = "TRANSIENT"
	Daemon    = "DAEMON"

	Spread  = "SPREAD"
	Binpack = "BINPACK"

	AvgAllocation = "AVG_ALLOCATION"
	Odevity       = "ODEVITY"
	RoundRobin    = "ROUND_ROBIN"

	// The misfire policies (issue 19): what a new leader does with the cron slots that fell
	// while no instance led. README "schedule semantics".
	FireOnce = "fireOnce" // one catch-up run for all of them (the default with misfire)
	FireAll  = "fireAll"  // one run per missed slot, at most 100
	Skip     = "skip"     // none (2.1.5's behaviour; the default without misfire)

	// The concurrency policies (issue 19): what a fire does that finds the job's last run
	// still running.
	Forbid  = "Forbid"  // it waits for that run to end: queued, or merged without misfire (2.1.5)
	Replace = "Replace" // that run's shards are killed (SIGTERM, SIGKILL after the grace), then it starts
	Allow   = "Allow"   // it starts beside that run: a shard may run twice at once (ShardsIndependent)
)

// MaxShards is the largest shardingTotalCount.
const MaxShards = 10000

// Job is a named unit of scheduled work (SPEC §3.2).
type Job struct {
	JobName                 string            `json:"jobName"`
	AppName                 string            `json:"appName"`
	JobType                 string            `json:"jobType"`
	JobClass                string            `json:"jobClass"`
	JobExecutionType        string            `json:"jobExecutionType"`
	Cron                    string            `json:"cron"`
	TimeZone                string            `json:"timeZone"`
	ShardingTotalCount      int               `json:"shardingTotalCount"`
	ShardingItemParameters  string            `json:"shardingItemParameters"`
	JobParameter            string            `json:"jobParameter"`
	CPUCount                float64           `json:"cpuCount"`
	MemoryMB                float64           `json:"memoryMB"`
	Failover                bool              `json:"failover"`
	Misfire                 bool              `json:"misfire"`
	StreamingProcess        bool              `json:"streamingProcess"`
	ScriptCommandLine       string            `json:"scriptCommandLine"`
	Placement               string            `json:"placement"`
	JobShardingStrategyType string            `json:"jobShardingStrategyType"`
	Description             string            `json:"description"`
	JobProperties           map[string]string `json:"jobProperties"`
	BeanName                string            `json:"beanName"`
	ApplicationContext      string            `json:"applicationContext"`
	// Issue 19's options are additions to the 2.1.5 contract: absent, they keep today's
	// behaviour, and a job stored without them reads as it did.
	MisfirePolicy    string `json:"misfirePolicy,omitempty"`    // fireOnce, fireAll or skip; default from misfire
	StartingDeadline int    `json:"startingDeadline,omitempty"` // seconds; a missed slot older than this is skipped; 0: none
	Retry            *Retry `json:"retry,omitempty"`            // retries of shards that fail by the job's own fault
	// ConcurrencyPolicy is Forbid, Replace or Allow; default Forbid.
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`
	// ShardsIndependent declares that two runs of a shard may overlap without harm (each run
	// works on its own data): Allow requires it.
	ShardsIndependent bool `json:"shardsIndependent,omitempty"`
	// DependsOn names jobs whose run for the same logical time (each one's latest slot at or
	// before this job's slot) must have succeeded before a run of this job starts.
	DependsOn []string `json:"dependsOn,omitempty"`
}

// Retry says how a TRANSIENT job's shards that fail by the job's own fault (the executor's
// job-failure marker, not an infrastructure failure) are run again: only the failed shards, up
// to MaxAttempts runs in all, the n-th retry Backoff·2^(n-1) seconds after the failure, at most
// MaxBackoff.
type Retry struct {
	MaxAttempts int     `json:"maxAttempts"` // runs of a shard per fire, the first included; 1: no retry
	Backoff     float64 `json:"backoff"`     // seconds before the first retry
	MaxBackoff  float64 `json:"maxBackoff"`  // seconds; 0: no bound
}

// MaxRetryAttempts bounds retry.maxAttempts.
const MaxRetryAttempts = 100

// BackoffDuration and MaxBackoffDuration are the retry's waits as durations.
func (r Retry) BackoffDuration() time.Duration {
	return time.Duration(r.Backoff * float64(time.Second))
}

// MaxBackoffDuration is MaxBackoff as a duration.
func (r Retry) MaxBackoffDuration() time.Duration {
	return time.Duration(r.MaxBackoff * float64(time.Second))
}

// Attempts is how many runs a shard of the job gets per fire.
func (j Job) Attempts() int {
	if j.Retry == nil || j.Retry.MaxAttempts < 1 || j.JobExecutionType != Transient {
		return 1
	}
	return j.Retry.MaxAttempts
}

// DecodeJob decodes and validates a whole job config from a request body (registration and
// PUT /api/job/update alike). A job without timeZone gets defaultZone.
func DecodeJob(body []byte, defaultZone string) (Job, error) {
	j := Job{Placement: Spread, JobShardingStrategyType: AvgAllocation, JobProperties: map[string]string{}}
	// Numbers that have no default: a missing one must say so, not "must be at least 1, got 0".
	given := map[string]bool{}
	err := decodeObject(body, map[string]setter{
		"jobName":                 str(&j.JobName),
		"appName":                 str(&j.AppName),
		"jobType":                 str(&j.JobType),
		"jobClass":                str(&j.JobClass),
		"jobExecutionType":        str(&j.JobExecutionType),
		"cron":                    str(&j.Cron),
		"timeZone":                str(&j.TimeZone),
		"shardingTotalCount":      mark(given, "shardingTotalCount", integer(&j.ShardingTotalCount)),
		"shardingItemParameters":  str(&j.ShardingItemParameters),
		"jobParameter":            str(&j.JobParameter),
		"cpuCount":                mark(given, "cpuCount", float(&j.CPUCount)),
		"memoryMB":                mark(given, "memoryMB", float(&j.MemoryMB)),
		"failover":                boolean(&j.Failover),
		"misfire":                 boolean(&j.Misfire),
		"streamingProcess":        boolean(&j.StreamingProcess),
		"scriptCommandLine":       str(&j.ScriptCommandLine),
		"placement":               str(&j.Placement),
		"jobShardingStrategyType": str(&j.JobShardingStrategyType),
		"description":             str(&j.Description),
		"jobProperties":           stringMap(&j.JobProperties),
		"beanName":                str(&j.BeanName),
		"applicationContext":      str(&j.ApplicationContext),
		"misfirePolicy":           str(&j.MisfirePolicy),
		"startingDeadline":        integer(&j.StartingDeadline),
		"retry":                   retryPolicy(&j.Retry),
		"concurrencyPolicy":       str(&j.ConcurrencyPolicy),
		"shardsIndependent":       boolean(&j.ShardsIndependent),
		"dependsOn":               stringList(&j.DependsOn),
		// Accepted and ignored, as 2.1.5 did, so that its exported configs still register.
		"appURL":          ignored,
		"bootstrapScript": ignored,
	})
	if err != nil {
		return Job{}, err
	}
	for _, f := range []string{"shardingTotalCount", "cpuCount", "memoryMB"} {
		if !given[f] {
			return Job{}, fieldErr(f, "is required")
		}
	}
	if j.TimeZone == "" {
		j.TimeZone = defaultZone
	}
	if j.JobProperties == nil {
		j.JobProperties = map[string]string{}
	}
	if j.MisfirePolicy == "" && j.JobExecutionType == Transient && j.Cron != "" {
		j.MisfirePolicy = j.EffectiveMisfirePolicy() // shown in the job's JSON
	}
	if j.ConcurrencyPolicy == "" && j.JobExecutionType == Transient {
		j.ConcurrencyPolicy = Forbid
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	// Checked here, at registration, not in Validate, which the executor also runs on every
	// task: a job stored before (by 2.1.5, say) with finer amounts still runs.
	for _, f := range []struct {
		name string
		v    float64
	}{{"cpuCount", j.CPUCount}, {"memoryMB", j.MemoryMB}} {
		if err := mesosPrecision(f.name, f.v); err != nil {
			return Job{}, err
		}
	}
	// Quartz refuses to schedule a trigger that will never fire (SPEC §12: an invalid cron is not
	// stored). Only here, at registration: a job whose last fire has just come still runs it.
	if s, _ := j.Schedule(); s != nil {
		if loc, err := j.Location(); err == nil && s.Next(time.Now().In(loc)).IsZero() {
			return Job{}, fieldErr("cron", "%q never fires after now", j.Cron)
		}
	}
	return j, nil
}

// checkKind checks what a job runs: its jobType, with its jobClass or its scriptCommandLine.
func (j Job) checkKind() error {
	switch j.JobType {
	case Simple, Dataflow:
		if strings.TrimSpace(j.JobClass) == "" {
			return fieldErr("jobClass", "is required for %s jobs", j.JobType)
		}
	case Script:
		if strings.TrimSpace(j.ScriptCommandLine) == "" {
			return fieldErr("scriptCommandLine", "is required for SCRIPT jobs")
		}
	case "":
		return fieldErr("jobType", "is required")
	default:
		return fieldErr("jobType", "must be SIMPLE, DATAFLOW or SCRIPT, got %q", j.JobType)
	}
	return nil
}

// Runnable checks the fields an executor acts on, and only those: what the job runs and how
// (a DAEMON's cron and zone are checked where its schedule is made). The rest was checked at
// registration, by the rules of the scheduler's version: checking it all again in the
// executor refused what the scheduler reads leniently (a 2.1.5 job whose
// shardingItemParameters names an item twice, the last entry winning) and anything a newer
// scheduler allows that an older executor, an SDK build, does not know; the task failed as
// TASK_ERROR with invalid task data, which the scheduler does not retry, and the job was
// stopped at its first launch. The error is a *FieldError.
func (j Job) Runnable() error {
	if err := j.checkKind(); err != nil {
		return err
	}
	if j.JobExecutionType != Transient && j.JobExecutionType != Daemon {
		return fieldErr("jobExecutionType", "must be TRANSIENT or DAEMON, got %q", j.JobExecutionType)
	}
	return nil
}

// Validate checks every rule of SPEC §3.2 that needs no other config (the app's existence is
// checked by the state layer, atomically with the write). The error is a *FieldError.
func (j Job) Validate() error {
	if err := validName("jobName", j.JobName); err != nil {
		return err
	}
	if err := validName("appName", j.AppName); err != nil {
		return err
	}
	if err := j.checkKind(); err != nil {
		return err
	}
	if j.StreamingProcess && j.JobType != Dataflow {
		return fieldErr("streamingProcess", "applies to DATAFLOW jobs only")
	}
	switch j.JobExecutionType {
	case Transient:
	case Daemon:
		if j.Cron == "" {
			return fieldErr("cron", "is required for DAEMON jobs")
		}
	case "":
		return fieldErr("jobExecutionType", "is required")
	default:
		return fieldErr("jobExecutionType", "must be TRANSIENT or DAEMON, got %q", j.JobExecutionType)
	}
	if j.Cron != "" {
		if _, err := cron.Parse(j.Cron); err != nil {
			return fieldErr("cron", "is not a valid Quartz expression: %v", err)
		}
	}
	if j.TimeZone == "" {
		return fieldErr("timeZone", "is required")
	}
	if _, err := time.LoadLocation(j.TimeZone); err != nil || j.TimeZone == "Local" {
		return fieldErr("timeZone", "must be an IANA time zone name such as Asia/Shanghai, got %q", j.TimeZone)
	}
	if j.ShardingTotalCount < 1 || j.ShardingTotalCount > MaxShards {
		return fieldErr("shardingTotalCount", "must be 1 to %d, got %d", MaxShards, j.ShardingTotalCount)
	}
	params, err := ParseShardingItemParameters(j.ShardingItemParameters, j.ShardingTotalCount)
	if err != nil {
		return fieldErr("shardingItemParameters", "%v", err)
	}
	if j.JobType == Script {
		if err := execable(j, params); err != nil {
			return err
		}
	}
	if !(j.CPUCount >= 0.001) {
		return fieldErr("cpuCount", "must be at least 0.001, got %v", j.CPUCount)
	}
	if !(j.MemoryMB >= 1) {
		return fieldErr("memoryMB", "must be at least 1, got %v", j.MemoryMB)
	}
	if j.Placement != Spread && j.Placement != Binpack {
		return fieldErr("placement", "must be SPREAD or BINPACK, got %q", j.Placement)
	}
	switch j.JobShardingStrategyType {
	case AvgAllocation, Odevity, RoundRobin:
	default:
		return fieldErr("jobShardingStrategyType", "must be AVG_ALLOCATION, ODEVITY or ROUND_ROBIN, got %q", j.JobShardingStrategyType)
	}
	switch j.MisfirePolicy {
	case "", FireOnce, FireAll, Skip:
	default:
		return fieldErr("misfirePolicy", "must be fireOnce, fireAll or skip, got %q", j.MisfirePolicy)
	}
	if j.StartingDeadline < 0 {
		return fieldErr("startingDeadline", "must be a number of seconds, at least 0 (0: no deadline), got %d", j.StartingDeadline)
	}
	switch j.ConcurrencyPolicy {
	case "", Forbid:
	case Replace:
		if j.JobExecutionType != Transient {
			return fieldErr("concurrencyPolicy", "Replace applies to TRANSIENT jobs only")
		}
	case Allow:
		// A run of an Allow job has no single end (its shards' runs overlap the next run's),
		// and a shard may have two attempts at once: so neither a retry nor a dependency.
		switch {
		case j.JobExecutionType != Transient:
			return fieldErr("concurrencyPolicy", "Allow applies to TRANSIENT jobs only")
		case !j.ShardsIndependent:
			return fieldErr("concurrencyPolicy", "Allow runs a shard again while its last run still runs: set shardsIndependent to true to declare that two runs of a shard may overlap")
		case j.Retry != nil && j.Retry.MaxAttempts > 1:
			return fieldErr("retry", "a job with concurrencyPolicy Allow cannot retry (two runs of a shard would share one attempt count)")
		case len(j.DependsOn) > 0:
			return fieldErr("dependsOn", "a job with concurrencyPolicy Allow cannot wait for other jobs (its runs overlap, so a logical time has no single run)")
		}
	default:
		return fieldErr("concurrencyPolicy", "must be Forbid, Replace or Allow, got %q", j.ConcurrencyPolicy)
	}
	if j.ShardsIndependent && j.ConcurrencyPolicy != Allow {
		return fieldErr("shardsIndependent", "applies to concurrencyPolicy Allow only")
	}
	if len(j.DependsOn) > 0 {
		if j.JobExecutionType != Transient || j.Cron == "" {
			return fieldErr("dependsOn", "applies to TRANSIENT jobs with a cron only (a run waits for its dependencies' runs of the same logical time)")
		}
		seen := map[string]bool{}
		for _, d := range j.DependsOn {
			if err := validName("dependsOn", d); err != nil {
				return err
			}
			if seen[d] {
				return fieldErr("dependsOn", "names %q twice", d)
			}
			seen[d] = true
		}
	}
	if r := j.Retry; r != nil {
		switch {
		case r.MaxAttempts < 1 || r.MaxAttempts > MaxRetryAttempts:
			return fieldErr("retry", "maxAttempts must be 1 to %d, got %d", MaxRetryAttempts, r.MaxAttempts)
		case !(r.Backoff >= 0) || r.Backoff > 86400:
			return fieldErr("retry", "backoff must be 0 to 86400 seconds, got %v", r.Backoff)
		case !(r.MaxBackoff >= 0) || r.MaxBackoff > 86400:
			return fieldErr("retry", "maxBackoff must be 0 to 86400 seconds (0: no bound), got %v", r.MaxBackoff)
		case r.MaxAttempts > 1 && j.JobExecutionType == Daemon:
			return fieldErr("retry", "applies to TRANSIENT jobs only (a DAEMON job's shards are relaunched by failover)")
		}
	}
	return nil
}

// EffectiveMisfirePolicy is the job's misfirePolicy, or its default: fireOnce with misfire, skip
// without.
func (j Job) EffectiveMisfirePolicy() string {
	switch {
	case j.MisfirePolicy != "":
		return j.MisfirePolicy
	case j.Misfire:
		return FireOnce
	}
	return Skip
}

// Schedule parses the job's cron; it is nil for a TRANSIENT job that runs only when triggered.
func (j Job) Schedule() (*cron.Schedule, error) {
	if j.Cron == "" {
		return nil, nil
	}
	return cron.Parse(j.Cron)
}

// FiredCron is the cron and zone the scheduler fires the job by: a TRANSIENT job's; none ("")
// for a trigger-only job or a DAEMON job, whose executor runs its cron. The fire ledger records
// it, so a change of it is a change of the job's schedule.
func (j Job) FiredCron() (cron, zone string) {
	if j.JobExecutionType != Transient || j.Cron == "" {
		return "", ""
	}
	return j.Cron, j.TimeZone
}

// Location returns the job's time zone.
func (j Job) Location() (*time.Location, error) { return time.LoadLocation(j.TimeZone) }

// maxExecString is the longest string Linux passes to a program, as an argument or as a
// variable (MAX_ARG_STRLEN, 32 pages, less the string's NUL).
const maxExecString = 32*4096 - 1

// execable checks that a SCRIPT job's shards can be started: the executor runs
// /bin/sh -c 'scriptCommandLine "$1"' with the sharding context, as JSON, in $1, and the job
// and shard parameters in EJCLOUD_JOB_PARAMETER and EJCLOUD_SHARDING_PARAMETER (SPEC §6.3).
// Linux refuses a NUL in any of them, and any one longer than maxExecString; the run then
// failed to start, as an error of the executor, and a job with failover was relaunched for
// ever.
func execable(j Job, params map[int]string) error {
	for field, v := range map[string]string{"scriptCommandLine": j.ScriptCommandLine, "jobParameter": j.JobParameter,
		"shardingItemParameters": j.ShardingItemParameters} {
		if strings.ContainsRune(v, 0) {
			return fieldErr(field, "must not hold a NUL character: a SCRIPT job passes it to a process, and Linux cannot")
		}
	}
	if n := len(j.ScriptCommandLine) + len(` "$1"`); n > maxExecString {
		return fieldErr("scriptCommandLine", "is %d bytes; Linux passes at most %d to a process", n, maxExecString)
	}
	if n := len("EJCLOUD_JOB_PARAMETER=") + len(j.JobParameter); n > maxExecString {
		return fieldErr("jobParameter", "is %d bytes; a SCRIPT job passes it to a process, and Linux passes at most %d in a variable", len(j.JobParameter), maxExecString-len("EJCLOUD_JOB_PARAMETER="))
	}
	// The context's JSON holds both parameters, escaped (a '<' takes 6 bytes), the job's name
	// twice and its task id, with its agent's id: 1 KiB covers all but the parameters.
	jobParam := jsonLen(j.JobParameter)
	for item, p := range params {
		if n := len("EJCLOUD_SHARDING_PARAMETER=") + len(p); n > maxExecString {
			return fieldErr("shardingItemParameters", "item %d's parameter is %d bytes; a SCRIPT job passes it to a process, and Linux passes at most %d in a variable", item, len(p), maxExecString-len("EJCLOUD_SHARDING_PARAMETER="))
		}
		if n := jobParam + jsonLen(p) + 4*len(j.JobName) + 1024; n > maxExecString {
			return fieldErr("jobParameter", "with item %d's parameter makes a sharding context of about %d bytes, as JSON; a SCRIPT job passes it to its script as one argument, and Linux passes at most %d", item, n, maxExecString)
		}
	}
	if n := jobParam + 4*len(j.JobName) + 1024; n > maxExecString {
		return fieldErr("jobParameter", "makes a sharding context of about %d bytes, as JSON; a SCRIPT job passes it to its script as one argument, and Linux passes at most %d", n, maxExecString)
	}
	return nil
}

// jsonLen is how long s is as a JSON string, escaped as encoding/json escapes it.
func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// ParseShardingItemParameters parses "0=a,1=b": keys are integers in [0,total), each at most
// once; values are trimmed. Empty entries are skipped.
func ParseShardingItemParameters(s string, total int) (map[int]string, error) {
	out := map[int]string{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		k, v, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("entry %q is not of the form item=parameter", entry)
		}
		item, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil {
			return nil, fmt.Errorf("entry %q: item %q is not an integer", entry, strings.TrimSpace(k))
		}
		if item < 0 || item >= total {
			return nil, fmt.Errorf("entry %q: item %d is outside [0,%d)", entry, item, total)
		}
		if _, dup := out[item]; dup {
			return nil, fmt.Errorf("item %d is given more than once", item)
		}
		out[item] = strings.TrimSpace(v)
	}
	return out, nil
}

// ShardingItemParameter is item's parameter in s as Elastic-Job 2.1.5 read it when it ran a
// job: the last entry for the item wins, and entries that are not item=parameter, or whose
// item is not an integer, are passed over. A job registered here passed
// ParseShardingItemParameters, and gets the same; a job node a 2.1.5 scheduler stored may hold
// what that refuses (an item given twice, one out of range), and its other items must not
// lose their parameters for it.
func ShardingItemParameter(s string, item int) string {
	param := ""
	for _, entry := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if n, err := strconv.Atoi(strings.TrimSpace(k)); ok && err == nil && n == item {
			param = strings.TrimSpace(v)
		}
	}
	return param
}

// ParseJob reads a job as stored in ZooKeeper, tolerating fields it does not know. A job that
// Elastic-Job 2.1.5 stored has no timeZone, placement or jobShardingStrategyType: it gets the
// defaults a registration without them gets (SPEC §3.2), the scheduler's zone among them, so
// that it fires in that zone rather than in UTC, and its config, as read, registers again.
func ParseJob(data []byte) (Job, error) {
	var j Job
	if err := json.Unmarshal(data, &j); err != nil {
		return j, err
	}
	if j.TimeZone == "" {
		j.TimeZone = LocalZone()
	}
	if j.Placement == "" {
		j.Placement = Spread
	}
	if j.JobShardingStrategyType == "" {
		j.JobShardingStrategyType = AvgAllocation
	}
	if j.JobProperties == nil {
		j.JobProperties = map[string]string{}
	}
	if j.ConcurrencyPolicy == "" && j.JobExecutionType == Transient {
		j.ConcurrencyPolicy = Forbid
	}
	return j, nil
}

// RestartsTasks reports whether replacing j by next must kill j's running tasks (SPEC §3.2):
// only changes to what a running task is made of do; cron and zone changes only reschedule.
// A DAEMON job's task is its schedule too: its executor runs the cron, in the zone, with the
// sharding and parameters the task was launched with, so rescheduling it, or changing what
// its runs are given, is restarting its tasks (as 2.1.5 did on any update).
func (j Job) RestartsTasks(next Job) bool {
	if j.AppName != next.AppName || j.JobType != next.JobType ||
		j.JobExecutionType != next.JobExecutionType || j.CPUCount != next.CPUCount ||
		j.MemoryMB != next.MemoryMB || j.ScriptCommandLine != next.ScriptCommandLine ||
		j.JobClass != next.JobClass {
		return true
	}
	return j.JobExecutionType == Daemon && (j.Cron != next.Cron || j.TimeZone != next.TimeZone ||
		j.ShardingTotalCount != next.ShardingTotalCount || j.ShardingItemParameters != next.ShardingItemParameters ||
		j.JobParameter != next.JobParameter || j.StreamingProcess != next.StreamingProcess ||
		!maps.Equal(j.JobProperties, next.JobProperties))
}
