package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleTensors covers several dtypes, a scalar, empty tensors and names in
// no particular order.
func sampleTensors() []Tensor {
	w := make([]float32, 10*1*5*5)
	for i := range w {
		w[i] = float32(i)*0.01 - 1
	}
	return []Tensor{
		F32("conv1.weight", []int{10, 1, 5, 5}, w),
		F32("conv1.bias", []int{10}, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), -0, 1e-30, 7, 8, 9}),
		F64("lr", []int{}, []float64{0.01}),
		I64("step", nil, []int64{-1 << 62}),
		I64("ids", []int{2, 2}, []int64{1, -2, math.MaxInt64, math.MinInt64}),
		I32("counts", []int{3}, []int32{0, -1, math.MaxInt32}),
		U8("pixels", []int{2, 3}, []uint8{0, 1, 2, 253, 254, 255}),
		{Name: "mask", DType: DTypeBool, Shape: []int{3}, Data: []byte{1, 0, 1}},
		{Name: "half", DType: DTypeF16, Shape: []int{2}, Data: []byte{0x00, 0x3c, 0x00, 0xc0}},
		{Name: "brain", DType: DTypeBF16, Shape: []int{1}, Data: []byte{0xc0, 0x3f}},
		{Name: "i16", DType: DTypeI16, Shape: []int{1}, Data: []byte{0xff, 0x7f}},
		{Name: "i8", DType: DTypeI8, Shape: []int{2}, Data: []byte{0x80, 0x7f}},
		F32("empty", []int{0, 3}, nil),
		F32("empty.too", []int{4, 0}, []float32{}),
		F32("emb.wörter \"quoted\"\n", []int{1}, []float32{42}),
	}
}

func sameShape(a, b []int) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// checkSame checks that got holds exactly the tensors of want (any order).
func checkSame(t *testing.T, got *File, want []Tensor, wantMeta map[string]string) {
	t.Helper()
	if len(got.Tensors) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(got.Tensors), len(want))
	}
	for _, w := range want {
		g, ok := got.Get(w.Name)
		if !ok {
			t.Errorf("tensor %q missing", w.Name)
			continue
		}
		if g.DType != w.DType || !sameShape(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %q: got %s %v % x, want %s %v % x", w.Name, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
		}
	}
	if len(wantMeta) == 0 && len(got.Metadata) == 0 {
		return
	}
	if !reflect.DeepEqual(got.Metadata, wantMeta) {
		t.Errorf("metadata: got %v, want %v", got.Metadata, wantMeta)
	}
}

func TestRoundTrip(t *testing.T) {
	tensors := sampleTensors()
	meta := map[string]string{"format": "pt", "gorun.epoch": "3", "ünïcode": "\"x\"\t\\", "": "empty key"}
	for _, m := range []map[string]string{meta, nil} {
		var buf bytes.Buffer
		if err := Encode(&buf, tensors, m); err != nil {
			t.Fatal(err)
		}
		raw := buf.Bytes()
		n := binary.LittleEndian.Uint64(raw)
		if n%8 != 0 {
			t.Errorf("header length %d is not a multiple of 8", n)
		}

		f, err := Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		checkSame(t, f, tensors, m)
		if m == nil && f.Metadata != nil {
			t.Errorf("no metadata written, got %v", f.Metadata)
		}
		fb, err := DecodeBytes(raw)
		if err != nil {
			t.Fatalf("DecodeBytes: %v", err)
		}
		if !reflect.DeepEqual(f, fb) {
			t.Errorf("Decode and DecodeBytes disagree")
		}

		// Re-encoding the decoded file gives the same bytes.
		var again bytes.Buffer
		if err := Encode(&again, f.Tensors, f.Metadata); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.Bytes(), raw) {
			t.Errorf("re-encoding changed the bytes")
		}

		// Through the file system.
		path := filepath.Join(t.TempDir(), "ckpt.safetensors")
		if err := WriteFile(path, tensors, m); err != nil {
			t.Fatal(err)
		}
		ff, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, ff, tensors, m)
	}
}

func TestDataSortedByName(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	f, err := DecodeBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(f.Tensors))
	for i, tt := range f.Tensors {
		names[i] = tt.Name
	}
	if !reflect.DeepEqual(names, f.Names()) {
		t.Errorf("data order %q is not sorted by name (%q)", names, f.Names())
	}
}

