//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
	"gorun/script"
)

// TestAttentionBF16Steps runs the fused attention's steps with
// Attrs.Precision bf16, as a plan of precision "bf16" holds them, through
// the device's op table (runAttention and runAttentionGrad choose the
// tensor-core kernels), on the GPU and on the CPU backend (the reference:
// ops/attention_bf16.go's kernels), beside the fp32 steps on the same
// qkv. One JSON line per shape ("attention_bf16_steps"). It fails when
// the GPU's bf16 outputs differ from the CPU's bf16 reference by more
// than 2e-3 (relative to the largest magnitude; the tensor cores sum each
// product in their own order, and a sum that differs in its last bit can
// move a probability or a ds to the neighbouring bfloat16), when the bf16
// steps differ from the fp32 ones by more than 2e-2 (forward) or 3e-2
// (gradient), or by less than 1e-4 (no rounding happened). Shapes: the
// GPT example's (causal), an odd one (T 77, dh 24, not causal), each at
// the planned batch and one sample less.
func TestAttentionBF16Steps(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name        string
		n, t, h, dh int
		causal      bool
	}{
		{"gpt_example", 32, 64, 4, 32, true},
		{"odd", 3, 77, 2, 24, false},
	} {
		for _, live := range []int{c.n, c.n - 1} {
			t.Run(fmt.Sprintf("%s/batch%d", c.name, live), func(t *testing.T) {
				attentionBF16Steps(t, c.name, c.n, c.t, c.h, c.dh, c.causal, live)
			})
		}
	}
}

func attentionBF16Steps(t *testing.T, name string, n, tt, h, dh int, causal bool, live int) {
	b := newProg()
	fp32 := ops.Attrs{Causal: causal}
	bf16 := ops.Attrs{Causal: causal, Precision: ops.BF16}
	qkv, do := b.f("qkv", true, n, tt, 3, h, dh), b.f("do", true, n, tt, h*dh)
	o, lse, dqkv := b.f("o", true, n, tt, h*dh), b.f("lse", true, n, h, tt), b.f("dqkv", true, n, tt, 3, h, dh)
	ob, lseb, dqkvb := b.f("o bf16", true, n, tt, h*dh), b.f("lse bf16", true, n, h, tt), b.f("dqkv bf16", true, n, tt, 3, h, dh)
	b.step(engine.PhaseForward, ops.Attention, fp32, false, []*engine.Buffer{qkv}, o, lse)
	b.step(engine.PhaseForward, ops.Attention, bf16, false, []*engine.Buffer{qkv}, ob, lseb)
	b.step(engine.PhaseBackward, ops.AttentionGrad, fp32, false, []*engine.Buffer{do, qkv, o, lse}, dqkv)
	b.step(engine.PhaseBackward, ops.AttentionGrad, bf16, false, []*engine.Buffer{do, qkv, ob, lseb}, dqkvb)
	pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 2026)
	for _, d := range []backend.Device{pr.gpu, pr.cpu} {
		d.SetBatch(live)
		for _, st := range pr.prog.Steps {
			if err := d.Exec(st, &once[0]); err != nil {
				t.Fatalf("%s: %s: %v", d.Name(), st.Op, err)
			}
		}
	}
	if err := pr.gpu.Sync(); err != nil {
		t.Fatal(err)
	}
	get := func(d backend.Device, buf *engine.Buffer) []float32 { return download(t, d, buf, liveElems(buf, live)) }
	res := map[string]any{"check": "attention_bf16_steps", "shape": name, "n": n, "t": tt, "h": h, "dh": dh, "causal": causal, "batch": live}
	worst := func(pairs ...[2][]float32) float64 {
		e := 0.0
		for _, p := range pairs {
			e = worse(e, relErr(p[0], p[1]))
		}
		return e
	}
	g, c := pr.gpu, pr.cpu
	vsRef := worst([2][]float32{get(g, ob), get(c, ob)}, [2][]float32{get(g, lseb), get(c, lseb)})
	gradVsRef := relErr(get(g, dqkvb), get(c, dqkvb))
	vsFP32 := worst([2][]float32{get(g, ob), get(g, o)}, [2][]float32{get(g, lseb), get(g, lse)})
	gradVsFP32 := relErr(get(g, dqkvb), get(g, dqkv))
	res["bf16_vs_cpu_bf16_rel_err"] = vsRef
	res["bf16_grad_vs_cpu_bf16_rel_err"] = gradVsRef
	res["bf16_vs_fp32_rel_err"] = vsFP32
	res["bf16_grad_vs_fp32_rel_err"] = gradVsFP32
	ok := vsRef <= 2e-3 && gradVsRef <= 2e-3 && vsFP32 <= 2e-2 && gradVsFP32 <= 3e-2 && vsFP32 > 1e-4 && gradVsFP32 > 1e-4
	res["ok"] = ok
	jsonLine(res)
	if !ok {
		t.Errorf("%s: bf16 vs the CPU's bf16 %g, gradient %g (want ≤ 2e-3); bf16 vs fp32 %g, gradient %g (want in (1e-4, 2e-2] and (1e-4, 3e-2])",
			name, vsRef, gradVsRef, vsFP32, gradVsFP32)
	}
}

