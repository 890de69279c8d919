package runner

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/spec"
	"gorun/safetensors"
)

// TestRegressionMSE trains nn.linear on float targets from data.tensors
// with loss = "mse": the first step's loss is PyTorch's mse_loss of the
// initial parameters (computed here by hand), training drives it down to
// the noise level, and evaluation reports the loss (no accuracy).
func TestRegressionMSE(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	const n, in, out = 256, 4, 2
	w := [out][in]float64{{1, -2, 0.5, 3}, {0, 1, 1, -1}}
	x, y := make([]float32, n*in), make([]float32, n*out)
	for i := range n {
		for j := range in {
			x[i*in+j] = float32(r.NormFloat64())
		}
		for o := range out {
			s := 0.3 + 0.01*r.NormFloat64()
			for j := range in {
				s += w[o][j] * float64(x[i*in+j])
			}
			y[i*out+o] = float32(s)
		}
	}
	path := filepath.Join(dir, "reg.safetensors")
	if err := safetensors.WriteFile(path, []safetensors.Tensor{
		safetensors.F32("x", []int{n, in}, x), safetensors.F32("y", []int{n, out}, y)}, nil); err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(`
train(
    model = nn.linear(4, 2, name = "fc")(data.input()),
    loss = "mse",
    data = data.tensors("PATH", x = "x", y = "y"),
    eval = data.tensors("PATH", x = "x", y = "y", limit = 100),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 32,
    epochs = 20,
    shuffle = False,
)
`, "PATH", path)
	p := compile(t, loadSpec(t, src), 2)
	init := p.InitialParams(p.Spec.Seed)
	// The first step's loss: the first 32 samples under the initial
	// parameters (fc.weight [2 4], then fc.bias [2]).
	var want float64
	for i := range 32 {
		for o := range out {
			s := float64(init[in*out+o])
			for j := range in {
				s += float64(init[o*in+j]) * float64(x[i*in+j])
			}
			d := s - float64(y[i*out+o])
			want += d * d / out
		}
	}
	want /= 32
	runDir := filepath.Join(dir, "run")
	res, err := Run(p, RunOptions{Out: runDir})
	if err != nil {
		t.Fatal(err)
	}
	var first float64
	var evals int
	for _, m := range readMetrics(t, filepath.Join(runDir, MetricsFile)) {
		if m["kind"] == "step" && m["step"].(float64) == 1 {
			first = m["loss"].(float64)
		}
		if m["kind"] == "eval" {
			evals++
			if m["accuracy"] != nil {
				t.Errorf("eval line of a regression run has accuracy %v", m["accuracy"])
			}
		}
	}
	if math.Abs(first-want) > 1e-5*want {
		t.Errorf("first step loss %.7f, mean squared error of the initial parameters %.7f", first, want)
	}
	if evals != 20 || !(res.TestLoss < 1e-3) || !math.IsNaN(res.TestAccuracy) {
		t.Errorf("%d evals, test loss %g, accuracy %g: want 20, below 1e-3, NaN", evals, res.TestLoss, res.TestAccuracy)
	}
	if _, err := os.Stat(filepath.Join(runDir, BestFile)); err != nil {
		t.Errorf("no best.safetensors for a regression run: %v", err)
	}
	// A classification loss on float targets, and mse on class labels, are refused.
	if _, err := compileErr(loadSpec(t, strings.Replace(src, `loss = "mse"`, `loss = "cross_entropy"`, 1)), 1); err == nil ||
		!strings.Contains(err.Error(), `the data have float targets of shape [2] (regression): use loss = "mse"`) {
		t.Errorf("cross_entropy on float targets: %v", err)
	}
	if _, err := compileErr(loadSpec(t, strings.Replace(src, `nn.linear(4, 2`, `nn.linear(4, 3`, 1)), 1); err == nil ||
		!strings.Contains(err.Error(), "the model's output has shape [32 3], want [N 2]") {
		t.Errorf("output shape: %v", err)
	}
	if _, err := compileErr(loadSpec(t, tinyScript, "loss=mse"), 1); err == nil || !strings.Contains(err.Error(), "mse needs float targets") {
		t.Errorf("mse on class labels: %v", err)
	}
}

func compileErr(s *spec.Spec, devices int) (*engine.Plan, error) {
	c := engine.DefaultCluster()
	c.Devices = devices
	return engine.Compile(s, c)
}

