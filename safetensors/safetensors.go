// Package safetensors reads and writes the safetensors file format, the
// format in which gorun saves checkpoints and loads initial weights. It
// depends on nothing else of gorun: the runner (engine/runner) writes and
// reads checkpoints with it, package datasets reads data.tensors arrays,
// and the CLI (cmd/gorun) reads the weights it samples from.
//
// A safetensors file is an 8-byte little-endian unsigned header length N,
// then N bytes of UTF-8 JSON header, then the byte buffer that holds the
// tensors' data:
//
//	{"__metadata__": {"format": "pt"},
//	 "conv1.bias":   {"dtype": "F32", "shape": [10], "data_offsets": [0, 40]},
//	 "conv1.weight": {"dtype": "F32", "shape": [10, 1, 5, 5], "data_offsets": [40, 1040]}}
//
// Data offsets are relative to the start of the byte buffer; tensor data are
// little-endian and row-major (C order). gorun names parameters as PyTorch's
// state_dict does, so a checkpoint written here loads in PyTorch with
// safetensors.torch.load_file followed by Module.load_state_dict.
//
// # Writing
//
// The writer is deterministic: a compact JSON header with "__metadata__"
// first (left out when there is no metadata; its keys sorted) and then the
// tensors sorted by name (byte-wise), each entry's fields in the order dtype,
// shape, data_offsets, as the reference implementation writes them; the
// header is padded with spaces so that its length is a multiple of 8; the
// data follow in the same sorted-name order, contiguous, without holes.
// Before writing a byte, Encode checks every tensor (known dtype, non-negative
// shape, data length = elements × dtype size, unique names, valid UTF-8).
//
// WriteFile replaces a file atomically: a reader of the path sees either the
// previous file or the complete new one, never a partial write.
//
// # Reading
//
// The reader accepts any layout the format allows (any key order, any
// whitespace padding, any data order) and validates everything: the header
// length against the file size and MaxHeaderSize, the JSON, the dtypes, the
// shapes against the byte lengths, that the tensors exactly tile the byte
// buffer (no overlap, no hole, nothing after the last tensor), and that names
// are unique. Every format error is an *Error naming the file (when known)
// and the tensor (when one is at fault).
package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"unicode/utf8"
)

// MaxHeaderSize is the largest header length the reader accepts, in bytes
// (the reference implementation's limit). A larger value in the first 8 bytes
// is treated as corruption, and Encode refuses to write a larger header.
const MaxHeaderSize = 100_000_000

// MetadataKey is the reserved header key that holds the file's
// string-to-string metadata. No tensor may have this name.
const MetadataKey = "__metadata__"

// DType is a tensor element type, spelled as in the safetensors header
// ("F32", "I64", ...).
type DType string

// The element types of the safetensors format.
const (
	DTypeF64    DType = "F64"     // IEEE 754 binary64
	DTypeF32    DType = "F32"     // IEEE 754 binary32
	DTypeF16    DType = "F16"     // IEEE 754 binary16
	DTypeBF16   DType = "BF16"    // bfloat16
	DTypeF8E4M3 DType = "F8_E4M3" // 8-bit float, 4 exponent and 3 mantissa bits
	DTypeF8E5M2 DType = "F8_E5M2" // 8-bit float, 5 exponent and 2 mantissa bits
	DTypeI64    DType = "I64"     // signed 64-bit integer
	DTypeI32    DType = "I32"     // signed 32-bit integer
	DTypeI16    DType = "I16"     // signed 16-bit integer
	DTypeI8     DType = "I8"      // signed 8-bit integer
	DTypeU64    DType = "U64"     // unsigned 64-bit integer
	DTypeU32    DType = "U32"     // unsigned 32-bit integer
	DTypeU16    DType = "U16"     // unsigned 16-bit integer
	DTypeU8     DType = "U8"      // unsigned 8-bit integer
	DTypeBool   DType = "BOOL"    // boolean, one byte per element
)

// Size returns the size of one element in bytes, or 0 if d is not a known
// dtype.
func (d DType) Size() int {
	switch d {
	case DTypeF64, DTypeI64, DTypeU64:
		return 8
	case DTypeF32, DTypeI32, DTypeU32:
		return 4
	case DTypeF16, DTypeBF16, DTypeI16, DTypeU16:
		return 2
	case DTypeF8E4M3, DTypeF8E5M2, DTypeI8, DTypeU8, DTypeBool:
		return 1
	}
	return 0
}

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return d.Size() != 0 }

// Tensor is one named tensor: its dtype, its shape (nil or empty for a
// scalar) and its data, little-endian and row-major, exactly
// NumElements × DType.Size() bytes.
//
// Tensors returned by the decoder share their Data with the decoded buffer
// (each slice capped at its own length, so appending to one never overwrites
// another); copy Data before modifying it if the buffer is shared.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// numElements returns the product of shape, or an error if a dimension is
// negative or the product (times elemSize) overflows.
func numElements(shape []int, elemSize int) (n uint64, nbytes uint64, err error) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n = lo
	}
	hi, lo := bits.Mul64(n, uint64(elemSize))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, 0, fmt.Errorf("shape %v of %d-byte elements is too large", shape, elemSize)
	}
	return n, lo, nil
}

// NumElements returns the number of elements the shape holds (1 for a
// scalar), or an error if a dimension is negative or the count overflows.
func (t Tensor) NumElements() (int, error) {
	n, _, err := numElements(t.Shape, 1)
	if err != nil {
		return 0, &Error{Tensor: t.Name, Msg: err.Error()}
	}
	return int(n), nil
}

