package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// raw builds a file from a header given as a string (unpadded) and data.
func raw(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// withLen builds a file whose length field says n, followed by rest.
func withLen(n uint64, rest string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
}

type corruptCase struct {
	name   string
	file   []byte
	tensor string // the tensor the error must name ("" for none)
	want   string // a substring of the error message
}

func corruptCases() []corruptCase {
	u8 := func(name string, n int, b, e int) string {
		return `"` + name + `":{"dtype":"U8","shape":[` + strconv.Itoa(n) + `],"data_offsets":[` + strconv.Itoa(b) + `,` + strconv.Itoa(e) + `]}`
	}
	four := []byte{1, 2, 3, 4}
	return []corruptCase{
		{"empty file", nil, "", "file is 0 bytes, too short"},
		{"short file", []byte{1, 0, 0}, "", "file is 3 bytes, too short"},
		{"header too large", withLen(MaxHeaderSize+1, "{}"), "", "exceeds the 100000000-byte limit"},
		{"header absurd", withLen(1<<63, "{}"), "", "exceeds"},
		{"header beyond file", withLen(1000, `{"a":1}`), "", "header length 1000 is beyond the end of the file (7 bytes follow"},
		{"header length zero", withLen(0, ""), "", "header length 0 is too small"},
		{"truncated JSON", raw(`{"a":{"dtype":"U8",`, nil), "a", "not valid JSON"},
		{"bad JSON", raw(`{"a" 1}`, nil), "a", "header is not valid JSON: expected colon after object key (at byte 5 of the header)"},
		{"not an object", raw(`[1, 2]`, nil), "", "not a JSON object"},
		{"string header", raw(`"abc"`, nil), "", "not a JSON object"},
		{"invalid UTF-8", raw("{\"a\xff\":1}", nil), "", "not valid UTF-8"},
		{"garbage after JSON", raw(`{} xyz`, nil), "", "data after its JSON object"},
		{"NUL padding", raw("{}\x00\x00", nil), "", "data after its JSON object"},
		{"second object", raw(`{}{}`, nil), "", "data after its JSON object"},
		{"unknown dtype", raw(`{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, four), "a", `unknown dtype "F33"`},
		{"lowercase dtype", raw(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, four), "a", `unknown dtype "f32"`},
		{"dtype not a string", raw(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, four), "a", "dtype 4 is not a string"},
		{"missing shape", raw(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, four), "a", `missing field "shape"`},
		{"missing offsets", raw(`{"a":{"dtype":"F32","shape":[1]}}`, four), "a", `missing field "data_offsets"`},
		{"unknown field", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"foo":1}}`, four), "a", `unknown field "foo"`},
		{"case-folded field", raw(`{"a":{"DTYPE":"F32","shape":[1],"data_offsets":[0,4]}}`, four), "a", `unknown field "DTYPE"`},
		{"entry not an object", raw(`{"a":5}`, nil), "a", "entry is not a JSON object"},
		{"entry null", raw(`{"a":null}`, nil), "a", "entry is not a JSON object"},
		{"negative dim", raw(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), "a", "shape [-1] is not an array of non-negative integers"},
		{"fractional dim", raw(`{"a":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}}`, four), "a", "not an array of non-negative integers"},
		{"exponent dim", raw(`{"a":{"dtype":"U8","shape":[4e0],"data_offsets":[0,4]}}`, four), "a", "not an array of non-negative integers"},
		{"string dim", raw(`{"a":{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}}`, four), "a", "not an array of non-negative integers"},
		{"null shape", raw(`{"a":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}`, []byte{1}), "a", "shape null is not an array"},
		{"dim beyond int", raw(`{"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}}`, []byte{1}), "a", "too large"},
		{"dim beyond u64", raw(`{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}}`, []byte{1}), "a", "not an array"},
		{"elements overflow", raw(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, []byte{1}), "a", "too many elements"},
		{"three offsets", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}}`, four), "a", "not an array of two non-negative integers"},
		{"negative offset", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}}`, four), "a", "not an array of two"},
		{"offsets reversed", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}}`, four), "a", "data_offsets [4, 0] end before they begin"},
		{"offsets out of range", raw(`{`+u8("a", 8, 0, 8)+`}`, four), "a", "data_offsets [0, 8] out of range: the data buffer has only 4 bytes"},
		{"huge claimed data", raw(`{`+u8("a", 1<<40, 0, 1<<40)+`}`, four), "a", "out of range"},
		{"second out of range", raw(`{`+u8("a", 4, 0, 4)+`,`+u8("b", 4, 4, 8)+`}`, four), "b", "out of range"},
		{"size mismatch", raw(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), "a", "shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] span 8"},
		{"scalar size mismatch", raw(`{"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}}`, four), "a", "needs 8 bytes"},
		{"overlap", raw(`{`+u8("a", 8, 0, 8)+`,`+u8("b", 8, 4, 12)+`}`, make([]byte, 12)), "b", `data_offsets [4, 12] overlap tensor "a"'s [0, 8]`},
		{"same offsets", raw(`{`+u8("a", 4, 0, 4)+`,`+u8("b", 4, 0, 4)+`}`, four), "b", "overlap"},
		{"empty inside another", raw(`{`+u8("a", 4, 0, 4)+`,`+u8("z", 0, 2, 2)+`}`, four), "z", "overlap"},
		{"hole between", raw(`{`+u8("a", 4, 0, 4)+`,`+u8("b", 4, 8, 12)+`}`, make([]byte, 12)), "b", `bytes [4, 8) between tensor "a" and it belong to no tensor`},
		{"hole at start", raw(`{`+u8("a", 4, 4, 8)+`}`, make([]byte, 8)), "a", "bytes [0, 4) of the data buffer belong to no tensor"},
		{"data after last tensor", raw(`{`+u8("a", 4, 0, 4)+`}`, make([]byte, 6)), "", `2 bytes follow the end of the last tensor "a" at byte 4`},
		{"data but no tensors", raw(`{}`, four), "", "the header lists no tensors but 4 bytes of data follow it"},
		{"duplicate name", raw(`{`+u8("a", 2, 0, 2)+`,`+u8("a", 2, 2, 4)+`}`, four), "a", "duplicate tensor name"},
		{"duplicate metadata", raw(`{"__metadata__":{},"__metadata__":{}}`, nil), "", `duplicate "__metadata__" key`},
		{"metadata not an object", raw(`{"__metadata__":[1]}`, nil), "", `"__metadata__" is not a JSON object`},
		{"metadata number value", raw(`{"__metadata__":{"epoch":3}}`, nil), "", `the value for key "epoch" is not a string`},
		{"metadata null value", raw(`{"__metadata__":{"epoch":null}}`, nil), "", `the value for key "epoch" is not a string`},
		{"empty name", raw(`{`+u8("", 4, 0, 4)+`}`, four), "", "empty tensor name"},
	}
}

