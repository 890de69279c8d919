package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/spec"
)

// torchReference runs testdata/torch_mnist.py (the same Net, recipe and
// batch in PyTorch, one thread per process) once per configuration and
// round and caches its samples/s, so a benchmark can report gorun's speed
// next to PyTorch's measured in the same run, the two alternating. ok is false, with the reason, when
// /usr/bin/python3 has no torch or MNIST is missing.
func torchReference(b *testing.B, steps, batch, world, round int) (float64, bool) {
	return torchModelReference(b, "net", steps, batch, world, round)
}

// fashionDir and fortunesDir are where Debian's dataset-fashion-mnist and
// fortunes install their files.
const (
	fashionDir  = "/usr/share/datasets/fashion-mnist"
	fortunesDir = "/usr/share/games/fortunes"
)

// torchModelReference is torchReference for model "net" (the tutorial's,
// on MNIST), "resnet" (resnet_fashion.star's, on Fashion-MNIST) or "gpt"
// (gpt_text.star's, on the fortunes); round tells apart the runs of one
// configuration that a benchmark alternates with its own.
func torchModelReference(b *testing.B, model string, steps, batch, world, round int) (float64, bool) {
	key := fmt.Sprint(model, steps, batch, world, round)
	torchMu.Lock()
	defer torchMu.Unlock()
	if r, ok := torchCache[key]; ok {
		return r, r > 0
	}
	torchCache[key] = 0
	dir, err := datasets.MNISTDefaultDir()
	switch model {
	case "resnet":
		dir = fashionDir
	case "gpt":
		dir = fortunesDir
	}
	if err != nil {
		b.Logf("SKIP PyTorch reference: %v", err)
		return 0, false
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		b.Logf("SKIP PyTorch reference: /usr/bin/python3 cannot import torch (install python3-torch)")
		return 0, false
	}
	if slowBLAS() {
		b.Logf("WARNING PyTorch reference: its matrix products run on the reference BLAS (%s); install libopenblas0-pthread, or the PyTorch figures are 1.2× (MNIST) to 13× (GPT) too slow", blasPath)
	}
	cmd := exec.Command("/usr/bin/python3", "testdata/torch_mnist.py", "--model", model, "--data", dir,
		"--steps", fmt.Sprint(steps), "--batch", fmt.Sprint(batch), "--world", fmt.Sprint(world))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		b.Logf("SKIP PyTorch reference: torch_mnist.py: %v", err)
		return 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r struct {
		SamplesPerS float64 `json:"samples_per_s"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		b.Logf("SKIP PyTorch reference: bad output %q", out)
		return 0, false
	}
	torchCache[key] = r.SamplesPerS
	return r.SamplesPerS, true
}

var (
	torchMu    sync.Mutex
	torchCache = map[string]float64{}
)

// blasPath is the libblas.so.3 Debian's python3-torch loads (an
// alternatives link).
const blasPath = "/usr/lib/x86_64-linux-gnu/libblas.so.3"

// slowBLAS reports whether blasPath resolves to netlib's reference BLAS
// (libblas3, under .../blas/): python3-torch only recommends OpenBLAS, so
// an install without recommends leaves it there.
func slowBLAS() bool {
	p, err := filepath.EvalSymlinks(blasPath)
	return err == nil && filepath.Base(filepath.Dir(p)) == "blas"
}

// BenchmarkTrainMNIST measures training steps of the tutorial's Net on
// MNIST, batch 64, one device, and reports samples/s next to PyTorch 1.13
// on one thread (the same recipe) measured in the same run, the two
// alternating in rounds (pairedSpeed), and their ratio. One iteration is
// one optimizer step; run with -benchtime=300x for a figure over 300 steps.
func BenchmarkTrainMNIST(b *testing.B) {
	benchTrain(b, 1, 64)
}

// BenchmarkTrainMNISTTwoDevices trains with --devices 2 at global batch
// 128 (64 per device, DDP-style all-reduce of the mean) and with one
// device at batch 64, in the same run, and reports the two-device speed as
// a ratio to one device (2.0 is perfect scaling) and to PyTorch
// DistributedDataParallel over gloo with two processes. One iteration is
// one optimizer step of each configuration; use -benchtime=300x. The
// configurations (and DDP) alternate in rounds of b.N/5 steps (each round a
// fresh run after 10 untimed steps), so that the machine's drift between
// seconds falls on all rather than on whichever ran last.
//
// Each round also trains two independent one-device runs side by side (no
// collective between them), and independent_runs_ratio is their summed
// speed over one device's: the most any two devices can gain over one on
// this machine at the time, since they compute what the two devices do
// without ever waiting for each other. A host whose two cores slow each
// other down (shared caches and memory, a hypervisor's neighbours) shows
// it there rather than in the two-device code; what the two devices lose
// beyond it is theirs (the lock-step of synchronous data parallelism: each
// step waits for the slower rank, less what helping takes back: see
// help.go; helped_kernels/step is how many gradient kernels a step's
// devices ran for each other).
//
// ratio_to_one_device is the two configurations' speeds over all rounds;
// ratio_to_one_device_median the median of the rounds' own ratios, which a
// round that the host slowed (one of its cores taken for a while: see
// steal_%) moves less. ratio_to_independent_runs is the two devices'
// speed over the pair's (1.0: all the machine gave two runs at the time),
// pooled over the rounds, and ratio_to_independent_runs_median the median
// of the rounds' own; collective_% is the share of the two-device run's
// time that rank 0 spent in gradient collectives, waiting for the other
// rank included. steal_% is the share of the machine's CPU time its
// hypervisor gave to other guests during the benchmark (/proc/stat), 0 on
// a quiet machine; the other training benchmarks report it too.
func BenchmarkTrainMNISTTwoDevices(b *testing.B) {
	r1 := newSpeedRun(b, mnistScript, 1, 64)
	r2 := newSpeedRun(b, mnistScript, 2, 128)
	pair := [2]*speedRun{newSpeedRun(b, mnistScript, 1, 64), newSpeedRun(b, mnistScript, 1, 64)}
	ddpOK, ddpSamples, ddpSecs := true, 0.0, 0.0 // PyTorch DDP's rounds
	rounds := 1
	if b.N >= 100 {
		rounds = 5
	}
	var perRound, perPair []float64 // each round's two devices over one, and over the pair
	var steal stealMeter
	steal.start()
	b.ResetTimer()
	for i := range rounds {
		n := b.N / rounds
		if i == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		one, two := r1.round(max(n, 1)), r2.round(max(n, 1))
		perRound = append(perRound, two/one)
		if b.N >= 100 && ddpOK {
			b.StopTimer()
			sps, ok := torchReference(b, n, 128, 2, i)
			b.StartTimer()
			ddpOK = ddpOK && ok
			ddpSamples += float64(n * 128)
			ddpSecs += float64(n*128) / sps
		}
		// The pair runs with a spare P: see spareP.
		var ps0 [2]int
		var pt0 [2]float64
		for k, r := range pair {
			ps0[k], pt0[k] = r.steps, r.secs
		}
		restore := spareP(2)
		var wg sync.WaitGroup
		var errs [2]error
		for k, r := range pair {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = r.try(max(n, 1))
			}()
		}
		wg.Wait()
		restore()
		if err := errors.Join(errs[:]...); err != nil {
			b.Fatal(err)
		}
		ps := 0.0
		for k, r := range pair {
			ps += r.speedSince(ps0[k], pt0[k])
		}
		perPair = append(perPair, two/ps)
	}
	b.StopTimer()
	one, two := r1.samplesPerS(), r2.samplesPerS()
	b.ReportMetric(two, "samples/s")
	b.ReportMetric(one, "one_device_samples/s")
	b.ReportMetric(two/one, "ratio_to_one_device")
	b.ReportMetric(median(perRound), "ratio_to_one_device_median")
	reportSteal(b, &steal)
	b.ReportMetric((pair[0].samplesPerS()+pair[1].samplesPerS())/one, "independent_runs_ratio")
	b.ReportMetric(two/(pair[0].samplesPerS()+pair[1].samplesPerS()), "ratio_to_independent_runs")
	b.ReportMetric(median(perPair), "ratio_to_independent_runs_median")
	b.ReportMetric(100*r2.comm/r2.secs, "collective_%")
	b.ReportMetric(float64(r2.helped)/float64(max(r2.ranSteps, 1)), "helped_kernels/step")
	if b.N >= 100 && ddpOK {
		ref := ddpSamples / ddpSecs
		b.ReportMetric(ref, "ddp_samples/s")
		b.ReportMetric(two/ref, "ratio_to_ddp")
	}
}

// spareP raises GOMAXPROCS to busy+1 when it is lower, and returns what
// restores it. Two goroutines that each spend most of their time in long
// cgo calls (the CPU kernels) with no P idle make the Go runtime's sysmon
// take the P of whichever is inside C (after 20 µs) and wake another
// thread for it, which lands on the other busy CPU: measured here with two
// independent runs at GOMAXPROCS 2 on 2 vCPUs, 1.41× one run and about 560
// rescheduling interrupts a round, against 1.88× and about 100 with a
// third P (2 separate processes: about 2×). The two-device run itself is
// not helped by it (its ranks park and wake each step, and a spare P turns
// each wake into a spinning thread: 1.26–1.40× against 1.50–1.78×), so
// only the independent pair, the ceiling, runs with it.
func spareP(busy int) (restore func()) {
	prev := runtime.GOMAXPROCS(0)
	if prev > busy {
		return func() {}
	}
	runtime.GOMAXPROCS(busy + 1)
	return func() { runtime.GOMAXPROCS(prev) }
}

func benchTrain(b *testing.B, devices, batch int) {
	r := newSpeedRun(b, mnistScript, devices, batch)
	var steal stealMeter
	steal.start()
	b.ResetTimer()
	sps, ref, ok := pairedSpeed(b, r, "net", 100)
	b.StopTimer()
	reportSteal(b, &steal)
	b.ReportMetric(sps, "samples/s")
	if ok {
		b.ReportMetric(ref, "torch_samples/s")
		b.ReportMetric(sps/ref, "ratio_to_torch")
	}
}

// pairRounds is how many rounds pairedSpeed alternates gorun and PyTorch.
const pairRounds = 3

// pairedSpeed trains b.N steps of r in pairRounds rounds, each followed by
// as many steps of the same model, batch and devices in PyTorch (model as
// torchModelReference names it), so that the machine's drift between
// seconds falls on both; it returns the speed of each over all rounds
// (samples/s). ok is false, with no PyTorch figure, when b.N is under
// minSteps or PyTorch is skipped.
func pairedSpeed(b *testing.B, r *speedRun, model string, minSteps int) (mine, ref float64, ok bool) {
	ok = b.N >= minSteps
	var samples, secs float64 // PyTorch's
	for i := range pairRounds {
		n := b.N / pairRounds
		if i == pairRounds-1 {
			n = b.N - n*(pairRounds-1)
		}
		r.run(max(n, 1))
		if !ok {
			continue
		}
		b.StopTimer()
		sps, good := torchModelReference(b, model, n, r.batch, r.p.World, i)
		b.StartTimer()
		if !good {
			ok = false
			continue
		}
		samples += float64(n * r.batch)
		secs += float64(n*r.batch) / sps
	}
	if ok {
		ref = samples / secs
	}
	return r.samplesPerS(), ref, ok
}

// BenchmarkZero trains the MNIST Net on two devices at global batch 128
// with sync.allreduce and with sync.zero stages 1, 2 and 3 (default
// buckets; stage 3 prefetching one layer), alternating in rounds so that
// the machine's drift falls on all, and reports each one's samples/s and
// its ratio to allreduce's measured in the same run. Use -benchtime=60x
// or more.
func BenchmarkZero(b *testing.B) {
	syncs := []struct{ name, sync string }{
		{"allreduce", "sync.allreduce()"}, {"stage1", "sync.zero(stage=1)"}, {"stage2", "sync.zero(stage=2)"}, {"stage3", "sync.zero(stage=3)"},
	}
	runs := make([]*speedRun, len(syncs))
	for i, c := range syncs {
		runs[i] = newSpeedRun(b, mnistScript, 2, 128, "sync="+c.sync)
	}
	var steal stealMeter
	steal.start()
	b.ResetTimer()
	for i := range pairRounds {
		n := b.N / pairRounds
		if i == pairRounds-1 {
			n = b.N - n*(pairRounds-1)
		}
		for _, r := range runs {
			r.run(max(n, 1))
		}
	}
	b.StopTimer()
	reportSteal(b, &steal)
	ar := runs[0].samplesPerS()
	b.ReportMetric(ar, "allreduce_samples/s")
	for i, c := range syncs[1:] {
		sps := runs[i+1].samplesPerS()
		b.ReportMetric(sps, c.name+"_samples/s")
		b.ReportMetric(sps/ar, c.name+"_ratio_to_allreduce")
	}
}

// BenchmarkTrainResNet trains scripts/examples/resnet_fashion.star's
// ResNet on Fashion-MNIST on one device at batch 64 and on two at global
// batch 128, and reports both next to the same model and recipe in
// PyTorch 1.13 (one thread per process; DDP over gloo for two) measured in
// the same run, alternating in rounds (pairedSpeed). Use -benchtime=100x.
func BenchmarkTrainResNet(b *testing.B) {
	src, err := os.ReadFile("../../scripts/examples/resnet_fashion.star")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(fashionDir); err != nil {
		b.Skip("SKIP: Fashion-MNIST not found; install dataset-fashion-mnist")
	}
	r1, r2 := newSpeedRun(b, string(src), 1, 64), newSpeedRun(b, string(src), 2, 128)
	var steal stealMeter
	steal.start()
	b.ResetTimer()
	one, ref1, ok1 := pairedSpeed(b, r1, "resnet", 30)
	two, ref2, ok2 := pairedSpeed(b, r2, "resnet", 30)
	b.StopTimer()
	reportSteal(b, &steal)
	b.ReportMetric(one, "samples/s")
	b.ReportMetric(two, "two_device_samples/s")
	b.ReportMetric(two/one, "ratio_two_to_one")
	if ok1 {
		b.ReportMetric(ref1, "torch_samples/s")
		b.ReportMetric(one/ref1, "ratio_to_torch")
	}
	if ok2 {
		b.ReportMetric(ref2, "ddp_samples/s")
		b.ReportMetric(two/ref2, "ratio_to_ddp")
	}
}

// BenchmarkTrainGPT trains scripts/examples/gpt_text.star's GPT (windows
// of 64 bytes) on one device at batch 32 and on two at global batch 64,
// and reports tokens/s next to the same model and recipe in PyTorch 1.13
// (one thread per process; DDP over gloo for two) measured in the same
// run, alternating in rounds (pairedSpeed). Use -benchtime=50x or more.
func BenchmarkTrainGPT(b *testing.B) {
	src, err := os.ReadFile("../../scripts/examples/gpt_text.star")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(fortunesDir); err != nil {
		b.Skip("SKIP: the fortunes text not found; install fortunes")
	}
	const t = 64 // tokens per sample
	r1, r2 := newSpeedRun(b, string(src), 1, 32), newSpeedRun(b, string(src), 2, 64)
	var steal stealMeter
	steal.start()
	b.ResetTimer()
	one, ref1, ok1 := pairedSpeed(b, r1, "gpt", 20)
	two, ref2, ok2 := pairedSpeed(b, r2, "gpt", 20)
	b.StopTimer()
	reportSteal(b, &steal)
	b.ReportMetric(one*t, "tokens/s")
	b.ReportMetric(two*t, "two_device_tokens/s")
	b.ReportMetric(two/one, "ratio_two_to_one")
	if ok1 {
		b.ReportMetric(ref1*t, "torch_tokens/s")
		b.ReportMetric(one/ref1, "ratio_to_torch")
	}
	if ok2 {
		b.ReportMetric(ref2*t, "ddp_tokens/s")
		b.ReportMetric(two/ref2, "ratio_to_ddp")
	}
}

// speedRun is one configuration (script, devices, batch) compiled and its
// data loaded once, timed over one or more runs: two configurations can
// then alternate in rounds, so that a machine whose speed drifts between
// minutes slows both alike.
type speedRun struct {
	b     *testing.B
	s     *spec.Spec
	p     *engine.Plan
	ds    datasets.Dataset
	batch int
	steps int     // timed steps so far
	secs  float64 // their wall time
	comm  float64 // rank 0's time in collectives during them
	// helped is the gradient kernels the run's devices ran for each other
	// (helping) over ran optimizer steps, warm-up steps included.
	helped   int64
	ranSteps int
}

func newSpeedRun(b *testing.B, src string, devices, batch int, sets ...string) *speedRun {
	s := loadSpec(b, src, append([]string{fmt.Sprintf("batch_size=%d", batch), "eval=None"}, sets...)...)
	p := compile(b, s, devices)
	ds, err := datasets.Load(&s.Data)
	if err != nil {
		b.Skipf("SKIP: training data not available: %v", err)
	}
	return &speedRun{b: b, s: s, p: p, ds: ds, batch: batch}
}

// run trains a fresh run of steps timed optimizer steps after 10 untimed
// ones and adds them to r's totals.
func (r *speedRun) run(steps int) {
	if err := r.try(steps); err != nil {
		r.b.Fatal(err)
	}
}

// try is run returning its failure, for a goroutine other than the
// benchmark's.
func (r *speedRun) try(steps int) error {
	const warmup = 10 // steps not timed
	r.s.MaxSteps = steps + warmup
	var t0, t1, comm float64
	last := 0
	res, err := Run(r.p, RunOptions{Train: r.ds, OnStep: func(m StepMetrics) {
		if m.Step == warmup {
			t0 = m.Time
		}
		if m.Step > warmup {
			comm += m.CommSeconds
		}
		t1, last = m.Time, m.Step
	}})
	if err != nil {
		return err
	}
	r.helped += res.HelpedSteps
	r.ranSteps += last
	// The script's epochs may end the run before MaxSteps: count the steps
	// that ran.
	if last <= warmup {
		return fmt.Errorf("the run stopped after %d steps, within the %d warm-up steps", last, warmup)
	}
	r.steps += last - warmup
	r.secs += t1 - t0
	r.comm += comm
	return nil
}

// round runs steps timed optimizer steps as run does and returns their
// speed alone (samples/s), for a figure per round.
func (r *speedRun) round(steps int) float64 {
	s0, t0 := r.steps, r.secs
	r.run(steps)
	return r.speedSince(s0, t0)
}

// speedSince is the speed (samples/s) of the timed steps r ran since it
// had s0 of them over t0 seconds.
func (r *speedRun) speedSince(s0 int, t0 float64) float64 {
	return float64((r.steps-s0)*r.batch) / (r.secs - t0)
}

// samplesPerS is the global samples per second over the timed steps.
func (r *speedRun) samplesPerS() float64 { return float64(r.steps*r.batch) / r.secs }
