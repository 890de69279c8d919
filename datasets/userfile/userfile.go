// Package userfile opens the files a user names for gorun to read: the
// script and the files it load()s, the cluster file, --init weights, a
// --resume folder's checkpoints and metrics, the data files of data.text,
// data.tensors and data.mnist(dir = ...), a run folder's run.json. Every
// package that reads such a file goes through it; it belongs to no phase.
//
// Only regular files are read. A named pipe (FIFO), a device (/dev/zero,
// a terminal behind /dev/stdin), a socket or a folder is refused before it
// is opened — opening a FIFO for reading blocks until a writer comes, in a
// system call that no signal ends, and a device such as /dev/zero never
// ends — and the file is checked again once open, so one swapped in
// between is refused too. ReadFile also refuses a file larger than the
// limit its caller gives (the caller's documented budget).
//
// It also holds the two steps every "whole or absent" write of a run
// folder shares (a checkpoint, the script's copy, a safetensors file):
// WriteNew, a new file synced, and SyncDir, its folder synced after a
// rename (durable.go).
//
// Errors name the file. A missing file is the *fs.PathError of os.Open
// (errors.Is(err, fs.ErrNotExist) holds); a file of the wrong kind is a
// *NotRegularError ("data.txt is a named pipe (FIFO), not a regular
// file"), one over the limit a *TooLargeError.
package userfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// NotRegularError is a file that is not a regular file: a folder, a named
// pipe, a device, a socket.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, Kind(e.Mode))
}

// TooLargeError is a file larger than the most its reader takes.
type TooLargeError struct {
	Path  string
	Size  int64 // bytes, or -1 when the file had no size to give (/proc)
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s holds more than the limit of %s", e.Path, Bytes(e.Limit))
	}
	return fmt.Sprintf("%s is %s, more than the limit of %s", e.Path, Bytes(e.Size), Bytes(e.Limit))
}

// Kind names what a file of mode m is, as messages say it: "a folder", "a
// named pipe (FIFO)", "a character device", "a block device", "a socket",
// "a symbolic link", "a regular file".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a regular file"
	}
	return "an irregular file"
}

// Bytes writes n bytes for a message: "812 bytes", "16 MiB", "1.5 GiB".
func Bytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			if n%u.size == 0 {
				return fmt.Sprintf("%d %s", n/u.size, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Check returns the file's information when path (its links followed) is a
// regular file, without opening it.
func Check(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op = "open" // what the caller was about to do
		}
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return st, nil
}

// Open opens the regular file at path for reading. It checks the file
// before opening it, opens it without waiting for a writer (O_NONBLOCK,
// which changes nothing for a regular file) and checks the open file
// again, so that it never blocks on a named pipe put in its place.
func Open(path string) (*os.File, error) {
	if _, err := Check(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return f, nil
}

// ReadFile reads the regular file at path whole. A limit above 0 is the
// most bytes it reads: a larger file is a *TooLargeError, found from the
// file's size before anything is read (and, for files whose size says
// nothing, such as those of /proc, when the limit is passed).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if limit > 0 && size > limit {
		return nil, &TooLargeError{Path: path, Size: size, Limit: limit}
	}
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + 512)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	if limit > 0 && int64(buf.Len()) > limit {
		return nil, &TooLargeError{Path: path, Size: -1, Limit: limit}
	}
	return buf.Bytes(), nil
}
