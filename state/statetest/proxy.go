package statetest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can cut them off, so that a test can partition
// one ZooKeeper client from the server (and let its session expire) while others stay connected.
type Proxy struct {
	Addr string

	target string
	ln     net.Listener
	mu     sync.Mutex // guards cut, drop, dropReq and conns
	cut    bool
	drop   bool // replies from the server are read and thrown away
	// dropReq: requests from the client are read and thrown away
	dropReq bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Cut closes every forwarded connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut, p.drop, p.dropReq = false, false, false
	p.mu.Unlock()
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(out) {
			if out != nil {
				out.Close()
			}
			p.untrack(in)
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out, true) // the server's replies
		go p.pipe(out, in, false)
	}
}

func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropping(replies) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.untrack(dst)
	p.untrack(src)
}

func (p *Proxy) dropping(replies bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if replies {
		return p.drop
	}
	return p.dropReq
}

// DropReplies lets requests through to the server but throws its replies away, until Cut or
// Restore: a request then takes effect while its client never learns it did — the reply lost
// with a connection that breaks.
func (p *Proxy) DropReplies() {
	p.mu.Lock()
	p.drop = true
	p.mu.Unlock()
}

// DropRequests throws away what the client sends, until Cut or Restore: a request then never
// reaches the server, while its client cannot tell that from a lost reply.
func (p *Proxy) DropRequests() {
	p.mu.Lock()
	p.dropReq = true
	p.mu.Unlock()
}
