//go:build unix

package datasets

import (
	"io/fs"
	"syscall"
)

// folderKey identifies a folder by device and inode, so that a walk that
// follows links visits it once.
func folderKey(st fs.FileInfo) ([2]uint64, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(sys.Dev), uint64(sys.Ino)}, true
}
