// Package console is ejcloud's web console (SPEC §8): static pages embedded in the binary that
// talk to the REST API from the browser, with the credentials the browser was given for the
// console. Nothing is fetched from elsewhere: the libraries are vendored under assets/vendor
// (VERSIONS names them) and the Content-Security-Policy refuses any other origin.
//
//	GET /                  the page (assets/index.html); the pages are client-side (#/apps, #/jobs, …)
//	GET /console/…         its scripts, styles and vendored libraries
//	GET /console/session   {"role":"root"|"guest"}: the console hides write controls from guests
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/ejcloud/ejcloud/api"
)

//go:embed assets
var assets embed.FS

// Config is the console's configuration: the API's credentials, which the console asks for too.
type Config struct {
	Root  string // "user:password" of the administrator; "" disables authentication
	Guest string // "user:password" of the read-only guest
}

// New returns the console's handler, for GET / and GET /console/….
func New(cfg Config) (http.Handler, error) {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	versions, err := assetVersions(files)
	if err != nil {
		return nil, err
	}
	index = versioned(index, versions)
	csp, err := policy(index)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(index)
	})
	mux.HandleFunc("GET /console/session", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"role": api.Role(cfg.Root, cfg.Guest, r), "authenticated": cfg.Root != ""})
	})
	assetServer := http.StripPrefix("/console/", http.FileServerFS(files))
	mux.HandleFunc("GET /console/", func(w http.ResponseWriter, r *http.Request) {
		v, ok := versions[strings.TrimPrefix(r.URL.Path, "/console/")]
		if ok && r.URL.Query().Get("v") == v {
			// The page names each asset with its content's hash, so an asset read once is
			// read from the browser's cache, without a request, until the binary changes.
			// Revalidating every load rewrote the cache entries each time (embedded files
			// carry no validator), and a navigation that left such a write mid-way stalled
			// the next page's load of that file for 20 s on Chromium's cache lock.
			w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
		}
		if ok {
			w.Header().Set("ETag", `"`+v+`"`) // a revalidation of an unversioned URL is a 304
		}
		assetServer.ServeHTTP(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]string{"error": "no such endpoint: " + r.URL.Path})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api.Role(cfg.Root, cfg.Guest, r) == api.RoleNone {
			w.Header().Set("WWW-Authenticate", api.Realm)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": "credentials required"})
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The page, and an asset asked for without its version, are revalidated: an upgraded
		// scheduler's console must not mix old and new scripts (a versioned asset says
		// otherwise below).
		h.Set("Cache-Control", "no-cache")
		mux.ServeHTTP(w, r)
	}), nil
}

// assetVersions maps each asset (its path under assets/) but the page to a hash of its content.
func assetVersions(files fs.FS) (map[string]string, error) {
	versions := map[string]string{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "index.html" {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		versions[p] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	return versions, nil
}

// versioned names every asset the page refers to ("/console/…", in its links, its script and
// its import map) with its version: ?v=<hash>.
func versioned(index []byte, versions map[string]string) []byte {
	for p, v := range versions {
		index = bytes.ReplaceAll(index, []byte(`"/console/`+p+`"`), []byte(`"/console/`+p+`?v=`+v+`"`))
	}
	return index
}

// policy is the Content-Security-Policy of the console: its own origin only, and the page's one
// inline script, the import map, by its hash.
func policy(index []byte) (string, error) {
	const open, end = `<script type="importmap">`, `</script>`
	i := bytes.Index(index, []byte(open))
	if i < 0 {
		return "", fmt.Errorf("console assets: index.html has no import map")
	}
	body := index[i+len(open):]
	j := bytes.Index(body, []byte(end))
	if j < 0 {
		return "", fmt.Errorf("console assets: index.html's import map is not closed")
	}
	sum := sha256.Sum256(body[:j])
	return "default-src 'self'; script-src 'self' 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'", nil
}
