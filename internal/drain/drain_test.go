package drain

import (
	"os/exec"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"
)

// A process that is quiet for longer than the console's read timeout, then writes far more
// than a pseudo-terminal buffers, still runs to its end.
func TestAQuietProcessThatThenTalksIsNotBlocked(t *testing.T) {
	console, err := expect.NewConsole(expect.WithDefaultTimeout(200 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.6; head -c 1000000 /dev/zero | tr '\\0' x; echo")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = console.Tty(), console.Tty(), console.Tty()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go Console(console)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("the process blocked writing to its console")
	}
}
