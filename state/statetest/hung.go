package statetest

import (
	"net"
	"sync"
	"testing"
)

// HungServer listens on a free loopback port, accepts TCP connections and never answers, as a
// SIGSTOPped process does (its kernel still accepts): a ZooKeeper member or a Mesos master.
// It returns its host:port; the listener and its connections close when the test ends.
func HungServer(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
