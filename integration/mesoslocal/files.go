package mesoslocal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The agent's /files/read (also /files/read.json), as Mesos 1.11's files.cpp serves it. The
// agent "attaches" each executor's sandbox when it launches the executor, under three paths
// (slave.cpp, Framework::addExecutor):
//
//	<work_dir>/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/<container>  the sandbox itself
//	<work_dir>/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/latest       its latest run
//	/frameworks/<fw>/executors/<ex>/runs/latest                                 the same, virtual
//
// and detaches them only when it garbage-collects the sandbox, which mesos-local never does:
// a sandbox stays readable after its executor has ended, as long as the agent runs (an agent
// restart forgets those of frameworks that do not checkpoint, which it does not recover).
// Nothing else of the host is served: the agent's log is not attached.
//
// A path is resolved as files.cpp resolves it: its longest attached prefix (compared token by
// token, without cleaning the path first) names the sandbox; the rest is appended to the
// sandbox's real path and the result canonicalized (symlinks and "..") must stay inside it.
// No attached prefix, or a canonical path that does not exist: 404 with an empty body. A path
// leaving its sandbox: 400 "'<path>' is inaccessible.". A directory: 400 "Cannot read a
// directory.".

// attachment is a sandbox attached under some path.
type attachment struct {
	dir        string
	checkpoint bool // its framework checkpoints: an agent restart keeps it
}

// attach exposes a new executor's sandbox in /files. Caller holds c.mu.
func (a *agent) attach(e *executor, runs string) {
	at := attachment{dir: e.dir, checkpoint: e.checkpoint}
	a.files[filepath.Clean(e.dir)] = at
	a.files[filepath.Join(runs, "latest")] = at
	a.files["/frameworks/"+e.frameworkID+"/executors/"+e.id+"/runs/latest"] = at
}

// maxRead caps a read at 16 pages, as files.cpp does.
var maxRead = int64(os.Getpagesize()) * 16

// filesRead serves GET /files/read?path=…[&offset=…][&length=…][&jsonp=…].
func (a *agent) filesRead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := q.Get("path")
	if path == "" {
		plain(w, http.StatusBadRequest, "Expecting 'path=value' in query.\n")
		return
	}
	offset, ok := intParam(w, q, "offset")
	if !ok {
		return
	}
	length, ok := intParam(w, q, "length") // none: to the end of the file, capped
	if !ok {
		return
	}
	// offset=-1 (the webui pailer's first request) asks for the size only.
	from := offset
	if offset == -1 {
		from, length = 0, 0
	}
	a.c.mu.Lock()
	dir, suffix, ok := a.attached(strings.TrimPrefix(path, "file://"))
	a.c.mu.Unlock()
	if !ok {
		plain(w, http.StatusNotFound, "")
		return
	}
	resolved, code, msg := resolveIn(dir, suffix)
	if code != 0 {
		plain(w, code, msg)
		return
	}
	size, data, code, msg := readAt(resolved, from, length)
	if code != 0 {
		plain(w, code, msg)
		return
	}
	if offset != -1 {
		size = offset // the answer names the offset asked for, even past the end (Mesos ≥ 1.1)
	}
	body := append([]byte(`{"data":`), jsonString(data)...)
	body = append(append(append(body, `,"offset":`...), strconv.FormatInt(size, 10)...), '}')
	if cb := q.Get("jsonp"); q.Has("jsonp") {
		w.Header().Set("Content-Type", "text/javascript")
		body = append(append([]byte(cb+"("), body...), ')')
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// attached finds the longest attached prefix of path, token by token: the sandbox it names and
// the rest of the path. Caller holds c.mu.
func (a *agent) attached(path string) (dir, suffix string, ok bool) {
	tokens := strings.Split(strings.TrimSuffix(path, "/"), "/")
	for i := len(tokens); i > 0; i-- {
		prefix := joinTokens(tokens[:i])
		if at, found := a.files[prefix]; found {
			return at.dir, strings.Join(tokens[i:], "/"), true
		}
	}
	return "", "", false
}

// joinTokens joins path tokens as stout's path::join does: empty tokens (from "//") vanish.
func joinTokens(tokens []string) string {
	var b strings.Builder
	for i, t := range tokens {
		switch {
		case i == 0:
			b.WriteString(t)
		case t != "":
			if !strings.HasSuffix(b.String(), "/") {
				b.WriteByte('/')
			}
			b.WriteString(t)
		}
	}
	return b.String()
}

// resolveIn canonicalizes suffix inside the sandbox dir; it answers a non-zero status code and
// a body when the path cannot be read.
func resolveIn(dir, suffix string) (path string, code int, msg string) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", http.StatusNotFound, "" // not there yet (or any more): it could not be attached
	}
	joined := real + "/" + suffix
	path, err = filepath.EvalSymlinks(joined)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", http.StatusNotFound, ""
	case errors.As(err, &pe):
		return "", http.StatusBadRequest, fmt.Sprintf("Failed to determine canonical path of '%s': %s.\n", joined, pe.Err)
	case err != nil:
		return "", http.StatusBadRequest, fmt.Sprintf("Failed to determine canonical path of '%s': %s.\n", joined, err)
	case path != real && !strings.HasPrefix(path, real+"/"):
		return "", http.StatusBadRequest, "'" + joined + "' is inaccessible.\n"
	}
	return path, 0, ""
}

