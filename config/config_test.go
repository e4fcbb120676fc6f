package config

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

const validJob = `{"jobName":"job_a","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT",
 "cron":"0/5 * * * * ?","shardingTotalCount":3,"cpuCount":0.5,"memoryMB":64,"scriptCommandLine":"echo hi"}`

// withField returns validJob with one field replaced (or removed when value is "").
func withField(t *testing.T, base, field, value string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeJobAppliesDefaults(t *testing.T) {
	j, err := DecodeJob([]byte(validJob), "Asia/Shanghai")
	if err != nil {
		t.Fatalf("DecodeJob(valid): %v", err)
	}
	want := Job{JobName: "job_a", AppName: "app", JobType: Script, JobExecutionType: Transient, Cron: "0/5 * * * * ?",
		TimeZone: "Asia/Shanghai", ShardingTotalCount: 3, CPUCount: 0.5, MemoryMB: 64, ScriptCommandLine: "echo hi",
		Placement: Spread, JobShardingStrategyType: AvgAllocation, JobProperties: map[string]string{},
		MisfirePolicy: Skip, ConcurrencyPolicy: Forbid} // issue 19: 2.1.5's behaviour, named
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("DecodeJob = %+v; want %+v", j, want)
	}
}

// Issue 19's misfire options: defaults that keep the behaviour of misfire, and a 400 naming
// the field for a bad value.
func TestDecodeJobMisfireOptions(t *testing.T) {
	with := func(extra string) []byte { // validJob with extra's fields added or replacing its own
		var m, more map[string]json.RawMessage
		if err := json.Unmarshal([]byte(validJob), &m); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte("{"+extra+"}"), &more); err != nil {
			t.Fatal(err)
		}
		maps.Copy(m, more)
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		extra    string
		policy   string
		deadline int
		field    string
	}{
		{`"misfire":true`, FireOnce, 0, ""},
		{`"misfire":false`, Skip, 0, ""},
		{`"misfire":true,"misfirePolicy":"fireAll","startingDeadline":"30"`, FireAll, 30, ""},
		{`"misfirePolicy":"fireOnce"`, FireOnce, 0, ""},
		{`"misfirePolicy":"FIRE_ONCE"`, "", 0, "misfirePolicy"},
		{`"startingDeadline":-1`, "", 0, "startingDeadline"},
		{`"startingDeadline":"soon"`, "", 0, "startingDeadline"},
		{`"retry":{"maxAttempts":0}`, "", 0, "retry"},
		{`"retry":{"maxAttempts":3,"backoff":-1}`, "", 0, "retry"},
		{`"retry":{"maxAttempts":3,"tries":2}`, "", 0, "retry"},
		{`"retry":3`, "", 0, "retry"},
		{`"concurrencyPolicy":"Allow"`, "", 0, "concurrencyPolicy"}, // shards not declared independent
		{`"concurrencyPolicy":"Allow","shardsIndependent":true,"jobExecutionType":"DAEMON"`, "", 0, "concurrencyPolicy"},
		{`"concurrencyPolicy":"Allow","shardsIndependent":true,"retry":{"maxAttempts":2}`, "", 0, "retry"},
		{`"concurrencyPolicy":"Allow","shardsIndependent":true,"dependsOn":["up"]`, "", 0, "dependsOn"},
		{`"shardsIndependent":true`, "", 0, "shardsIndependent"}, // without Allow it would do nothing
		{`"concurrencyPolicy":"Allow","shardsIndependent":true`, Skip, 0, ""},
		{`"concurrencyPolicy":"replace"`, "", 0, "concurrencyPolicy"},
	}
	for _, c := range cases {
		j, err := DecodeJob(with(c.extra), "UTC")
		if c.field != "" {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("%s: %v; want a FieldError on %s", c.extra, err, c.field)
			}
			continue
		}
		if err != nil || j.MisfirePolicy != c.policy || j.StartingDeadline != c.deadline {
			t.Errorf("%s: policy %q deadline %d err %v; want %q %d", c.extra, j.MisfirePolicy, j.StartingDeadline, err, c.policy, c.deadline)
		}
	}
	j, err := DecodeJob(with(`"retry":{"maxAttempts":"3","backoff":1.5,"maxBackoff":60}`), "UTC")
	if err != nil || j.Attempts() != 3 || j.Retry.BackoffDuration() != 1500*time.Millisecond || j.Retry.MaxBackoffDuration() != time.Minute {
		t.Errorf("retry: %+v, %v", j.Retry, err)
	}
	if j, err := DecodeJob(with(`"concurrencyPolicy":"Replace"`), "UTC"); err != nil || j.ConcurrencyPolicy != Replace {
		t.Errorf("Replace: %q, %v", j.ConcurrencyPolicy, err)
	}
	if j, err := DecodeJob(with(`"concurrencyPolicy":"Allow","shardsIndependent":"true"`), "UTC"); err != nil || j.ConcurrencyPolicy != Allow || !j.ShardsIndependent {
		t.Errorf("Allow: %q, independent %v, %v", j.ConcurrencyPolicy, j.ShardsIndependent, err)
	}
	if j, _ := DecodeJob([]byte(validJob), "UTC"); j.Attempts() != 1 || j.Retry != nil {
		t.Errorf("no retry given: %d attempts, %+v; want 1, none", j.Attempts(), j.Retry)
	}
	// A job stored before issue 19 has no policy: it reads as misfire said.
	old, err := ParseJob([]byte(`{"jobName":"j","misfire":true}`))
	if err != nil || old.EffectiveMisfirePolicy() != FireOnce {
		t.Errorf("a stored job with misfire: %q, %v; want fireOnce", old.EffectiveMisfirePolicy(), err)
	}
}