// TestBF16AttentionTarget: the built backend's Target keeps the fused
// attention under bf16 (FusedBF16 holds ops.Attention and its gradient,
// which it supports), and supports every op but the CPU-only fusions it
// declines: what engine's TestBF16AttentionFusedOnCUDA assumes of it
// (cudaLikeTarget) when it plans the GPT example for cuda without this
// package. And the GPT example (where its text is: Debian's fortunes),
// compiled with --set precision=bf16 for a cuda cluster by this build,
// holds one bf16 fused attention and its gradient a block. Needs no GPU.
func TestBF16AttentionTarget(t *testing.T) {
	tg := Backend{}.Target()
	for _, op := range []ops.Op{ops.Attention, ops.AttentionGrad} {
		if !slices.Contains(tg.FusedBF16, op) || !tg.Supports(op) {
			t.Errorf("%s: in FusedBF16 %v, supported %v", op, slices.Contains(tg.FusedBF16, op), tg.Supports(op))
		}
	}
	cpuOnly := []ops.Op{ops.Conv2DPool, ops.Conv2DPoolGrad, ops.AttentionHeads, ops.AttentionHeadsGrad}
	for _, op := range ops.All() {
		if tg.Supports(op) == slices.Contains(cpuOnly, op) {
			t.Errorf("%s: supported %v", op, tg.Supports(op))
		}
	}
}

func TestBF16AttentionPlanGPT(t *testing.T) {
	const gpt = "../scripts/examples/gpt_text.star"
	if _, err := os.Stat(gpt); err != nil {
		t.Skipf("no GPT example here: %v", err)
	}
	ov, err := script.ParseOverride("precision=bf16")
	if err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(gpt, script.WithOverrides(ov))
	if err != nil {
		t.Skipf("the GPT example does not load here (it needs Debian's fortunes): %v", err)
	}
	c := engine.DefaultCluster()
	c.Backend = "cuda"
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	n := map[ops.Op]int{}
	for _, st := range p.Devices[0].Steps {
		if st.Kind == engine.KernelStep && st.Attrs.Precision == ops.BF16 && engine.StepDtype(st) == "bf16" {
			n[st.Op]++
		}
		if st.Op == ops.Softmax {
			t.Errorf("step %d: softmax in the cuda bf16 plan (attention built from its parts)", st.ID)
		}
	}
	if n[ops.Attention] != 4 || n[ops.AttentionGrad] != 4 {
		t.Errorf("cuda bf16 plan of the GPT example: %d bf16 attention and %d attention_grad steps, want 4 each", n[ops.Attention], n[ops.AttentionGrad])
	}
}
