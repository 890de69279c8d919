package datasets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"gorun/datasets/userfile"
	"gorun/safetensors"
)

// npyMagic opens every .npy file.
const npyMagic = "\x93NUMPY"

// maxNPYHeader bounds the header length a .npy file may declare (numpy
// writes a few hundred bytes).
const maxNPYHeader = 1 << 20

// array is an n-dimensional array read from a file: its element type (in
// safetensors' spelling), its shape and its little-endian, row-major
// bytes. where names it in messages: the .npy path, or the safetensors
// path and tensor name.
type array struct {
	where string
	dtype safetensors.DType
	shape []int
	data  []byte // nil when only the header was read
}

// npyDTypes maps a .npy type code (without its byte-order character) to
// the safetensors dtype of the same layout.
var npyDTypes = map[string]safetensors.DType{
	"f2": safetensors.DTypeF16, "f4": safetensors.DTypeF32, "f8": safetensors.DTypeF64,
	"i1": safetensors.DTypeI8, "i2": safetensors.DTypeI16, "i4": safetensors.DTypeI32, "i8": safetensors.DTypeI64,
	"u1": safetensors.DTypeU8, "u2": safetensors.DTypeU16, "u4": safetensors.DTypeU32, "u8": safetensors.DTypeU64,
	"b1": safetensors.DTypeBool,
}

// readNPY reads the .npy file at path: format version 1.0, 2.0 or 3.0, a
// little-endian (or single-byte) numeric dtype, C order. With headerOnly,
// it reads the header and checks the file's length against it without
// reading the data. Its errors name path and say what is wrong.
func readNPY(path string, headerOnly bool) (*array, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{path}, args...)...)
	}
	f, err := userfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()

	var pre [12]byte
	n, err := io.ReadFull(f, pre[:10])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fail("read error: %v", err)
	}
	if n < len(npyMagic) || string(pre[:len(npyMagic)]) != npyMagic {
		return nil, fail("not a .npy file: it does not start with \\x93NUMPY")
	}
	if n < 10 {
		return nil, fail("truncated: the file ends inside the .npy preamble, after %d bytes", n)
	}
	major, minor := pre[6], pre[7]
	var hlen, start int64
	switch major {
	case 1:
		hlen, start = int64(binary.LittleEndian.Uint16(pre[8:10])), 10
	case 2, 3:
		if _, err := io.ReadFull(f, pre[10:12]); err != nil {
			return nil, fail("truncated: the file ends inside the .npy preamble")
		}
		hlen, start = int64(binary.LittleEndian.Uint32(pre[8:12])), 12
	default:
		return nil, fail("unsupported .npy format version %d.%d: want 1.0, 2.0 or 3.0", major, minor)
	}
	if hlen > maxNPYHeader {
		return nil, fail("the .npy header length %d is more than %d bytes: corrupt file", hlen, maxNPYHeader)
	}
	if start+hlen > size {
		return nil, fail("truncated: the .npy header is %d bytes but the file ends after %d", hlen, size-start)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fail("read error: %v", err)
	}
	a, err := parseNPYHeader(string(hdr))
	if err != nil {
		return nil, fail("%v", err)
	}
	a.where = path
	_, nbytes, err := arrayBytes(a.shape, a.dtype.Size())
	if err != nil {
		return nil, fail("%v", err)
	}
	have := size - start - hlen
	switch {
	case uint64(have) < nbytes:
		return nil, fail("truncated: the header declares %s of shape %v, %d bytes of data, but the file holds %d",
			dtypeName(a.dtype), a.shape, nbytes, have)
	case uint64(have) > nbytes:
		return nil, fail("%d unexpected bytes after the %d bytes of data the header declares (%s of shape %v)",
			uint64(have)-nbytes, nbytes, dtypeName(a.dtype), a.shape)
	}
	if headerOnly {
		return a, nil
	}
	a.data = make([]byte, nbytes)
	if _, err := io.ReadFull(f, a.data); err != nil {
		return nil, fail("read error: %v", err)
	}
	return a, nil
}

// arrayBytes is the number of elements of shape and their size in bytes,
// or an error when a dimension is negative or the size overflows.
func arrayBytes(shape []int, elem int) (n, nbytes uint64, err error) {
	n = 1
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt32*uint64(1<<16) {
			return 0, 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n = lo
	}
	return n, n * uint64(elem), nil
}

