package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-zookeeper/zk"
)

// translate gives every error that may leave a request's outcome unknown ErrUnavailable, which
// is what sends a write to be read back or retried on its session: go-zookeeper hands the
// request whose write to the socket failed the socket's own error, which was passed on as it
// was, as if ZooKeeper had refused the request.
func TestTranslateMarksABrokenSocketUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}, true},
		{fmt.Errorf("write tcp: %w", os.ErrDeadlineExceeded), true},
		{io.EOF, true},
		{net.ErrClosed, true},
		{zk.ErrConnectionClosed, true},
		{zk.ErrNoNode, false},
		{context.DeadlineExceeded, false}, // a net.Error too, but the caller's own deadline
		{context.Canceled, false},
		{errors.New("zk: invalid path"), false},
	} {
		if got := errors.Is(translate(tc.err), ErrUnavailable); got != tc.unavailable {
			t.Errorf("translate(%v) unavailable: %v, want %v", tc.err, got, tc.unavailable)
		}
	}
}
