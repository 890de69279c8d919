package safetensors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// python is the interpreter the interop tests run: Debian's, whose
// python3-numpy package the tests need.
const python = "/usr/bin/python3"

// interopScript is an independent safetensors reader and writer that uses
// only json, struct, hashlib and numpy.
const interopScript = "testdata/interop.py"

func needPythonNumpy(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skip("SKIP: " + python + " not found; install python3 and python3-numpy")
	}
	if out, err := exec.Command(python, "-c", "import numpy").CombinedOutput(); err != nil {
		t.Skipf("SKIP: %s has no numpy (%v: %s); install python3-numpy", python, err, strings.TrimSpace(string(out)))
	}
}

// runScript runs the interop script and decodes its JSON output into v.
func runScript(t *testing.T, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{interopScript}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", interopScript, args, err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s %v: bad output: %v", interopScript, args, err)
	}
}

// pyReport is what `interop.py read` prints.
type pyReport struct {
	HeaderLen  uint64            `json:"header_len"`
	HeaderKeys []string          `json:"header_keys"`
	Padding    string            `json:"padding"`
	Metadata   map[string]string `json:"metadata"`
	Tensors    map[string]struct {
		DType       DType    `json:"dtype"`
		Shape       []int    `json:"shape"`
		DataOffsets []uint64 `json:"data_offsets"`
		Sum         *string  `json:"sum"` // Python's repr, or null for F8
		SHA256      string   `json:"sha256"`
	} `json:"tensors"`
}

// TestInteropPythonReadsGo writes a file with WriteFile and has the
// independent Python reader check it.
func TestInteropPythonReadsGo(t *testing.T) {
	needPythonNumpy(t)
	tensors := sampleTensors()
	tensors = append(tensors, Tensor{Name: "f8", DType: DTypeF8E4M3, Shape: []int{2}, Data: []byte{0x38, 0xb8}})
	meta := map[string]string{"format": "pt", "gorun.step": "1200", "ünï": "cödé"}
	path := filepath.Join(t.TempDir(), "go.safetensors")
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	var rep pyReport
	runScript(t, &rep, "read", path)

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(raw); rep.HeaderLen != n || n%8 != 0 {
		t.Errorf("Python sees header length %d, file says %d (must be a multiple of 8)", rep.HeaderLen, n)
	}
	if strings.Trim(rep.Padding, " ") != "" || len(rep.Padding) >= 8 {
		t.Errorf("padding %q: want fewer than 8 spaces", rep.Padding)
	}
	names := make([]string, len(tensors))
	for i, tt := range tensors {
		names[i] = tt.Name
	}
	sort.Strings(names)
	if want := append([]string{MetadataKey}, names...); !reflect.DeepEqual(rep.HeaderKeys, want) {
		t.Errorf("header keys in order %q, want %q", rep.HeaderKeys, want)
	}
	if !reflect.DeepEqual(rep.Metadata, meta) {
		t.Errorf("metadata: Python sees %v, want %v", rep.Metadata, meta)
	}
	if len(rep.Tensors) != len(tensors) {
		t.Errorf("Python sees %d tensors, want %d", len(rep.Tensors), len(tensors))
	}

	// Expected layout: contiguous, in sorted-name order.
	offsets := map[string][2]uint64{}
	var pos uint64
	byName := map[string]Tensor{}
	for _, tt := range tensors {
		byName[tt.Name] = tt
	}
	for _, n := range names {
		offsets[n] = [2]uint64{pos, pos + uint64(len(byName[n].Data))}
		pos += uint64(len(byName[n].Data))
	}

	for _, tt := range tensors {
		p, ok := rep.Tensors[tt.Name]
		if !ok {
			t.Errorf("Python does not see tensor %q", tt.Name)
			continue
		}
		if p.DType != tt.DType || !sameShape(p.Shape, tt.Shape) {
			t.Errorf("%q: Python sees %s %v, want %s %v", tt.Name, p.DType, p.Shape, tt.DType, tt.Shape)
		}
		if o := offsets[tt.Name]; !reflect.DeepEqual(p.DataOffsets, o[:]) {
			t.Errorf("%q: data_offsets %v, want %v", tt.Name, p.DataOffsets, o)
		}
		sum := sha256.Sum256(tt.Data)
		if p.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%q: Python's bytes differ", tt.Name)
		}
		vals, ok := toFloat64s(tt)
		if !ok {
			if p.Sum != nil {
				t.Errorf("%q: Python sums %s, expected no sum", tt.Name, *p.Sum)
			}
			continue
		}
		want := 0.0
		for _, v := range vals {
			want += v
		}
		if p.Sum == nil {
			t.Errorf("%q: no sum from Python", tt.Name)
			continue
		}
		got, err := strconv.ParseFloat(*p.Sum, 64)
		if err != nil {
			t.Errorf("%q: Python's sum %q: %v", tt.Name, *p.Sum, err)
			continue
		}
		if !(got == want || math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))) {
			t.Errorf("%q: Python sums %v, Go %v", tt.Name, got, want)
		}
	}
}

