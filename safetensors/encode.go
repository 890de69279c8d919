package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Encode writes tensors and metadata to w in safetensors format. The tensors
// may come in any order; the file holds them sorted by name. metadata may be
// nil. Encode validates everything (see Tensor.Validate; names must be
// unique; metadata keys and values valid UTF-8) before writing anything, so
// an invalid input writes no bytes. Errors from w are returned wrapped.
func Encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	p, err := prepare(tensors, metadata)
	if err != nil {
		return err
	}
	return p.writeTo(w)
}

// prepared is a validated file, ready to write: the header bytes (length
// prefix included) and the tensors in data order.
type prepared struct {
	head    []byte
	tensors []Tensor
}

// prepare validates the input, sorts the tensors by name and builds the
// header.
func prepare(tensors []Tensor, metadata map[string]string) (*prepared, error) {
	for k, v := range metadata {
		if !utf8.ValidString(k) {
			return nil, &Error{Msg: fmt.Sprintf("metadata key %q is not valid UTF-8", k)}
		}
		if !utf8.ValidString(v) {
			return nil, &Error{Msg: fmt.Sprintf("metadata value for key %q is not valid UTF-8", k)}
		}
	}
	sorted := make([]Tensor, len(tensors))
	copy(sorted, tensors)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i, t := range sorted {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return nil, &Error{Tensor: t.Name, Msg: "duplicate tensor name"}
		}
	}

	h := make([]byte, 8, 8+64*(len(sorted)+1))
	h = append(h, '{')
	if len(metadata) > 0 {
		h = appendJSONString(h, MetadataKey)
		h = append(h, ':', '{')
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				h = append(h, ',')
			}
			h = appendJSONString(h, k)
			h = append(h, ':')
			h = appendJSONString(h, metadata[k])
		}
		h = append(h, '}')
	}
	var off uint64
	for i, t := range sorted {
		if i > 0 || len(metadata) > 0 {
			h = append(h, ',')
		}
		h = appendJSONString(h, t.Name)
		h = append(h, `:{"dtype":`...)
		h = appendJSONString(h, string(t.DType))
		h = append(h, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				h = append(h, ',')
			}
			h = strconv.AppendInt(h, int64(d), 10)
		}
		h = append(h, `],"data_offsets":[`...)
		h = strconv.AppendUint(h, off, 10)
		h = append(h, ',')
		off += uint64(len(t.Data))
		h = strconv.AppendUint(h, off, 10)
		h = append(h, ']', '}')
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	n := len(h) - 8
	if n > MaxHeaderSize {
		return nil, &Error{Msg: fmt.Sprintf("header would be %d bytes, more than the %d-byte limit", n, MaxHeaderSize)}
	}
	binary.LittleEndian.PutUint64(h[:8], uint64(n))
	return &prepared{head: h, tensors: sorted}, nil
}

// writeTo writes the prepared file to w.
func (p *prepared) writeTo(w io.Writer) error {
	if _, err := w.Write(p.head); err != nil {
		return fmt.Errorf("safetensors: writing header: %w", err)
	}
	for _, t := range p.tensors {
		if len(t.Data) == 0 {
			continue
		}
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: writing tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// appendJSONString appends s as a JSON string, escaping as serde_json (the
// reference implementation's serializer) does: '"', '\\' and control
// characters only; everything else, non-ASCII included, is written as is.
// s must be valid UTF-8.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, '\\', '"')
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
