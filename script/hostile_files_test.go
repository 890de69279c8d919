package script

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"gorun/engine/spec"
)

// Tests for issue 29 (hostile input, round two): load(), --set and the
// memory budget.

// TestLoadConfined: load() reads only .star files under its roots. An
// absolute path, a path through "..", and a file that is not a .star file
// are refused before anything is read, and no error shows a word of the
// file (before, load("secret.txt") failed with "undefined: hunter2", and an
// absolute path read any file, /proc/self/environ included).
func TestLoadConfined(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "w")
	other := filepath.Join(root, "other")
	for _, d := range []string{dir, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "hunter2"
	for _, p := range []string{filepath.Join(dir, "secret.txt"), filepath.Join(other, "secret.star"), filepath.Join(dir, "secret")} {
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ module, want string }{
		{"secret.txt", `load("secret.txt"): not a .star file; load() reads .star files from the loading script's folder, the GORUN_PATH folders and the library shipped with gorun`},
		{"secret", `load("secret"): not a .star file`},
		{filepath.Join(other, "secret.star"), `: an absolute path; load() reads .star files from the loading script's folder, the GORUN_PATH folders and the library shipped with gorun: give the path from one of them`},
		{"/proc/self/environ", `load("/proc/self/environ"): an absolute path`},
		{"../other/secret.star", `load("../other/secret.star"): the path leaves its folder (through "..")`},
		{"", `load(""): an empty path`},
	}
	for _, c := range cases {
		script := filepath.Join(dir, "train.star")
		src := "load(" + strQuote(c.module) + ", \"x\")\n"
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// GORUN_PATH holds the folder with secret.star: it may be loaded
		// by its name, never by its absolute path.
		_, err := Load(script, WithSearchPath(other))
		if err == nil {
			t.Errorf("load(%q): no error", c.module)
			continue
		}
		got := errorText(err)
		if !strings.Contains(got, c.want) || strings.Contains(got, secret) {
			t.Errorf("load(%q):\n%s\nwant %q and not %q", c.module, got, c.want, secret)
		}
	}
	// By its name, from GORUN_PATH, secret.star is a script like any other
	// (its errors may name what it holds: it is Starlark).
	os.WriteFile(filepath.Join(other, "secret.star"), []byte("x = 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "train.star"), []byte("load(\"./secret.star\", \"x\")\n"+`train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1))`), 0o644)
	if _, err := Load(filepath.Join(dir, "train.star"), WithSearchPath(other)); err != nil {
		t.Errorf("load(\"./secret.star\") from GORUN_PATH: %v", errorText(err))
	}
}

func strQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestSetSeesLoadedNames: a --set expression sees the names the script
// load()ed, as it sees those the script defines (before: "undefined:
// net").
func TestSetSeesLoadedNames(t *testing.T) {
	fs := memFS{
		"/w/train.star": `load("lib.star", "net", width = "hidden")
train(model = net(width), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1))`,
		"/w/lib.star": `hidden = 32
def net(n):
    return nn.sequential(nn.flatten(), nn.linear(784, n, name = "fc1"), nn.relu(), nn.linear(n, 10, name = "fc2"))`,
	}
	o, err := ParseOverride("model=net(width * 2)")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load("/w/train.star", WithFileReader(fs), WithOverrides(o))
	if err != nil {
		t.Fatal(errorText(err))
	}
	var widths []int
	var walk func(l *spec.Layer)
	walk = func(l *spec.Layer) {
		if l.Name == "fc1" {
			widths = append(widths, l.Out)
		}
		for _, c := range l.Layers {
			walk(c)
		}
	}
	for _, n := range s.Model.Nodes {
		walk(n.Layer)
	}
	if len(widths) != 1 || widths[0] != 64 {
		t.Errorf("fc1 widths %v, want [64] (net(width * 2) with width = 32 loaded as an alias)", widths)
	}
}

// TestMemoryWatch: the watch of a script's memory, on a heap the test
// sets. It cancels once the heap has grown by more than a third of the
// budget, so that the operation under way — Starlark sees a cancel only
// between two, and x + x takes twice what x takes — ends within the
// budget; and it calls abort once the heap passes the budget all the same.
// Before, it cancelled only past the budget, and the doubling under way
// ended at twice the budget (8.4 GB against 4 GiB).
func TestMemoryWatch(t *testing.T) {
	const budget = 300 << 20
	var heap atomic.Uint64
	heap.Store(1 << 30) // the heap before the script
	cancelled := make(chan string, 2)
	aborted := make(chan error, 1)
	w := &watcher{max: budget, what: "t.star", cancel: func(r string) { cancelled <- r }, abort: func(err error) { aborted <- err }, heap: heap.Load}
	defer w.start()()
	wait := func(what string, d time.Duration) {
		t.Helper()
		select {
		case v := <-cancelled:
			if what != "cancel" {
				t.Fatalf("cancelled (%s), want %s", v, what)
			}
			if want := "the script's values take more than 100 MiB, a third of its memory budget of 300 MiB (one more operation, such as x + x, could take the rest)"; v != want {
				t.Errorf("cancel reason %q, want %q", v, want)
			}
		case err := <-aborted:
			if what != "abort" {
				t.Fatalf("aborted (%v), want %s", err, what)
			}
			if want := "t.star: stopped: its values passed the memory budget of 300 MiB in one operation, which Starlark cannot interrupt (a repetition such as [0] * n, or a join)"; err.Error() != want {
				t.Errorf("abort: %v, want %s", err, want)
			}
		case <-time.After(d):
			if what != "nothing" {
				t.Fatalf("no %s after %v", what, d)
			}
		}
	}
	heap.Store(1<<30 + budget/3) // a third: not more
	wait("nothing", 50*time.Millisecond)
	heap.Store(1<<30 + budget/3 + 1)
	wait("cancel", 5*time.Second)
	heap.Store(1<<30 + budget) // the operation under way: within the budget
	wait("nothing", 50*time.Millisecond)
	heap.Store(1<<30 + budget + 1)
	wait("abort", 5*time.Second)
}

// TestMemoryBudget: scripts that double a list or a string stop with the
// watch's error; the heap's growth is logged (it depends on how soon the
// watch runs on a busy machine: TestMemoryWatch checks the thresholds).
func TestMemoryBudget(t *testing.T) {
	const budget = 96 << 20
	for _, src := range []string{
		"x = [0] * 1000\nfor i in range(40):\n    x = x + x\n",
		"x = [0] * 1000\nfor i in range(40):\n    x += x\n",
		"x = 'a' * 1000\nfor i in range(40):\n    x = x + x\n",
	} {
		runtime.GC()
		base := heapBytes()
		_, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": src}), WithMaxMemory(budget))
		want := "Starlark computation cancelled: the script's values take more than 32 MiB, a third of its memory budget of 96 MiB (one more operation, such as x + x, could take the rest)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", src, err, want)
		}
		h := heapBytes()
		t.Logf("%q: the heap grew by %d MiB", src, (h-min(base, h))>>20)
	}
}

