//go:build !unix

package main

import (
	"os"
	"path/filepath"
)

// lockRunFolder writes the lock file without an advisory lock: this system
// has no flock.
func lockRunFolder(out string) (unlock func(), err error) {
	path := filepath.Join(out, lockName)
	if err := os.WriteFile(path, []byte(lockContent()), 0o644); err != nil {
		return nil, err
	}
	return func() { os.Remove(path) }, nil
}