func TestDecodeJobAcceptsTheOldConsoleForms(t *testing.T) {
	body := `{"jobName":"j","appName":"app","jobType":"SIMPLE","jobClass":"com.Foo","jobExecutionType":"DAEMON",
	 "cron":"0 0 * * * ?","shardingTotalCount":"4","cpuCount":"1.5","memoryMB":"128","failover":"true",
	 "misfire":"false","appURL":"http://ignored","bootstrapScript":"ignored","description":null,
	 "shardingItemParameters":"0=a, 1 = b ,","jobProperties":{"job_exception_handler":"x"}}`
	j, err := DecodeJob([]byte(body), "UTC")
	if err != nil {
		t.Fatalf("DecodeJob(%s): %v", body, err)
	}
	if j.ShardingTotalCount != 4 || j.CPUCount != 1.5 || j.MemoryMB != 128 || !j.Failover || j.Misfire {
		t.Fatalf("numeric and boolean strings decoded as %+v", j)
	}
	p, _ := ParseShardingItemParameters(j.ShardingItemParameters, j.ShardingTotalCount)
	if !reflect.DeepEqual(p, map[int]string{0: "a", 1: "b"}) {
		t.Fatalf("sharding item parameters = %v", p)
	}
}

func TestDecodeJobRejectsEachRuleNamingTheField(t *testing.T) {
	tests := []struct {
		name, field, value, wantField string
	}{
		{"missing jobName", "jobName", "", "jobName"},
		{"jobName too long", "jobName", `"` + strings.Repeat("a", 101) + `"`, "jobName"},
		{"jobName with the task id delimiter", "jobName", `"a@-@b"`, "jobName"},
		{"jobName with a slash", "jobName", `"a/b"`, "jobName"},
		{"jobName not a string", "jobName", `7`, "jobName"},
		{"missing appName", "appName", "", "appName"},
		{"appName with a space", "appName", `"my app"`, "appName"},
		{"missing jobType", "jobType", "", "jobType"},
		{"unknown jobType", "jobType", `"JAVA"`, "jobType"},
		{"SIMPLE without jobClass", "jobType", `"SIMPLE"`, "jobClass"},
		{"SCRIPT without command line", "scriptCommandLine", `""`, "scriptCommandLine"},
		{"streaming on a SCRIPT job", "streamingProcess", `true`, "streamingProcess"},
		{"missing jobExecutionType", "jobExecutionType", "", "jobExecutionType"},
		{"unknown jobExecutionType", "jobExecutionType", `"ONCE"`, "jobExecutionType"},
		{"invalid cron", "cron", `"0 0 25 * * ?"`, "cron"},
		{"Unix cron", "cron", `"*/5 * * * *"`, "cron"},
		{"cron of 30 February", "cron", `"0 0 0 30 2 ?"`, "cron"},
		{"cron of a past year", "cron", `"0 0 0 1 1 ? 2020"`, "cron"},
		{"unknown time zone", "timeZone", `"Mars/Olympus"`, "timeZone"},
		{"zero shards", "shardingTotalCount", `0`, "shardingTotalCount"},
		{"too many shards", "shardingTotalCount", `10001`, "shardingTotalCount"},
		{"fractional shards", "shardingTotalCount", `2.5`, "shardingTotalCount"},
		{"non-numeric shards", "shardingTotalCount", `"many"`, "shardingTotalCount"},
		{"item parameter out of range", "shardingItemParameters", `"3=x"`, "shardingItemParameters"},
		{"item parameter given twice", "shardingItemParameters", `"0=x,0=y"`, "shardingItemParameters"},
		{"item parameter without '='", "shardingItemParameters", `"0"`, "shardingItemParameters"},
		{"item parameter key not an integer", "shardingItemParameters", `"a=b"`, "shardingItemParameters"},
		{"cpu too small", "cpuCount", `0.0001`, "cpuCount"},
		{"cpu missing", "cpuCount", "", "cpuCount"},
		{"cpu NaN string", "cpuCount", `"NaN"`, "cpuCount"},
		{"memory too small", "memoryMB", `0.5`, "memoryMB"},
		{"cpu finer than Mesos keeps", "cpuCount", `0.0015`, "cpuCount"},
		{"memory finer than Mesos keeps", "memoryMB", `64.0001`, "memoryMB"},
		{"unknown placement", "placement", `"RANDOM"`, "placement"},
		{"unknown strategy", "jobShardingStrategyType", `"HASH"`, "jobShardingStrategyType"},
		{"failover not a boolean", "failover", `"yes please"`, "failover"},
		{"jobProperties with a number", "jobProperties", `{"a":1}`, "jobProperties"},
		{"unknown field", "shardingTotalCnt", `3`, "shardingTotalCnt"},
		// A SCRIPT job passes these to a process (SPEC §6.3): Linux takes no NUL, nor a string
		// over 128 KiB.
		{"a NUL in a script's command line", "scriptCommandLine", `"echo a\u0000b"`, "scriptCommandLine"},
		{"a NUL in a script's job parameter", "jobParameter", `"a\u0000b"`, "jobParameter"},
		{"a NUL in a script's item parameter", "shardingItemParameters", `"0=a\u0000b"`, "shardingItemParameters"},
		{"a script's command line over 128 KiB", "scriptCommandLine", `"` + strings.Repeat("x", 131072) + `"`, "scriptCommandLine"},
		{"a script's job parameter over 128 KiB", "jobParameter", `"` + strings.Repeat("x", 131072) + `"`, "jobParameter"},
		{"a script's item parameter over 128 KiB", "shardingItemParameters", `"1=` + strings.Repeat("x", 131072) + `"`, "shardingItemParameters"},
		{"a script's context over 128 KiB as JSON", "jobParameter", `"` + strings.Repeat("<", 30000) + `"`, "jobParameter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := withField(t, validJob, tc.field, tc.value)
			_, err := DecodeJob(body, "UTC")
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField {
				t.Fatalf("DecodeJob(%s) error = %v; want a FieldError for %q", body, err, tc.wantField)
			}
			if !strings.Contains(fe.Message, tc.wantField) {
				t.Fatalf("message %q does not name the field %q", fe.Message, tc.wantField)
			}
		})
	}
}

