package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Decode reads a whole safetensors file from r, to the end of r, and
// validates it; trailing bytes after the last tensor are an error. It
// allocates memory as data actually arrive, so a header claiming huge
// tensors cannot make it allocate much more than the input's size. The
// returned tensors' Data share one buffer. Errors in the format are *Error
// values; I/O errors are returned wrapped.
func Decode(r io.Reader) (*File, error) {
	return decodeReader(r, "")
}

// DecodeBytes decodes and validates a safetensors file held in b. The
// returned tensors' Data alias b.
func DecodeBytes(b []byte) (*File, error) {
	return decodeBytes(b, "")
}

// entry is one tensor's header entry.
type entry struct {
	name       string
	dtype      DType
	shape      []int
	begin, end uint64
}

// header is a parsed and validated header.
type header struct {
	metadata map[string]string
	entries  []entry // sorted by data offset
	total    uint64  // the byte buffer's length the entries call for
}

func decodeBytes(b []byte, file string) (*File, error) {
	if len(b) < 8 {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is %d bytes, too short for the 8-byte header length", len(b))}
	}
	n := binary.LittleEndian.Uint64(b)
	if err := checkHeaderLen(n, file); err != nil {
		return nil, err
	}
	if rest := uint64(len(b) - 8); n > rest {
		return nil, &Error{File: file, Msg: fmt.Sprintf("header length %d is beyond the end of the file (%d bytes follow the length field)", n, rest)}
	}
	h, err := parseHeader(b[8:8+n], file)
	if err != nil {
		return nil, err
	}
	data := b[8+n:]
	if err := h.checkBuffer(uint64(len(data)), file); err != nil {
		return nil, err
	}
	return h.file(data), nil
}

func decodeReader(r io.Reader, file string) (*File, error) {
	var lenBuf [8]byte
	if k, err := io.ReadFull(r, lenBuf[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, &Error{File: file, Msg: fmt.Sprintf("file is %d bytes, too short for the 8-byte header length", k)}
		}
		return nil, fmt.Errorf("safetensors: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if err := checkHeaderLen(n, file); err != nil {
		return nil, err
	}
	var hbuf bytes.Buffer
	if k, err := io.CopyN(&hbuf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: fmt.Sprintf("header length %d is beyond the end of the file (%d bytes follow the length field)", n, k)}
		}
		return nil, fmt.Errorf("safetensors: reading header: %w", err)
	}
	h, err := parseHeader(hbuf.Bytes(), file)
	if err != nil {
		return nil, err
	}
	// Read the data as they come: total is only what the header claims.
	var dbuf bytes.Buffer
	dbuf.Grow(int(min(h.total, 1<<20)))
	k, err := io.CopyN(&dbuf, r, int64(min(h.total, math.MaxInt64)))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("safetensors: reading data: %w", err)
	}
	if err == nil {
		// Count whatever follows the last tensor: it must be nothing.
		extra, err := io.Copy(io.Discard, r)
		if err != nil {
			return nil, fmt.Errorf("safetensors: reading data: %w", err)
		}
		k += extra
	}
	if err := h.checkBuffer(uint64(k), file); err != nil {
		return nil, err
	}
	return h.file(dbuf.Bytes()), nil
}

func checkHeaderLen(n uint64, file string) error {
	if n > MaxHeaderSize {
		return &Error{File: file, Msg: fmt.Sprintf("header length %d exceeds the %d-byte limit", n, uint64(MaxHeaderSize))}
	}
	if n < 2 {
		return &Error{File: file, Msg: fmt.Sprintf("header length %d is too small for a JSON object", n)}
	}
	return nil
}

// file builds the File, the tensors' Data slicing data.
func (h *header) file(data []byte) *File {
	f := &File{Metadata: h.metadata, Tensors: make([]Tensor, len(h.entries))}
	for i, e := range h.entries {
		f.Tensors[i] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: data[e.begin:e.end:e.end]}
	}
	return f
}

// checkBuffer checks that a byte buffer of n bytes holds exactly the tensors.
func (h *header) checkBuffer(n uint64, file string) error {
	if n < h.total {
		for _, e := range h.entries {
			if e.end > n {
				return &Error{File: file, Tensor: e.name, Msg: fmt.Sprintf(
					"data_offsets [%d, %d] out of range: the data buffer has only %d bytes", e.begin, e.end, n)}
			}
		}
	}
	if n > h.total {
		if len(h.entries) == 0 {
			return &Error{File: file, Msg: fmt.Sprintf("the header lists no tensors but %d bytes of data follow it", n)}
		}
		last := h.entries[len(h.entries)-1]
		return &Error{File: file, Msg: fmt.Sprintf(
			"%d bytes follow the end of the last tensor %q at byte %d of the data buffer (a hole: no tensor covers them)",
			n-h.total, last.name, h.total)}
	}
	return nil
}

