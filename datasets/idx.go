package datasets

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"gorun/datasets/userfile"
)

// idxKind is the kind of IDX file expected.
type idxKind int

const (
	// idxImages: magic 2051 = 0x00000803 (ubyte, 3 dims: count, rows, cols).
	idxImages idxKind = iota
	// idxLabels: magic 2049 = 0x00000801 (ubyte, 1 dim: count).
	idxLabels
)

// Magic numbers: 0x08 (unsigned byte) in the third byte, the number of
// dimensions in the fourth.
const (
	idxImagesMagic = 0x0803
	idxLabelsMagic = 0x0801
)

func (k idxKind) magic() uint32 {
	if k == idxImages {
		return idxImagesMagic
	}
	return idxLabelsMagic
}

func (k idxKind) String() string {
	if k == idxImages {
		return "images"
	}
	return "labels"
}

// dimName names dimension i.
func (k idxKind) dimName(i int) string {
	if k == idxLabels {
		return "labels"
	}
	return [...]string{"images", "rows", "columns"}[i]
}

// ndims is the number of dimensions.
func (k idxKind) ndims() int {
	if k == idxImages {
		return 3
	}
	return 1
}

// Limits that keep a corrupt header from asking for absurd amounts of
// memory before the file's length shows it is wrong.
const (
	maxIDXSampleDim = 1 << 14   // rows or columns
	maxIDXBytes     = 1<<31 - 1 // payload bytes
	idxReadChunk    = 64 << 20
)

// idxFile is a decoded IDX file of unsigned bytes.
type idxFile struct {
	dims []int
	data []byte
}

// readIDX reads the unsigned-byte IDX file at path, gzipped or not (told by
// its first bytes, not its name), and checks its magic number, dimensions
// and length against kind. Its errors start with the path.
func readIDX(path string, kind idxKind) (*idxFile, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{path}, args...)...)
	}
	f, err := userfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	gz := false
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fail("not a valid gzip file: %v", err)
		}
		defer zr.Close()
		r, gz = zr, true
	}
	corrupt := func(err error) error {
		if gz {
			return fail("corrupt gzip data: %v", err)
		}
		return fail("read error: %v", err)
	}

	// Header: magic, then one big-endian uint32 per dimension.
	hdr := make([]byte, 4+4*kind.ndims())
	if n, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fail("truncated: the file ends inside the %d-byte IDX header, after %d bytes", len(hdr), n)
		}
		return nil, corrupt(err)
	}
	magic := binary.BigEndian.Uint32(hdr)
	if want := kind.magic(); magic != want {
		hint := ""
		switch magic {
		case idxImagesMagic:
			hint = " (that of an images file)"
		case idxLabelsMagic:
			hint = " (that of a labels file)"
		default:
			if magic>>8 == 0x08 {
				hint = fmt.Sprintf(" (an IDX file of %d dimensions)", magic&0xff)
			} else if magic>>16 != 0 {
				hint = " (not an IDX file)"
			}
		}
		return nil, fail("bad magic number %d (0x%08x)%s: want %d (0x%08x) for an IDX %s file",
			magic, magic, hint, want, want, kind)
	}
	dims := make([]int, kind.ndims())
	total := uint64(1)
	for i := range dims {
		d := binary.BigEndian.Uint32(hdr[4+4*i:])
		if d == 0 && i > 0 {
			return nil, fail("the header gives 0 %s per sample", kind.dimName(i))
		}
		if i > 0 && d > maxIDXSampleDim {
			return nil, fail("the header gives %d %s per sample, more than %d", d, kind.dimName(i), maxIDXSampleDim)
		}
		dims[i] = int(d)
		total *= uint64(d) // at most 2^32 * 2^14 * 2^14: no overflow
	}
	if total > maxIDXBytes {
		return nil, fail("the header declares %s, %d bytes of data: more than the %d allowed",
			describeDims(kind, dims), total, maxIDXBytes)
	}

	data, err := readExactly(r, int(total))
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fail("truncated: the header declares %s (%d bytes of data) but the data ends after %d bytes",
				describeDims(kind, dims), total, len(data))
		}
		return nil, corrupt(err)
	}
	// Read to the end: nothing may follow the data, and reading to the end
	// is what makes gzip check its CRC.
	var extra [1]byte
	n, err := io.ReadFull(r, extra[:])
	switch {
	case n > 0:
		return nil, fail("unexpected data after the %s the header declares (%d bytes)", describeDims(kind, dims), total)
	case err != io.EOF:
		return nil, corrupt(err)
	}
	return &idxFile{dims: dims, data: data}, nil
}

// describeDims says what dims hold, e.g. "60000 images of 28x28".
func describeDims(kind idxKind, dims []int) string {
	s := fmt.Sprintf("%d %s", dims[0], kind.dimName(0))
	for i, d := range dims[1:] {
		if i == 0 {
			s += " of "
		} else {
			s += "x"
		}
		s += fmt.Sprint(d)
	}
	return s
}

// readExactly reads n bytes from r. Short of n, it returns what it read and
// the error (io.EOF or io.ErrUnexpectedEOF when the stream ended). Large
// payloads are read in chunks so that a header promising more than the file
// holds costs no more memory than the file's real size.
func readExactly(r io.Reader, n int) ([]byte, error) {
	if n <= idxReadChunk {
		buf := make([]byte, n)
		k, err := io.ReadFull(r, buf)
		return buf[:k], err
	}
	buf := make([]byte, 0, idxReadChunk)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		k, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}
