// Package gobuild builds the project's binaries for tests the way `make build` builds them, so
// that a test runs what operators deploy.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
)

// Executor builds the executor package pkg into out as `make build` does: linked statically
// (CGO_ENABLED=0), because agents fetch it onto hosts whose C library may differ and every
// shard re-executes it as its script's supervisor, which the dynamic loader makes dearer.
func Executor(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
