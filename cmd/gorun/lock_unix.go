//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"gorun/datasets/userfile"
)

// lockRunFolder takes the advisory lock (flock) of the run folder out,
// writing the holder's pid and start time into out/gorun.lock. A folder
// another process holds is an error naming that process. unlock releases
// the lock and removes the file.
func lockRunFolder(out string) (unlock func(), err error) {
	path := filepath.Join(out, lockName)
	for tries := 0; ; tries++ {
		fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("run folder lock: %w", err)
		}
		if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			content, _ := userfile.ReadFile(path, 1<<12) // a FIFO in its place: not read
			fh.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("run folder %s is in use by %s (lock file %s); wait for it to end or choose another --out", out, holderOf(content), path)
			}
			return nil, fmt.Errorf("run folder lock %s: %w", path, err)
		}
		// The holder before us may have removed the file between our open
		// and our lock: then we locked a file nobody else will see.
		var a, b syscall.Stat_t
		if syscall.Fstat(int(fh.Fd()), &a) != nil || syscall.Stat(path, &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			fh.Close()
			if tries < 10 {
				continue
			}
			return nil, fmt.Errorf("run folder lock %s: the file keeps changing", path)
		}
		if err := fh.Truncate(0); err == nil {
			fh.WriteAt([]byte(lockContent()), 0)
		}
		return func() {
			os.Remove(path)
			syscall.Flock(int(fh.Fd()), syscall.LOCK_UN)
			fh.Close()
		}, nil
	}
}
