// Package drain keeps reading what a process writes to its go-expect console, so that the
// process never blocks on a full pseudo-terminal. A single ExpectEOF is not enough: it gives
// up after the console's read timeout of silence (a standby scheduler says nothing for
// minutes), and the next log line of the process — now a leader — then blocks for ever, with
// its event loop behind the logger's lock.
package drain

import (
	"errors"
	"os"

	expect "github.com/Netflix/go-expect"
)

// Console reads c until EOF or until c is closed; run it in its own goroutine.
func Console(c *expect.Console) {
	for {
		_, err := c.ExpectEOF()
		if err == nil || !(errors.Is(err, os.ErrDeadlineExceeded) || os.IsTimeout(err)) {
			return // EOF, or the console was closed
		}
	}
}
