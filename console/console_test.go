package console

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, h http.Handler, path string, auth ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesThePageAndEveryAssetItNames(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	page := serve(t, h, "/")
	if page.Code != 200 || !strings.HasPrefix(page.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", page.Code, page.Header().Get("Content-Type"))
	}
	csp := page.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "'sha256-") {
		t.Fatalf("Content-Security-Policy %q: want this origin only, and the import map by its hash", csp)
	}
	// Every URL the page and the scripts name is one of the console's own assets.
	refs := regexp.MustCompile(`(?:href|src)="([^"]+)"|"(/console/[^"]+)"|from ?['"]([^'"]+)['"]|import ?['"]([^'"]+)['"]`)
	bare := map[string]bool{"preact": true, "preact/hooks": true, "htm": true, "uplot": true} // the import map's names
	seen := 0
	for _, file := range []string{"/", "/console/app.js", "/console/vendor/hooks.module.js"} {
		body := serve(t, h, file).Body.String()
		for _, m := range refs.FindAllStringSubmatch(body, -1) {
			u := m[1] + m[2] + m[3] + m[4]
			if bare[u] || u == "data:," || strings.HasPrefix(u, "#") {
				continue
			}
			if !strings.HasPrefix(u, "/console/") {
				t.Errorf("%s names %q: every asset must be the console's own", file, u)
				continue
			}
			if u == "/console/session" || u == "/console/leader" {
				continue
			}
			seen++
			if rec := serve(t, h, u); rec.Code != 200 {
				t.Errorf("%s names %s, which answers %d", file, u, rec.Code)
			}
		}
	}
	if seen < 7 {
		t.Fatalf("found %d asset references; the pattern no longer reads the page", seen)
	}
	if ct := serve(t, h, "/console/app.js").Header().Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Fatalf("app.js served as %q: browsers refuse modules that are not JavaScript", ct)
	}
	if rec := serve(t, h, "/nope"); rec.Code != 404 {
		t.Fatalf("GET /nope = %d; want 404", rec.Code)
	}
}

func TestAuthenticationAndRole(t *testing.T) {
	h, err := New(Config{Root: "root:pw", Guest: "guest:look"})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/console/app.js", "/console/session"} {
		rec := serve(t, h, path)
		if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != `Basic realm="ejcloud"` {
			t.Fatalf("GET %s without credentials = %d %q; want 401 with the API's realm", path, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
	}
	if rec := serve(t, h, "/", "root", "wrong"); rec.Code != 401 {
		t.Fatalf("wrong password: %d", rec.Code)
	}
	for _, tc := range []struct{ user, pass, want string }{{"root", "pw", `"role":"root"`}, {"guest", "look", `"role":"guest"`}} {
		if rec := serve(t, h, "/console/session", tc.user, tc.pass); rec.Code != 200 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Fatalf("session of %s = %d %s; want %s", tc.user, rec.Code, rec.Body, tc.want)
		}
	}
}

// The vendored libraries are the published files VERSIONS names, unchanged.
func TestVendoredFilesMatchVERSIONS(t *testing.T) {
	vendor, err := fs.Sub(assets, "assets/vendor")
	if err != nil {
		t.Fatal(err)
	}
	f, err := vendor.Open("VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 5 {
			t.Fatalf("VERSIONS line %q: want file, package@version, path, licence, sha256", line)
		}
		b, err := fs.ReadFile(vendor, cols[0])
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != cols[4] {
			t.Errorf("%s differs from the published %s", cols[0], cols[1])
		}
		listed[cols[0]] = true
	}
	entries, err := fs.ReadDir(vendor, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && e.Name() != "VERSIONS" && !listed[e.Name()] {
			t.Errorf("vendor/%s is not in VERSIONS", e.Name())
		}
	}
	for _, lic := range []string{"preact.LICENSE", "htm.LICENSE", "uplot.LICENSE", "pico.LICENSE.md"} {
		if f, err := vendor.Open("licenses/" + lic); err != nil {
			t.Errorf("licence %s: %v", lic, err)
		} else {
			io.Copy(io.Discard, f)
			f.Close()
		}
	}
}

// Every asset the page names carries its content's hash and is cached for good under that
// name; the same asset asked for otherwise is revalidated, and a revalidation is a 304.
func TestAssetsAreNamedByTheirContent(t *testing.T) {
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	page := serve(t, h, "/")
	if cc := page.Header().Get("Cache-Control"); cc != "no-cache" {
		t.Fatalf("the page's Cache-Control is %q; want no-cache (it names the assets' versions)", cc)
	}
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`"/console/([^"?]+)(\?v=([0-9a-f]+))?"`).FindAllStringSubmatch(page.Body.String(), -1)
	if len(named) < 8 { // three styles, the script, four modules in the import map
		t.Fatalf("the page names %d assets: %q", len(named), named)
	}
	for _, m := range named {
		file, v := m[1], m[3]
		content, err := fs.ReadFile(files, file)
		if err != nil {
			t.Fatalf("the page names %s: %v", file, err)
		}
		sum := sha256.Sum256(content)
		if v != hex.EncodeToString(sum[:8]) {
			t.Fatalf("the page names %s with version %q; want its content's hash %x", file, v, sum[:8])
		}
		rec := serve(t, h, "/console/"+file+"?v="+v)
		if rec.Code != 200 || rec.Header().Get("Cache-Control") != "private, max-age=31536000, immutable" {
			t.Fatalf("GET %s?v=%s = %d, Cache-Control %q; want 200, cached for good", file, v, rec.Code, rec.Header().Get("Cache-Control"))
		}
		for _, q := range []string{"", "?v=0123456789abcdef"} { // unversioned, or another binary's version
			rec := serve(t, h, "/console/"+file+q)
			if rec.Code != 200 || rec.Header().Get("Cache-Control") != "no-cache" || rec.Header().Get("ETag") != `"`+v+`"` {
				t.Fatalf("GET %s%s = %d, Cache-Control %q, ETag %q; want 200, no-cache, ETag %q", file, q, rec.Code, rec.Header().Get("Cache-Control"), rec.Header().Get("ETag"), v)
			}
			req := httptest.NewRequest("GET", "/console/"+file+q, nil)
			req.Header.Set("If-None-Match", `"`+v+`"`)
			again := httptest.NewRecorder()
			h.ServeHTTP(again, req)
			if again.Code != 304 {
				t.Fatalf("GET %s%s with If-None-Match of its version = %d; want 304", file, q, again.Code)
			}
		}
	}
}
