package runner

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorun/engine"
	"gorun/ops"
)

// TestLendPlanMNIST: in the tutorial Net's program exactly the weight and
// bias gradient steps are lendable; each may start once the step that
// computes its output gradient has run, and must be done before the
// gradient all-reduce.
func TestLendPlanMNIST(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 2)
	prog := p.Devices[1]
	plan := lendPlan(prog)
	sync := -1
	for i, st := range prog.Steps {
		if st.Kind == engine.CollectiveStep {
			sync = i
			break
		}
	}
	var got []string
	for i, st := range prog.Steps {
		l := plan[i]
		if !l.ok {
			continue
		}
		layer, _, _ := strings.Cut(st.Layer, " (")
		got = append(got, fmt.Sprintf("%s %s", st.Op, layer))
		if l.until != sync {
			t.Errorf("step %d (%s of %s): until %d, want the all-reduce, step %d", i, st.Op, st.Layer, l.until, sync)
		}
		if l.ready < 1 || l.ready > i {
			t.Errorf("step %d (%s of %s): ready %d", i, st.Op, st.Layer, l.ready)
			continue
		}
		// The step before ready produces an input of this one.
		prev := prog.Steps[l.ready-1]
		feeds := false
		for _, o := range prev.Out {
			for _, in := range st.In {
				if in != nil && o.Offset < in.Offset+in.Elems() && in.Offset < o.Offset+o.Elems() {
					feeds = true
				}
			}
		}
		if !feeds {
			t.Errorf("step %d (%s of %s): ready after step %d (%s), which writes none of its inputs", i, st.Op, st.Layer, l.ready-1, prev.Op)
		}
	}
	want := []string{
		`linear_grad_weight linear "fc2"`, `linear_grad_bias linear "fc2"`,
		`linear_grad_weight linear "fc1"`, `linear_grad_bias linear "fc1"`,
		`conv2d_grad_weight conv2d "conv2"`, `conv2d_grad_bias conv2d "conv2"`,
		`conv2d+maxpool2d_grad conv2d "conv1"`, // its weight's and bias's (the fused Conv2DPoolGrad)
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("lendable steps:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLendPlanMemory: lendPlan follows the arena, not the op names: a
// later step that reuses a lendable step's input memory ends its window,
// a gradient two steps accumulate into is lent only the first time, and
// a gradient a collective touched before is not lent.
func TestLendPlanMemory(t *testing.T) {
	buf := func(off, n int, view *engine.Buffer) *engine.Buffer {
		return &engine.Buffer{Offset: off, Max: []int{n}, View: view}
	}
	grads := buf(100, 20, nil)
	prog := &engine.Program{GradArena: grads}
	act, act2 := buf(0, 10, nil), buf(10, 10, nil)
	g1, g2 := buf(100, 10, grads), buf(110, 10, grads)
	k := func(op ops.Op, in []*engine.Buffer, out ...*engine.Buffer) *engine.Step {
		return &engine.Step{Kind: engine.KernelStep, Phase: engine.PhaseBackward, Op: op, In: in, Out: out}
	}
	reuse := buf(5, 10, nil) // overlaps act and act2
	prog.Steps = []*engine.Step{
		k(ops.ReLUGrad, []*engine.Buffer{act2, act2}, act),       // 0: writes act
		k(ops.LinearGradWeight, []*engine.Buffer{act, act2}, g1), // 1: lendable from 1
		k(ops.ReLUGrad, []*engine.Buffer{act2, act2}, act2),      // 2: rewrites act2, an input of 1
		k(ops.LinearGradWeight, []*engine.Buffer{act, act}, g1),  // 3: accumulates into g1 after 1: not lent
		{Kind: engine.CollectiveStep, Phase: engine.PhaseSync, Collective: &engine.Collective{Buffer: grads, Offset: 10, Elems: 10}},
		k(ops.LinearGradBias, []*engine.Buffer{reuse}, g2), // 5: after the collective on g2: not lent
		k(ops.ReLU, []*engine.Buffer{act}, reuse),          // 6: forward-phase op: never lent
	}
	prog.Steps[6].Phase = engine.PhaseForward
	plan := lendPlan(prog)
	want := []lendable{{}, {ok: true, ready: 1, until: 2}, {}, {}, {}, {}, {}}
	for i := range want {
		if plan[i] != want[i] {
			t.Errorf("step %d: %+v, want %+v", i, plan[i], want[i])
		}
	}
}

// forceHelping makes every micro-step of rank 1 lend all of its deferred
// gradient steps to the other ranks: rank 1 stops before its collectives
// until helpers have claimed them, and the others wait for it there
// before they help. It returns a check of what happened.
func forceHelping(t *testing.T) (check func()) {
	t.Helper()
	var arrived atomic.Uint64 // rank 1's micro-step at its stop
	var stuck atomic.Bool
	stepHook = func(d *worker, i int) {
		if d.lend == nil || i != d.tail {
			return
		}
		l := d.lend
		deadline := time.Now().Add(20 * time.Second)
		if d.rank != 1 {
			for arrived.Load() < l.gen && time.Now().Before(deadline) {
				runtime.Gosched()
			}
			return
		}
		arrived.Store(l.gen)
		for _, k := range l.pending {
			for l.claims[k].Load() != l.gen && time.Now().Before(deadline) {
				runtime.Gosched()
			}
		}
		if time.Now().After(deadline) {
			stuck.Store(true)
		}
	}
	t.Cleanup(func() { stepHook = nil })
	return func() {
		if stuck.Load() {
			t.Error("rank 1 waited 20 s for helpers that never came")
		}
	}
}

// TestHelpingIsBitIdentical: with every lendable step of rank 1 run by
// another rank (forceHelping), training ends with the same bits as with
// helping off, on 2 and 3 devices, with one bucket and with small
// buckets (overlapped all-reduces), with accumulation, with a parameter
// server and with a batch the ranks share unevenly.
func TestHelpingIsBitIdentical(t *testing.T) {
	cases := [][]string{
		{"sync=sync.allreduce(op='mean')", "batch_size=24"},
		{"sync=sync.allreduce(op='mean', bucket_mb=0.0002)", "batch_size=24"},
		{"sync=sync.allreduce(op='mean')", "accumulate=2", "batch_size=24"},
		{"sync=sync.parameter_server(root=0)", "batch_size=24"},
		{"sync=sync.allreduce(op='mean')", "batch_size=23"}, // uneven: ranks' batches differ
	}
	for _, n := range []int{2, 3} {
		for _, c := range cases {
			sets := append([]string{"max_steps=12"}, c...)
			name := fmt.Sprintf("%d devices, %s", n, strings.Join(c, " "))
			off := trainedRun(t, n, append(sets, "cpu.help=false")...)
			check := forceHelping(t)
			on := trainedRun(t, n, sets...)
			stepHook = nil
			check()
			if on.HelpedSteps == 0 {
				t.Errorf("%s: no step was helped", name)
			}
			if off.HelpedSteps != 0 {
				t.Errorf("%s: cpu.help = false helped %d steps", name, off.HelpedSteps)
			}
			for r := range on.Params {
				if d := maxRelDiff(off.Params[r], on.Params[r]); d != 0 {
					t.Errorf("%s: rank %d's parameters differ from helping off by %.2e", name, r, d)
				}
			}
			if on.FinalLoss != off.FinalLoss {
				t.Errorf("%s: final loss %v, helping off %v", name, on.FinalLoss, off.FinalLoss)
			}
		}
	}
}

// trainedRun is trained returning the whole Result; sets may hold
// cluster keys ("cpu.help=false").
func trainedRun(t *testing.T, devices int, sets ...string) *Result {
	t.Helper()
	script, keys := clusterSets(sets)
	p := compileWith(t, loadSpec(t, tinyScript, script...), devices, keys...)
	res, err := Run(p, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestHelpingUnderJitter: ranks slowed at random steps (so helpers take
// steps the moment they become ready, and owners meet helpers anywhere in
// a step's window) still end with the bits of helping off. Run with -race
// it also checks that owners and helpers never touch a step's memory at
// once (make test does).
func TestHelpingUnderJitter(t *testing.T) {
	for _, c := range []string{"sync=sync.allreduce(op='mean')", "sync=sync.allreduce(op='mean', bucket_mb=0.0002)"} {
		sets := []string{"max_steps=30", "batch_size=24", c}
		off := trainedRun(t, 3, append(sets, "cpu.help=false")...)
		stepHook = func(d *worker, i int) {
			if rand.IntN(8) == 0 {
				for t0, n := time.Now(), time.Duration(rand.IntN(300))*time.Microsecond; time.Since(t0) < n; {
				}
			}
		}
		on := trainedRun(t, 3, sets...)
		stepHook = nil
		t.Logf("%s: %d steps helped", c, on.HelpedSteps)
		for r := range on.Params {
			if d := maxRelDiff(off.Params[r], on.Params[r]); d != 0 {
				t.Errorf("%s: rank %d's parameters differ from helping off by %.2e", c, r, d)
			}
		}
	}
}

// TestHelpingModelsBitIdentical: forced helping on the test ResNet (batch
// norm, residual blocks, fused steps; with SyncBatchNorm, whose
// all-reduces sit inside the backward pass) and the test GPT (layer norm,
// attention, an embedding tied to the output layer, whose one gradient
// two steps accumulate) ends with the bits of helping off.
func TestHelpingModelsBitIdentical(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijkkjihgfedcbaacegikbdfhjhhaakk", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	syncBN := strings.NewReplacer(`name = "bn`, `sync = True, name = "bn`, "nn.batchnorm2d(cout)", "nn.batchnorm2d(cout, sync = True)").Replace(resnetScript)
	for _, c := range []struct {
		name, src string
		sets      []string
	}{
		{"resnet", resnetScript, []string{"max_steps=4"}},
		{"resnet, SyncBatchNorm", syncBN, []string{"max_steps=4"}},
		{"gpt", strings.Replace(gptScript, "TEXT", text, 1), []string{"max_steps=4", "batch_size=6", "accumulate=2"}},
	} {
		run := func(keys ...string) *Result {
			p := compileWith(t, loadSpec(t, c.src, c.sets...), 2, keys...)
			res, err := Run(p, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		off := run("cpu.help=false")
		check := forceHelping(t)
		on := run()
		stepHook = nil
		check()
		if on.HelpedSteps == 0 {
			t.Errorf("%s: no step was helped", c.name)
		}
		for r := range on.Params {
			if d := maxRelDiff(off.Params[r], on.Params[r]); d != 0 {
				t.Errorf("%s: rank %d's parameters differ from helping off by %.2e", c.name, r, d)
			}
		}
		if on.FinalLoss != off.FinalLoss {
			t.Errorf("%s: final loss %v, helping off %v", c.name, on.FinalLoss, off.FinalLoss)
		}
		t.Logf("%s: %d kernels helped, %d steps, final loss %v (off: %d helped)", c.name, on.HelpedSteps, on.Steps, on.FinalLoss, off.HelpedSteps)
	}
}
