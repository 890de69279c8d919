package runner

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/ops"
)

// resnetScript is testdata/gen_resnet_golden.py's Net written with
// symbolic tensors: a block function called under nn.module scopes, a
// layer applied to a tensor, a residual +, a sequential downsample.
const resnetScript = `
def block(x, cin, cout, stride):
    conv1 = nn.conv2d(cin, cout, 3, stride = stride, padding = 1, bias = False, name = "conv1")
    bn1 = nn.batchnorm2d(cout, name = "bn1")
    conv2 = nn.conv2d(cout, cout, 3, padding = 1, bias = False, name = "conv2")
    bn2 = nn.batchnorm2d(cout, name = "bn2")
    y = nn.relu(bn1(conv1(x)))
    y = bn2(conv2(y))
    if stride != 1 or cin != cout:
        x = nn.sequential(nn.conv2d(cin, cout, 1, stride = stride, bias = False), nn.batchnorm2d(cout), name = "downsample")(x)
    return nn.relu(y + x)

x = data.input()
y = nn.relu(nn.batchnorm2d(4, name = "bn1")(nn.conv2d(1, 4, 3, padding = 1, bias = False, name = "conv1")(x)))
y = nn.module("layer1.0", block, y, 4, 4, 1)
y = nn.module("layer2.0", block, y, 4, 8, 2)
y = nn.adaptive_avgpool2d(1)(y).flatten()
y = nn.linear(8, 4, name = "fc")(y)
train(
    model = y,
    loss = "cross_entropy",
    data = data.synthetic(size = 64, shape = (1, 8, 8), classes = 4, seed = 3),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 6,
)
`

// TestResNetMatchesPyTorch runs one training step of a small ResNet with
// batch normalisation and compares the loss, every parameter gradient, the
// running statistics after the step and the eval-mode loss with PyTorch
// 1.13's (testdata/gen_resnet_golden.py). The parameter and statistic
// names must be exactly the PyTorch module's state_dict keys.
func TestResNetMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/resnet_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	type tensor struct {
		Shape []int
		Data  []float32
	}
	var golden struct {
		X              []float32
		Y              []int32
		Params         map[string]tensor
		StateDictKeys  []string `json:"state_dict_keys"`
		Loss, EvalLoss float64
		Grads          map[string][]float32
		Stats          map[string]tensor
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	golden.EvalLoss = evalLossOf(b)
	p := compile(t, loadSpec(t, resnetScript), 1)
	var names []string
	for _, prm := range p.Graph.Params {
		names = append(names, prm.Name)
	}
	for _, st := range p.Graph.Stats {
		names = append(names, st.Name)
	}
	want := slices.Clone(golden.StateDictKeys)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("state_dict names:\n gorun   %v\n PyTorch %v", names, want)
	}
	d, cd := testDevice(t, p, 0, 1)
	if err := d.dev.UploadF32(d.prog.StatArena, 0, p.InitialStats()); err != nil {
		t.Fatal(err)
	}
	for name, v := range golden.Params {
		if err := setParam(d, name, v.Shape, v.Data); err != nil {
			t.Fatal(err)
		}
	}
	ds := &fixedSet{x: golden.X, y: golden.Y, shape: []int{1, 8, 8}, classes: 4}
	idx := []int{0, 1, 2, 3, 4, 5}
	backward(t, d, ds, idx)
	if got, _ := d.readLoss(); math.Abs(got-golden.Loss) > 1e-5*math.Abs(golden.Loss) {
		t.Errorf("loss %.7f, PyTorch %.7f", got, golden.Loss)
	}
	for i, prm := range p.Graph.Params {
		g := golden.Grads[prm.Name]
		if diff := maxAbsDiff(cd.Buf(d.prog.Grads[i]).Data, g); diff > 1e-5*(1+maxAbs(g)) {
			t.Errorf("gradient of %s differs from PyTorch's by %.2e", prm.Name, diff)
		}
	}
	for i, st := range p.Graph.Stats {
		w := golden.Stats[st.Name].Data
		if diff := maxAbsDiff(cd.Buf(d.prog.Stats[i]).Data, w); diff > 1e-5*(1+maxAbs(w)) {
			t.Errorf("%s = %v, PyTorch %v", st.Name, cd.Buf(d.prog.Stats[i]).Data, w)
		}
	}
	// The same forward pass under label smoothing (train(label_smoothing)).
	ps := compile(t, loadSpec(t, resnetScript, "label_smoothing=0.1"), 1)
	ds2, _ := testDevice(t, ps, 0, 1)
	if err := ds2.dev.UploadF32(ds2.prog.StatArena, 0, ps.InitialStats()); err != nil {
		t.Fatal(err)
	}
	for name, v := range golden.Params {
		if err := setParam(ds2, name, v.Shape, v.Data); err != nil {
			t.Fatal(err)
		}
	}
	backward(t, ds2, ds, idx)
	if got, want := mustLoss(t, ds2), smoothedLossOf(b); math.Abs(got-want) > 1e-5*want {
		t.Errorf("label_smoothing 0.1: loss %.7f, PyTorch %.7f", got, want)
	}

	feed(t, d, ds, idx)
	if err := d.evalBatch(true); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.readLoss(); math.Abs(got-golden.EvalLoss) > 1e-5*math.Abs(golden.EvalLoss) {
		t.Errorf("eval loss %.7f, PyTorch %.7f", got, golden.EvalLoss)
	}
}

