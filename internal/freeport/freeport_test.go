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

func TestListenIsBelowTheEphemeralRangeOnTheAddressAsked(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		l, err := Listen(ip)
		if err != nil {
			t.Fatal(err)
		}
		a := l.Addr().(*net.TCPAddr)
		l.Close()
		if a.IP.String() != ip || a.Port < lowest || a.Port >= ephemeralStart() {
			t.Fatalf("Listen(%s) = %s; want %s and a port in [%d, %d)", ip, a, ip, lowest, ephemeralStart())
		}
	}
}
