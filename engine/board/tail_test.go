package board

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gorun/datasets/userfile"
)

// poll polls t and fails the test on an error.
func poll(t *testing.T, tl *Tail) Update {
	t.Helper()
	u, err := tl.Poll()
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	return u
}

func lines(u Update) string {
	var s []string
	for _, l := range u.Lines {
		s = append(s, string(l))
	}
	return strings.Join(s, "|")
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTailAppendsAndPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	tl := NewTail(path)
	if u := poll(t, tl); u.Exists || u.Reset || len(u.Lines) > 0 {
		t.Fatalf("no file yet: got %+v", u)
	}
	appendTo(t, path, "a\nb\n")
	if u := poll(t, tl); !u.Exists || u.Reset || lines(u) != "a|b" {
		t.Fatalf("first lines: got %+v (%s)", u, lines(u))
	}
	if u := poll(t, tl); len(u.Lines) > 0 || u.Reset {
		t.Fatalf("nothing new: got %s", lines(u))
	}
	// A line in three writes, the first two without its newline.
	appendTo(t, path, `{"kind":"st`)
	if u := poll(t, tl); len(u.Lines) > 0 {
		t.Fatalf("a partial line was passed on: %s", lines(u))
	}
	appendTo(t, path, `ep"`)
	if u := poll(t, tl); len(u.Lines) > 0 {
		t.Fatalf("a partial line was passed on: %s", lines(u))
	}
	appendTo(t, path, "}\r\n\n  \nc")
	if u := poll(t, tl); lines(u) != `{"kind":"step"}` {
		t.Fatalf("completed line: got %q", lines(u))
	}
	appendTo(t, path, "\n")
	if u := poll(t, tl); lines(u) != "c" {
		t.Fatalf("got %q, want c", lines(u))
	}
}

func TestTailTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	appendTo(t, path, "one\ntwo\nthree\n")
	tl := NewTail(path)
	if u := poll(t, tl); lines(u) != "one|two|three" {
		t.Fatalf("got %q", lines(u))
	}
	// Truncated in place, then shorter content.
	if err := os.WriteFile(path, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := poll(t, tl)
	if !u.Reset || u.Why != "truncated" || lines(u) != "x" {
		t.Fatalf("after truncation: reset %v (%s), lines %q", u.Reset, u.Why, lines(u))
	}
	// Rewritten in place to the same length and longer: the bytes before
	// the offset changed.
	if err := os.WriteFile(path, []byte("y\nzzzz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u = poll(t, tl)
	if !u.Reset || u.Why != "rewritten" || lines(u) != "y|zzzz" {
		t.Fatalf("after a rewrite: reset %v (%s), lines %q", u.Reset, u.Why, lines(u))
	}
}

// TestTailReplaced: --resume rewrites metrics.jsonl into a temporary file
// and renames it into place (engine/runner's trimMetrics), then appends.
func TestTailReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	appendTo(t, path, "s1\ns2\ns3\npart")
	tl := NewTail(path)
	if u := poll(t, tl); lines(u) != "s1|s2|s3" {
		t.Fatalf("got %q", lines(u))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("s1\ns2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "s3b\n")
	u := poll(t, tl)
	if !u.Reset || u.Why != "replaced" || lines(u) != "s1|s2|s3b" {
		t.Fatalf("after a replacement: reset %v (%s), lines %q", u.Reset, u.Why, lines(u))
	}
}

// TestTailFolderGoneAndBack: a run folder removed, then made again by a new
// run (--overwrite, or rm -r and a new run).
func TestTailFolderGoneAndBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "metrics.jsonl")
	tl := NewTail(path)
	if u := poll(t, tl); u.Exists {
		t.Fatal("a file in a folder that does not exist")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "a\n")
	if u := poll(t, tl); lines(u) != "a" || u.Reset {
		t.Fatalf("created late: %+v", u)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	u := poll(t, tl)
	if u.Exists || !u.Reset || u.Why != "removed" {
		t.Fatalf("folder removed: %+v", u)
	}
	if u := poll(t, tl); u.Reset {
		t.Fatal("a second reset for the same removal")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, "b\n")
	if u := poll(t, tl); lines(u) != "b" || u.Reset {
		t.Fatalf("made again: %+v", u)
	}
}

func TestTailLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	tl := NewTail(path)
	tl.MaxLine, tl.MaxRead = 8, 10
	// A line too long in one piece, one that grows too long over polls,
	// and short ones around them.
	appendTo(t, path, "ok1\n0123456789abc\nok2\n")
	var got []string
	skipped, polls := 0, 0
	for more := true; more && polls < 10; polls++ {
		u := poll(t, tl)
		for _, l := range u.Lines {
			got = append(got, string(l))
		}
		skipped += u.Skipped
		more = u.More
	}
	if strings.Join(got, "|") != "ok1|ok2" {
		t.Errorf("lines: %q, want ok1 and ok2", got)
	}
	if polls != 3 {
		t.Errorf("22 bytes read 10 at a time took %d polls, want 3", polls)
	}
	if skipped != 1 {
		t.Errorf("skipped %d lines, want 1", skipped)
	}
	appendTo(t, path, "01234")
	poll(t, tl)
	appendTo(t, path, "56789")
	u := poll(t, tl)
	appendTo(t, path, "xyz\nok3\n")
	u2 := poll(t, tl)
	if u.Skipped+u2.Skipped != 1 || lines(u2) != "ok3" {
		t.Errorf("a line grown too long: skipped %d, then %q", u.Skipped+u2.Skipped, lines(u2))
	}
}

func TestTailRefusesNamedPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("SKIP: no named pipes here: %v", err)
	}
	_, err := NewTail(path).Poll()
	var nr *userfile.NotRegularError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Poll of a named pipe: %v, want a NotRegularError naming it", err)
	}
}
