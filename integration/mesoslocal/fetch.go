package mesoslocal

import (
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// fetchAll runs the Mesos fetcher (MESOS.md §7.3) for an executor's URIs, in order, into its
// sandbox, logging to the sandbox's stdout and stderr as the real fetcher does.
func fetchAll(dir, workDir string, uris []mesos.CommandInfo_URI) error {
	logf, err := os.OpenFile(filepath.Join(dir, "stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	for _, u := range uris {
		fmt.Fprintf(logf, "Fetching URI '%s'\n", u.Value)
		if err := fetch(dir, workDir, u); err != nil {
			fmt.Fprintf(logf, "Failed to fetch '%s': %v\n", u.Value, err)
			return fmt.Errorf("fetch %s: %w", u.Value, err)
		}
		fmt.Fprintf(logf, "Fetched '%s'\n", u.Value)
	}
	return nil
}

func fetch(dir, workDir string, u mesos.CommandInfo_URI) error {
	name := path.Base(strings.TrimPrefix(strings.SplitN(u.Value, "?", 2)[0], "file://"))
	if u.OutputFile != nil && *u.OutputFile != "" {
		name = *u.OutputFile
	}
	if filepath.IsAbs(name) || strings.Contains(name, "..") {
		return fmt.Errorf("output_file %q must be a relative path inside the sandbox", name)
	}
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	cached := u.Cache != nil && *u.Cache
	executable := u.Executable != nil && *u.Executable
	src := dst
	if cached {
		sum := sha256.Sum256([]byte(u.Value))
		src = filepath.Join(workDir, "fetcher-cache", hex.EncodeToString(sum[:8])+"-"+path.Base(name))
		// One fetch per cache entry at a time, as the Mesos fetcher cache does: the others
		// wait for it and copy the result.
		lock, _ := cacheLocks.LoadOrStore(src, &sync.Mutex{})
		lock.(*sync.Mutex).Lock()
		var err error
		if !fileExists(src) {
			if err = os.MkdirAll(filepath.Dir(src), 0o755); err == nil {
				err = download(u.Value, src)
			}
		}
		lock.(*sync.Mutex).Unlock()
		if err != nil {
			return err
		}
	} else {
		if executable {
			src = dst + ".fetched"
			defer os.Remove(src)
		}
		if err := download(u.Value, src); err != nil {
			return err
		}
	}
	if executable {
		return copyExecutable(src, dst)
	}
	if (u.Extract == nil || *u.Extract) && isArchive(name) {
		return extract(src, dir)
	}
	if cached {
		return copyFile(src, dst)
	}
	return nil
}

// cacheLocks holds a mutex per fetcher cache entry.
var cacheLocks sync.Map

// download copies a URI (absolute path, file://, http:// or https://) to dst.
func download(uri, dst string) error {
	tmp := dst + ".fetching-" + newUUID()
	defer os.Remove(tmp)
	switch {
	case strings.HasPrefix(uri, "http://"), strings.HasPrefix(uri, "https://"):
		client := &http.Client{Timeout: 5 * time.Minute}
		resp, err := client.Get(uri)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d from %s", resp.StatusCode, uri)
		}
		out, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, resp.Body); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	case strings.HasPrefix(uri, "file://"), strings.HasPrefix(uri, "/"):
		if err := copyFile(strings.TrimPrefix(uri, "file://"), tmp); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported URI scheme in %q (mesos-local fetches file:// and http(s)://)", uri)
	}
	return os.Rename(tmp, dst)
}

// copyExecutable writes src's bytes to a new file dst while no process is forked. A child
// forked while dst is open for writing holds that descriptor until its exec, and an exec of dst
// meanwhile fails with ETXTBSY ("Text file busy", golang/go#22315): with several agents
// launching executors at once, one executor's shell exited 126. The real fetcher runs in a
// process of its own; here the write is short (the bytes are read first) and holds the fork lock.
func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	os.Remove(dst)
	return os.WriteFile(dst, data, 0o755)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

var archiveSuffixes = []string{".tar", ".tar.gz", ".tar.bz2", ".tar.xz", ".gz", ".tgz", ".tbz2", ".txz", ".zip"}

func isArchive(name string) bool {
	for _, s := range archiveSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// extract unpacks an archive into dir.
func extract(archive, dir string) error {
	name := filepath.Base(archive)
	switch {
	case strings.HasSuffix(name, ".zip"):
		return unzip(archive, dir)
	case strings.HasSuffix(name, ".gz") && !strings.HasSuffix(name, ".tar.gz"):
		return gunzip(archive, filepath.Join(dir, strings.TrimSuffix(name, ".gz")))
	}
	// GNU tar detects gzip, bzip2 and xz by itself.
	out, err := exec.Command("tar", "-C", dir, "-xf", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tar -xf %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func gunzip(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, zr); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func unzip(src, dir string) error {
	zr, err := zip.OpenReader(src)
	if err != nil {
		return err
	}
	defer zr.Close()
	for _, f := range zr.File {
		p := filepath.Join(dir, f.Name)
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("zip entry %q escapes the sandbox", f.Name)
		}
		if f.FileInfo().IsDir() {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		in, err := f.Open()
		if err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, f.Mode().Perm()|0o600)
		if err != nil {
			in.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
