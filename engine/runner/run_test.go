package runner

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/engine/spec"
	"gorun/script"
)

// loadSpec evaluates a script held in memory.
func loadSpec(t testing.TB, src string, sets ...string) *spec.Spec {
	t.Helper()
	var ov []script.Override
	for _, s := range sets {
		o, err := script.ParseOverride(s)
		if err != nil {
			t.Fatal(err)
		}
		ov = append(ov, o)
	}
	s, err := script.Load("/t/train.star", script.WithFileReader(memFile(src)), script.WithOverrides(ov...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type memFile string

func (m memFile) ReadFile(path string) ([]byte, error) {
	if path == "/t/train.star" {
		return []byte(m), nil
	}
	return nil, os.ErrNotExist
}

func compile(t testing.TB, s *spec.Spec, devices int) *engine.Plan {
	t.Helper()
	return compileWith(t, s, devices)
}

// compileWith is compile on a cluster whose keys are set as --set sets
// them: "cluster.fusion=false", "cpu.help=false".
func compileWith(t testing.TB, s *spec.Spec, devices int, keys ...string) *engine.Plan {
	t.Helper()
	c := engine.DefaultCluster()
	c.Devices = devices
	for _, kv := range keys {
		k, v, _ := strings.Cut(kv, "=")
		if err := c.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clusterSets splits --set style arguments into the script's and the
// cluster's (engine.IsClusterKey).
func clusterSets(sets []string) (script, cluster []string) {
	for _, s := range sets {
		if k, _, _ := strings.Cut(s, "="); engine.IsClusterKey(k) {
			cluster = append(cluster, s)
		} else {
			script = append(script, s)
		}
	}
	return script, cluster
}

// mnistScript is the tutorial's Net, with placeholders for tests to vary.
const mnistScript = `
model = nn.sequential(
    nn.conv2d(1, 10, kernel = 5, name = "conv1"),
    nn.maxpool2d(2),
    nn.relu(),
    nn.conv2d(10, 20, kernel = 5, name = "conv2"),
    nn.dropout2d(0.5),
    nn.maxpool2d(2),
    nn.relu(),
    nn.flatten(),
    nn.linear(320, 50, name = "fc1"),
    nn.relu(),
    nn.dropout(0.5),
    nn.linear(50, 10, name = "fc2"),
    nn.log_softmax(),
)
train(
    model = model,
    loss = "nll",
    data = data.mnist(split = "train"),
    eval = data.mnist(split = "test"),
    optimizer = optim.sgd(lr = 0.01, momentum = 0.5),
    batch_size = 64,
    epochs = 1,
    seed = 1234,
)
`

// tinyScript is a small model over blobs (1×8×8 images, 4 classes).
const tinyScript = `
train(
    model = nn.sequential(
        nn.conv2d(1, 3, kernel = 3, padding = 1, name = "conv"),
        nn.relu(),
        nn.maxpool2d(2),
        nn.flatten(),
        nn.linear(48, 4, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.synthetic(size = 512, shape = (1, 8, 8), classes = 4, noise = 1.0, seed = 3),
    eval = data.synthetic(size = 200, shape = (1, 8, 8), classes = 4, noise = 1.0, seed = 3, split = "test"),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.5),
    batch_size = 16,
    epochs = 2,
    seed = 7,
)
`

// testDevice opens a CPU device for rank r of p, its parameters
// initialised from seed.
func testDevice(t testing.TB, p *engine.Plan, r int, seed int64) (*worker, *cpu.Device) {
	t.Helper()
	dev, err := cpu.Backend{}.Open(r, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog := p.Devices[r]
	if err := dev.Load(prog); err != nil {
		t.Fatal(err)
	}
	if err := dev.UploadF32(prog.ParamArena, 0, p.InitialParams(seed)); err != nil {
		t.Fatal(err)
	}
	d := &worker{rank: r, prog: prog, dev: dev, world: p.World}
	d.rc.First, d.rc.Last = true, true
	return d, dev.(*cpu.Device)
}

// feed gathers samples idx of ds into d's input and target.
func feed(t testing.TB, d *worker, ds datasets.Dataset, idx []int) {
	t.Helper()
	data, err := d.dev.LoadData(ds)
	if err != nil {
		t.Fatal(err)
	}
	d.dev.SetBatch(len(idx))
	if err := d.dev.Gather(data, idx, d.prog.Input, d.prog.Target); err != nil {
		t.Fatal(err)
	}
}

// backward runs one micro-batch's forward and backward passes on idx.
func backward(t *testing.T, d *worker, ds datasets.Dataset, idx []int) {
	t.Helper()
	feed(t, d, ds, idx)
	d.rc.LossScale = 1 / float64(len(idx))
	for _, st := range d.prog.Steps {
		if st.Phase == engine.PhaseUpdate {
			break
		}
		if err := d.exec(st); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelGradientFiniteDifferences checks the compiled backward pass
// (autodiff, views, the gradient arena, a batch smaller than planned)
// against central differences of the loss, on a model without kinks
// (ReLU and max-pooling make finite differences unreliable; the test
// against PyTorch below covers them).
func TestModelGradientFiniteDifferences(t *testing.T) {
	smooth := strings.NewReplacer("nn.relu(),", "", "nn.maxpool2d(2),", "", "nn.linear(48, 4", "nn.linear(192, 4").Replace(tinyScript)
	for _, loss := range []string{"nll", "cross_entropy"} {
		src := smooth
		if loss == "cross_entropy" {
			src = strings.Replace(src, "nn.log_softmax(),", "nn.softmax(), nn.log_softmax(),", 1)
		}
		p := compile(t, loadSpec(t, src, "loss="+loss), 1)
		d, cd := testDevice(t, p, 0, 3)
		ds, err := datasets.Load(&p.Spec.Data)
		if err != nil {
			t.Fatal(err)
		}
		backward(t, d, ds, []int{3, 1, 4, 1, 5}) // 5 < the planned 16
		grads := append([]float32(nil), cd.Buf(d.prog.GradArena).Data...)
		params := cd.Buf(d.prog.ParamArena).Data
		lossAt := func() float64 {
			if err := d.evalBatch(true); err != nil {
				t.Fatal(err)
			}
			l, err := d.readLoss()
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		if rel := gradError(params, grads, lossAt); rel > 1e-3 {
			t.Errorf("%s: relative gradient error %.2e", loss, rel)
		}
	}
}

// gradError is the relative error ‖fd − grads‖/‖fd‖ of grads against
// central differences (step 1e-2) of lossAt over every element of params.
func gradError(params, grads []float32, lossAt func() float64) float64 {
	var num, den float64
	for i := range params {
		old := params[i]
		const h = 1e-2
		params[i] = old + h
		lp := lossAt()
		params[i] = old - h
		lm := lossAt()
		params[i] = old
		fd := (lp - lm) / (2 * h)
		num += (fd - float64(grads[i])) * (fd - float64(grads[i]))
		den += fd * fd
	}
	return math.Sqrt(num / den)
}

// stepLosses trains the script src on devices (with the --set sets) into
// a temporary run folder and returns every step's loss and rank 0's final
// parameters.
func stepLosses(t *testing.T, src string, devices int, sets ...string) ([]float64, []float32) {
	t.Helper()
	dir := t.TempDir()
	p := compile(t, loadSpec(t, src, sets...), devices)
	res, err := Run(p, RunOptions{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
		if m["kind"] == "step" {
			losses = append(losses, m["loss"].(float64))
		}
	}
	return losses, res.Params[0]
}

// TestModelGradientMatchesPyTorch compares every parameter gradient of a
// conv → relu → maxpool → linear model with PyTorch 1.13's
// (testdata/gen_model_grad.py), under NLL and cross-entropy, and with
// nn.silu in place of nn.relu.
func TestModelGradientMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/model_grad_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		X      []float32
		Y      []int32
		Params map[string]struct {
			Shape []int
			Data  []float32
		}
		Cases map[string]struct {
			Loss  float64
			Grads map[string][]float32
		}
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	if _, ok := golden.Cases["nll_silu"]; !ok || len(golden.Cases) != 3 {
		t.Fatalf("golden cases %v: want nll, cross_entropy and nll_silu", golden.Cases)
	}
	for name, want := range golden.Cases {
		src, loss := tinyScript, name
		switch name {
		case "cross_entropy":
			src = strings.Replace(src, "nn.log_softmax(),", "", 1)
		case "nll_silu":
			src, loss = strings.Replace(src, "nn.relu(),", "nn.silu(),", 1), "nll"
		}
		p := compile(t, loadSpec(t, src, "loss="+loss), 1)
		d, cd := testDevice(t, p, 0, 1)
		for name, v := range golden.Params {
			if err := setParam(d, name, v.Shape, v.Data); err != nil {
				t.Fatal(err)
			}
		}
		ds := &fixedSet{x: golden.X, y: golden.Y, shape: []int{1, 8, 8}, classes: 4}
		backward(t, d, ds, []int{0, 1, 2, 3, 4})
		if got, _ := d.readLoss(); math.Abs(got-want.Loss) > 1e-6*math.Abs(want.Loss) {
			t.Errorf("%s: loss %.7f, PyTorch %.7f", name, got, want.Loss)
		}
		for i, prm := range p.Graph.Params {
			if diff := maxAbsDiff(cd.Buf(d.prog.Grads[i]).Data, want.Grads[prm.Name]); diff > 1e-6 {
				t.Errorf("%s: gradient of %s differs from PyTorch's by %.2e", name, prm.Name, diff)
			}
		}
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// fixedSet serves given samples.
type fixedSet struct {
	x       []float32
	y       []int32
	shape   []int
	classes int
}

func (s *fixedSet) Name() string       { return "fixed" }
func (s *fixedSet) Len() int           { return len(s.y) }
func (s *fixedSet) SampleShape() []int { return s.shape }
func (s *fixedSet) NumClasses() int    { return s.classes }
func (s *fixedSet) Labels() []int32    { return s.y }
func (s *fixedSet) Fill(idx []int, x []float32, y []int32) {
	n := len(s.x) / len(s.y)
	for i, j := range idx {
		copy(x[i*n:(i+1)*n], s.x[j*n:(j+1)*n])
		y[i] = s.y[j]
	}
}

func runTiny(t *testing.T, dir string, sets ...string) *Result {
	t.Helper()
	p := compile(t, loadSpec(t, tinyScript, sets...), 1)
	res, err := Run(p, RunOptions{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTrainingLossFalls(t *testing.T) {
	dir := t.TempDir()
	res := runTiny(t, dir)
	recs := readMetrics(t, filepath.Join(dir, MetricsFile))
	var steps []map[string]any
	kinds := map[string]int{}
	for _, r := range recs {
		kinds[r["kind"].(string)]++
		if r["kind"] == "step" {
			steps = append(steps, r)
		}
	}
	if kinds["step"] != 64 || kinds["epoch"] != 2 || kinds["eval"] != 2 || kinds["summary"] != 1 {
		t.Fatalf("metrics kinds = %v, want 64 steps (2 epochs × 512/16), 2 epochs, 2 evals, 1 summary", kinds)
	}
	first := steps[0]["loss"].(float64)
	last := steps[len(steps)-1]["loss"].(float64)
	if !(last < first/2) {
		t.Errorf("loss went from %.3f to %.3f; want it to fall by half", first, last)
	}
	if res.TestAccuracy < 0.9 {
		t.Errorf("test accuracy %.3f on synthetic data, want ≥ 0.9", res.TestAccuracy)
	}
	sum := recs[len(recs)-1]
	for _, k := range []string{"train_samples_per_s", "test_accuracy", "wall_seconds", "peak_rss_bytes"} {
		if v, ok := sum[k].(float64); !ok || v <= 0 {
			t.Errorf("summary %s = %v", k, sum[k])
		}
	}
	for _, k := range []string{"step", "epoch", "loss", "lr", "samples_per_s", "comm_seconds", "time"} {
		if _, ok := steps[0][k]; !ok {
			t.Errorf("step line lacks %q: %v", k, steps[0])
		}
	}
}

// TestDeterministic: with a fixed seed, two runs write the same metrics
// (times aside) bit for bit.
func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	runTiny(t, a, "epochs=1")
	runTiny(t, b, "epochs=1")
	strip := func(dir string) string {
		var out []string
		for _, r := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			for _, k := range []string{"time", "samples_per_s", "seconds", "train_seconds", "wall_seconds", "train_samples_per_s", "peak_rss_bytes", "comm_seconds", "data_wait_seconds"} {
				delete(r, k)
			}
			out = append(out, mustJSON(r))
		}
		return strings.Join(out, "\n")
	}
	if sa, sb := strip(a), strip(b); sa != sb {
		t.Errorf("two runs with the same seed differ:\n%s\n---\n%s", sa, sb)
	}
	// A different seed gives a different run.
	c := t.TempDir()
	runTiny(t, c, "epochs=1", "seed=8")
	if strip(a) == strip(c) {
		t.Error("seeds 7 and 8 gave identical runs")
	}
}

func TestMaxStepsAndAccumulate(t *testing.T) {
	res := runTiny(t, "", "max_steps=5")
	if res.Steps != 5 {
		t.Errorf("max_steps=5 took %d steps", res.Steps)
	}
	res = runTiny(t, "", "accumulate=4", "epochs=1")
	if res.Steps != 8 || res.Samples != 512 {
		t.Errorf("accumulate=4: %d steps over %d samples, want 8 over 512", res.Steps, res.Samples)
	}
}

// TestAccumulateEqualsBigBatch: K micro-batches of B per step give the
// same parameters as one batch of K·B (no dropout, same sample order).
func TestAccumulateEqualsBigBatch(t *testing.T) {
	run := func(sets ...string) []float32 {
		p := compile(t, loadSpec(t, tinyScript, append(sets, "shuffle=False", "epochs=1")...), 1)
		res, err := Run(p, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Params[0]
	}
	a := run("batch_size=64", "data.size=256")
	b := run("batch_size=16", "accumulate=4", "data.size=256")
	if d := maxRelDiff(a, b); d > 1e-5 {
		t.Errorf("accumulate=4 × 16 vs batch 64: max relative difference %.2e", d)
	}
}

// maxRelDiff is the largest elementwise |a-b| / max(|a|, |b|, 0.01): a
// relative difference, except that values closer to zero than 0.01 (a
// few percent of these models' weights) are compared absolutely, as float32
// rounding of a sum near zero has no meaningful relative size.
func maxRelDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		s := math.Max(math.Max(math.Abs(float64(a[i])), math.Abs(float64(b[i]))), 0.01)
		m = math.Max(m, d/s)
	}
	return m
}

// TestStepAllocatesNothing: a steady-state training step, data feeding
// included, allocates nothing.
func TestStepAllocatesNothing(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 1)
	d, _ := testDevice(t, p, 0, 1)
	ds := newMNISTLike(256)
	data, err := d.dev.LoadData(ds)
	if err != nil {
		t.Fatal(err)
	}
	shards, _, err := p.Shards(0, ds)
	if err != nil {
		t.Fatal(err)
	}
	sc := engine.NewSchedule(shards, p.LocalBatch, "zero")
	step := 0
	run := func() {
		idx := sc.Slice(0, step%sc.Steps)
		d.dev.SetBatch(len(idx))
		if err := d.dev.Gather(data, idx, d.prog.Input, d.prog.Target); err != nil {
			t.Fatal(err)
		}
		d.rc.LossScale = 1 / float64(len(idx))
		d.rc.Step = step + 1
		if err := d.runStep(true, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.readLoss(); err != nil {
			t.Fatal(err)
		}
		step++
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Errorf("a training step allocates %.1f times", n)
	}
	m, err := openMetrics(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	sm := StepMetrics{Step: 1, Loss: 0.5}
	if n := testing.AllocsPerRun(20, func() { m.step(&sm) }); n != 0 {
		t.Errorf("writing a step line allocates %.1f times", n)
	}
}

// newMNISTLike is random data shaped like MNIST, for tests that need no
// real digits.
func newMNISTLike(n int) *randomSet {
	r := rand.New(rand.NewPCG(9, 9))
	s := &randomSet{x: make([]float32, n*784), labels: make([]int32, n)}
	for i := range s.x {
		s.x[i] = float32(r.NormFloat64())
	}
	for i := range s.labels {
		s.labels[i] = int32(r.IntN(10))
	}
	return s
}

type randomSet struct {
	x      []float32
	labels []int32
}

func (s *randomSet) Name() string       { return "random" }
func (s *randomSet) Len() int           { return len(s.labels) }
func (s *randomSet) SampleShape() []int { return []int{1, 28, 28} }
func (s *randomSet) NumClasses() int    { return 10 }
func (s *randomSet) Labels() []int32    { return s.labels }
func (s *randomSet) Fill(idx []int, x []float32, y []int32) {
	for i, j := range idx {
		copy(x[i*784:(i+1)*784], s.x[j*784:(j+1)*784])
		y[i] = s.labels[j]
	}
}

func readMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: bad line %q: %v", path, line, err)
		}
		out = append(out, m)
	}
	return out
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
