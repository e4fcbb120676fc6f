package mesoslocal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Framework authentication, as a master started with --authenticate_http_frameworks and
// --credentials does it: every scheduler API request needs HTTP Basic credentials of a
// principal in the credentials file (else 401, with a challenge), and the principal must be the
// one in the framework's FrameworkInfo (else 400; MESOS.md §1.2 step 12).

// ReadCredentials reads a Mesos credentials file: JSON ({"credentials":[{"principal":…,
// "secret":…}]}) or text lines "principal secret".
func ReadCredentials(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read credentials: %w", err)
	}
	out := map[string]string{}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var f struct {
			Credentials []struct{ Principal, Secret string } `json:"credentials"`
		}
		if err := json.Unmarshal(t, &f); err != nil {
			return nil, fmt.Errorf("credentials %s: %w", path, err)
		}
		for _, c := range f.Credentials {
			out[c.Principal] = c.Secret
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for n := 1; sc.Scan(); n++ {
			fields := strings.Fields(sc.Text())
			if len(fields) == 0 {
				continue
			}
			if len(fields) != 2 {
				return nil, fmt.Errorf("credentials %s line %d: want \"principal secret\"", path, n)
			}
			out[fields[0]] = fields[1]
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("credentials %s: no principal", path)
	}
	return out, nil
}

// authenticate returns the request's principal, or answers 401 itself and returns false.
// Without credentials configured every request passes, with no principal.
func (c *Cluster) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if c.opts.Credentials == nil {
		return "", true
	}
	user, pass, ok := r.BasicAuth()
	if ok {
		if secret, known := c.opts.Credentials[user]; known && secret == pass {
			return user, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="mesos"`)
	w.WriteHeader(http.StatusUnauthorized)
	return "", false
}

// principalMismatch is the 400 body for a request whose principal is not the framework's.
func principalMismatch(authenticated, framework string) string {
	return fmt.Sprintf("Authenticated principal '%s' does not match principal '%s' set in `FrameworkInfo`", authenticated, framework)
}