// Validate checks that the tensor can be written: a known dtype, a shape with
// no negative dimension, Data exactly elements × dtype size bytes, and a name
// that is non-empty, valid UTF-8 and not MetadataKey.
func (t Tensor) Validate() error {
	if msg := checkName(t.Name); msg != "" {
		return &Error{Tensor: t.Name, Msg: msg}
	}
	if !t.DType.Valid() {
		return &Error{Tensor: t.Name, Msg: fmt.Sprintf("unknown dtype %q", string(t.DType))}
	}
	_, nbytes, err := numElements(t.Shape, t.DType.Size())
	if err != nil {
		return &Error{Tensor: t.Name, Msg: err.Error()}
	}
	if uint64(len(t.Data)) != nbytes {
		return &Error{Tensor: t.Name, Msg: fmt.Sprintf("shape %v of %s needs %d bytes of data, have %d",
			t.Shape, t.DType, nbytes, len(t.Data))}
	}
	return nil
}

// checkName returns why name cannot be a tensor name, or "".
func checkName(name string) string {
	if name == "" {
		return "empty tensor name"
	}
	if name == MetadataKey {
		return fmt.Sprintf("the name %q is reserved for metadata", MetadataKey)
	}
	if !utf8.ValidString(name) {
		return "name is not valid UTF-8"
	}
	return ""
}

func cloneShape(shape []int) []int {
	s := make([]int, len(shape))
	copy(s, shape)
	return s
}

// F32 returns an F32 tensor holding a little-endian copy of v. It does not
// check len(v) against shape; Validate and Encode do.
func F32(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: DTypeF32, Shape: cloneShape(shape), Data: b}
}

// F64 returns an F64 tensor holding a little-endian copy of v. It does not
// check len(v) against shape; Validate and Encode do.
func F64(name string, shape []int, v []float64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return Tensor{Name: name, DType: DTypeF64, Shape: cloneShape(shape), Data: b}
}

// I32 returns an I32 tensor holding a little-endian copy of v. It does not
// check len(v) against shape; Validate and Encode do.
func I32(name string, shape []int, v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{Name: name, DType: DTypeI32, Shape: cloneShape(shape), Data: b}
}

// I64 returns an I64 tensor holding a little-endian copy of v. It does not
// check len(v) against shape; Validate and Encode do.
func I64(name string, shape []int, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: DTypeI64, Shape: cloneShape(shape), Data: b}
}

// U8 returns a U8 tensor holding a copy of v. It does not check len(v)
// against shape; Validate and Encode do.
func U8(name string, shape []int, v []uint8) Tensor {
	b := make([]byte, len(v))
	copy(b, v)
	return Tensor{Name: name, DType: DTypeU8, Shape: cloneShape(shape), Data: b}
}

// checkAccess verifies dtype and data length for a typed accessor.
func (t Tensor) checkAccess(want DType) error {
	if t.DType != want {
		return &Error{Tensor: t.Name, Msg: fmt.Sprintf("dtype is %s, not %s", t.DType, want)}
	}
	return t.Validate()
}

// Float32s decodes the data of an F32 tensor. It returns an error if the
// dtype is not F32 or the data length does not match the shape.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.checkAccess(DTypeF32); err != nil {
		return nil, err
	}
	v := make([]float32, len(t.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v, nil
}

// Float64s decodes the data of an F64 tensor. It returns an error if the
// dtype is not F64 or the data length does not match the shape.
func (t Tensor) Float64s() ([]float64, error) {
	if err := t.checkAccess(DTypeF64); err != nil {
		return nil, err
	}
	v := make([]float64, len(t.Data)/8)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return v, nil
}

// Int32s decodes the data of an I32 tensor. It returns an error if the dtype
// is not I32 or the data length does not match the shape.
func (t Tensor) Int32s() ([]int32, error) {
	if err := t.checkAccess(DTypeI32); err != nil {
		return nil, err
	}
	v := make([]int32, len(t.Data)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v, nil
}

// Int64s decodes the data of an I64 tensor. It returns an error if the dtype
// is not I64 or the data length does not match the shape.
func (t Tensor) Int64s() ([]int64, error) {
	if err := t.checkAccess(DTypeI64); err != nil {
		return nil, err
	}
	v := make([]int64, len(t.Data)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return v, nil
}

// File is the content of a safetensors file.
type File struct {
	// Metadata is the header's "__metadata__" map; nil when absent.
	Metadata map[string]string
	// Tensors, in the order of their data in the file (for files written by
	// this package, sorted by name).
	Tensors []Tensor
}

// Get returns the tensor with the given name.
func (f *File) Get(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Names returns the tensors' names, sorted.
func (f *File) Names() []string {
	names := make([]string, len(f.Tensors))
	for i, t := range f.Tensors {
		names[i] = t.Name
	}
	sort.Strings(names)
	return names
}

// Error is a safetensors format error: a malformed file being read, or a
// tensor or metadata that cannot be written.
type Error struct {
	File   string // the file's path; "" when decoding a stream or encoding
	Tensor string // the tensor at fault; "" when the error is not about one tensor
	Msg    string // what is wrong
}

// Error formats the error as
// `safetensors: FILE: tensor "NAME": MSG`, leaving out the parts not known.
func (e *Error) Error() string {
	s := "safetensors: "
	if e.File != "" {
		s += e.File + ": "
	}
	if e.Tensor != "" {
		s += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	return s + e.Msg
}