func TestCorruptInputs(t *testing.T) {
	dir := t.TempDir()
	for i, c := range corruptCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "case"+strconv.Itoa(i)+".safetensors")
			if err := os.WriteFile(path, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			check := func(how string, f *File, err error, file string) {
				t.Helper()
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: got %v, %v; want an *Error", how, f, err)
				}
				if e.File != file || e.Tensor != c.tensor || !strings.Contains(e.Msg, c.want) {
					t.Errorf("%s: got %q (file %q, tensor %q)\nwant file %q, tensor %q, message with %q",
						how, err, e.File, e.Tensor, file, c.tensor, c.want)
				}
			}
			f, err := DecodeBytes(c.file)
			check("DecodeBytes", f, err, "")
			f, err = Decode(bytes.NewReader(c.file))
			check("Decode", f, err, "")
			f, err = Decode(io.MultiReader(bytes.NewReader(c.file))) // no Len/Seek: a pure stream
			check("Decode(stream)", f, err, "")
			f, err = ReadFile(path)
			check("ReadFile", f, err, path)
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("ReadFile error %q does not name the file", err)
			}
		})
	}
}

func TestReaderAcceptsOtherLayouts(t *testing.T) {
	// Keys in any order, metadata last, data in reverse name order, a
	// spaced-out header, padding not to 8 bytes, an empty metadata map.
	header := ` { "b" : { "shape" : [ 2 ] , "data_offsets" : [ 0 , 2 ] , "dtype" : "U8" } ,` + "\n" +
		`"a":{"data_offsets":[2,6],"dtype":"F32","shape":[]}, "e":{"dtype":"I64","shape":[0],"data_offsets":[6,6]},` +
		`"__metadata__" : { "k" : "v" } }` + "\t\r\n   "
	data := []byte{7, 8, 0, 0, 0xc0, 0x3f}
	f, err := DecodeBytes(raw(header, data))
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, f, []Tensor{
		U8("b", []int{2}, []byte{7, 8}),
		F32("a", nil, []float32{1.5}),
		I64("e", []int{0}, nil),
	}, map[string]string{"k": "v"})
	if got := []string{f.Tensors[0].Name, f.Tensors[1].Name, f.Tensors[2].Name}; !reflect.DeepEqual(got, []string{"b", "a", "e"}) {
		t.Errorf("tensors not in data order: %q", got)
	}

	// "__metadata__": null and {} both mean no metadata.
	for _, h := range []string{`{"__metadata__":null}`, `{"__metadata__":{}}`} {
		f, err := DecodeBytes(raw(h, nil))
		if err != nil || len(f.Metadata) != 0 || len(f.Tensors) != 0 {
			t.Errorf("%s: %v, %v", h, f, err)
		}
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestDecodeReaderErrors(t *testing.T) {
	boom := errors.New("boom")
	var buf bytes.Buffer
	if err := Encode(&buf, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	n := binary.LittleEndian.Uint64(full)
	for _, cut := range []int{4, 8 + int(n)/2, 8 + int(n) + 10, len(full)} {
		r := io.MultiReader(bytes.NewReader(full[:cut]), failingReader{boom})
		if _, err := Decode(r); !errors.Is(err, boom) {
			t.Errorf("cut at %d: got %v, want the reader's error", cut, err)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range corruptCases() {
		f.Add(c.file)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(raw(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, []byte{0, 0, 0xc0, 0x3f}))

	f.Fuzz(func(t *testing.T, b []byte) {
		fb, errB := DecodeBytes(b)
		fr, errR := Decode(bytes.NewReader(b))
		if (errB == nil) != (errR == nil) {
			t.Fatalf("DecodeBytes: %v; Decode: %v", errB, errR)
		}
		if errB != nil {
			var e *Error
			if !errors.As(errB, &e) || errB.Error() != errR.Error() {
				t.Fatalf("DecodeBytes: %v; Decode: %v", errB, errR)
			}
			return
		}
		if !reflect.DeepEqual(fb, fr) {
			t.Fatalf("DecodeBytes and Decode disagree")
		}
		// What decodes is valid, and re-encodes to a file that decodes
		// to the same tensors.
		for _, tt := range fb.Tensors {
			if err := tt.Validate(); err != nil {
				t.Fatalf("decoded an invalid tensor: %v", err)
			}
		}
		var out bytes.Buffer
		if err := Encode(&out, fb.Tensors, fb.Metadata); err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		again, err := DecodeBytes(out.Bytes())
		if err != nil {
			t.Fatalf("decoding the re-encoded file: %v", err)
		}
		checkSame(t, again, fb.Tensors, fb.Metadata)
	})
}