// TestExactLayout checks the writer against a file built by hand.
func TestExactLayout(t *testing.T) {
	header := `{"__metadata__":{"format":"pt"},` +
		`"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},` +
		`"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}}` +
		"      " // 138 bytes of JSON, 6 spaces: 144
	want := []byte{0x90, 0, 0, 0, 0, 0, 0, 0} // 144, little-endian u64
	want = append(want, header...)
	want = append(want, 0x00, 0x00, 0xc0, 0x3f) // a: 1.5f
	want = append(want, 0x01, 0x00, 0x00, 0x00) // b[0]: 1
	want = append(want, 0xfe, 0xff, 0xff, 0xff) // b[1]: -2
	if len(header) != 144 {
		t.Fatalf("test header is %d bytes", len(header))
	}

	var buf bytes.Buffer
	err := Encode(&buf, []Tensor{
		I32("b", []int{2}, []int32{1, -2}),
		F32("a", nil, []float32{1.5}),
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("got\n%q\nwant\n%q", buf.Bytes(), want)
	}

	// And the reader reads the hand-built file.
	f, err := DecodeBytes(want)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Get("a")
	av, err := a.Float32s()
	if err != nil || len(av) != 1 || av[0] != 1.5 || len(a.Shape) != 0 {
		t.Errorf("a = %v %v, %v", a.Shape, av, err)
	}
	b, _ := f.Get("b")
	bv, err := b.Int32s()
	if err != nil || !reflect.DeepEqual(bv, []int32{1, -2}) || !reflect.DeepEqual(b.Shape, []int{2}) {
		t.Errorf("b = %v %v, %v", b.Shape, bv, err)
	}
	if f.Metadata["format"] != "pt" || len(f.Metadata) != 1 {
		t.Errorf("metadata = %v", f.Metadata)
	}
}

func TestExactLayoutNoMetadataAndEscapes(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, []Tensor{{Name: "x\"\\\x01<é", DType: DTypeU8, Shape: []int{0}}}, nil); err != nil {
		t.Fatal(err)
	}
	json := `{"x\"\\\u0001<é":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`
	for len(json)%8 != 0 {
		json += " "
	}
	got := buf.Bytes()
	if n := binary.LittleEndian.Uint64(got); n != uint64(len(json)) || string(got[8:]) != json {
		t.Errorf("got %d %q, want %d %q", n, got[8:], len(json), json)
	}
}

func TestAccessors(t *testing.T) {
	f32 := F32("w", []int{2}, []float32{1.25, -3})
	if v, err := f32.Float32s(); err != nil || !reflect.DeepEqual(v, []float32{1.25, -3}) {
		t.Errorf("Float32s = %v, %v", v, err)
	}
	f64 := F64("w", []int{1}, []float64{math.Pi})
	if v, err := f64.Float64s(); err != nil || v[0] != math.Pi {
		t.Errorf("Float64s = %v, %v", v, err)
	}
	i64 := I64("w", []int{1}, []int64{math.MinInt64})
	if v, err := i64.Int64s(); err != nil || v[0] != math.MinInt64 {
		t.Errorf("Int64s = %v, %v", v, err)
	}
	i32 := I32("w", []int{1}, []int32{math.MinInt32})
	if v, err := i32.Int32s(); err != nil || v[0] != math.MinInt32 {
		t.Errorf("Int32s = %v, %v", v, err)
	}

	// Wrong dtype.
	if _, err := f64.Float32s(); err == nil || !strings.Contains(err.Error(), "dtype is F64, not F32") {
		t.Errorf("Float32s on F64: %v", err)
	}
	if _, err := f32.Float64s(); err == nil {
		t.Error("Float64s on F32: no error")
	}
	if _, err := f32.Int64s(); err == nil {
		t.Error("Int64s on F32: no error")
	}
	if _, err := i64.Int32s(); err == nil {
		t.Error("Int32s on I64: no error")
	}
	// Data not matching the shape.
	bad := F32("w", []int{3}, []float32{1, 2})
	if _, err := bad.Float32s(); err == nil || !strings.Contains(err.Error(), "needs 12 bytes of data, have 8") {
		t.Errorf("Float32s with short data: %v", err)
	}

	// The constructors copy their inputs.
	shape := []int{2}
	v := []float32{1, 2}
	tt := F32("w", shape, v)
	shape[0], v[0] = 5, 9
	if tt.Shape[0] != 2 || binary.LittleEndian.Uint32(tt.Data) != math.Float32bits(1) {
		t.Error("F32 did not copy its inputs")
	}

	if n, err := (Tensor{Shape: []int{2, 3, 4}}).NumElements(); n != 24 || err != nil {
		t.Errorf("NumElements = %d, %v", n, err)
	}
	if n, err := (Tensor{}).NumElements(); n != 1 || err != nil {
		t.Errorf("scalar NumElements = %d, %v", n, err)
	}
	if _, err := (Tensor{Shape: []int{1 << 40, 1 << 40}}).NumElements(); err == nil {
		t.Error("overflowing NumElements: no error")
	}
}