// TestScheduleDrivesTheUpdate: the schedule's learning rate is the one the
// optimizer uses (one step under a warm-up starting at half the rate
// equals one step at half the rate) and the one metrics.jsonl logs.
func TestScheduleDrivesTheUpdate(t *testing.T) {
	warm := trained(t, 2, "max_steps=1", "optimizer=optim.sgd(lr=0.1, momentum=0.5)", "schedule=sched.linear_warmup(steps=5, start_factor=0.5)")[0]
	half := trained(t, 2, "max_steps=1", "optimizer=optim.sgd(lr=0.05, momentum=0.5)")[0]
	if d := maxRelDiff(warm, half); d != 0 {
		t.Errorf("warm-up step 1 differs from a step at lr 0.05 by %.2e", d)
	}
	dir := t.TempDir()
	p := compile(t, loadSpec(t, tinyScript, "schedule=sched.cosine(min_lr=0.01)", "eval=None"), 1)
	if _, err := Run(p, RunOptions{Out: dir}); err != nil {
		t.Fatal(err)
	}
	total := 2 * 512 / 16
	n := 0
	for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
		if m["kind"] != "step" {
			continue
		}
		n++
		step := int(m["step"].(float64))
		if want := 0.01 + (0.1-0.01)*(1+math.Cos(math.Pi*float64(step-1)/float64(total)))/2; math.Abs(m["lr"].(float64)-want) > 1e-12 {
			t.Errorf("step %d logs lr %v, want %v", step, m["lr"], want)
		}
	}
	if n != total {
		t.Errorf("%d step lines, want %d", n, total)
	}
}

// TestParamGroups: optim.group exempts the matching parameters (here the
// biases) from AdamW's weight decay and leaves the others as they were
// (one step: later ones would see the other parameters' changes).
func TestParamGroups(t *testing.T) {
	p := compile(t, loadSpec(t, tinyScript), 1)
	plain := trained(t, 1, "max_steps=1", "optimizer=optim.adamw(lr=0.01, weight_decay=0.5)")[0]
	grouped := trained(t, 1, "max_steps=1", "optimizer=optim.adamw(lr=0.01, weight_decay=0.5, groups=[optim.group(['*.bias'], weight_decay=0)])")[0]
	nodecay := trained(t, 1, "max_steps=1", "optimizer=optim.adamw(lr=0.01, weight_decay=0)")[0]
	prog := p.Devices[0]
	for i, prm := range p.Graph.Params {
		b := prog.Params[i]
		at := func(v []float32) []float32 { return v[b.Offset-prog.ParamArena.Offset:][:b.Elems()] }
		want := plain
		if prm.Bias {
			want = nodecay
		}
		if d := maxRelDiff(at(grouped), at(want)); d != 0 {
			t.Errorf("%s: differs from the run it should match by %.2e", prm.Name, d)
		}
		if d := maxRelDiff(at(plain), at(nodecay)); d == 0 {
			t.Errorf("%s: weight decay changed nothing: the test cannot tell groups apart", prm.Name)
		}
	}
}

// TestClipGradNorm: one plain SGD step with clip_grad_norm moves the
// parameters by exactly lr·max_norm when the gradient is longer, on one
// device and on two (the norm is taken after the all-reduce); a max_norm
// above the gradient's norm changes nothing.
func TestClipGradNorm(t *testing.T) {
	init := trained(t, 1, "max_steps=1", "optimizer=optim.sgd(lr=1e-30)")[0]
	free := trained(t, 1, "max_steps=1", "optimizer=optim.sgd(lr=0.1)")[0]
	moved := func(p []float32) float64 {
		var s float64
		for i := range p {
			d := float64(p[i]) - float64(init[i])
			s += d * d
		}
		return math.Sqrt(s)
	}
	if got := moved(free); got < 0.1*0.05 {
		t.Fatalf("an unclipped step moves %.3g: too little for max_norm 0.05 to bite", got)
	}
	for _, n := range []int{1, 2} {
		clipped := trained(t, n, "max_steps=1", "optimizer=optim.sgd(lr=0.1)", "clip_grad_norm=0.05")[0]
		if got := moved(clipped); math.Abs(got-0.1*0.05) > 1e-4*0.1*0.05 {
			t.Errorf("%d devices: a clipped step moves %.7g, want lr·max_norm = %.7g", n, got, 0.1*0.05)
		}
	}
	loose := trained(t, 1, "max_steps=1", "optimizer=optim.sgd(lr=0.1)", "clip_grad_norm=1e6")[0]
	if d := maxRelDiff(loose, free); d != 0 {
		t.Errorf("clip_grad_norm above the norm changed the step by %.2e", d)
	}
}