// pyManifest is what `interop.py write` prints.
type pyManifest struct {
	Metadata map[string]string `json:"metadata"`
	Tensors  map[string]struct {
		DType  DType         `json:"dtype"`
		Shape  []int         `json:"shape"`
		Values []json.Number `json:"values"`
	} `json:"tensors"`
}

// TestInteropGoReadsPython has the Python writer write a file with its own
// layout choices and checks that ReadFile reads every value; then it writes
// what it read back with WriteFile and checks that Python reads the same
// bytes from that file.
func TestInteropGoReadsPython(t *testing.T) {
	needPythonNumpy(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "py.safetensors")
	var man pyManifest
	runScript(t, &man, "write", path)

	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Metadata, man.Metadata) {
		t.Errorf("metadata %v, want %v", f.Metadata, man.Metadata)
	}
	if len(f.Tensors) != len(man.Tensors) || len(man.Tensors) < 10 {
		t.Errorf("read %d tensors, Python wrote %d", len(f.Tensors), len(man.Tensors))
	}
	for name, m := range man.Tensors {
		tt, ok := f.Get(name)
		if !ok {
			t.Errorf("tensor %q missing", name)
			continue
		}
		if tt.DType != m.DType || !sameShape(tt.Shape, m.Shape) {
			t.Errorf("%q: read %s %v, want %s %v", name, tt.DType, tt.Shape, m.DType, m.Shape)
			continue
		}
		got, err := valueStrings(tt)
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		if len(got) != len(m.Values) {
			t.Errorf("%q: %d values, want %d", name, len(got), len(m.Values))
			continue
		}
		for i, v := range m.Values {
			if want := canonical(tt.DType, v.String()); got[i] != want {
				t.Errorf("%q[%d] = %s, want %s", name, i, got[i], want)
			}
		}
	}

	// Rewrite with Go's layout; Python must see the same data.
	var before pyReport
	runScript(t, &before, "read", path)
	again := filepath.Join(dir, "again.safetensors")
	if err := WriteFile(again, f.Tensors, f.Metadata); err != nil {
		t.Fatal(err)
	}
	var after pyReport
	runScript(t, &after, "read", again)
	if !reflect.DeepEqual(before.Metadata, after.Metadata) || len(before.Tensors) != len(after.Tensors) {
		t.Errorf("rewritten file differs: metadata %v vs %v, %d vs %d tensors",
			before.Metadata, after.Metadata, len(before.Tensors), len(after.Tensors))
	}
	for name, b := range before.Tensors {
		a := after.Tensors[name]
		if a.SHA256 != b.SHA256 || a.DType != b.DType || !sameShape(a.Shape, b.Shape) {
			t.Errorf("%q changed in the rewrite", name)
		}
	}
}

