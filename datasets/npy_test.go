package datasets

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/safetensors"
)

// npyBytes encodes a .npy file as numpy.save does: format version major
// (1 or 2), the header dict padded with spaces to a multiple of 64 bytes
// and ended by a newline, then data.
func npyBytes(major int, descr string, fortran bool, shape []int, data []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := "(" + strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	tuple += ")"
	f := "False"
	if fortran {
		f = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, f, tuple)
	pre := 10
	if major >= 2 {
		pre = 12
	}
	pad := 64 - (pre+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	dict += strings.Repeat(" ", pad) + "\n"
	var b bytes.Buffer
	b.WriteString(npyMagic)
	b.WriteByte(byte(major))
	b.WriteByte(0)
	if major >= 2 {
		binary.Write(&b, binary.LittleEndian, uint32(len(dict)))
	} else {
		binary.Write(&b, binary.LittleEndian, uint16(len(dict)))
	}
	b.WriteString(dict)
	b.Write(data)
	return b.Bytes()
}

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f64Bytes(v ...float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func i64Bytes(v ...int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

func i32Bytes(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func TestReadNPY(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		file  []byte
		dtype safetensors.DType
		shape []int
	}{
		{"v1 float32", npyBytes(1, "<f4", false, []int{2, 3}, f32Bytes(1, 2, 3, 4, 5, 6)), safetensors.DTypeF32, []int{2, 3}},
		{"v2 float64", npyBytes(2, "<f8", false, []int{1, 2}, f64Bytes(1, 2)), safetensors.DTypeF64, []int{1, 2}},
		{"v3 int64", npyBytes(3, "<i8", false, []int{3}, i64Bytes(1, 2, 3)), safetensors.DTypeI64, []int{3}},
		{"uint8", npyBytes(1, "|u1", false, []int{2, 2}, []byte{1, 2, 3, 4}), safetensors.DTypeU8, []int{2, 2}},
		{"int32", npyBytes(1, "<i4", false, []int{2}, i32Bytes(7, 8)), safetensors.DTypeI32, []int{2}},
		{"empty", npyBytes(1, "<f4", false, []int{0, 5}, nil), safetensors.DTypeF32, []int{0, 5}},
		{"scalar", npyBytes(1, "<f4", false, []int{}, f32Bytes(1)), safetensors.DTypeF32, []int{}},
		{"big-endian byte", npyBytes(1, ">u1", false, []int{1}, []byte{9}), safetensors.DTypeU8, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".npy")
			writeFile(t, p, tc.file)
			a, err := readNPY(p, false)
			if err != nil {
				t.Fatal(err)
			}
			if a.dtype != tc.dtype || !slices.Equal(a.shape, tc.shape) {
				t.Errorf("got %s %v, want %s %v", a.dtype, a.shape, tc.dtype, tc.shape)
			}
			_, n, _ := arrayBytes(tc.shape, tc.dtype.Size())
			if uint64(len(a.data)) != n || !bytes.HasSuffix(tc.file, a.data) {
				t.Errorf("data: %d bytes, want the file's last %d", len(a.data), n)
			}
			h, err := readNPY(p, true)
			if err != nil || h.data != nil || !slices.Equal(h.shape, tc.shape) {
				t.Errorf("header only: %v, %v, data %d bytes", err, h, len(h.data))
			}
		})
	}
}

func TestReadNPYErrors(t *testing.T) {
	dir := t.TempDir()
	good := npyBytes(1, "<f4", false, []int{2, 2}, f32Bytes(1, 2, 3, 4))
	badVersion := bytes.Clone(good)
	badVersion[6] = 4
	hugeHeader := append(npyBytes(2, "<f4", false, []int{1}, nil)[:8], 0xff, 0xff, 0xff, 0x7f)
	tests := []struct {
		name    string
		file    []byte
		message string
	}{
		{"fortran order", npyBytes(1, "<f4", true, []int{2, 2}, f32Bytes(1, 2, 3, 4)), "Fortran (column-major) order"},
		{"big-endian", npyBytes(1, ">f4", false, []int{2}, f32Bytes(1, 2)), `big-endian data (dtype ">f4") are not supported`},
		{"object", npyBytes(1, "|O", false, []int{2}, make([]byte, 16)), `object arrays (dtype "|O") are not supported`},
		{"string", npyBytes(1, "<U3", false, []int{2}, make([]byte, 24)), "string arrays"},
		{"complex", npyBytes(1, "<c8", false, []int{2}, make([]byte, 16)), `unsupported dtype "<c8"`},
		{"structured", []byte(strings.Replace(string(npyBytes(1, "<f4", false, []int{1}, f32Bytes(1))),
			"'<f4'", "[('a', '<f4')]", 1)), "structured arrays"},
		{"truncated data", good[:len(good)-3], "truncated: the header declares float32 (F32) of shape [2 2], 16 bytes of data, but the file holds 13"},
		{"extra data", append(bytes.Clone(good), 0, 0), "2 unexpected bytes after the 16 bytes of data"},
		{"truncated header", good[:40], "truncated: the .npy header is"},
		{"truncated preamble", good[:8], "truncated: the file ends inside the .npy preamble"},
		{"not npy", []byte("PK\x03\x04 a zip file"), "not a .npy file"},
		{"empty file", nil, "not a .npy file"},
		{"bad version", badVersion, "unsupported .npy format version 4.0"},
		{"huge header", hugeHeader, "header length 2147483647 is more than"},
		{"no shape", []byte(strings.Replace(string(good), "'shape': (2, 2), ", "                 ", 1)), "want the keys 'descr', 'fortran_order' and 'shape'"},
		{"negative dim", []byte(strings.Replace(string(good), "(2, 2)", "(-2, 2)", 1)), "want a non-negative dimension"},
		{"unknown key", []byte(strings.Replace(string(good), "'shape'", "'shope'", 1)), `unexpected key "shope"`},
		{"not a dict", []byte(strings.Replace(string(good), "{", "[", 1)), "not a Python dict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".npy")
			writeFile(t, p, tc.file)
			_, err := readNPY(p, false)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			if !strings.HasPrefix(err.Error(), p+": ") {
				t.Errorf("message does not start with the path %s", p)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("message lacks %q", tc.message)
			}
		})
	}
	if _, err := readNPY(filepath.Join(dir, "missing.npy"), false); err == nil || !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

// python is Debian's interpreter, whose python3-numpy package the numpy
// interoperability tests use.
const python = "/usr/bin/python3"

// needNumpy skips the test when python has no numpy.
func needNumpy(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skip("SKIP: " + python + " not found: numpy is missing (install python3 and python3-numpy)")
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Skipf("SKIP: numpy is missing from %s (%v: %s); install python3-numpy", python, err, strings.TrimSpace(string(out)))
	}
}

