package scheduler

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// The executor binary is served as it is, or, from a .gz file (the scheduler image's), as the
// binary itself; a .gz that is not gzip is an aborted response, never a truncated binary.
func TestExecutorBinaryIsServedDecompressed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	binary := bytes.Repeat([]byte("\x7fELF executor bytes "), 50_000)
	plain, gz, broken := filepath.Join(dir, "ejcloud-executor"), filepath.Join(dir, "ejcloud-executor.gz"), filepath.Join(dir, "broken.gz")
	os.WriteFile(plain, binary, 0o755)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(binary)
	zw.Close()
	os.WriteFile(gz, b.Bytes(), 0o644)
	os.WriteFile(broken, binary, 0o644)

	for _, path := range []string{plain, gz} {
		s := &instance{cfg: Config{ExecutorBinary: path}, log: quietLog()}
		srv := httptest.NewServer(http.HandlerFunc(s.executorBinary))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, binary) {
			t.Fatalf("%s: %d, %d bytes, %v; want the %d bytes of the binary", filepath.Base(path), resp.StatusCode, len(got), err, len(binary))
		}
	}
	s := &instance{cfg: Config{ExecutorBinary: broken}, log: quietLog()}
	srv := httptest.NewServer(http.HandlerFunc(s.executorBinary))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatalf("a .gz that is not gzip was served as a whole response (%d)", resp.StatusCode)
	}
}