func evalLossOf(b []byte) float64 {
	var v struct {
		EvalLoss float64 `json:"eval_loss"`
	}
	json.Unmarshal(b, &v)
	return v.EvalLoss
}

func smoothedLossOf(b []byte) float64 {
	var v struct {
		Smoothed float64 `json:"smoothed_loss"`
	}
	json.Unmarshal(b, &v)
	return v.Smoothed
}

func mustLoss(t *testing.T, d *worker) float64 {
	t.Helper()
	l, err := d.readLoss()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}

// TestSyncBatchNormMatchesOneDevice: with nn.batchnorm2d(sync = True) the
// batch statistics are the global batch's, so 2 and 3 devices give one
// device's losses and parameters (dropout-free model) to 1e-5; plain batch
// norm on 2 devices does not (each device normalises its own half).
func TestSyncBatchNormMatchesOneDevice(t *testing.T) {
	syncBN := strings.NewReplacer(`name = "bn`, `sync = True, name = "bn`, "nn.batchnorm2d(cout)", "nn.batchnorm2d(cout, sync = True)").Replace(resnetScript)
	run := func(src string, devices int) ([]float64, []float32) {
		return stepLosses(t, src, devices, "max_steps=8", "optimizer=optim.sgd(lr=0.05, momentum=0.9)")
	}
	oneLoss, oneParams := run(syncBN, 1)
	if len(oneLoss) != 8 {
		t.Fatalf("%d step losses, want 8", len(oneLoss))
	}
	for _, n := range []int{2, 3} {
		loss, params := run(syncBN, n)
		if d := maxRelDiff64(oneLoss, loss); d > 1e-5 {
			t.Errorf("%d devices, SyncBatchNorm: losses differ from one device's by %.2e (relative)\n one %v\n %d   %v", n, d, oneLoss, n, loss)
		}
		if d := maxRelDiff(oneParams, params); d > 1e-5 {
			t.Errorf("%d devices, SyncBatchNorm: parameters differ from one device's by %.2e (relative)", n, d)
		}
	}
	plain, _ := run(resnetScript, 2)
	if d := maxRelDiff64(oneLoss, plain); d < 1e-4 {
		t.Errorf("2 devices with plain batch norm match one device (%.2e): the test cannot tell SyncBatchNorm from it", d)
	}
}

func maxRelDiff64(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i])/math.Max(math.Abs(a[i]), 1e-12))
	}
	return m
}

// wiringScript uses every autodiff rule the symbolic surface adds that
// TestResNetMatchesPyTorch does not: cat, -, *, sigmoid, tanh, leaky_relu,
// avgpool2d, softmax over a middle dimension (permutes around it), a
// shared layer, .mean, batch norm without affine parameters
// over [N, C] — with no kinks where finite differences land (leaky_relu's
// slope 0.9 keeps its kink small).
const wiringScript = `
x = data.input()
a = nn.conv2d(1, 2, 3, padding = 1, name = "a")(x)
b = nn.conv2d(1, 3, 3, padding = 1, name = "b")(x)
h = nn.cat([nn.tanh(a), nn.sigmoid(b), a * a], dim = 1)
h = nn.avgpool2d(2)(h)
h = nn.softmax(h, dim = 1) + h
h = nn.leaky_relu(h, 0.9)
m = h.mean((2, 3))
shared = nn.linear(7, 7, name = "shared")
m = shared(nn.tanh(shared(m))) - m * nn.sigmoid(m)
m = nn.batchnorm1d(7, affine = False, name = "bn")(m)
train(model = nn.linear(7, 4, name = "fc")(m), loss = "cross_entropy",
      data = data.synthetic(size = 64, shape = (1, 8, 8), classes = 4, seed = 3),
      optimizer = optim.sgd(lr = 0.1), batch_size = 6)
`

