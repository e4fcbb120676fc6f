package scheduler

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A client that keeps a connection open and sends nothing more, or sends a request's headers
// and then nothing, loses the connection at the server's timeouts: such clients cannot hold
// connections (and their goroutines) for good.
func TestIdleAndStalledConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := newHTTPServer(h, serverTimeouts{header: time.Second, read: 300 * time.Millisecond, write: time.Second, idle: 300 * time.Millisecond})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	closedWithin := func(t *testing.T, c net.Conn, r *bufio.Reader) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second)) // far beyond the server's timeouts
		for {
			if _, err := r.ReadByte(); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the server kept the connection open")
				}
				return // EOF or reset: closed
			}
		}
	}
	t.Run("idle keep-alive", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%v, %v", resp, err)
		}
		closedWithin(t, c, r)
	})
	t.Run("a body that never comes", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n{")
		closedWithin(t, c, bufio.NewReader(c))
	})
}
