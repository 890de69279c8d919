package safetensors

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gorun/datasets/userfile"
)

// ReadFile reads and validates the safetensors file at path. Format errors
// are *Error values naming path.
func ReadFile(path string) (*File, error) {
	b, err := userfile.ReadFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return decodeBytes(b, path)
}

// WriteFile writes tensors and metadata to path in safetensors format (see
// Encode), atomically: it writes a temporary file in the same directory,
// syncs it to disk, renames it over path and syncs the directory. If it fails
// before the rename, any previous file at path is left untouched and the
// temporary file is removed; invalid input is rejected before anything is
// created. A failure to sync the directory after the rename is reported,
// though the new file is then already in place.
//
// The new file takes the permission bits of the file it replaces, or 0644.
// If path is a symbolic link, the link itself is replaced, not its target.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	return writeFile(path, tensors, metadata, writeHooks{})
}

// writeHooks lets tests inject failures into writeFile. The zero value
// injects nothing.
type writeHooks struct {
	// wrap, if set, wraps the temporary file's writer.
	wrap func(io.Writer) io.Writer
	// beforeRename, if set, runs after the temporary file is written,
	// synced and closed, and before the rename; an error aborts the write.
	beforeRename func(tmp string) error
}

func writeFile(path string, tensors []Tensor, metadata map[string]string, hooks writeHooks) (err error) {
	p, err := prepare(tensors, metadata)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.File = path
		}
		return err
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("safetensors: writing %s: %s: %w", path, what, err)
	}

	perm := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		perm = fi.Mode().Perm()
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fail("creating temporary file", err)
	}
	tmp := f.Name()
	closed, renamed := false, false
	defer func() {
		if err != nil && !renamed {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()

	var w io.Writer = f
	if hooks.wrap != nil {
		w = hooks.wrap(w)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := p.writeTo(bw); err != nil {
		return fail("temporary file "+tmp, err)
	}
	if err := bw.Flush(); err != nil {
		return fail("temporary file "+tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail("temporary file "+tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fail("syncing temporary file "+tmp, err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fail("closing temporary file "+tmp, err)
	}
	if hooks.beforeRename != nil {
		if err := hooks.beforeRename(tmp); err != nil {
			return fail("before rename", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail("renaming temporary file", err)
	}
	renamed = true
	if derr := userfile.SyncDir(dir); derr != nil {
		// The new file is in place: nothing to clean up.
		return fmt.Errorf("safetensors: %s written, but syncing its directory failed: %w", path, derr)
	}
	return nil
}
