package script

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strings"
	"time"

	"go.starlark.net/starlark"
)

// Limits on what a script may ask for. The step budget (WithMaxSteps)
// bounds time; these bound memory and the Go stack.
const (
	// MaxElements is the most elements a builtin may produce in one call
	// (shuffle's n, a range's length): 1<<26 ints is about 1 GiB of
	// Starlark values.
	MaxElements = 1 << 26
	// MaxDepth is the deepest Starlark call stack a script or strategy may
	// build (Python's default recursion limit is 1000).
	MaxDepth = 10_000
	// stepChunk is how often (in steps) the call depth is checked.
	stepChunk = 4096
	// DefaultMaxMemory is how much the Go heap may grow while a script or
	// a strategy runs (WithMaxMemory).
	DefaultMaxMemory = 4 << 30
	// MaxSourceBytes is the largest script or load()ed file read from
	// disk: a configuration larger than 16 MiB is a mistake.
	MaxSourceBytes = 16 << 20
)

const budgetKey = "gorun.budget"

// setupThread gives t the step budget max (counted by the interpreter and
// charged by gorun's builtins) and the call depth limit.
func setupThread(t *starlark.Thread, max uint64) {
	if max == 0 {
		max = defaultMaxSteps
	}
	t.SetLocal(budgetKey, max)
	t.SetMaxExecutionSteps(min(max, stepChunk))
	// The interpreter calls OnMaxSteps once the steps reach the limit set
	// above: every stepChunk steps, check the depth and move the limit on,
	// up to the real budget.
	t.OnMaxSteps = func(t *starlark.Thread) {
		switch {
		case t.Steps >= max:
			t.Cancel("too many steps")
		case t.CallStackDepth() > MaxDepth:
			t.Cancel(fmt.Sprintf("recursion deeper than %d calls", MaxDepth))
		default:
			t.SetMaxExecutionSteps(min(max, t.Steps+stepChunk))
		}
	}
}

// charge counts cost steps of a builtin's work against the thread's budget.
// It fails, as the interpreter does, once the budget is spent.
func charge(t *starlark.Thread, name string, cost uint64) error {
	max, ok := t.Local(budgetKey).(uint64)
	t.Steps += cost
	if ok && t.Steps >= max {
		t.Cancel("too many steps")
		return fmt.Errorf("%s: too many steps (the script's budget of %d steps is spent)", name, max)
	}
	return nil
}

// checkElements fails when a builtin would produce more than MaxElements
// elements.
func checkElements(name, what string, n int) error {
	if n > MaxElements {
		return fmt.Errorf("%s: %s = %d is more than the limit of %d elements", name, what, n, MaxElements)
	}
	return nil
}

// boundedUniverse shadows the universe builtins whose work or result grows
// with their arguments: range refuses more than MaxElements elements (a
// list(range(1 << 40)) would otherwise ask for terabytes before anything
// counts it), and the others charge one step per element of their
// arguments.
func boundedUniverse() starlark.StringDict {
	d := starlark.StringDict{}
	if r, ok := starlark.Universe["range"].(*starlark.Builtin); ok {
		d["range"] = starlark.NewBuiltin("range", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			v, err := r.CallInternal(thread, args, kwargs)
			if err != nil {
				return nil, err
			}
			if err := checkElements("range", "len", starlark.Len(v)); err != nil {
				return nil, err
			}
			return v, nil
		})
	}
	for _, name := range []string{"list", "tuple", "sorted", "reversed", "enumerate", "zip", "dict", "set", "min", "max", "any", "all", "str", "repr"} {
		orig, ok := starlark.Universe[name].(*starlark.Builtin)
		if !ok {
			continue
		}
		d[name] = starlark.NewBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
			cost := uint64(1)
			for _, a := range args {
				if n := starlark.Len(a); n > 0 {
					cost += uint64(n)
				}
			}
			if err := charge(thread, name, cost); err != nil {
				return nil, err
			}
			return orig.CallInternal(thread, args, kwargs)
		})
	}
	return d
}