// canonical formats a manifest value as valueStrings formats the element.
func canonical(d DType, s string) string {
	switch d {
	case DTypeF64, DTypeF32, DTypeF16, DTypeBF16:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "bad " + s
		}
		if d == DTypeF32 {
			v = float64(float32(v))
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return s
}

// valueStrings formats each element of a tensor: floats with the shortest
// float64 repr, integers and booleans (0 or 1) in decimal.
func valueStrings(t Tensor) ([]string, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	size := t.DType.Size()
	out := make([]string, len(t.Data)/size)
	for i := range out {
		b := t.Data[i*size : (i+1)*size]
		switch t.DType {
		case DTypeI64:
			out[i] = strconv.FormatInt(int64(binary.LittleEndian.Uint64(b)), 10)
		case DTypeI32:
			out[i] = strconv.FormatInt(int64(int32(binary.LittleEndian.Uint32(b))), 10)
		case DTypeI16:
			out[i] = strconv.FormatInt(int64(int16(binary.LittleEndian.Uint16(b))), 10)
		case DTypeI8:
			out[i] = strconv.FormatInt(int64(int8(b[0])), 10)
		case DTypeU64:
			out[i] = strconv.FormatUint(binary.LittleEndian.Uint64(b), 10)
		case DTypeU32:
			out[i] = strconv.FormatUint(uint64(binary.LittleEndian.Uint32(b)), 10)
		case DTypeU16:
			out[i] = strconv.FormatUint(uint64(binary.LittleEndian.Uint16(b)), 10)
		case DTypeU8, DTypeBool:
			out[i] = strconv.FormatUint(uint64(b[0]), 10)
		default:
			v, ok := toFloat64s(Tensor{DType: t.DType, Shape: []int{1}, Data: b})
			if !ok {
				out[i] = "0x" + hex.EncodeToString(b)
				continue
			}
			out[i] = strconv.FormatFloat(v[0], 'g', -1, 64)
		}
	}
	return out, nil
}

// toFloat64s converts a tensor's elements to float64, independently of the
// package's accessors; false for dtypes without a conversion here (F8).
func toFloat64s(t Tensor) ([]float64, bool) {
	size := t.DType.Size()
	if size == 0 {
		return nil, false
	}
	out := make([]float64, len(t.Data)/size)
	for i := range out {
		b := t.Data[i*size:]
		switch t.DType {
		case DTypeF64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case DTypeF32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case DTypeF16:
			out[i] = halfToFloat64(binary.LittleEndian.Uint16(b))
		case DTypeBF16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
		case DTypeI64:
			out[i] = float64(int64(binary.LittleEndian.Uint64(b)))
		case DTypeI32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(b)))
		case DTypeI16:
			out[i] = float64(int16(binary.LittleEndian.Uint16(b)))
		case DTypeI8:
			out[i] = float64(int8(b[0]))
		case DTypeU64:
			out[i] = float64(binary.LittleEndian.Uint64(b))
		case DTypeU32:
			out[i] = float64(binary.LittleEndian.Uint32(b))
		case DTypeU16:
			out[i] = float64(binary.LittleEndian.Uint16(b))
		case DTypeU8, DTypeBool:
			out[i] = float64(b[0])
		default:
			return nil, false
		}
	}
	return out, true
}

// halfToFloat64 decodes an IEEE 754 binary16 value.
func halfToFloat64(h uint16) float64 {
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(frac, -24)
	case 31:
		v = math.Inf(1)
		if frac != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(1024+frac, exp-25)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

func TestHalfToFloat64(t *testing.T) {
	for h, want := range map[uint16]float64{
		0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: math.Ldexp(1, -24), 0x3555: 0.333251953125, 0x7c00: math.Inf(1),
	} {
		if got := halfToFloat64(h); got != want {
			t.Errorf("halfToFloat64(%#04x) = %v, want %v", h, got, want)
		}
	}
}