// parseNPYHeader parses a .npy header, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
func parseNPYHeader(h string) (*array, error) {
	p := &pyLit{s: strings.TrimRight(h, " \n\x00")}
	if !p.eat('{') {
		return nil, fmt.Errorf("bad .npy header %q: not a Python dict", h)
	}
	var (
		descr               string
		fortran             bool
		shape               []int
		haveD, haveF, haveS bool
	)
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return nil, fmt.Errorf("bad .npy header %q: %v", h, err)
		}
		if p.space(); !p.eat(':') {
			return nil, fmt.Errorf("bad .npy header %q: no ':' after %q", h, key)
		}
		p.space()
		switch key {
		case "descr":
			if p.peek() == '[' {
				return nil, fmt.Errorf("structured arrays (descr %s) are not supported: save a plain numeric array", p.rest())
			}
			if descr, err = p.str(); err != nil {
				return nil, fmt.Errorf("bad .npy header %q: descr: %v", h, err)
			}
			haveD = true
		case "fortran_order":
			if fortran, err = p.boolean(); err != nil {
				return nil, fmt.Errorf("bad .npy header %q: fortran_order: %v", h, err)
			}
			haveF = true
		case "shape":
			if shape, err = p.intTuple(); err != nil {
				return nil, fmt.Errorf("bad .npy header %q: shape: %v", h, err)
			}
			haveS = true
		default:
			return nil, fmt.Errorf("bad .npy header %q: unexpected key %q", h, key)
		}
		p.space()
		if !p.eat(',') {
			if p.space(); !p.eat('}') {
				return nil, fmt.Errorf("bad .npy header %q: want ',' or '}' after %q", h, key)
			}
			break
		}
	}
	if !haveD || !haveF || !haveS {
		return nil, fmt.Errorf("bad .npy header %q: want the keys 'descr', 'fortran_order' and 'shape'", h)
	}
	if fortran {
		return nil, fmt.Errorf("the array is stored in Fortran (column-major) order: save it in C order (numpy.ascontiguousarray)")
	}
	dt, err := npyDType(descr)
	if err != nil {
		return nil, err
	}
	return &array{dtype: dt, shape: shape}, nil
}

// npyDType maps a .npy descr such as "<f4" to a safetensors dtype.
func npyDType(descr string) (safetensors.DType, error) {
	if descr == "" {
		return "", fmt.Errorf("empty dtype descr")
	}
	order, code := descr[0], descr[1:]
	if order != '<' && order != '>' && order != '|' && order != '=' {
		order, code = '=', descr
	}
	switch {
	case strings.HasPrefix(code, "O"):
		return "", fmt.Errorf("object arrays (dtype %q) are not supported: save a numeric array", descr)
	case strings.HasPrefix(code, "U"), strings.HasPrefix(code, "S"), strings.HasPrefix(code, "a"):
		return "", fmt.Errorf("string arrays (dtype %q) are not supported: save a numeric array", descr)
	}
	dt, ok := npyDTypes[code]
	if !ok {
		return "", fmt.Errorf("unsupported dtype %q: want a float, integer or bool type", descr)
	}
	if order == '>' && dt.Size() > 1 {
		return "", fmt.Errorf("big-endian data (dtype %q) are not supported: save little-endian data (array.astype('<%s'))", descr, code)
	}
	return dt, nil
}

// pyLit scans the Python literals of a .npy header.
type pyLit struct {
	s string
	i int
}

func (p *pyLit) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *pyLit) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *pyLit) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

// rest is what is left, for messages.
func (p *pyLit) rest() string {
	r := p.s[p.i:]
	if len(r) > 60 {
		r = r[:60] + "…"
	}
	return r
}

// str reads a quoted string without escapes.
func (p *pyLit) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", fmt.Errorf("want a quoted string at %q", p.rest())
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at %q", p.rest())
	}
	s := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return s, nil
}

func (p *pyLit) boolean() (bool, error) {
	switch {
	case strings.HasPrefix(p.s[p.i:], "True"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "False"):
		p.i += 5
		return false, nil
	}
	return false, fmt.Errorf("want True or False at %q", p.rest())
}

// intTuple reads a tuple of non-negative integers such as (3,) or (2, 3).
func (p *pyLit) intTuple() ([]int, error) {
	if !p.eat('(') {
		return nil, fmt.Errorf("want a tuple at %q", p.rest())
	}
	out := []int{}
	for {
		p.space()
		if p.eat(')') {
			return out, nil
		}
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		// Python 2 wrote long integers with an L suffix.
		v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
		if err != nil || v > math.MaxInt32*int64(1<<16) {
			return nil, fmt.Errorf("want a non-negative dimension at %q", p.rest())
		}
		out = append(out, int(v))
		p.i = j
		p.eat('L')
		p.space()
		if !p.eat(',') {
			if p.space(); !p.eat(')') {
				return nil, fmt.Errorf("want ',' or ')' at %q", p.rest())
			}
			return out, nil
		}
	}
}

// dtypeName is how messages name a dtype: numpy's name and safetensors'.
func dtypeName(d safetensors.DType) string {
	names := map[safetensors.DType]string{
		safetensors.DTypeF64: "float64", safetensors.DTypeF32: "float32", safetensors.DTypeF16: "float16",
		safetensors.DTypeBF16: "bfloat16", safetensors.DTypeI64: "int64", safetensors.DTypeI32: "int32",
		safetensors.DTypeI16: "int16", safetensors.DTypeI8: "int8", safetensors.DTypeU64: "uint64",
		safetensors.DTypeU32: "uint32", safetensors.DTypeU16: "uint16", safetensors.DTypeU8: "uint8",
		safetensors.DTypeBool: "bool", safetensors.DTypeF8E4M3: "float8_e4m3", safetensors.DTypeF8E5M2: "float8_e5m2",
	}
	if n, ok := names[d]; ok {
		return fmt.Sprintf("%s (%s)", n, d)
	}
	return string(d)
}
