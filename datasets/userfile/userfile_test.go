package userfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// within runs f and fails the test when it has not returned after d: a
// regression that blocks on a FIFO fails instead of hanging.
func within[T any](t *testing.T, d time.Duration, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		var zero T
		return zero, nil
	}
}

// TestRefusesNonRegular: a FIFO with no writer, /dev/zero and a folder are
// refused at once, by ReadFile, Open and Check, naming the file and what it
// is.
func TestRefusesNonRegular(t *testing.T) {
	cases := []struct{ path, want string }{
		{fifo(t), "is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", "/dev/zero is a character device, not a regular file"},
		{t.TempDir(), "is a folder, not a regular file"},
	}
	for _, c := range cases {
		if _, err := os.Stat(c.path); err != nil {
			t.Logf("skipping %s: %v", c.path, err)
			continue
		}
		_, err := within(t, 5*time.Second, func() ([]byte, error) { return ReadFile(c.path, 0) })
		var nr *NotRegularError
		if !errors.As(err, &nr) || !strings.HasPrefix(err.Error(), c.path+" ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%s): %v, want %q", c.path, err, c.want)
		}
		_, err = within(t, 5*time.Second, func() (*os.File, error) { return Open(c.path) })
		if !errors.As(err, &nr) {
			t.Errorf("Open(%s): %v, want a NotRegularError", c.path, err)
		}
		if _, err = Check(c.path); !errors.As(err, &nr) {
			t.Errorf("Check(%s): %v, want a NotRegularError", c.path, err)
		}
	}
}

// TestReadFile: a regular file reads whole, through a symbolic link too; a
// missing one is fs.ErrNotExist; one over the limit is refused, from its
// size or, for /proc files whose size is 0, from what was read.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p, link} {
		if b, err := ReadFile(path, 5); err != nil || string(b) != "hello" {
			t.Errorf("ReadFile(%s, 5) = %q, %v", path, b, err)
		}
	}
	_, err := ReadFile(p, 4)
	var tl *TooLargeError
	if !errors.As(err, &tl) || err.Error() != p+" is 5 bytes, more than the limit of 4 bytes" {
		t.Errorf("ReadFile(%s, 4): %v", p, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none"), 0); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "open ") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		_, err := ReadFile("/proc/self/status", 16)
		if !errors.As(err, &tl) || err.Error() != "/proc/self/status holds more than the limit of 16 bytes" {
			t.Errorf("/proc/self/status: %v", err)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{812: "812 bytes", 16 << 20: "16 MiB", 3 << 29: "1.5 GiB", 1536: "1.5 KiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestWriteNewAndSyncDir: WriteNew writes and syncs a new file, refuses
// to replace one, and SyncDir syncs its folder (or says why not).
func TestWriteNewAndSyncDir(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteNew(p, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "data" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if err := WriteNew(p, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("WriteNew over an existing file: %v, want fs.ErrExist", err)
	}
	if err := SyncDir(dir); err != nil {
		t.Errorf("SyncDir: %v", err)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir of a missing folder: %v, want fs.ErrNotExist", err)
	}
}
