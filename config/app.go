// Package config holds the App and Job configurations of SPEC §3: their JSON form (as stored in
// ZooKeeper and served by the REST API), their lenient decoding (numbers may be numeric strings,
// as the 2.1.5 console sends them) and every validation rule, each error naming its field.
// The API, the state layer and the scheduler all use these types, so a rule lives in one place.
package config

import (
	"encoding/json"
	"net/url"
	"strings"
	"unicode"
)

// App is a deployable bundle holding an executor and the job code (SPEC §3.1).
type App struct {
	AppName                 string  `json:"appName"`
	AppURL                  string  `json:"appURL"`
	BootstrapScript         string  `json:"bootstrapScript"`
	CPUCount                float64 `json:"cpuCount"`
	MemoryMB                float64 `json:"memoryMB"`
	AppCacheEnable          bool    `json:"appCacheEnable"`
	EventTraceSamplingCount int     `json:"eventTraceSamplingCount"`
}

// DefaultApp returns an App holding the defaults of SPEC §3.1.
func DefaultApp() App {
	return App{CPUCount: 1, MemoryMB: 128, AppCacheEnable: true}
}

// DecodeApp decodes and validates a new app from a request body.
func DecodeApp(body []byte) (App, error) {
	return PatchApp(DefaultApp(), body)
}

// PatchApp applies the fields present in body to base and validates the result: the partial
// update of PUT /api/app. Fields absent from body keep base's values.
func PatchApp(base App, body []byte) (App, error) {
	a := base
	err := decodeObject(body, map[string]setter{
		"appName":                 str(&a.AppName),
		"appURL":                  str(&a.AppURL),
		"bootstrapScript":         str(&a.BootstrapScript),
		"cpuCount":                float(&a.CPUCount),
		"memoryMB":                float(&a.MemoryMB),
		"appCacheEnable":          boolean(&a.AppCacheEnable),
		"eventTraceSamplingCount": integer(&a.EventTraceSamplingCount),
	})
	if err != nil {
		return base, err
	}
	if err := a.Validate(); err != nil {
		return base, err
	}
	return a, nil
}

// Validate checks every rule of SPEC §3.1. The error, if any, is a *FieldError.
func (a App) Validate() error {
	if err := validName("appName", a.AppName); err != nil {
		return err
	}
	if err := validURL(a.AppURL); err != nil {
		return err
	}
	if strings.TrimSpace(a.BootstrapScript) == "" {
		return fieldErr("bootstrapScript", "is required")
	}
	// The Mesos agent runs it as sh -c <bootstrapScript>: a NUL cannot pass exec, and another
	// control character (a carriage return of a script written on Windows) is a command that
	// does not run as it reads. Tabs and line breaks are a script's own.
	for _, r := range a.BootstrapScript {
		if unicode.IsControl(r) && r != '\t' && r != '\n' {
			return fieldErr("bootstrapScript", "must not contain the control character %q: the Mesos agent runs it as a shell command", r)
		}
	}
	if !(a.CPUCount > 0) {
		return fieldErr("cpuCount", "must be greater than 0, got %v", a.CPUCount)
	}
	if !(a.MemoryMB >= 32) {
		return fieldErr("memoryMB", "must be at least 32, got %v", a.MemoryMB)
	}
	if err := mesosPrecision("cpuCount", a.CPUCount); err != nil {
		return err
	}
	if err := mesosPrecision("memoryMB", a.MemoryMB); err != nil {
		return err
	}
	if a.EventTraceSamplingCount < 0 {
		return fieldErr("eventTraceSamplingCount", "must be at least 0, got %d", a.EventTraceSamplingCount)
	}
	return nil
}

// validURL checks an app's URL: what the Mesos fetcher can fetch. An http(s) URL names a host,
// a file:// URL a file; an absolute path is a file on the agent.
func validURL(u string) *FieldError {
	if u == "" {
		return fieldErr("appURL", "is required")
	}
	for _, r := range u {
		switch {
		case r == ' ' || r == '\t' || r == '\r' || r == '\n':
			return fieldErr("appURL", "must not contain white space")
		case unicode.IsControl(r):
			return fieldErr("appURL", "must not contain a control character, got %q", r)
		}
	}
	if strings.HasPrefix(u, "/") {
		if strings.Trim(u, "/") == "" {
			return fieldErr("appURL", "must name a file, got %q", u)
		}
		return nil
	}
	var scheme string
	switch {
	case strings.HasPrefix(u, "http://"):
		scheme = "http"
	case strings.HasPrefix(u, "https://"):
		scheme = "https"
	case strings.HasPrefix(u, "file:///"):
		scheme = "file"
	default:
		return fieldErr("appURL", "must be an http://, https:// or file:// URL or an absolute path, got %q", u)
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fieldErr("appURL", "is not a valid URL: %v", err)
	case scheme == "file" && strings.Trim(p.Path, "/") == "":
		return fieldErr("appURL", "must name a file after file://, got %q", u)
	case scheme != "file" && p.Hostname() == "":
		return fieldErr("appURL", "must name a host after %s://, got %q", scheme, u)
	}
	return nil
}

var archiveSuffixes = []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip"}

// IsArchive reports whether the Mesos fetcher should extract the app's URL (SPEC §3.1);
// anything else is made executable.
func (a App) IsArchive() bool {
	path, _, _ := strings.Cut(a.AppURL, "?")
	for _, s := range archiveSuffixes {
		if strings.HasSuffix(path, s) {
			return true
		}
	}
	return false
}

// ParseApp reads an app as stored in ZooKeeper. Unlike DecodeApp it tolerates unknown fields,
// so that configs written by other versions still load.
func ParseApp(data []byte) (App, error) {
	a := DefaultApp()
	err := json.Unmarshal(data, &a)
	return a, err
}
