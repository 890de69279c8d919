package board

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"

	"gorun/datasets/userfile"
)

// Defaults of a Tail's limits.
const (
	// DefaultMaxLine is the longest line a Tail passes on (1 MiB); a
	// metrics.jsonl line is a few hundred bytes.
	DefaultMaxLine = 1 << 20
	// DefaultMaxRead is the most bytes one Poll reads (1 MiB): a long log
	// comes in several updates, none of them unbounded.
	DefaultMaxRead = 1 << 20
	// fingerprintLen is how many bytes before the offset a Tail keeps to
	// notice a file rewritten in place to the same length or longer.
	fingerprintLen = 64
)

// Tail follows one file of lines, such as a run's metrics.jsonl, as it
// grows: each Poll returns the lines completed since the last one.
//
// It reads by offset and keeps the last line until its newline comes, so a
// line being written is never split. It starts over from the beginning of
// the file (Update.Reset) when the file is not the one it followed: a new
// file in its place (a resumed run's metrics.jsonl is rewritten and
// renamed into place; --overwrite removes it), a file shorter than what
// was read (truncated), or one whose bytes before the offset changed
// (rewritten in place). A file that does not exist (yet, or any more) is
// no error: Update.Exists is false. A Tail is used by one goroutine.
type Tail struct {
	path string
	// MaxLine is the longest line passed on (DefaultMaxLine when 0); a
	// longer one is dropped up to its newline and counted in
	// Update.Skipped.
	MaxLine int
	// MaxRead is the most bytes one Poll reads (DefaultMaxRead when 0).
	MaxRead int64

	info     fs.FileInfo // the file followed, as last seen; nil: none yet
	off      int64       // bytes read
	partial  []byte      // the last line so far, without its newline
	skipping bool        // dropping an overlong line up to its newline
	last     []byte      // the file's bytes just before off (up to fingerprintLen)
}

// NewTail returns a Tail of the file at path, which need not exist yet.
func NewTail(path string) *Tail {
	return &Tail{path: path}
}

// Path is the file the Tail follows.
func (t *Tail) Path() string { return t.path }

// Update is what one Poll found.
type Update struct {
	// Exists says whether the file is there.
	Exists bool
	// Reset says that the file is not the one followed until now, or is
	// gone: the lines of earlier Updates are void, and Lines start again
	// from the file's beginning. Why says why ("replaced", "truncated",
	// "rewritten", "removed").
	Reset bool
	Why   string
	// Lines are the lines completed since the last Poll, in order, without
	// their newline (nor a carriage return before it); empty lines are
	// left out. They alias no buffer of the Tail.
	Lines [][]byte
	// Skipped counts the lines dropped for being longer than MaxLine.
	Skipped int
	// More says that the file holds more bytes than this Poll read: poll
	// again at once.
	More bool
}

// Poll reads what was appended to the file since the last Poll. Its error
// names the file: one that is not a regular file (a named pipe, a folder
// in its place) or cannot be read; the Tail stays as it was, and a later
// Poll tries again.
func (t *Tail) Poll() (Update, error) {
	var u Update
	f, err := userfile.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		if t.info != nil {
			t.restart()
			u.Reset, u.Why = true, "removed"
		}
		return u, nil
	}
	if err != nil {
		return u, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return u, err
	}
	u.Exists = true
	if t.info != nil {
		switch {
		case !os.SameFile(t.info, st):
			u.Why = "replaced"
		case st.Size() < t.off:
			u.Why = "truncated"
		case len(t.last) > 0:
			b := make([]byte, len(t.last))
			if _, err := f.ReadAt(b, t.off-int64(len(b))); err != nil || !bytes.Equal(b, t.last) {
				u.Why = "rewritten"
			}
		}
		if u.Why != "" {
			t.restart()
			u.Reset = true
		}
	}
	t.info = st
	n := st.Size() - t.off
	if n <= 0 {
		return u, nil
	}
	maxRead := t.MaxRead
	if maxRead <= 0 {
		maxRead = DefaultMaxRead
	}
	if n > maxRead {
		n, u.More = maxRead, true
	}
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, t.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return u, err
	}
	buf = buf[:got]
	t.off += int64(got)
	t.remember(buf)
	t.split(buf, &u)
	return u, nil
}

// restart forgets the file followed.
func (t *Tail) restart() {
	t.info, t.off, t.partial, t.skipping, t.last = nil, 0, nil, false, nil
}

// remember keeps the last bytes read, the fingerprint of the offset.
func (t *Tail) remember(b []byte) {
	if len(b) >= fingerprintLen {
		t.last = append(t.last[:0], b[len(b)-fingerprintLen:]...)
		return
	}
	t.last = append(t.last, b...)
	if len(t.last) > fingerprintLen {
		t.last = append([]byte(nil), t.last[len(t.last)-fingerprintLen:]...)
	}
}

// split cuts b into lines, continuing the partial line.
func (t *Tail) split(b []byte, u *Update) {
	maxLine := t.MaxLine
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skipping {
				t.partial = append(t.partial, b...)
				if len(t.partial) > maxLine {
					t.partial, t.skipping = nil, true
					u.Skipped++
				}
			}
			return
		}
		seg := b[:i]
		b = b[i+1:]
		if t.skipping {
			t.skipping = false
			continue
		}
		line := make([]byte, 0, len(t.partial)+len(seg))
		line = append(append(line, t.partial...), seg...)
		t.partial = t.partial[:0]
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case len(line) > maxLine:
			u.Skipped++
		case len(bytes.TrimSpace(line)) > 0:
			u.Lines = append(u.Lines, line)
		}
	}
}