func TestDTypeSize(t *testing.T) {
	sizes := map[DType]int{
		DTypeF64: 8, DTypeF32: 4, DTypeF16: 2, DTypeBF16: 2, DTypeF8E4M3: 1, DTypeF8E5M2: 1,
		DTypeI64: 8, DTypeI32: 4, DTypeI16: 2, DTypeI8: 1,
		DTypeU64: 8, DTypeU32: 4, DTypeU16: 2, DTypeU8: 1, DTypeBool: 1,
		"f32": 0, "": 0, "F128": 0,
	}
	for d, want := range sizes {
		if got := d.Size(); got != want {
			t.Errorf("%q.Size() = %d, want %d", d, got, want)
		}
		if d.Valid() != (want != 0) {
			t.Errorf("%q.Valid() = %v", d, d.Valid())
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	good := F32("ok", []int{1}, []float32{1})
	cases := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		tensor  string // the tensor the error must name
		want    string
	}{
		{"short data", []Tensor{good, F32("w", []int{2, 2}, []float32{1, 2, 3})}, nil, "w", "needs 16 bytes of data, have 12"},
		{"long data", []Tensor{{Name: "w", DType: DTypeU8, Shape: nil, Data: []byte{1, 2}}}, nil, "w", "needs 1 bytes of data, have 2"},
		{"unknown dtype", []Tensor{{Name: "w", DType: "F33", Shape: []int{1}, Data: []byte{1}}}, nil, "w", `unknown dtype "F33"`},
		{"negative dim", []Tensor{{Name: "w", DType: DTypeU8, Shape: []int{-1}}}, nil, "w", "negative dimension"},
		{"overflow", []Tensor{{Name: "w", DType: DTypeF64, Shape: []int{1 << 31, 1 << 31}}}, nil, "w", "too large"},
		{"duplicate", []Tensor{good, F32("w", nil, []float32{1}), good}, nil, "ok", "duplicate tensor name"},
		{"reserved name", []Tensor{F32(MetadataKey, nil, []float32{1})}, nil, MetadataKey, "reserved"},
		{"empty name", []Tensor{F32("", nil, []float32{1})}, nil, "", "empty tensor name"},
		{"bad utf8 name", []Tensor{F32("w\xff", nil, []float32{1})}, nil, "w\xff", "not valid UTF-8"},
		{"bad utf8 metadata", []Tensor{good}, map[string]string{"k": "\xfe"}, "", "metadata value for key \"k\" is not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Encode(&buf, c.tensors, c.meta)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.Tensor != c.tensor || !strings.Contains(e.Msg, c.want) {
				t.Errorf("got %q (tensor %q), want tensor %q and %q", err, e.Tensor, c.tensor, c.want)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		e    Error
		want string
	}{
		{Error{File: "a/b.safetensors", Tensor: "fc1.weight", Msg: "bad"}, `safetensors: a/b.safetensors: tensor "fc1.weight": bad`},
		{Error{Tensor: "x", Msg: "bad"}, `safetensors: tensor "x": bad`},
		{Error{File: "f", Msg: "bad"}, `safetensors: f: bad`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestDecodedDataIsCapped(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, []Tensor{U8("a", []int{2}, []byte{1, 2}), U8("b", []int{2}, []byte{3, 4})}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := DecodeBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Get("a")
	_ = append(a.Data, 99) // must not overwrite b
	b, _ := f.Get("b")
	if !bytes.Equal(b.Data, []byte{3, 4}) {
		t.Errorf("appending to a changed b: % x", b.Data)
	}
	if _, ok := f.Get("c"); ok {
		t.Error("Get of a missing name succeeded")
	}
}
