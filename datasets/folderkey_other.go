//go:build !unix

package datasets

import "io/fs"

// folderKey has no device and inode to give here: a walk relies on its
// depth limit alone.
func folderKey(fs.FileInfo) ([2]uint64, bool) { return [2]uint64{}, false }
