package runner

import (
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/backend/cpu"
	"gorun/engine/target"
	"gorun/ops"
)

// withLinearGELU registers, for the rest of the test, a cpu Target that
// also runs ops.LinearGELU, ops.LinearGradInputGELU and
// ops.LinearGradWeightBias (the real one declines them: they are CUDA
// fusions, cuBLASLt's GELU and BGRADB epilogues), so that the compiler's fusion can
// be trained on the CPU kernels and compared with the unfused plan.
func withLinearGELU(t *testing.T) {
	t.Helper()
	tg := cpu.Backend{}.Target()
	own := tg.Supports
	tg.Supports = func(op ops.Op) bool {
		return op == ops.LinearGELU || op == ops.LinearGradInputGELU || op == ops.LinearGradWeightBias || own(op)
	}
	tg.Declines = nil
	target.Register(tg)
	t.Cleanup(func() { target.Register(cpu.Backend{}.Target()) })
}

// TestLinearGELUTrainsAsUnfused: for a target that runs ops.LinearGELU,
// each block's MLP (mlp.c_fc, then nn.gelu(approximate = "tanh"))
// compiles into one linear+gelu step, and the GELU's gradient joins
// mlp.c_proj's input gradient (one linear_grad_input+gelu_grad step on
// the kept pre-activation), every linear layer with a bias has its
// weight and bias gradients in one linear_grad_weight+linear_grad_bias
// step, and the GPT trains — two micro-batches a step,
// evaluation on — bit for bit as the plan with cluster.fusion = false,
// on one device and two (and two under sync.zero(stage = 3)). The real
// cpu target declines it; an exact (erf) GELU is not fused.
func TestLinearGELUTrainsAsUnfused(t *testing.T) {
	base := attnSrc(t, false, "0.0")
	src := strings.Replace(base, `loss = "cross_entropy",`,
		`loss = "cross_entropy", accumulate = 2, eval = data.text("`+textOf(t, base)+`", seq_len = T, vocab = "chars"),`, 1)
	if p := compile(t, loadSpec(t, src), 1); countOp(p, ops.LinearGELU) != 0 || countOp(p, ops.GELU) != 2 {
		t.Errorf("the cpu target's plan fuses linear and gelu")
	}
	withLinearGELU(t)
	exact := strings.Replace(src, `approximate = "tanh"`, `approximate = "none"`, 1)
	if p := compile(t, loadSpec(t, exact), 1); countOp(p, ops.LinearGELU) != 0 || countOp(p, ops.GELU) != 2 {
		t.Errorf("an exact GELU is fused: %d linear_gelu, %d gelu steps", countOp(p, ops.LinearGELU), countOp(p, ops.GELU))
	}
	for _, run := range []struct {
		devices int
		sets    []string
	}{{1, nil}, {2, nil}, {2, []string{"sync=sync.zero(stage = 3)"}}} {
		fused, plain, pf, pp := trainFusedAndPlain(t, src, run.sets, run.devices)
		if n, g, gg, dg := countOp(pf, ops.LinearGELU), countOp(pf, ops.GELU), countOp(pf, ops.GELUGrad), countOp(pf, ops.LinearGradInputGELU); n != 2 || g != 0 || gg != 0 || dg != 2 {
			t.Errorf("fused plan: %d linear_gelu, %d gelu, %d gelu_grad, %d linear_grad_input_gelu steps; want 2, 0, 0, 2", n, g, gg, dg)
		}
		// Each block: mlp.c_fc and mlp.c_proj (attn's own products are the
		// unfused attention's linear layers: in_proj and out_proj).
		if wb, w, bb := countOp(pf, ops.LinearGradWeightBias), countOp(pf, ops.LinearGradWeight), countOp(pf, ops.LinearGradBias); wb == 0 || wb != countOp(pp, ops.LinearGradBias) || bb != 0 || w != countOp(pp, ops.LinearGradWeight)-wb {
			t.Errorf("fused plan: %d linear_grad_weight_bias, %d linear_grad_weight, %d linear_grad_bias steps (unfused: %d weight, %d bias)", wb, w, bb,
				countOp(pp, ops.LinearGradWeight), countOp(pp, ops.LinearGradBias))
		}
		for _, st := range pf.Devices[0].Steps {
			if st.Kind == engine.KernelStep && st.Op == ops.LinearGELU && (st.Phase != engine.PhaseForward || st.OpName() != "linear+gelu" || !st.Attrs.Approximate) {
				t.Errorf("fused step: phase %v, name %s, tanh %v", st.Phase, st.OpName(), st.Attrs.Approximate)
			}
		}
		if countOp(pp, ops.LinearGELU) != 0 || countOp(pp, ops.GELU) != 2 || countOp(pp, ops.LinearGradInputGELU) != 0 || countOp(pp, ops.GELUGrad) != 2 {
			t.Errorf("cluster.fusion = false: want linear and gelu")
		}
		for i := range fused.Params {
			if d := maxRelDiff(fused.Params[i], plain.Params[i]); d != 0 {
				t.Errorf("%d devices %v: rank %d's parameters differ from the unfused plan's by %.2e", run.devices, run.sets, i, d)
			}
		}
		if fused.TestLoss != plain.TestLoss || fused.TestLoss != fused.TestLoss {
			t.Errorf("%d devices %v: test loss %v fused, %v unfused", run.devices, run.sets, fused.TestLoss, plain.TestLoss)
		}
	}
}
