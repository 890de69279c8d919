//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"
	"time"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// TestAttentionKernelsGPU runs, on the GPU, the fused attention (the fp32
// kernels of ops.Attention and ops.AttentionGrad, and the bf16
// tensor-core ones, gorun_attention_bf16 and its two gradient kernels,
// against the fp32 ones) against the unfused path's
// forward steps (permute, narrow, batch_matmul, scale, causal softmax,
// batch_matmul, permute: the T×T scores written whole), at the GPT
// example's shape and at a long sequence. It reports one JSON line per
// shape: the largest difference of the fused outputs from the unfused one
// (fp32, and bf16 against fp32) and the microseconds of each (back-to-back
// launches). It fails when fp32 differs by more than 1e-4 (relative), the
// bf16 forward by more than 2e-2 or its gradient by more than 3e-2; speed
// is reported, not required.
func TestAttentionKernelsGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name        string
		n, t, h, dh int
	}{
		{"gpt_example", 32, 64, 4, 32},
		{"long", 4, 1024, 8, 64},
	} {
		t.Run(c.name, func(t *testing.T) { attentionGPU(t, c.name, c.n, c.t, c.h, c.dh) })
	}
}

func attentionGPU(t *testing.T, name string, n, tt, h, dh int) {
	b := newProg()
	causal := ops.Attrs{Causal: true}
	qkv := b.f("qkv", true, n, tt, 3, h, dh)
	o, lse := b.f("o", true, n, tt, h*dh), b.f("lse", true, n, h, tt)
	ob, lseb := b.f("o bf16", true, n, tt, h*dh), b.f("lse bf16", true, n, h, tt)
	do, dqkv := b.f("do", true, n, tt, h*dh), b.f("dqkv", true, n, tt, 3, h, dh)
	dqkvb := b.f("dqkv bf16", true, n, tt, 3, h, dh)
	fwdStep := b.step(engine.PhaseForward, ops.Attention, causal, false, []*engine.Buffer{qkv}, o, lse)
	bwdStep := b.step(engine.PhaseBackward, ops.AttentionGrad, causal, false, []*engine.Buffer{do, qkv, o, lse}, dqkv)
	// The unfused forward, as engine's attention builder writes it.
	heads := b.f("heads", true, n, 3, h, tt, dh)
	first := len(b.p.Steps)
	b.step(engine.PhaseForward, ops.Permute, ops.Attrs{Perm: [ops.MaxPermRank]int8{0, 2, 3, 1, 4, 5}}, false, []*engine.Buffer{qkv}, heads)
	var qkvs [3]*engine.Buffer
	for i := range qkvs {
		qkvs[i] = b.f(fmt.Sprintf("part %d", i), true, n, 1, h, tt, dh)
		b.step(engine.PhaseForward, ops.Narrow, ops.Attrs{Offset: i, Length: 1}, false, []*engine.Buffer{heads}, qkvs[i])
	}
	s := b.f("scores", true, n, 1, h, tt, tt)
	b.step(engine.PhaseForward, ops.BatchMatMul, ops.Attrs{TransB: true}, false, []*engine.Buffer{qkvs[0], qkvs[1]}, s)
	b.step(engine.PhaseForward, ops.Scale, ops.Attrs{Alpha: 1 / math.Sqrt(float64(dh))}, false, []*engine.Buffer{s}, s)
	b.step(engine.PhaseForward, ops.Softmax, causal, false, []*engine.Buffer{s}, s)
	mix := b.f("mix", true, n, 1, h, tt, dh)
	b.step(engine.PhaseForward, ops.BatchMatMul, ops.Attrs{}, false, []*engine.Buffer{s, qkvs[2]}, mix)
	ou := b.f("o unfused", true, n, tt, 1, h, dh)
	b.step(engine.PhaseForward, ops.Permute, ops.Attrs{Perm: [ops.MaxPermRank]int8{0, 3, 1, 2, 4, 5}}, false, []*engine.Buffer{mix}, ou)
	unfused := b.p.Steps[first:]

	pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 26)
	d := pr.gpu.(*Device)
	rc := &once[0]
	exec := func(steps ...*engine.Step) func() error {
		return func() error {
			for _, st := range steps {
				if err := d.Exec(st, rc); err != nil {
					return err
				}
			}
			return nil
		}
	}
	bf16 := func() error {
		if err := d.enter(); err != nil {
			return err
		}
		defer d.exit()
		nn, t, hh, dd, scale, geom := attnDims(d, qkv)
		return d.launch(kAttentionBf16, geom, d.bufArg(qkv), d.bufArg(ob), d.bufArg(lseb), intArg(nn), intArg(t), intArg(hh), intArg(dd), boolArg(true), floatArg(scale))
	}
	bf16Grad := func() error {
		if err := d.enter(); err != nil {
			return err
		}
		defer d.exit()
		nn, t, hh, dd, scale, geom := attnDims(d, qkv)
		for _, k := range []kernelID{kAttentionBf16GradQ, kAttentionBf16GradKv} {
			if err := d.launch(k, geom, d.bufArg(do), d.bufArg(qkv), d.bufArg(o), d.bufArg(lse), d.bufArg(dqkvb),
				intArg(nn), intArg(t), intArg(hh), intArg(dd), boolArg(true), floatArg(scale)); err != nil {
				return err
			}
		}
		return nil
	}
	perCall := func(f func() error) float64 {
		reps := 20
		for range 3 {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for range reps {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		return float64(time.Since(t0).Microseconds()) / float64(reps)
	}
	res := map[string]any{"check": "attention_kernels", "shape": name, "n": n, "t": tt, "h": h, "dh": dh,
		"unfused_fwd_us": perCall(exec(unfused...)),
		"fused_fwd_us":   perCall(exec(fwdStep)),
		"bf16_fwd_us":    perCall(bf16),
		"fused_bwd_us":   perCall(exec(bwdStep)),
		"bf16_bwd_us":    perCall(bf16Grad),
	}
	elems := n * tt * h * dh
	want := download(t, d, ou, elems)
	errFP32 := relErr(download(t, d, o, elems), want)
	errBF16 := relErr(download(t, d, ob, elems), download(t, d, o, elems))
	errLse := relErr(download(t, d, lseb, n*h*tt), download(t, d, lse, n*h*tt))
	errGrad := relErr(download(t, d, dqkvb, 3*elems), download(t, d, dqkv, 3*elems))
	res["bf16_grad_vs_fp32_rel_err"] = errGrad
	res["fp32_vs_unfused_rel_err"] = errFP32
	res["bf16_vs_fp32_rel_err"] = errBF16
	res["bf16_lse_rel_err"] = errLse
	res["fused_over_unfused_fwd"] = res["unfused_fwd_us"].(float64) / res["fused_fwd_us"].(float64)
	res["bf16_over_fp32_fwd"] = res["fused_fwd_us"].(float64) / res["bf16_fwd_us"].(float64)
	res["bf16_over_fp32_bwd"] = res["fused_bwd_us"].(float64) / res["bf16_bwd_us"].(float64)
	ok := errFP32 <= 1e-4 && errBF16 <= 2e-2 && errLse <= 2e-2 && errGrad <= 3e-2
	res["ok"] = ok
	jsonLine(res)
	if !ok {
		t.Errorf("%s: fused fp32 vs unfused %g (want ≤ 1e-4), bf16 vs fp32 %g and lse %g (want ≤ 2e-2), bf16 gradient vs fp32 %g (want ≤ 3e-2)",
			name, errFP32, errBF16, errLse, errGrad)
	}
}