// parseHeader parses and validates the JSON header hdr.
func parseHeader(hdr []byte, file string) (*header, error) {
	fail := func(tensor, format string, args ...any) (*header, error) {
		return nil, &Error{File: file, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(hdr) {
		return fail("", "header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	tok, err := dec.Token()
	if err != nil {
		return fail("", "header is not valid JSON: %s", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fail("", "header is not a JSON object")
	}
	h := &header{}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("", "header is not valid JSON: %s", jsonErr(err))
		}
		name, ok := tok.(string)
		if !ok { // cannot happen: json.Decoder only yields string keys
			return fail("", "header has a non-string key")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fail(name, "header is not valid JSON: %s", jsonErr(err))
		}
		if seen[name] {
			if name == MetadataKey {
				return fail("", "duplicate %q key", MetadataKey)
			}
			return fail(name, "duplicate tensor name")
		}
		seen[name] = true
		if name == MetadataKey {
			md, msg := parseMetadata(raw)
			if msg != "" {
				return fail("", "%s", msg)
			}
			h.metadata = md
			continue
		}
		e, msg := parseEntry(name, raw)
		if msg != "" {
			return fail(name, "%s", msg)
		}
		h.entries = append(h.entries, e)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fail("", "header is not valid JSON: %s", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail("", "header has data after its JSON object (only whitespace padding may follow)")
	}

	// The tensors must tile the byte buffer: sorted by offset, each one must
	// begin where the previous one ends, the first at 0.
	sort.SliceStable(h.entries, func(i, j int) bool {
		a, b := h.entries[i], h.entries[j]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		return a.end < b.end
	})
	var pos uint64
	prev := -1
	for i, e := range h.entries {
		switch {
		case e.begin < pos:
			p := h.entries[prev]
			return fail(e.name, "data_offsets [%d, %d] overlap tensor %q's [%d, %d]", e.begin, e.end, p.name, p.begin, p.end)
		case e.begin > pos:
			if prev < 0 {
				return fail(e.name, "data_offsets [%d, %d] leave a hole: bytes [0, %d) of the data buffer belong to no tensor", e.begin, e.end, e.begin)
			}
			p := h.entries[prev]
			return fail(e.name, "data_offsets [%d, %d] leave a hole: bytes [%d, %d) between tensor %q and it belong to no tensor",
				e.begin, e.end, pos, e.begin, p.name)
		}
		pos = e.end
		if e.end > e.begin || prev < 0 {
			prev = i
		}
	}
	h.total = pos
	return h, nil
}

// jsonErr describes a JSON syntax error, with its position when known.
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d of the header)", err, se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of the header"
	}
	return err.Error()
}

// parseMetadata parses the "__metadata__" value: an object of strings, or
// null. It returns a non-empty message on error.
func parseMetadata(raw json.RawMessage) (map[string]string, string) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return nil, ""
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Sprintf("%q is not a JSON object", MetadataKey)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Sprintf("%q: %v", MetadataKey, err)
	}
	md := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		v := bytes.TrimSpace(m[k])
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, fmt.Sprintf("%q: the value for key %q is not a string", MetadataKey, k)
		}
		md[k] = s
	}
	return md, ""
}

// parseEntry parses one tensor's entry and checks it on its own: exactly the
// fields dtype, shape and data_offsets; a known dtype; non-negative integer
// dimensions; begin <= end; and end - begin = elements × dtype size. It
// returns a non-empty message on error.
func parseEntry(name string, raw json.RawMessage) (entry, string) {
	e := entry{name: name}
	if name == "" {
		return e, "empty tensor name"
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return e, "entry is not a JSON object"
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return e, fmt.Sprintf("entry is not valid: %v", err)
	}
	for _, k := range sortedKeys(m) {
		if k != "dtype" && k != "shape" && k != "data_offsets" {
			return e, fmt.Sprintf("unknown field %q", k)
		}
	}
	for _, k := range []string{"dtype", "shape", "data_offsets"} {
		if _, ok := m[k]; !ok {
			return e, fmt.Sprintf("missing field %q", k)
		}
	}

	dt := bytes.TrimSpace(m["dtype"])
	var s string
	if len(dt) == 0 || dt[0] != '"' || json.Unmarshal(dt, &s) != nil {
		return e, fmt.Sprintf("dtype %s is not a string", dt)
	}
	e.dtype = DType(s)
	if !e.dtype.Valid() {
		return e, fmt.Sprintf("unknown dtype %q", s)
	}

	dims, ok := parseUints(m["shape"])
	if !ok {
		return e, fmt.Sprintf("shape %s is not an array of non-negative integers", bytes.TrimSpace(m["shape"]))
	}
	e.shape = make([]int, len(dims))
	for i, d := range dims {
		if d > uint64(maxInt) {
			return e, fmt.Sprintf("shape %s: dimension %d is too large", bytes.TrimSpace(m["shape"]), d)
		}
		e.shape[i] = int(d)
	}

	offs, ok := parseUints(m["data_offsets"])
	if !ok || len(offs) != 2 {
		return e, fmt.Sprintf("data_offsets %s is not an array of two non-negative integers", bytes.TrimSpace(m["data_offsets"]))
	}
	e.begin, e.end = offs[0], offs[1]
	if e.begin > e.end {
		return e, fmt.Sprintf("data_offsets [%d, %d] end before they begin", e.begin, e.end)
	}

	_, nbytes, err := numElements(e.shape, e.dtype.Size())
	if err != nil {
		return e, err.Error()
	}
	if nbytes != e.end-e.begin {
		return e, fmt.Sprintf("shape %v of %s needs %d bytes, but data_offsets [%d, %d] span %d",
			e.shape, e.dtype, nbytes, e.begin, e.end, e.end-e.begin)
	}
	return e, ""
}

// sortedKeys returns m's keys, sorted, so that the error reported for a
// header is always the same.
func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

const maxInt = int(^uint(0) >> 1)

// parseUints parses a JSON array of non-negative integers written without
// fraction or exponent, as the reference reader (unsigned integers through
// serde) requires.
func parseUints(raw json.RawMessage) ([]uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false
	}
	out := make([]uint64, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) == 0 || len(it) > 1 && it[0] == '0' {
			return nil, false
		}
		for _, c := range it {
			if c < '0' || c > '9' {
				return nil, false
			}
		}
		v, err := strconv.ParseUint(string(it), 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}