// What Linux cannot pass to a process binds SCRIPT jobs only: an SDK job gets its parameters
// in memory. The bounds are Linux's, not less: a script's parameters of 100 KiB each pass.
func TestOnlyScriptJobsAreBoundByWhatAProcessTakes(t *testing.T) {
	big := `"` + strings.Repeat("x", 200000) + `"`
	sdk := withField(t, string(withField(t, string(withField(t, validJob, "jobType", `"SIMPLE"`)), "jobClass", `"a.B"`)), "scriptCommandLine", "")
	for _, body := range [][]byte{
		withField(t, string(sdk), "jobParameter", big),
		withField(t, string(sdk), "jobParameter", `"a\u0000b"`),
		withField(t, string(sdk), "shardingItemParameters", `"0=`+strings.Repeat("y", 200000)+`"`),
		withField(t, string(withField(t, validJob, "jobParameter", `"`+strings.Repeat("x", 60000)+`"`)),
			"shardingItemParameters", `"0=`+strings.Repeat("y", 60000)+`,2=z"`),
	} {
		if _, err := DecodeJob(body, "UTC"); err != nil {
			t.Errorf("DecodeJob(%.120s…) = %v; want it valid", body, err)
		}
	}
}

// A missing number without a default is "required", not "too small": 0 is not what was sent.
func TestDecodeJobMissingNumbersAreRequired(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"shardingTotalCount", ""}, {"cpuCount", ""}, {"memoryMB", ""}, {"cpuCount", "null"}, {"memoryMB", "null"},
	} {
		body := withField(t, validJob, tc.field, tc.value)
		var fe *FieldError
		if _, err := DecodeJob(body, "UTC"); !errors.As(err, &fe) || fe.Field != tc.field || fe.Message != tc.field+" is required" {
			t.Errorf("DecodeJob without %s (%q) = %v; want %q", tc.field, tc.value, err, tc.field+" is required")
		}
	}
}