// TestNPYFromNumpy reads files numpy itself wrote, in both format versions
// and every accepted dtype, through Tensors.
func TestNPYFromNumpy(t *testing.T) {
	needNumpy(t)
	dir := t.TempDir()
	prog := `
import sys, numpy as np
from numpy.lib import format
d = sys.argv[1]
x = (np.arange(5 * 2 * 3, dtype=np.float64).reshape(5, 2, 3) / 7 - 1)
y = np.array([3, 0, 1, 2, 1])
np.save(d + "/x_f4.npy", x.astype("<f4"))
np.save(d + "/x_f8.npy", x)
np.save(d + "/x_u1.npy", (np.arange(30) * 8).reshape(5, 2, 3).astype(np.uint8))
np.save(d + "/y_i8.npy", y.astype(np.int64))
np.save(d + "/y_i4.npy", y.astype(np.int32))
np.save(d + "/y_u1.npy", y.astype(np.uint8))
with open(d + "/x_v2.npy", "wb") as f:
    format.write_array(f, x.astype("<f4"), version=(2, 0))
np.save(d + "/x_fortran.npy", np.asfortranarray(x.astype("<f4")))
np.save(d + "/x_big.npy", x.astype(">f4"))
np.save(d + "/y_obj.npy", np.array([1, "a", None, 2, 3], dtype=object), allow_pickle=True)
`
	if out, err := exec.Command(python, "-c", prog, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	want := make([]float32, 30)
	for i := range want {
		want[i] = float32(float64(i)/7 - 1)
	}
	wantY := []int32{3, 0, 1, 2, 1}
	for _, xf := range []string{"x_f4", "x_f8", "x_v2", "x_u1"} {
		for _, yf := range []string{"y_i8", "y_i4", "y_u1"} {
			src := TensorsSource{X: filepath.Join(dir, xf+".npy"), Y: filepath.Join(dir, yf+".npy")}
			d, err := Tensors(src, "train", 0, 0, 1)
			if err != nil {
				t.Fatalf("%s, %s: %v", xf, yf, err)
			}
			if !slices.Equal(d.SampleShape(), []int{2, 3}) || d.NumClasses() != 4 || d.Len() != 5 {
				t.Fatalf("%s: shape %v, %d classes, %d samples", xf, d.SampleShape(), d.NumClasses(), d.Len())
			}
			x, y := fillAll(d, []int{0, 1, 2, 3, 4})
			if !slices.Equal(y, wantY) {
				t.Errorf("%s: labels %v, want %v", yf, y, wantY)
			}
			for i, v := range x {
				w := want[i]
				if xf == "x_u1" {
					w = float32(byte(i*8)) / 255
				}
				if v != w {
					t.Fatalf("%s: value %d = %v, want %v", xf, i, v, w)
				}
			}
		}
	}
	for f, msg := range map[string]string{
		"x_fortran": "Fortran (column-major) order",
		"x_big":     "big-endian data",
	} {
		_, err := Tensors(TensorsSource{X: filepath.Join(dir, f+".npy"), Y: filepath.Join(dir, "y_i8.npy")}, "train", 0, 0, 1)
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), f+".npy") {
			t.Errorf("%s: got %v, want an error naming the file and saying %q", f, err, msg)
		}
	}
	_, err := Tensors(TensorsSource{X: filepath.Join(dir, "x_f4.npy"), Y: filepath.Join(dir, "y_obj.npy")}, "train", 0, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "object arrays") {
		t.Errorf("object labels: got %v", err)
	}
}
