package runner

import (
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/backend/cpu"
	"gorun/engine/target"
	"gorun/ops"
)

// withFusedClassifier registers, for the rest of the test, a cpu Target
// that runs ops.CrossEntropyFused (the real one declines it: it is a CUDA
// fusion), so that the compiler's fused classifier can be trained on the
// CPU kernels and compared with the unfused plan.
func withFusedClassifier(t *testing.T) {
	t.Helper()
	tg := cpu.Backend{}.Target()
	tg.Supports = func(op ops.Op) bool { return ops.Kernels32[op] != nil }
	tg.Declines = nil
	target.Register(tg)
	t.Cleanup(func() { target.Register(cpu.Backend{}.Target()) })
}

// TestClassifierFusedTrainsAsUnfused: for a target that runs
// ops.CrossEntropyFused, the GPT's loss (attention unfused; the test
// target also runs the linear+GELU fusions, which cluster.fusion = false
// turns off too, and which give the unfused bits; cross-entropy with label
// smoothing 0.1 and ignore_index = 3, a class the text holds, so some
// positions are ignored) compiles into one cross_entropy_fused step in
// the forward pass, with no cross_entropy_grad, and trains — two
// micro-batches a step, evaluation on — bit for bit as the plan with
// cluster.fusion = false, on one device and two (and two under
// sync.zero(stage = 3)). For the real cpu
// target (which declines it) the plan keeps the two ops.
func TestClassifierFusedTrainsAsUnfused(t *testing.T) {
	src := strings.Replace(attnSrc(t, false, "0.0"), `loss = "cross_entropy",`,
		`loss = nn.cross_entropy(label_smoothing = 0.1, ignore_index = 3), accumulate = 2, eval = data.text("`+textOf(t, attnSrc(t, false, "0.0"))+`", seq_len = T, vocab = "chars"),`, 1)
	cpuPlan := compile(t, loadSpec(t, src), 1)
	if countOp(cpuPlan, ops.CrossEntropyFused) != 0 || countOp(cpuPlan, ops.CrossEntropyGrad) != 1 {
		t.Errorf("the cpu target's plan fuses the classifier")
	}
	withFusedClassifier(t)
	for _, run := range []struct {
		devices int
		sets    []string
	}{{1, nil}, {2, nil}, {2, []string{"sync=sync.zero(stage = 3)"}}} {
		devices := run.devices
		fused, plain, pf, pp := trainFusedAndPlain(t, src, run.sets, devices)
		if n, m, g := countOp(pf, ops.CrossEntropyFused), countOp(pf, ops.CrossEntropy), countOp(pf, ops.CrossEntropyGrad); n != 1 || m != 0 || g != 0 {
			t.Errorf("fused plan: %d cross_entropy_fused, %d cross_entropy, %d cross_entropy_grad steps; want 1, 0, 0", n, m, g)
		}
		for _, st := range pf.Devices[0].Steps {
			if st.Op == ops.CrossEntropyFused && (st.Phase != engine.PhaseForward || st.OpName() != "cross_entropy+cross_entropy_grad" || !st.Acc) {
				t.Errorf("fused step: phase %v, name %s, acc %v: want the forward pass's, accumulating its loss", st.Phase, st.OpName(), st.Acc)
			}
		}
		if countOp(pp, ops.CrossEntropyFused) != 0 || countOp(pp, ops.CrossEntropyGrad) != 1 {
			t.Errorf("cluster.fusion = false: want cross_entropy and cross_entropy_grad")
		}
		t.Logf("%d devices: memory fused %d bytes, unfused %d", devices, pf.Devices[0].MemoryBytes(), pp.Devices[0].MemoryBytes())
		for i := range fused.Params {
			if d := maxRelDiff(fused.Params[i], plain.Params[i]); d != 0 {
				t.Errorf("%d devices: rank %d's parameters differ from the unfused plan's by %.2e", devices, i, d)
			}
		}
		if fused.TestLoss != plain.TestLoss || fused.TestLoss != fused.TestLoss {
			t.Errorf("%d devices: test loss %v fused, %v unfused", devices, fused.TestLoss, plain.TestLoss)
		}
	}
}

// textOf returns the text file a script made by attnSrc reads.
func textOf(t *testing.T, src string) string {
	i := strings.Index(src, `data.text("`)
	if i < 0 {
		t.Fatal("no data.text in the script")
	}
	rest := src[i+len(`data.text("`):]
	return rest[:strings.Index(rest, `"`)]
}
