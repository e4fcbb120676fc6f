// Package freeport finds loopback ports for servers a test starts (ZooKeeper, mesos-local and
// its agents, the scheduler), below the kernel's ephemeral range. A port the kernel hands out
// for ":0" comes from that range, which is also where every outgoing connection takes its
// local port: between the probe and the server's own bind, one of the test's many client
// connections could take it ("bind: address already in use"). Below the range only another
// listener can, and the probe checks for that.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// lowest is the bottom of the range ports are picked from: above the well-known and most
// registered service ports a developer's machine may run.
const lowest = 10000

// Addr returns "127.0.0.1:port" for a port that was free a moment ago and that no outgoing
// connection will take.
func Addr() (string, error) {
	l, err := Listen("127.0.0.1")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Listen listens on ip at a port below the ephemeral range, for a server that must bind the
// same port again after a restart (mesos-local's agents): a port the kernel chose for ":0"
// would, while the server is down, go to the next ":0" listener on that address or to an
// outgoing connection's local end.
func Listen(ip string) (net.Listener, error) {
	top := ephemeralStart() - 1
	if top <= lowest {
		return net.Listen("tcp", net.JoinHostPort(ip, "0")) // no room below the range: the kernel's choice
	}
	var err error
	for range 200 {
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(lowest+rand.IntN(top-lowest+1)))); err == nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no free port on %s below %d: %w", ip, top+1, err)
}

// For is Addr for a test, which it fails when no port is free.
func For(t testing.TB) string {
	t.Helper()
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Port is Addr's port.
func Port() (int, error) {
	addr, err := Addr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux; 32768 elsewhere).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