// readAt reads up to length bytes (length -1: to the end) of the file at offset, capped at
// maxRead, and returns the file's size with them.
func readAt(path string, offset, length int64) (size int64, data []byte, code int, msg string) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return 0, nil, http.StatusBadRequest, "Cannot read a directory.\n"
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, http.StatusInternalServerError, fmt.Sprintf("Failed to open file at '%s': %v.\n", path, err)
	}
	defer f.Close()
	size, err = f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, nil, http.StatusInternalServerError, fmt.Sprintf("Failed to open file at '%s': %v.\n", path, err)
	}
	if offset >= size {
		return size, nil, 0, ""
	}
	if length == -1 {
		length = size - offset
	}
	if length == 0 {
		return size, nil, 0, ""
	}
	data = make([]byte, min(length, maxRead))
	n, err := f.ReadAt(data, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, nil, http.StatusInternalServerError, fmt.Sprintf("Failed to read file at '%s': %v.\n", path, err)
	}
	return size, data[:n], 0, ""
}

// numify parses an integer as stout's numify does: decimal with an optional sign, or
// hexadecimal with a 0x prefix (and an optional minus).
func numify(s string) (int64, bool) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, true
	}
	hex, neg := strings.CutPrefix(s, "-")
	if h, ok := strings.CutPrefix(strings.ToLower(hex), "0x"); ok && !strings.ContainsAny(h, ".p") {
		if v, err := strconv.ParseInt(h, 16, 64); err == nil && !strings.HasPrefix(h, "+") && !strings.HasPrefix(h, "-") {
			if neg {
				return -v, true
			}
			return v, true
		}
	}
	return 0, false
}

// jsonString writes bytes as a JSON string the way Mesos's JSON writer (rapidjson) does: '"',
// '\' and control characters escaped (\u00XX in upper case where there is no short form),
// every other byte as it is, without checking that the bytes are UTF-8.
func jsonString(b []byte) []byte {
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(b)+2)
	out = append(out, '"')
	for _, c := range b {
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
}

// intParam reads an optional integer query parameter as Mesos's files endpoints do: absent is
// -1, below -1 or not a number answers 400 naming it (and ok is false).
func intParam(w http.ResponseWriter, q url.Values, name string) (v int64, ok bool) {
	if !q.Has(name) {
		return -1, true
	}
	v, ok = numify(q.Get(name))
	switch {
	case !ok:
		plain(w, http.StatusBadRequest, "Failed to parse "+name+": Failed to convert '"+q.Get(name)+"' to number.\n")
		return 0, false
	case v < -1:
		plain(w, http.StatusBadRequest, fmt.Sprintf("Negative %s provided: %d.\n", name, v))
		return 0, false
	}
	return v, true
}
