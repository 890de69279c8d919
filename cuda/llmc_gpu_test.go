//go:build cuda

package cuda

// GPU checks of llm.c's tricks (issue 26): the linear layer's bias in a
// cuBLASLt epilogue against cuBLAS SGEMM and the separate bias kernel,
// and the fused classifier against cross_entropy and cross_entropy_grad,
// at GPT-2 small's shapes. Each prints one JSON line per shape with the
// difference and the microseconds of each path (back-to-back launches);
// speed is reported, not required.

import (
	"testing"
	"time"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// perCallOn is the microseconds per call of f on d (3 warm-up calls, then
// reps).
func perCallOn(t *testing.T, d *Device, reps int, f func() error) float64 {
	t.Helper()
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

// execSteps runs steps on d with rc.
func execSteps(d *Device, rc *backend.RunCtx, steps ...*engine.Step) func() error {
	return func() error {
		for _, st := range steps {
			if err := d.Exec(st, rc); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestLtLinearGPU: a linear layer with a bias through cuBLASLt (the bias
// in the epilogue) and, on a device opened with cublaslt = false, through
// cuBLAS SGEMM and gorun_bias_add, at GPT-2 small's shapes (B·T = 4·1024
// rows; 768 → 2304 c_attn, 768 → 3072 c_fc, 3072 → 768 c_proj) and an odd
// one: outputs within 1e-5 (relative; both fp32, no TF32), and the time of
// each. It fails when cuBLASLt did not run (no library, no algorithm): the
// note says why.
func TestLtLinearGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name    string
		n, i, o int
	}{
		{"c_attn", 4096, 768, 2304}, {"c_fc", 4096, 768, 3072}, {"c_proj", 4096, 3072, 768}, {"odd", 37, 13, 9},
	} {
		b := newProg()
		x, w, bias, y := b.f("x", true, c.n, c.i), b.f("w", false, c.o, c.i), b.f("b", false, c.o), b.f("y", true, c.n, c.o)
		st := b.step(engine.PhaseForward, ops.Linear, ops.Attrs{}, false, []*engine.Buffer{x, w, bias}, y)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 7)
		lt := pr.gpu.(*Device)
		plainDev, err := Backend{}.Open(0, backend.Options{Settings: map[string]any{"eager": true, "cublaslt": false}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { plainDev.Close() })
		plain := plainDev.(*Device)
		if err := plain.Load(pr.prog); err != nil {
			t.Fatal(err)
		}
		for _, buf := range []*engine.Buffer{x, w, bias} {
			if err := plain.UploadF32(buf, 0, download(t, lt, buf, buf.Elems())); err != nil {
				t.Fatal(err)
			}
		}
		if lt.lt == nil || plain.lt != nil {
			t.Fatalf("%s: cuBLASLt on the default device %v, on the cublaslt = false one %v: want true, false", c.name, lt.lt != nil, plain.lt != nil)
		}
		rc := &once[0]
		ltUS := perCallOn(t, lt, 20, execSteps(lt, rc, st))
		plainUS := perCallOn(t, plain, 20, execSteps(plain, rc, st))
		call, _ := linearBiasCall(c.n, c.i, c.o, ltAlignment(lt.ptr(x), lt.ptr(w), lt.ptr(bias), lt.ptr(y)), ltCompute32F)
		ran := lt.lt.calls[call] != nil && lt.lt.calls[call].ok
		e := relErr(download(t, lt, y, c.n*c.o), download(t, plain, y, c.n*c.o))
		ok := e <= 1e-5 && ran
		jsonLine(map[string]any{"check": "lt_linear_bias", "shape": c.name, "n": c.n, "in": c.i, "out": c.o, "lt_ran": ran,
			"lt_us": ltUS, "sgemm_bias_add_us": plainUS, "lt_over_unfused": plainUS / ltUS, "rel_err": e, "ok": ok})
		if !ok {
			t.Errorf("%s: cuBLASLt ran %v; relative difference from SGEMM + bias_add %g (want ≤ 1e-5)", c.name, ran, e)
		}
	}
}

// TestClassifierFusedGPU: the fused classifier against cross_entropy then
// cross_entropy_grad on the GPU, at GPT-2 small's vocabulary (50257) and
// the GPT example's (65), label smoothing 0 and 0.1 with an ignore_index:
// loss and dlogits within 1e-5, and the time of each.
func TestClassifierFusedGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name string
		n, v int
		a    ops.Attrs
	}{
		{"gpt2_small", 4 * 256, 50257, ops.Attrs{}},
		{"gpt2_small smoothing ignore", 4 * 256, 50257, ops.Attrs{LabelSmoothing: 0.1, HasIgnore: true, IgnoreIndex: 3}},
		{"gpt_example", 32 * 64, 65, ops.Attrs{}},
	} {
		b := newProg()
		logits, target, dloss := b.f("logits", true, c.n, c.v), b.i("target", c.v, true, c.n), b.f("dloss", false, 1)
		loss, probs, dx := b.f("loss", false, 1), b.f("probs", true, c.n, c.v), b.f("dx", true, c.n, c.v)
		floss, fdx := b.f("fused loss", false, 1), b.f("fused dx", true, c.n, c.v)
		ce := b.step(engine.PhaseForward, ops.CrossEntropy, c.a, false, []*engine.Buffer{logits, target}, loss, probs)
		ceg := b.step(engine.PhaseBackward, ops.CrossEntropyGrad, c.a, false, []*engine.Buffer{dloss, probs, target}, dx)
		fused := b.step(engine.PhaseForward, ops.CrossEntropyFused, c.a, false, []*engine.Buffer{logits, target, dloss}, floss, fdx)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 50257)
		d := pr.gpu.(*Device)
		rc := &once[0]
		unfusedUS := perCallOn(t, d, 5, execSteps(d, rc, ce, ceg))
		fusedUS := perCallOn(t, d, 5, execSteps(d, rc, fused))
		eLoss := relErr(download(t, d, floss, 1), download(t, d, loss, 1))
		eDx := relErr(download(t, d, fdx, c.n*c.v), download(t, d, dx, c.n*c.v))
		ok := eLoss <= 1e-5 && eDx <= 1e-5
		jsonLine(map[string]any{"check": "fused_classifier", "shape": c.name, "rows": c.n, "vocab": c.v,
			"unfused_us": unfusedUS, "fused_us": fusedUS, "fused_over_unfused": unfusedUS / fusedUS,
			"loss_rel_err": eLoss, "dx_rel_err": eDx, "ok": ok})
		if !ok {
			t.Errorf("%s: fused vs unfused: loss %g, dx %g (want ≤ 1e-5)", c.name, eLoss, eDx)
		}
	}
}