// TestSymbolicGradientFiniteDifferences checks the whole compiled backward
// pass of wiringScript against central differences of the loss.
func TestSymbolicGradientFiniteDifferences(t *testing.T) {
	p := compile(t, loadSpec(t, wiringScript), 1)
	d, cd := testDevice(t, p, 0, 3)
	if err := d.dev.UploadF32(d.prog.StatArena, 0, p.InitialStats()); err != nil {
		t.Fatal(err)
	}
	ds, err := datasets.Load(&p.Spec.Data)
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{3, 1, 4, 1, 5}
	lossAt := func() float64 {
		backward(t, d, ds, idx) // batch statistics: the loss of training mode
		return mustLoss(t, d)
	}
	lossAt()
	grads := append([]float32(nil), cd.Buf(d.prog.GradArena).Data...)
	params := cd.Buf(d.prog.ParamArena).Data
	if rel := gradError(params, grads, lossAt); rel > 2e-3 {
		t.Errorf("relative gradient error %.2e", rel)
	}
}

// TestResumeWithBatchNorm: stopping a ResNet run inside an epoch and
// resuming it ends bit for bit where an uninterrupted run does, running
// statistics included (they travel in the checkpoint; with
// broadcast_buffers rank 0's reach every device).
func TestResumeWithBatchNorm(t *testing.T) {
	for _, devices := range []int{1, 2} {
		sets := []string{"epochs=2", "optimizer=optim.adam(lr=0.01)", "eval=data.synthetic(size=30, shape=(1, 8, 8), classes=4, seed=3, split='test')"}
		run := func(dir, resume string, extra ...string) *Result {
			p := compile(t, loadSpec(t, resnetScript, append(sets, extra...)...), devices)
			res, err := Run(p, RunOptions{Out: dir, Resume: resume})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		whole := run(t.TempDir(), "")
		dir := t.TempDir()
		run(dir, "", "max_steps=13")
		resumed := run("", dir)
		if d := maxRelDiff(whole.Params[0], resumed.Params[0]); d != 0 {
			t.Errorf("%d devices: resumed parameters differ from an uninterrupted run's by %.2e", devices, d)
		}
		if whole.TestLoss != resumed.TestLoss {
			t.Errorf("%d devices: test loss %v after resuming, %v uninterrupted (the running statistics differ)", devices, resumed.TestLoss, whole.TestLoss)
		}
	}
}

// TestSoftmaxOverAnyDimension checks the gradient of (log-)softmax over
// dimension 1 of [N, C, H, W] (a permute to the last dimension and back)
// and of x.transpose against central differences.
func TestSoftmaxOverAnyDimension(t *testing.T) {
	for _, expr := range []string{"nn.log_softmax(a, dim = 1)", "nn.softmax(a, dim = -3)", "nn.log_softmax(a, dim = 2)", "a.transpose(1, 3)"} {
		src := strings.Replace(`
x = data.input()
a = nn.conv2d(1, 3, 3, padding = 1, name = "a")(x)
train(model = nn.linear(192, 4, name = "fc")(EXPR.flatten()), loss = "cross_entropy",
      data = data.synthetic(size = 64, shape = (1, 8, 8), classes = 4, seed = 3),
      optimizer = optim.sgd(lr = 0.1), batch_size = 6)
`, "EXPR", expr, 1)
		p := compile(t, loadSpec(t, src), 1)
		d, cd := testDevice(t, p, 0, 3)
		ds, err := datasets.Load(&p.Spec.Data)
		if err != nil {
			t.Fatal(err)
		}
		lossAt := func() float64 { backward(t, d, ds, []int{3, 1, 4, 1, 5}); return mustLoss(t, d) }
		lossAt()
		grads := append([]float32(nil), cd.Buf(d.prog.GradArena).Data...)
		if rel := gradError(cd.Buf(d.prog.ParamArena).Data, grads, lossAt); rel > 1e-3 {
			t.Errorf("%s: relative gradient error %.2e", expr, rel)
		}
	}
}

// TestSoftmaxOverMiddleDimensionForward: nn.softmax(x, dim = 1) of
// [N, 3, 4] normalises over the 3 (each column sums to 1), as
// torch.softmax(x, dim=1), computed here by hand.
func TestSoftmaxOverMiddleDimensionForward(t *testing.T) {
	p := compile(t, loadSpec(t, `
x = data.input()
s = nn.softmax(x, dim = 1, name = "s")
train(model = nn.linear(12, 4, name = "fc")(s.flatten()), loss = "cross_entropy",
      data = data.synthetic(size = 16, shape = (3, 4), classes = 4, seed = 3),
      optimizer = optim.sgd(lr = 0.1), batch_size = 4)
`), 1)
	d, cd := testDevice(t, p, 0, 3)
	ds, err := datasets.Load(&p.Spec.Data)
	if err != nil {
		t.Fatal(err)
	}
	backward(t, d, ds, []int{0, 1, 2, 3})
	var out *engine.Buffer
	for _, b := range d.prog.Buffers {
		if b.Name == "s" {
			out = b
		}
	}
	if out == nil {
		t.Fatal("no buffer s")
	}
	x, y := cd.Buf(d.prog.Input).Data, cd.Buf(out).Data
	for n := range 4 {
		for w := range 4 {
			var sum float64
			for c := range 3 {
				sum += math.Exp(float64(x[n*12+c*4+w]))
			}
			for c := range 3 {
				want := math.Exp(float64(x[n*12+c*4+w])) / sum
				if got := float64(y[n*12+c*4+w]); math.Abs(got-want) > 1e-6 {
					t.Fatalf("sample %d, [%d %d]: %v, want %v", n, c, w, got, want)
				}
			}
		}
	}
}

// TestFusionMatchesUnfused: the plan fuses every batch norm that feeds a
// ReLU (and each block's bn2 + shortcut + ReLU) into one step, and the
// backward Add of a block input's two gradients into the ReLU gradient
// that reads it, and trains and evaluates bit for bit as the unfused plan
// (cluster.fusion = false) does, on one device and two.
func TestFusionMatchesUnfused(t *testing.T) {
	sets := []string{"epochs=2", "optimizer=optim.sgd(lr=0.05, momentum=0.9)", "eval=data.synthetic(size=30, shape=(1, 8, 8), classes=4, seed=3, split='test')"}
	// count returns the forward ReLU, Add and fused batch norm steps, and
	// the backward Add and ReLUGrad-of-a-sum steps.
	count := func(p *engine.Plan) (n [5]int) {
		for _, st := range p.Devices[0].Steps {
			fwd := st.Phase == engine.PhaseForward
			switch {
			case fwd && st.Op == ops.ReLU:
				n[0]++
			case fwd && st.Op == ops.Add:
				n[1]++
			case fwd && st.Op == ops.BatchNormNorm && st.Attrs.ReLU:
				n[2]++
			case !fwd && st.Op == ops.Add:
				n[3]++
			case !fwd && st.Op == ops.ReLUGrad && len(st.In) > 2:
				n[4]++
			}
		}
		return
	}
	for _, devices := range []int{1, 2} {
		fused, plain, pf, pp := trainFusedAndPlain(t, resnetScript, sets, devices)
		const what = "forward ReLU, Add and fused batch norm steps, backward Add and ReLUGrad of a sum"
		if n := count(pf); n != [5]int{0, 0, 5, 0, 2} {
			t.Errorf("fused plan: %v %s; want [0 0 5 0 2]", n, what)
		}
		if n := count(pp); n != [5]int{5, 2, 0, 2, 0} {
			t.Errorf("cluster.fusion = false: %v %s; want [5 2 0 2 0]", n, what)
		}
		for i := range fused.Params {
			if d := maxRelDiff(fused.Params[i], plain.Params[i]); d != 0 {
				t.Errorf("%d devices: rank %d's parameters differ from the unfused plan's by %.2e", devices, i, d)
			}
		}
		if fused.TestLoss != plain.TestLoss {
			t.Errorf("%d devices: test loss %v fused, %v unfused", devices, fused.TestLoss, plain.TestLoss)
		}
	}
}
