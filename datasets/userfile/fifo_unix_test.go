//go:build unix

package userfile

import (
	"path/filepath"
	"syscall"
	"testing"
)

// fifo makes a named pipe with no writer in a temporary folder.
func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipe.txt")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return p
}