func TestDecodeJobDaemonNeedsCron(t *testing.T) {
	body := withField(t, string(withField(t, validJob, "jobExecutionType", `"DAEMON"`)), "cron", "")
	var fe *FieldError
	if _, err := DecodeJob(body, "UTC"); !errors.As(err, &fe) || fe.Field != "cron" {
		t.Fatalf("DAEMON without cron: error = %v; want FieldError for cron", err)
	}
	if _, err := DecodeJob(withField(t, validJob, "cron", ""), "UTC"); err != nil {
		t.Fatalf("TRANSIENT without cron must be valid (trigger-only): %v", err)
	}
}

func TestDecodeRejectsNonObjects(t *testing.T) {
	for _, body := range []string{``, `[]`, `"job"`, `null`, `{"jobName":"a"} {}`, `{`} {
		var fe *FieldError
		if _, err := DecodeJob([]byte(body), "UTC"); !errors.As(err, &fe) {
			t.Errorf("DecodeJob(%q) error = %v; want a FieldError", body, err)
		}
		if _, err := DecodeApp([]byte(body)); !errors.As(err, &fe) {
			t.Errorf("DecodeApp(%q) error = %v; want a FieldError", body, err)
		}
	}
}

const validApp = `{"appName":"app","appURL":"http://127.0.0.1/app.tar.gz","bootstrapScript":"bin/start.sh"}`

func TestDecodeAppAppliesDefaults(t *testing.T) {
	a, err := DecodeApp([]byte(validApp))
	if err != nil {
		t.Fatal(err)
	}
	want := App{AppName: "app", AppURL: "http://127.0.0.1/app.tar.gz", BootstrapScript: "bin/start.sh", CPUCount: 1, MemoryMB: 128, AppCacheEnable: true}
	if a != want {
		t.Fatalf("DecodeApp = %+v; want %+v", a, want)
	}
	if !a.IsArchive() {
		t.Fatalf("%q should be an archive", a.AppURL)
	}
}

