package userfile

import (
	"errors"
	"os"
	"syscall"
)

// SyncDir fsyncs a folder, so that what was created in it or renamed into
// it survives a crash: the last step of writing a run folder's files as
// one unit (a checkpoint, the script's copy, a safetensors file) through a
// temporary name. File systems that cannot sync folders pass: that is not
// an error anyone can act on.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	return err
}

// WriteNew writes data into a new file at path (an existing one is an
// error: callers write into a fresh temporary folder) and syncs it.
func WriteNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