// TestAbortOneOperation: one operation that takes more than the whole
// budget at once ([0] * n) cannot be stopped part way; the abort function
// (WithAbort, which in gorun ends the process) is called as soon as the
// heap passes the budget, naming the script.
func TestAbortOneOperation(t *testing.T) {
	runtime.GC()
	aborted := make(chan error, 1)
	_, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": "x = [0] * (1 << 22)\nwhile True:\n    pass\n"}),
		WithMaxMemory(30<<20), WithAbort(func(err error) { aborted <- err }))
	if err == nil || !strings.Contains(err.Error(), "cancelled: the script's values take more than 10 MiB") {
		t.Errorf("Load: %v", err)
	}
	select {
	case err := <-aborted:
		if want := "/w/train.star: stopped: its values passed the memory budget of 30 MiB in one operation, which Starlark cannot interrupt (a repetition such as [0] * n, or a join)"; err.Error() != want {
			t.Errorf("abort: %v\nwant %s", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Error("abort not called")
	}
}

// TestAbortAfterCancel: Starlark code that has not stopped abortGrace after a
// cancel (SIGTERM) — one operation under way that does not end, here a
// builtin that waits — is aborted, naming the script and the signal.
// Before, gorun waited for the operation to end (12 s for a doubling of
// 4 GiB).
func TestAbortAfterCancel(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	stuck := starlark.NewBuiltin("stuck", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		close(entered)
		<-release
		return starlark.None, nil
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	aborted := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": "stuck()\nx = 1\n"}),
			WithPredeclared(starlark.StringDict{"stuck": stuck}), WithContext(ctx), WithAbort(func(err error) { aborted <- err }))
		done <- err
	}()
	<-entered
	start := time.Now()
	cancel(errors.New("interrupted by SIGTERM"))
	select {
	case err := <-aborted:
		if took := time.Since(start); took < abortGrace || took > abortGrace+time.Second {
			t.Errorf("aborted after %v, want about %v", took, abortGrace)
		}
		if want := "/w/train.star: stopped: interrupted by SIGTERM, and one operation under way did not end within 250ms"; err.Error() != want {
			t.Errorf("abort: %v\nwant %s", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Error("abort not called")
	}
	close(release)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "cancelled: interrupted by SIGTERM") {
		t.Errorf("Load: %v", err)
	}
}
