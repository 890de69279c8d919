package script

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"gorun/engine/spec"
)

// strategyScript declares a partition strategy named PART among these.
const strategyScript = `
def shuffles(ctx):
    for i in range(100000):
        shuffle(100000, i)
    return [list(range(ctx.size))]

def spin(ctx):
    while True:
        pass

def deep(ctx):
    def down(n):
        return down(n + 1)
    return down(0)

train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1), partition = PART)
`

func loadStrategy(t *testing.T, part string, opts ...Option) *spec.Partition {
	t.Helper()
	src := strings.Replace(strategyScript, "PART", part, 1)
	opts = append([]Option{WithFileReader(memFS{"/w/train.star": src})}, opts...)
	s, err := Load("/w/train.star", opts...)
	if err != nil {
		t.Fatal(errorText(err))
	}
	return s.Partition
}

// callWithin calls the strategy and fails the test when it has not
// returned within d.
func callWithin(t *testing.T, p *spec.Partition, d time.Duration, during func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := p.Fn(spec.PartitionContext{Size: 10, World: 1})
		done <- err
	}()
	if during != nil {
		during()
	}
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("the strategy still runs after %v", d)
		return nil
	}
}

// TestBuiltinsChargeSteps: a strategy calling shuffle(100000, i) 100000
// times (10^10 elements of work) stops on the step budget in a fraction of
// a second instead of running for minutes.
func TestBuiltinsChargeSteps(t *testing.T) {
	p := loadStrategy(t, "shuffles")
	start := time.Now()
	err := callWithin(t, p, 20*time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "shuffle: too many steps") {
		t.Fatalf("err = %v, want shuffle: too many steps", err)
	}
	t.Logf("stopped after %v", time.Since(start))
}

// TestCancelStrategy: ending the context given to Load cancels a strategy
// that is running (as SIGINT does in the CLI).
func TestCancelStrategy(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	p := loadStrategy(t, "spin", WithContext(ctx), WithMaxSteps(1<<62))
	err := callWithin(t, p, 5*time.Second, func() {
		time.Sleep(100 * time.Millisecond)
		cancel(errors.New("interrupted by SIGTERM"))
	})
	if err == nil || !strings.Contains(err.Error(), "Starlark computation cancelled: interrupted by SIGTERM") {
		t.Fatalf("err = %v", err)
	}
}

// TestCancelScript: the same for the script's own top level.
func TestCancelScript(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": "while True:\n    pass\n"}),
			WithContext(ctx), WithMaxSteps(1<<62))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel(errors.New("interrupted by SIGINT"))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "cancelled: interrupted by SIGINT") {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the script still runs 5s after the cancel")
	}
}

// TestRecursionBacktrace: a deeply recursive strategy stops at MaxDepth,
// and FormatBacktrace keeps the first and last frames of its backtrace.
func TestRecursionBacktrace(t *testing.T) {
	p := loadStrategy(t, "deep")
	err := callWithin(t, p, 20*time.Second, nil)
	var ee *starlark.EvalError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an EvalError", err)
	}
	if len(ee.CallStack) < MaxDepth {
		t.Errorf("stack of %d frames, want more than %d", len(ee.CallStack), MaxDepth)
	}
	got := FormatBacktrace(ee, 3, 3)
	lines := strings.Split(got, "\n")
	// Traceback line, 3 frames, the omission line, 3 frames, the error.
	if len(lines) != 9 {
		t.Fatalf("backtrace has %d lines:\n%s", len(lines), got)
	}
	if !strings.Contains(lines[1], "in deep") || !strings.Contains(lines[2], "in down") {
		t.Errorf("first frames:\n%s", got)
	}
	if want := len(ee.CallStack) - 6; lines[4] != "  … "+itoa(want)+" frames omitted" {
		t.Errorf("omission line %q, want %d frames", lines[4], want)
	}
	if !strings.HasPrefix(lines[8], "Error: Starlark computation cancelled: recursion deeper than 10000 calls") {
		t.Errorf("last line %q", lines[8])
	}
	// A short stack is printed whole, as EvalError.Backtrace prints it.
	short := &starlark.EvalError{Msg: "boom", CallStack: ee.CallStack[:4]}
	if FormatBacktrace(short, 3, 3) != short.Backtrace() {
		t.Errorf("short backtrace:\n%s\nwant\n%s", FormatBacktrace(short, 3, 3), short.Backtrace())
	}
}

// TestDataDirRelative: a relative dir= is relative to the folder of the
// script that declares it, as load() is; on the command line, to the
// working folder.
func TestDataDirRelative(t *testing.T) {
	fs := memFS{
		"/w/train.star": "load(\"lib/d.star\", \"d\")\ntrain(model = nn.linear(784, 10), loss = \"nll\", data = data.mnist(dir = \"mnist\"), eval = d, optimizer = optim.sgd(lr = 0.1))",
		"/w/lib/d.star": "d = data.mnist(dir = \"../other\", split = \"test\")",
	}
	s, err := Load("/w/train.star", WithFileReader(fs))
	if err != nil {
		t.Fatal(errorText(err))
	}
	if s.Data.Dir != "/w/mnist" || s.Eval.Dir != "/w/other" {
		t.Errorf("data dir %q, eval dir %q; want /w/mnist, /w/other", s.Data.Dir, s.Eval.Dir)
	}
	// Rebuilt by --set from the main script, the eval set keeps its folder.
	o, _ := ParseOverride("eval.limit=5")
	if s, err = Load("/w/train.star", WithFileReader(fs), WithOverrides(o)); err != nil {
		t.Fatal(errorText(err))
	}
	if s.Eval.Dir != "/w/other" || s.Eval.Limit != 5 {
		t.Errorf("after --set eval.limit=5: eval %+v", s.Eval)
	}
	o, _ = ParseOverride("data.dir=cli")
	if s, err = Load("/w/train.star", WithFileReader(fs), WithOverrides(o)); err != nil {
		t.Fatal(errorText(err))
	}
	if abs, _ := filepath.Abs("cli"); s.Data.Dir != abs {
		t.Errorf("--set data.dir=cli: dir %q, want %q", s.Data.Dir, abs)
	}
}
