package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	for range 20 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if host != "127.0.0.1" || port < lowest || port >= ephemeralStart() {
			t.Fatalf("Addr() = %s; want 127.0.0.1 and a port in [%d, %d)", addr, lowest, ephemeralStart())
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the port Addr() returned is not free: %v", err)
		}
		l.Close()
	}
}
