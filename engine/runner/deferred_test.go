package runner

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/safetensors"
)

// The deferred path (deferred.go) against the synchronous one: each case
// runs twice, once as Run chooses (the CPU device is a backend.Deferrer,
// so the deferred path) and once with RunOptions.SyncVerdicts, and the two
// must end alike to the bit: the error, the final parameters, every
// metrics.jsonl line but its times, the log but its times and speeds, and
// every checkpoint's tensors.

// verdictRun is what one run left.
type verdictRun struct {
	dir     string
	res     *Result
	err     error
	log     string
	metrics []map[string]any
}

// runVerdicts runs p with opts on the deferred path and the synchronous
// one; fresh gives each run its own RunOptions (its data, its interrupt).
func runVerdicts(t *testing.T, p *engine.Plan, fresh func(dir string) RunOptions) (deferred, synced verdictRun) {
	t.Helper()
	run := func(sync bool) verdictRun {
		dir := t.TempDir()
		opts := fresh(dir)
		var log bytes.Buffer
		opts.Log, opts.Verbose, opts.SyncVerdicts = &log, true, sync
		res, err := Run(p, opts)
		v := verdictRun{dir: opts.Out, res: res, err: err, log: log.String()}
		if opts.Out != "" {
			if _, statErr := os.Stat(filepath.Join(opts.Out, MetricsFile)); statErr == nil {
				v.metrics = readMetrics(t, filepath.Join(opts.Out, MetricsFile))
			}
		}
		return v
	}
	return run(false), run(true)
}

// timeKeys are metrics.jsonl fields that measure time or memory: they
// differ from run to run.
var timeKeys = regexp.MustCompile(`seconds|_per_s$|^time$|peak_rss_bytes`)

// speeds are the log's times and speeds.
var speeds = regexp.MustCompile(`\d+ samples/s|\(\d+\.\ds\)`)