func TestDecodeAppRejectsEachRuleNamingTheField(t *testing.T) {
	tests := []struct{ name, field, value string }{
		{"missing appName", "appName", ""},
		{"bad appName", "appName", `"a@-@b"`},
		{"missing appURL", "appURL", ""},
		{"relative appURL", "appURL", `"app.tar.gz"`},
		{"ftp appURL", "appURL", `"ftp://h/app.tar.gz"`},
		{"missing bootstrapScript", "bootstrapScript", ""},
		{"blank bootstrapScript", "bootstrapScript", `"  "`},
		{"zero cpuCount", "cpuCount", `0`},
		{"memory below 32", "memoryMB", `"31"`},
		{"negative sampling", "eventTraceSamplingCount", `-1`},
		{"fractional sampling", "eventTraceSamplingCount", `1.5`},
		{"cache flag not a boolean", "appCacheEnable", `"sometimes"`},
		{"unknown field", "appUrl", `"http://h/x"`},
		// URLs the Mesos fetcher can never fetch: every launch of the app's jobs would fail.
		{"file URL without a path", "appURL", `"file:///"`},
		{"file URL of the root", "appURL", `"file:////"`},
		{"file URL with a host", "appURL", `"file://h/app.tar.gz"`},
		{"http URL without a host", "appURL", `"http:///app.tar.gz"`},
		{"https URL without a host", "appURL", `"https://?x"`},
		{"http URL with a port but no host", "appURL", `"http://:80/app.tar.gz"`},
		{"http URL with a bad escape", "appURL", `"http://h/a%zz"`},
		{"the root as a path", "appURL", `"/"`},
		{"slashes as a path", "appURL", `"//"`},
		{"appURL with a NUL", "appURL", `"http://h/a\u0000b"`},
		{"appURL with a DEL", "appURL", `"http://h/a\u007fb"`},
		{"appURL with a C1 control", "appURL", `"/opt/a\u0085b"`},
		{"appURL with a tab", "appURL", `"/opt/a\tb"`},
		// The agent runs it as sh -c <bootstrapScript>: a NUL cannot pass exec, and a carriage
		// return is part of the command.
		{"bootstrapScript with a NUL", "bootstrapScript", `"./start.sh\u0000 --x"`},
		{"bootstrapScript with a carriage return", "bootstrapScript", `"./start.sh\r\n"`},
		{"bootstrapScript with an escape", "bootstrapScript", `"./start.sh \u001b[0m"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := withField(t, validApp, tc.field, tc.value)
			var fe *FieldError
			if _, err := DecodeApp(body); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("DecodeApp(%s) error = %v; want a FieldError for %q", body, err, tc.field)
			}
		})
	}
}

// What the Mesos fetcher can fetch registers: an http(s) URL naming a host, a file:// URL or an
// absolute path naming a file. A bootstrapScript may hold tabs and lines.
func TestDecodeAppAcceptsFetchableURLsAndScriptsOfLines(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"appURL", `"http://h/app.tar.gz"`},
		{"appURL", `"https://h:8443/dl?app=x&v=1#top"`},
		{"appURL", `"http://[::1]:8080/app"`},
		{"appURL", `"http://user:pw@h/app.zip"`},
		{"appURL", `"http://h"`},
		{"appURL", `"file:///opt/app.tar.gz"`},
		{"appURL", `"/opt/app.tar.gz"`},
		{"appURL", `"/opt/ünïcode/app"`},
		{"bootstrapScript", `"cd bin &&\n\t./start.sh"`},
	} {
		if _, err := DecodeApp(withField(t, validApp, tc.field, tc.value)); err != nil {
			t.Errorf("%s %s: %v; want it valid", tc.field, tc.value, err)
		}
	}
}

// Numbers given as strings (the 2.1.5 console's form) hold JSON numbers: Go's own syntax,
// which strconv takes (hex floats, a trailing dot, a leading '+', underscores, Inf), is refused
// naming the field.
func TestNumericStringsAreJSONNumbers(t *testing.T) {
	for _, tc := range []struct {
		field, value string
		ok           bool
	}{
		{"shardingTotalCount", `"3"`, true},
		{"shardingTotalCount", `" 3 "`, true},
		{"shardingTotalCount", `"3.0"`, true},
		{"shardingTotalCount", `"3e0"`, true},
		{"cpuCount", `"0.5"`, true},
		{"cpuCount", `"5E-1"`, true},
		{"cpuCount", `"-0"`, false}, // a JSON number, and too small
		{"shardingTotalCount", `"0x10p0"`, false},
		{"shardingTotalCount", `"0x10"`, false},
		{"shardingTotalCount", `"5."`, false},
		{"shardingTotalCount", `"+5"`, false},
		{"shardingTotalCount", `"05"`, false},
		{"shardingTotalCount", `"1_0"`, false},
		{"cpuCount", `"0x1p-1"`, false},
		{"cpuCount", `".5"`, false},
		{"cpuCount", `"Inf"`, false},
		{"cpuCount", `"NaN"`, false},
		{"cpuCount", `""`, false},
	} {
		_, err := DecodeJob(withField(t, validJob, tc.field, tc.value), "UTC")
		var fe *FieldError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %s: %v; want it valid", tc.field, tc.value, err)
		case !tc.ok && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%s %s: %v; want a FieldError for %s", tc.field, tc.value, err, tc.field)
		}
	}
	if _, err := DecodeApp(withField(t, validApp, "memoryMB", `"+64"`)); err == nil || !strings.Contains(err.Error(), `a JSON number, or a string holding one such as "12.5"), got "+64"`) {
		t.Errorf(`memoryMB "+64": %v; want it refused, saying what a number is`, err)
	}
}

// A body is one JSON object and nothing after it: json.Decoder.More is false before a stray
// '}' or ']', which was then taken for the end of the body.
func TestDataAfterTheBodysObjectIsRefusedNamingBody(t *testing.T) {
	for _, rest := range []string{"}", "]", " {}", `"x"`, "x", ",", "\x00"} {
		var fe *FieldError
		if _, err := DecodeJob([]byte(validJob+rest), "UTC"); !errors.As(err, &fe) || fe.Field != "body" || fe.Message != "body has data after the JSON object" {
			t.Errorf("DecodeJob(validJob + %q) = %v; want body has data after the JSON object", rest, err)
		}
		if _, err := DecodeApp([]byte(validApp + rest)); !errors.As(err, &fe) || fe.Field != "body" {
			t.Errorf("DecodeApp(validApp + %q) = %v; want a FieldError for body", rest, err)
		}
	}
	if _, err := DecodeJob([]byte(validJob+" \n\t\r\n"), "UTC"); err != nil {
		t.Errorf("DecodeJob(validJob + white space) = %v; want it valid", err)
	}
}

// A member given twice is refused naming it (encoding/json keeps the last one silently), also
// when an escape spells its name; within retry, the error names retry.
func TestAKeyGivenTwiceIsRefusedNamingIt(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`{"appName":"first","appURL":"/x","bootstrapScript":"s","appName":"second"}`, "appName"},
		{`{"appName":"a","appURL":"/x","bootstrapScript":"s","app\u0055RL":"/y"}`, "appURL"},
		{`{"appName":"a","appURL":"/x","bootstrapScript":"s","cpuCount":null,"cpuCount":2}`, "cpuCount"},
		{`{"appName":"a","appURL":"/x","bootstrapScript":"s","":1,"":2}`, "body"},
	} {
		var fe *FieldError
		if _, err := DecodeApp([]byte(tc.body)); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("DecodeApp(%s) = %v; want a FieldError for %s", tc.body, err, tc.field)
		}
	}
	for _, tc := range []struct{ extra, field string }{
		{`"cron":"0/5 * * * * ?"`, "cron"}, // the same value twice too
		{`"jobName":"other"`, "jobName"},
		{`"retry":{"maxAttempts":2,"maxAttempts":3}`, "retry"},
	} {
		body := strings.TrimSuffix(strings.TrimSpace(validJob), "}") + "," + tc.extra + "}"
		var fe *FieldError
		if _, err := DecodeJob([]byte(body), "UTC"); !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Message, "given more than once") {
			t.Errorf("DecodeJob(…%s) = %v; want a FieldError for %s, given more than once", tc.extra, err, tc.field)
		}
	}
}

// A config larger, as stored JSON, than the state layer's bound is refused naming the field
// that takes the most of it; '<' counts 6 bytes, as encoding/json writes it.
func TestAConfigTooLargeToStoreNamesItsLargestField(t *testing.T) {
	job, err := DecodeJob([]byte(validJob), "UTC")
	if err != nil {
		t.Fatal(err)
	}
	size, _, _ := StoredSize(job)
	described := job
	described.Description = strings.Repeat("<", 1000)
	propertied := job
	propertied.JobProperties = map[string]string{"a": strings.Repeat("x", 600), "b": strings.Repeat("y", 600)}
	propertied.Description = strings.Repeat("d", 1000)
	app, _ := DecodeApp([]byte(validApp))
	app.BootstrapScript = strings.Repeat("&", 1000)
	for _, tc := range []struct {
		name  string
		c     any
		most  int
		field string
	}{
		{"a job within the bound", job, size, ""},
		{"a job over it", job, size - 1, "jobShardingStrategyType"}, // "AVG_ALLOCATION", its longest value
		{"a description of '<'s", described, size + 5000, "description"},
		{"a description of '<'s within the bound", described, size + 6002, ""},
		{"job properties", propertied, 2000, "jobProperties"},
		{"an app's bootstrapScript", app, 5000, "bootstrapScript"},
	} {
		err := CheckStoredSize(tc.c, tc.most)
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v; want it stored", tc.name, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(fe.Message, tc.field+" is too large to store")):
			t.Errorf("%s: %v; want %s is too large to store", tc.name, err, tc.field)
		}
	}
	if err := TooLargeToWrite(described); !strings.HasPrefix(err.Error(), "description: description is too large to store") {
		t.Errorf("TooLargeToWrite: %v; want it to name description", err)
	}
}

func TestPatchAppKeepsAbsentFields(t *testing.T) {
	base, err := DecodeApp([]byte(`{"appName":"app","appURL":"/opt/app","bootstrapScript":"./app","cpuCount":2,"memoryMB":256,"appCacheEnable":false,"eventTraceSamplingCount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := PatchApp(base, []byte(`{"appName":"app","memoryMB":"512"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.MemoryMB = 512
	if got != want {
		t.Fatalf("PatchApp = %+v; want %+v", got, want)
	}
	if got, err := PatchApp(base, []byte(`{"memoryMB":1}`)); err == nil || got != base {
		t.Fatalf("an invalid patch must fail and return the base unchanged, got %+v, %v", got, err)
	}
}

func TestRestartsTasks(t *testing.T) {
	j, err := DecodeJob([]byte(validJob), "UTC")
	if err != nil {
		t.Fatal(err)
	}
	// A DAEMON task runs its cron in its executor, with what it was launched with.
	d := j
	d.JobExecutionType = Daemon
	for _, tc := range []struct {
		name   string
		daemon bool
		change func(*Job)
		want   bool
	}{
		{"cron change only reschedules", false, func(j *Job) { j.Cron = "0 0 * * * ?" }, false},
		{"zone change only reschedules", false, func(j *Job) { j.TimeZone = "Asia/Tokyo" }, false},
		{"shard total change does not kill", false, func(j *Job) { j.ShardingTotalCount = 9 }, false},
		{"memory change kills", false, func(j *Job) { j.MemoryMB = 65 }, true},
		{"command change kills", false, func(j *Job) { j.ScriptCommandLine = "echo bye" }, true},
		{"app change kills", false, func(j *Job) { j.AppName = "other" }, true},
		{"a daemon's cron change restarts it", true, func(j *Job) { j.Cron = "0 0 * * * ?" }, true},
		{"a daemon's zone change restarts it", true, func(j *Job) { j.TimeZone = "Asia/Tokyo" }, true},
		{"a daemon's shard total change restarts it", true, func(j *Job) { j.ShardingTotalCount = 9 }, true},
		{"a daemon's parameters change restarts it", true, func(j *Job) { j.JobParameter = "p" }, true},
		{"a daemon's item parameters change restarts it", true, func(j *Job) { j.ShardingItemParameters = "0=a" }, true},
		{"a daemon's properties change restarts it", true, func(j *Job) { j.JobProperties = map[string]string{"k": "v"} }, true},
		{"a daemon's description change does not", true, func(j *Job) { j.Description = "d" }, false},
	} {
		cur := j
		if tc.daemon {
			cur = d
		}
		next := cur
		tc.change(&next)
		if got := cur.RestartsTasks(next); got != tc.want {
			t.Errorf("%s: RestartsTasks = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestStoredFormRoundTrips(t *testing.T) {
	j, err := DecodeJob([]byte(validJob), "UTC")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(j)
	back, err := ParseJob(data)
	if err != nil || !reflect.DeepEqual(back, j) {
		t.Fatalf("ParseJob(Marshal(j)) = %+v, %v; want %+v", back, err, j)
	}
	if again, err := DecodeJob(data, "UTC"); err != nil || !reflect.DeepEqual(again, j) {
		t.Fatalf("the stored form must be accepted by the API again: %+v, %v", again, err)
	}
}

// A task's sharding parameter is read as 2.1.5 read it: for what ParseShardingItemParameters
// accepts, the same value; for what only a 2.1.5 scheduler stored (an item twice, an item out
// of range, a malformed entry), the other items keep theirs and the last entry wins.
func TestShardingItemParameterAgreesWithTheParseAndToleratesStoredLegacy(t *testing.T) {
	for _, s := range []string{"0=a, 1 = b ,", "1=x,0=y,2=", "", "0=a=b"} {
		p, err := ParseShardingItemParameters(s, 3)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		for item := range 3 {
			if got := ShardingItemParameter(s, item); got != p[item] {
				t.Errorf("%q item %d: %q; the parse says %q", s, item, got, p[item])
			}
		}
	}
	for _, tc := range []struct {
		s    string
		item int
		want string
	}{
		{"0=a,0=b,1=c", 0, "b"}, {"0=a,0=b,1=c", 1, "c"},
		{"0=a,7=z,1=c", 1, "c"}, {"0=a,junk,1=c", 0, "a"}, {"x=1,1=c", 1, "c"},
	} {
		if got := ShardingItemParameter(tc.s, tc.item); got != tc.want {
			t.Errorf("%q item %d: %q; want %q", tc.s, tc.item, got, tc.want)
		}
	}
}

// A job node as Elastic-Job 2.1.5 wrote it reads with the defaults of a registration without
// the fields it lacks: it fires in the scheduler's zone, and its config, as read, is accepted
// by PUT /api/job/update.
func TestAJobStoredBy215ReadsWithTheDefaults(t *testing.T) {
	t.Setenv("TZ", "Asia/Shanghai")
	stored := `{"jobName":"legacy","jobClass":"","jobType":"SCRIPT","cron":"0 0 10 * * ?","shardingTotalCount":3,
	 "shardingItemParameters":"","jobParameter":"","failover":true,"misfire":true,"description":"",
	 "jobProperties":{"job_exception_handler":"com.dangdang.ddframe.job.executor.handler.impl.DefaultJobExceptionHandler",
	 "executor_service_handler":"com.dangdang.ddframe.job.executor.handler.impl.DefaultExecutorServiceHandler"},
	 "scriptCommandLine":"/bin/true","appName":"app","cpuCount":0.5,"memoryMB":128.0,"jobExecutionType":"TRANSIENT"}`
	j, err := ParseJob([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if j.TimeZone != "Asia/Shanghai" || j.Placement != Spread || j.JobShardingStrategyType != AvgAllocation || j.ConcurrencyPolicy != Forbid {
		t.Errorf("timeZone %q, placement %q, strategy %q, concurrency %q; want the scheduler's zone and the defaults",
			j.TimeZone, j.Placement, j.JobShardingStrategyType, j.ConcurrencyPolicy)
	}
	data, _ := json.Marshal(j)
	if _, err := DecodeJob(data, "UTC"); err != nil {
		t.Errorf("the job as read is refused by the API: %v", err)
	}
}
