package safetensors

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// failAfter passes n bytes through to w, then fails with err.
type failAfter struct {
	w   io.Writer
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return f.w.Write(p)
	}
	k, _ := f.w.Write(p[:f.n])
	f.n = 0
	return k, f.err
}

// dirNames lists the names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func encoded(t *testing.T, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	v1 := []Tensor{F32("w", []int{2}, []float32{1, 2})}
	v2 := sampleTensors()
	if err := WriteFile(path, v1, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("new file: %v, %v; want mode 0644", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, v2, map[string]string{"v": "2"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := encoded(t, v2, map[string]string{"v": "2"}); !bytes.Equal(got, want) {
		t.Error("the file does not hold exactly what Encode writes")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file: %v, %v; want the previous mode 0600", fi.Mode(), err)
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"model.safetensors"}) {
		t.Errorf("directory holds %q", names)
	}

	// A relative path in the current directory.
	t.Chdir(dir)
	if err := WriteFile("rel.safetensors", v1, nil); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadFile("rel.safetensors"); err != nil || len(f.Tensors) != 1 {
		t.Errorf("relative path: %v, %v", f, err)
	}
}

// TestWriteFileAtomic makes writes fail at many points and checks that the
// previous file survives byte for byte and no temporary file is left.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	prev := []Tensor{F32("fc.weight", []int{2, 2}, []float32{1, 2, 3, 4})}
	if err := WriteFile(path, prev, map[string]string{"epoch": "1"}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	next := sampleTensors()
	size := len(encoded(t, next, nil))
	boom := errors.New("injected failure")
	check := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("the write succeeded")
		}
		after, rerr := os.ReadFile(path)
		if rerr != nil || !bytes.Equal(after, before) {
			t.Errorf("the previous file changed (read error %v)", rerr)
		}
		if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"ckpt.safetensors"}) {
			t.Errorf("directory holds %q", names)
		}
	}

	for _, n := range []int{0, 1, 7, 8, 100, size / 2, size - 1} {
		t.Run("fail after "+strconv.Itoa(n)+" bytes", func(t *testing.T) {
			err := writeFile(path, next, nil, writeHooks{
				wrap: func(w io.Writer) io.Writer { return &failAfter{w: w, n: n, err: boom} },
			})
			if !errors.Is(err, boom) {
				t.Errorf("got %v, want the injected error", err)
			}
			check(t, err)
		})
	}

	t.Run("fail before rename", func(t *testing.T) {
		var sawTmp bool
		err := writeFile(path, next, nil, writeHooks{beforeRename: func(tmp string) error {
			// The temporary file is complete and in the same directory.
			b, err := os.ReadFile(tmp)
			sawTmp = err == nil && len(b) == size && filepath.Dir(tmp) == dir
			return boom
		}})
		if !sawTmp {
			t.Error("the temporary file was not complete, or not next to the target")
		}
		if !errors.Is(err, boom) {
			t.Errorf("got %v, want the injected error", err)
		}
		check(t, err)
	})

	t.Run("invalid tensor", func(t *testing.T) {
		bad := append(sampleTensors(), F32("fc2.weight", []int{10, 50}, make([]float32, 499)))
		err := WriteFile(path, bad, nil)
		var e *Error
		if !errors.As(err, &e) || e.File != path || e.Tensor != "fc2.weight" {
			t.Errorf("got %v, want an *Error naming %s and fc2.weight", err, path)
		}
		check(t, err)
	})

	t.Run("no previous file", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "new.safetensors")
		err := writeFile(p, next, nil, writeHooks{
			wrap: func(w io.Writer) io.Writer { return &failAfter{w: w, n: 50, err: boom} },
		})
		if !errors.Is(err, boom) {
			t.Errorf("got %v, want the injected error", err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("directory holds %q", names)
		}
	})

	t.Run("path is a directory", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "sub")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(p, next, nil); err == nil {
			t.Error("writing over a directory succeeded")
		}
		if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"sub"}) {
			t.Errorf("directory holds %q", names)
		}
	})

	t.Run("missing directory", func(t *testing.T) {
		if err := WriteFile(filepath.Join(dir, "no", "such", "x.safetensors"), next, nil); err == nil {
			t.Error("writing into a missing directory succeeded")
		}
	})
}

func TestEncodeWriterError(t *testing.T) {
	boom := errors.New("disk full")
	tensors := []Tensor{U8("a", []int{4}, []byte{1, 2, 3, 4}), U8("b", []int{4}, []byte{5, 6, 7, 8})}
	full := encoded(t, tensors, nil)
	for _, c := range []struct {
		n    int
		want string
	}{
		{0, "safetensors: writing header: disk full"},
		{len(full) - 6, `safetensors: writing tensor "a": disk full`},
		{len(full) - 2, `safetensors: writing tensor "b": disk full`},
	} {
		var buf bytes.Buffer
		err := Encode(&failAfter{w: &buf, n: c.n, err: boom}, tensors, nil)
		if !errors.Is(err, boom) || err.Error() != c.want {
			t.Errorf("failing after %d bytes: got %v, want %q", c.n, err, c.want)
		}
	}
}
