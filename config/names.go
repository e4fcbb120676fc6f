package config

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	_ "time/tzdata" // time zones must resolve on machines without the tzdata package
)

// validName checks the naming rule shared by apps and jobs: 1–100 characters of [A-Za-z0-9_.-].
// It keeps "@-@" and "/" out of names, which task ids and ZooKeeper paths rely on.
func validName(field, name string) *FieldError {
	if name == "" {
		return fieldErr(field, "is required")
	}
	if len(name) > 100 {
		return fieldErr(field, "must be at most 100 characters, got %d", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return fieldErr(field, "may contain only letters, digits, '_', '.' and '-', got %q", r)
		}
	}
	if name == "." || name == ".." {
		return fieldErr(field, "must not be %q", name)
	}
	return nil
}

// LocalZone returns the IANA name of the machine's time zone, the default zone of jobs
// registered without one. It is stored with the job, so that a job's schedule does not change
// when the scheduler moves to a machine in another zone.
func LocalZone() string {
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz
		}
	}
	if target, err := filepath.EvalSymlinks("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "zoneinfo/"); ok {
			if _, err := time.LoadLocation(name); err == nil {
				return name
			}
		}
	}
	return "UTC"
}

// reserved are the names the REST API's fixed paths take (SPEC §7): GET /api/app/list lists
// the apps rather than showing an app named "list", and /api/job/jobs/{jobName} takes
// /api/job/{jobName}/disable (next, failure, fires) of a job named "jobs".
var reserved = map[string]string{"appName": "list", "jobName": "jobs"}

// CheckNewName refuses, at registration, a name that the REST API could not address. Configs
// stored before (by 2.1.5, say) are read and updated as they are.
func CheckNewName(field, name string) error {
	if reserved[field] == name {
		return fieldErr(field, "%q is reserved: the REST API's fixed paths use it", name)
	}
	return nil
}

// mesosPrecision refuses an amount finer than Mesos keeps: scalars are fixed-point with three
// decimals, so shards of 0.0015 cpus that fit an offer as summed here would each be asked for,
// and charged, 0.002.
func mesosPrecision(field string, v float64) *FieldError {
	if r := math.Round(v*1000) / 1000; math.Abs(r-v) > 1e-9 {
		return fieldErr(field, "must be a multiple of 0.001 (Mesos keeps three decimals), got %v", v)
	}
	return nil
}