// sameRuns fails t where the two runs differ.
func sameRuns(t *testing.T, what string, a, b verdictRun) {
	t.Helper()
	errText := func(v verdictRun) string {
		if v.err == nil {
			return ""
		}
		return strings.ReplaceAll(v.err.Error(), v.dir, "DIR")
	}
	if errText(a) != errText(b) {
		t.Errorf("%s: deferred error\n%s\nsynchronous error\n%s", what, errText(a), errText(b))
	}
	if (a.res == nil) != (b.res == nil) {
		t.Fatalf("%s: deferred result %v, synchronous %v", what, a.res != nil, b.res != nil)
	}
	if a.res != nil {
		if a.res.Steps != b.res.Steps || a.res.Interrupted != b.res.Interrupted || !sameFloat(a.res.FinalLoss, b.res.FinalLoss) {
			t.Errorf("%s: deferred %d steps (interrupted %v, final loss %v), synchronous %d (%v, %v)", what,
				a.res.Steps, a.res.Interrupted, a.res.FinalLoss, b.res.Steps, b.res.Interrupted, b.res.FinalLoss)
		}
		for r := range b.res.Params {
			if !sameBits(a.res.Params[r], b.res.Params[r]) {
				t.Errorf("%s: rank %d's final parameters differ", what, r)
			}
		}
	}
	// Several ranks log from their own goroutines: the lines, in any
	// order.
	sorted := func(log string) string {
		lines := strings.Split(speeds.ReplaceAllString(log, ""), "\n")
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	if la, lb := sorted(a.log), sorted(b.log); la != lb {
		t.Errorf("%s: deferred log\n%s\nsynchronous log\n%s", what, lastLines(la, 8), lastLines(lb, 8))
	}
	if len(a.metrics) != len(b.metrics) {
		t.Fatalf("%s: deferred %d metrics lines, synchronous %d", what, len(a.metrics), len(b.metrics))
	}
	for i := range a.metrics {
		for _, m := range []map[string]any{a.metrics[i], b.metrics[i]} {
			for k := range m {
				if timeKeys.MatchString(k) {
					delete(m, k)
				}
			}
		}
		if ja, jb := mustJSON(a.metrics[i]), mustJSON(b.metrics[i]); ja != jb {
			t.Errorf("%s: metrics line %d: deferred %s, synchronous %s", what, i+1, ja, jb)
		}
	}
	if a.dir != "" {
		sameCheckpoints(t, what, a.dir, b.dir)
	}
}

func sameFloat(a, b float64) bool {
	return a == b || math.IsNaN(a) && math.IsNaN(b)
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// sameCheckpoints compares the checkpoints of two run folders: the same
// steps, and in each the same tensors to the bit.
func sameCheckpoints(t *testing.T, what, a, b string) {
	t.Helper()
	sa, _ := listCheckpoints(a)
	sb, _ := listCheckpoints(b)
	if mustJSON(sa) != mustJSON(sb) {
		t.Fatalf("%s: deferred checkpoints %v, synchronous %v", what, sa, sb)
	}
	for _, step := range sa {
		pa, pb := checkpointPath(a, step), checkpointPath(b, step)
		for _, pair := range [][2]string{{pa, pb}, {statePath(pa), statePath(pb)}} {
			fa, err := safetensors.ReadFile(pair[0])
			if err != nil {
				t.Fatal(err)
			}
			fb, err := safetensors.ReadFile(pair[1])
			if err != nil {
				t.Fatal(err)
			}
			if mustJSON(fa.Names()) != mustJSON(fb.Names()) {
				t.Errorf("%s: checkpoint %d: tensors %v and %v", what, step, fa.Names(), fb.Names())
				continue
			}
			for _, name := range fa.Names() {
				ta, _ := fa.Get(name)
				tb, _ := fb.Get(name)
				if !bytes.Equal(ta.Data, tb.Data) {
					t.Errorf("%s: checkpoint %d: tensor %s differs", what, step, name)
				}
			}
		}
	}
}

// TestDeferredPathChosen: CPU devices take the deferred path, alone or
// several in the process, except where the verdict cannot wait (fp16) or
// the flag cannot hold the update back (a parameter server's broadcast),
// or the test asks for the synchronous one.
func TestDeferredPathChosen(t *testing.T) {
	for _, c := range []struct {
		devices int
		sets    []string
		sync    bool
		want    bool
	}{
		{1, nil, false, true},
		{2, nil, false, true},
		{3, nil, false, true},
		{1, nil, true, false},
		{2, []string{"sync=sync.parameter_server()"}, false, false},
		{1, []string{"precision=\"fp16\""}, false, false},
		{1, []string{"precision=\"bf16\""}, false, true},
	} {
		p := compile(t, loadSpec(t, tinyScript, c.sets...), c.devices)
		rs := &runState{plan: p, opts: RunOptions{SyncVerdicts: c.sync}, log: &bytes.Buffer{}}
		if err := rs.openDevices(); err != nil {
			t.Fatal(err)
		}
		if err := rs.connect(); err != nil {
			t.Fatal(err)
		}
		for _, d := range rs.workers {
			if d.deferred != c.want {
				t.Errorf("%d devices %v (sync %v): rank %d deferred %v, want %v", c.devices, c.sets, c.sync, d.rank, d.deferred, c.want)
			}
			d.stopAsync()
		}
		rs.closeDevices()
	}
}

// TestDeferredTrainsAlike: plain training, with dropout, evaluation,
// checkpoints and gradient accumulation, on one device and on three.
func TestDeferredTrainsAlike(t *testing.T) {
	for _, devices := range []int{1, 3} {
		for _, sets := range [][]string{
			{"epochs=2"},
			{"epochs=1", "accumulate=2", "optimizer=optim.adamw(lr=0.01)", "clip_grad_norm=0.5"},
		} {
			if devices == 3 {
				sets = append(sets, "batch_size=24")
			}
			p := compile(t, loadSpec(t, dropoutScript, sets...), devices)
			a, b := runVerdicts(t, p, func(dir string) RunOptions { return RunOptions{Out: dir} })
			if a.err != nil || b.err != nil {
				t.Fatalf("%d devices %v: %v; %v", devices, sets, a.err, b.err)
			}
			sameRuns(t, strings.Join(sets, " "), a, b)
		}
	}
}

// lateNaN is random MNIST-like data whose sample 5 (with every set, every
// sample whose index is 5 modulo every) holds a NaN once after fills
// Fill calls (every rank's), and from then on.
type lateNaN struct {
	randomSet
	after, every int
	fills        atomic.Int64
}

func (s *lateNaN) Fill(idx []int, x []float32, y []int32) {
	s.randomSet.Fill(idx, x, y)
	if s.fills.Add(1) <= int64(s.after) {
		return
	}
	for i, j := range idx {
		if j == 5 || s.every > 0 && j%s.every == 5 {
			x[i*784+100] = float32(math.NaN())
		}
	}
}

var _ datasets.Dataset = (*lateNaN)(nil)

// TestDeferredNonFiniteAlike: injected non-finite steps under
// on_nonfinite = "skip" (some steps skipped, the run goes on) and "stop"
// (the same error, naming the same op or the input batch, with the same
// last checkpoint and parameters), on one device and on two.
func TestDeferredNonFiniteAlike(t *testing.T) {
	for _, devices := range []int{1, 2} {
		// skip: a NaN in sample 5 from the second epoch on; shuffled,
		// a different step of each epoch is skipped.
		s := loadSpec(t, mnistScript, "eval=None", "batch_size=16", "epochs=3")
		s.OnNonFinite = "skip"
		p := compile(t, s, devices)
		a, b := runVerdicts(t, p, func(dir string) RunOptions {
			return RunOptions{Out: dir, Train: &lateNaN{randomSet: *newMNISTLike(96), after: 6 * devices}}
		})
		if a.err != nil || b.err != nil {
			t.Fatalf("%d devices, skip: %v; %v", devices, a.err, b.err)
		}
		if !strings.Contains(a.log, "update skipped") {
			t.Errorf("%d devices, skip: no step skipped:\n%s", devices, lastLines(a.log, 8))
		}
		sameRuns(t, "skip", a, b)

		// stop: NaNs in a sixth of the samples from epoch 2's second
		// step on: a step inside the epoch fails, after epoch 1's
		// checkpoint, in the input batch; on the deferred path the step
		// after it has run when its verdict is read.
		p = compile(t, loadSpec(t, mnistScript, "eval=None", "batch_size=16", "epochs=3"), devices)
		a, b = runVerdicts(t, p, func(dir string) RunOptions {
			return RunOptions{Out: dir, Train: &lateNaN{randomSet: *newMNISTLike(96), after: 7 * devices, every: 6}}
		})
		if a.err == nil || !strings.Contains(a.err.Error(), "first in the input batch") || !strings.Contains(a.err.Error(), "the last good checkpoint is") ||
			strings.Contains(a.err.Error(), "step 12:") {
			t.Errorf("%d devices, stop: %v", devices, a.err)
		}
		sameRuns(t, "stop (input)", a, b)

		// stop: a learning rate that overflows at step 2, an op named.
		p = compile(t, loadSpec(t, dropoutScript, "optimizer=optim.sgd(lr=1e30)"), devices)
		a, b = runVerdicts(t, p, func(dir string) RunOptions { return RunOptions{Out: dir} })
		if a.err == nil || !strings.Contains(a.err.Error(), "first produced by") {
			t.Errorf("%d devices, stop: %v", devices, a.err)
		}
		sameRuns(t, "stop (op)", a, b)
	}
}

// TestDeferredNonFiniteKeepsParameters: a run stopped at a non-finite
// step keeps the parameters and optimizer state from before it on the
// deferred path too, though the step after it was under way when the
// verdict was read.
func TestDeferredNonFiniteKeepsParameters(t *testing.T) {
	p := compile(t, loadSpec(t, dropoutScript, "optimizer=optim.sgd(lr=1e30, momentum=0.5)"), 1)
	_, params1, mom1 := driveSteps(t, p, true, 1)
	for _, sync := range []bool{false, true} {
		err, params, mom := driveSteps(t, p, sync, 5)
		if err == nil || !strings.Contains(err.Error(), "epoch 1 step 2: non-finite values") {
			t.Fatalf("sync %v: %v", sync, err)
		}
		if !sameBits(params, params1) || !sameBits(mom, mom1) {
			t.Errorf("sync %v: the parameters or momentum after the stop are not step 1's", sync)
		}
	}
}

// driveSteps runs up to n optimizer steps of p's first epoch on one
// device, as runEpoch does, and returns the first error and the
// parameters and first momentum buffer the device holds then.
func driveSteps(t *testing.T, p *engine.Plan, sync bool, n int) (error, []float32, []float32) {
	t.Helper()
	var stepErr error
	var params, mom []float32
	drive(t, p, sync, n, func(rs *runState, d *worker, err error) {
		stepErr = err
		var derr error
		if params, derr = download(d, d.prog.ParamArena); derr != nil {
			t.Fatal(derr)
		}
		if mom, derr = download(d, d.prog.State[0][0]); derr != nil {
			t.Fatal(derr)
		}
	}, true)
	return stepErr, params, mom
}

// driveStepsThen runs n deferred steps (without settling the last) and
// calls then.
func driveStepsThen(t *testing.T, p *engine.Plan, n int, then func(*runState, *worker)) {
	t.Helper()
	drive(t, p, false, n, func(rs *runState, d *worker, err error) {
		if err != nil {
			t.Fatal(err)
		}
		then(rs, d)
	}, false)
}

// drive runs up to n optimizer steps of p's first epoch on one device, as
// runEpoch does (settling the last with settle), and calls then with the
// first error while the device is open.
func drive(t *testing.T, p *engine.Plan, sync bool, n int, then func(*runState, *worker, error), settle bool) {
	t.Helper()
	train, err := datasets.Load(&p.Spec.Data)
	if err != nil {
		t.Fatal(err)
	}
	rs := &runState{plan: p, opts: RunOptions{SyncVerdicts: sync}, train: train, log: io.Discard, lead: true}
	if err := rs.openDevices(); err != nil {
		t.Fatal(err)
	}
	defer rs.closeDevices()
	if err := rs.initParams(); err != nil {
		t.Fatal(err)
	}
	if rs.metrics, err = openMetrics("", false); err != nil {
		t.Fatal(err)
	}
	if err := rs.connect(); err != nil {
		t.Fatal(err)
	}
	rs.schedules = make([]*engine.Schedule, p.Spec.Epochs)
	rs.schedOnce = make([]gosync.Once, p.Spec.Epochs)
	rs.schedErr = make([]error, p.Spec.Epochs)
	sc, err := rs.schedule(0)
	if err != nil {
		t.Fatal(err)
	}
	d := rs.workers[0]
	if d.deferred == sync {
		t.Fatalf("sync %v: deferred %v", sync, d.deferred)
	}
	pr := rs.startProgress()
	d.progress = pr
	d.perEpoch, d.totalSteps = sc.Steps, p.Spec.Epochs*sc.Steps
	for g := 0; g < min(n, sc.Steps) && err == nil; g++ {
		err = rs.optimizerStep(d, pr, sc, 0, g, g+1)
	}
	if err == nil && settle {
		err = rs.settleStep(d, pr)
	}
	then(rs, d, err)
}

// TestRerunStepRepeatsIt: running a deferred step again after the next
// one has run (its batch, run constants and dropout draws restored)
// gives its loss to the bit, the parameters being the same (a learning
// rate of 1e-30 moves none, as a halted update leaves them).
func TestRerunStepRepeatsIt(t *testing.T) {
	p := compile(t, loadSpec(t, dropoutScript, "optimizer=optim.sgd(lr=1e-30)"), 1)
	var d *worker
	var rs *runState
	driveStepsThen(t, p, 3, func(r *runState, w *worker) {
		rs, d = r, w
		var rec *stepRecord
		for i := range d.recs {
			if d.recs[i].step == 2 {
				rec = &d.recs[i]
			}
		}
		if rec == nil || rec.local == 0 {
			t.Fatalf("no record of step 2 read back: %+v", d.recs)
		}
		if err := rs.rerunStep(d, rec); err != nil {
			t.Fatal(err)
		}
		got, err := d.readLoss()
		if err != nil {
			t.Fatal(err)
		}
		if got != rec.local {
			t.Errorf("step 2 run again: loss %v, first %v", got, rec.local)
		}
	})
}

// TestDeferredInterruptAndResumeAlike: an interrupt asked for at step 13
// (from OnStep, which the deferred path calls a step late) stops both
// paths after the same step with the same checkpoint, and resuming each
// run folder on its own path ends alike; fp16 (which keeps the
// synchronous path) with overflows too.
func TestDeferredInterruptAndResumeAlike(t *testing.T) {
	for _, devices := range []int{1, 2} {
		p := compile(t, loadSpec(t, dropoutScript, "epochs=2"), devices)
		fresh := func(dir string) RunOptions {
			var stop atomic.Bool
			return RunOptions{Out: dir, Interrupt: &stop, OnStep: func(m StepMetrics) {
				if m.Step == 13 {
					stop.Store(true)
				}
			}}
		}
		a, b := runVerdicts(t, p, fresh)
		if a.err != nil || b.err != nil || !a.res.Interrupted || a.res.Steps != 14 {
			t.Fatalf("%d devices: %v; %v; %+v", devices, a.err, b.err, a.res)
		}
		sameRuns(t, "interrupt", a, b)
		resume := func(v verdictRun, sync bool) verdictRun {
			var log bytes.Buffer
			res, err := Run(p, RunOptions{Resume: v.dir, Log: &log, Verbose: true, SyncVerdicts: sync})
			return verdictRun{dir: v.dir, res: res, err: err, log: log.String(), metrics: readMetrics(t, filepath.Join(v.dir, MetricsFile))}
		}
		sameRuns(t, "resume", resume(a, false), resume(b, true))
	}
	g := readLossScaleGolden(t)
	steps := len(g.Scales)
	p, init := fp16Plan(t, g.Overflow, steps, "max_steps=40")
	a, b := runVerdicts(t, p, func(dir string) RunOptions { return RunOptions{Out: dir, Init: init} })
	if a.err != nil || b.err != nil {
		t.Fatalf("fp16: %v; %v", a.err, b.err)
	}
	sameRuns(t, "fp16", a, b)
}
