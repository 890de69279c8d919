package runner

import (
	"testing"

	"gorun/engine"
	"gorun/ops"
)

// convPoolScript has a first convolution (padding 1) pooled without a ReLU
// after it, so that the fusion takes the convolution and the pooling only.
const convPoolScript = `
model = nn.sequential(
    nn.conv2d(1, 4, kernel = 3, padding = 1, name = "c1"),
    nn.maxpool2d(2),
    nn.conv2d(4, 6, kernel = 3, name = "c2"),
    nn.relu(),
    nn.flatten(),
    nn.linear(24, 4, name = "fc"),
    nn.log_softmax(),
)
train(
    model = model,
    loss = "nll",
    data = data.synthetic(size = 96, shape = (1, 8, 8), classes = 4, seed = 2),
    eval = data.synthetic(size = 30, shape = (1, 8, 8), classes = 4, seed = 3, split = "test"),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.9),
    batch_size = 24,
    epochs = 2,
    seed = 5,
)
`

// TestConvPoolFusionMatchesUnfused trains the MNIST Net (its first
// convolution, pooling and ReLU fused into one Conv2DPool, their
// parameters' gradients into one Conv2DPoolGrad) and a net whose first
// convolution is pooled without a ReLU, on one and two devices, and
// requires every rank's parameters and the test loss to be bit for bit
// those of the unfused plan (cluster.fusion = false).
func TestConvPoolFusionMatchesUnfused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		src   string
		sets  []string
		relu  bool
		steps int  // how many more steps the unfused plan has
		less  bool // the fused plan's arena is smaller (the convolution's output was its peak)
	}{
		{"mnist", mnistScript, []string{"max_steps=25"}, true, 5, true},
		{"no relu", convPoolScript, nil, false, 3, false},
	} {
		for _, devices := range []int{1, 2} {
			fused, plain, pf, pp := trainFusedAndPlain(t, tc.src, tc.sets, devices)
			n, ng := 0, 0
			for _, st := range pf.Devices[0].Steps {
				if st.Op == ops.Conv2DPoolGrad {
					ng++
				}
				if st.Op == ops.Conv2DPool {
					n++
					if st.Attrs.ReLU != tc.relu || st.OpName() != map[bool]string{true: "conv2d+maxpool2d+relu", false: "conv2d+maxpool2d"}[tc.relu] {
						t.Errorf("%s: fused step %s, ReLU %v; want ReLU %v", tc.name, st.OpName(), st.Attrs.ReLU, tc.relu)
					}
				}
			}
			if n != 1 || ng != 1 {
				t.Errorf("%s: %d conv2d+maxpool2d and %d conv2d+maxpool2d_grad steps in the plan, want 1 and 1", tc.name, n, ng)
			}
			if d := len(pp.Devices[0].Steps) - len(pf.Devices[0].Steps); d != tc.steps {
				t.Errorf("%s: the unfused plan has %d more steps, want %d", tc.name, d, tc.steps)
			}
			if tc.less && pf.Devices[0].ArenaElems >= pp.Devices[0].ArenaElems {
				t.Errorf("%s: fused arena %d elements, unfused %d: the convolution's output should be gone", tc.name, pf.Devices[0].ArenaElems, pp.Devices[0].ArenaElems)
			}
			for i := range fused.Params {
				if d := maxRelDiff(fused.Params[i], plain.Params[i]); d != 0 {
					t.Errorf("%s, %d devices: rank %d's parameters differ from the unfused plan's by %.2e", tc.name, devices, i, d)
				}
			}
			if fused.TestLoss != plain.TestLoss {
				t.Errorf("%s, %d devices: test loss %v fused, %v unfused", tc.name, devices, fused.TestLoss, plain.TestLoss)
			}
		}
	}
}

// TestConvPoolFusionOnCPUOnly compiles the MNIST Net for a CUDA cluster:
// the CUDA backend has no Conv2DPool kernel, so its plan keeps the three
// ops.
func TestConvPoolFusionOnCPUOnly(t *testing.T) {
	s := loadSpec(t, mnistScript)
	c := engine.DefaultCluster()
	c.Backend = "cuda"
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range append(p.Devices[0].Steps, p.Devices[0].Eval...) {
		if st.Op == ops.Conv2DPool {
			t.Fatalf("step %d of a cuda plan is %s", st.ID, st.OpName())
		}
	}
}

// trainFusedAndPlain trains src (with sets) on devices in-process devices
// twice, as compiled and with cluster.fusion = false, and returns both
// results and plans.
func trainFusedAndPlain(t *testing.T, src string, sets []string, devices int) (fused, plain *Result, pf, pp *engine.Plan) {
	t.Helper()
	run := func(keys ...string) (*Result, *engine.Plan) {
		p := compileWith(t, loadSpec(t, src, sets...), devices, keys...)
		res, err := Run(p, RunOptions{Out: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return res, p
	}
	fused, pf = run()
	plain, pp = run("cluster.fusion=false")
	return fused, plain, pf, pp
}

// TestResumeAcrossConvPoolFusion: a checkpoint written by a plan without
// the conv+pool fusion (a CUDA plan's steps, or an earlier gorun's; here
// cluster.fusion = false) resumes on the fused CPU plan, and ends with the
// parameters of an uninterrupted fused run, bit for bit: the resume key
// leaves the backend's fusions out.
func TestResumeAcrossConvPoolFusion(t *testing.T) {
	run := func(dir, resume string, sets ...string) *Result {
		script, keys := clusterSets(sets)
		p := compileWith(t, loadSpec(t, convPoolScript, script...), 2, keys...)
		res, err := Run(p, RunOptions{Out: dir, Resume: resume})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	whole := run(t.TempDir(), "", "epochs=3")
	dir := t.TempDir()
	run(dir, "", "epochs=3", "max_steps=5", "cluster.fusion=false")
	resumed := run("", dir, "epochs=3")
	for r := range whole.Params {
		if d := maxRelDiff(whole.Params[r], resumed.Params[r]); d != 0 {
			t.Errorf("rank %d's parameters differ from an uninterrupted fused run by %.2e", r, d)
		}
	}
	s := loadSpec(t, mnistScript)
	cpu, err := engine.Compile(s, engine.DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultCluster()
	c.Backend = "cuda"
	cuda, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cpu.ResumeKey(), cuda.ResumeKey()
	if len(a) != len(b) {
		t.Fatalf("resume keys of %d and %d entries", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("resume key entry %s: cpu %q, cuda %q", a[i].Label, a[i].Text, b[i].Text)
		}
	}
}