// FormatBacktrace renders a Starlark error's backtrace as
// EvalError.Backtrace does, keeping only the first head and the last tail
// frames of a deep stack, with the count of frames left out between them.
func FormatBacktrace(ee *starlark.EvalError, head, tail int) string {
	stack := ee.CallStack
	suffix := ""
	if last := len(stack) - 1; last >= 0 && stack[last].Pos.Filename() == "<builtin>" {
		suffix = " in " + stack[last].Name
		stack = stack[:last]
	}
	var b strings.Builder
	if len(stack) > 0 {
		b.WriteString("Traceback (most recent call last):\n")
	}
	for i, fr := range stack {
		if i == head && len(stack) > head+tail+1 {
			fmt.Fprintf(&b, "  … %d frames omitted\n", len(stack)-head-tail)
		}
		if i >= head && i < len(stack)-tail && len(stack) > head+tail+1 {
			continue
		}
		fmt.Fprintf(&b, "  %s: in %s\n", fr.Pos, fr.Name)
	}
	fmt.Fprintf(&b, "Error%s: %s", suffix, ee.Msg)
	return b.String()
}

// heapBytes is the Go heap in use now (runtime/metrics: no stop of the
// world): live objects, and dead ones not yet swept.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// How the watch of an evaluation runs (watch).
const (
	// watchTick is how often the heap is read.
	watchTick = time.Millisecond
	// abortGrace is how long Starlark code may take to stop once its
	// context ended before the abort function (WithAbort) ends the
	// process.
	abortGrace = 250 * time.Millisecond
)

// watch watches one evaluation — a script with the files it loads, or one
// call of a partition strategy, named by what — from another goroutine,
// until the returned stop is called:
//
//   - when ctx ends (a signal), it cancels the evaluation with ctx's cause;
//   - when the Go heap has grown by more than a third of max, it cancels
//     the evaluation. Starlark sees a cancel only between two operations,
//     and one operation may take twice what the values it reads take (x +
//     x, x += x): stopped at a third, a script that doubles a list stays
//     within max, where one stopped at max reached twice max;
//   - with abort set, when the heap passes max all the same (one
//     operation as big as Starlark allows: a repetition [0] * n of up to
//     2^30 elements, a join), or when the evaluation still runs
//     abortGrace after ctx ended (an operation that takes that long), it
//     calls abort, which ends the process: nothing else stops an
//     operation under way. (After a cancel for memory, the operation under
//     way is left to end: it ends within max.)
func watch(ctx context.Context, max uint64, what string, cancel func(reason string), abort func(error)) (stop func()) {
	w := &watcher{ctx: ctx, max: max, what: what, cancel: cancel, abort: abort, heap: heapBytes}
	return w.start()
}

// watcher is what watch watches with; tests give it another heap.
type watcher struct {
	ctx    context.Context
	max    uint64
	what   string
	cancel func(reason string)
	abort  func(error)
	heap   func() uint64 // the Go heap in use now: heapBytes
}

func (w *watcher) start() (stop func()) {
	max, ctx := w.max, w.ctx
	if max == 0 {
		max = DefaultMaxMemory
	}
	if ctx == nil {
		ctx = context.Background()
	}
	interrupted := func() string {
		if c := context.Cause(ctx); c != nil {
			return c.Error()
		}
		return "interrupted"
	}
	if ctx.Err() != nil {
		w.cancel(interrupted()) // before the first step
	}
	base := w.heap()
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(watchTick)
		defer tick.Stop()
		ctxDone := ctx.Done()
		cancelled := false
		var signalled time.Time // when ctx ended
		var why string          // ctx's cause
		stopping := func(reason string) {
			if !cancelled {
				cancelled = true
				w.cancel(reason)
			}
		}
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				signalled, why = time.Now(), interrupted()
				stopping(why)
			case <-tick.C:
			}
			var grown uint64
			if h := w.heap(); h > base {
				grown = h - base
			}
			if grown > max/3 {
				stopping(fmt.Sprintf("the script's values take more than %d MiB, a third of its memory budget of %d MiB (one more operation, such as x + x, could take the rest)", max/3>>20, max>>20))
			}
			if w.abort == nil {
				continue
			}
			switch {
			case grown > max:
				w.abort(fmt.Errorf("%s: stopped: its values passed the memory budget of %d MiB in one operation, which Starlark cannot interrupt (a repetition such as [0] * n, or a join)", w.what, max>>20))
				return
			case !signalled.IsZero() && time.Since(signalled) > abortGrace:
				w.abort(fmt.Errorf("%s: stopped: %s, and one operation under way did not end within %v", w.what, why, abortGrace))
				return
			}
		}
	}()
	return func() { close(done) }
}
