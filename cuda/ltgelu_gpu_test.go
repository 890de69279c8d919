//go:build cuda

package cuda

import (
	"testing"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// TestLinearGELUGPU: ops.LinearGELU (tanh form) through cuBLASLt's GELU
// epilogue (GELU_AUX_BIAS, GELU_AUX without a bias) and, on a device
// opened with cublaslt = false, through the unfused kernels (SGEMM,
// gorun_bias_add, gorun_unary's tanh GELU), at GPT-2 small's c_fc
// (B·T = 4·1024 rows, 768 → 3072) and the GPT example's (32·64 rows,
// 128 → 512), and an odd one whose 9 outputs cuBLASLt's aux matrix cannot
// take (the unfused kernels run on both): pre within 1e-5 and y within
// 1e-4 (relative; fp32 products, no TF32; cuBLASLt's tanh is not
// gorun_unary's), and the time of each. It fails when cuBLASLt did not
// run where it should (the note says why).
func TestLinearGELUGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name    string
		n, i, o int
		bias    bool
		lt      bool
	}{
		{"gpt2_small_c_fc", 4096, 768, 3072, true, true}, {"gpt2_small_c_fc_nobias", 4096, 768, 3072, false, true},
		{"gpt_example_c_fc", 2048, 128, 512, true, true}, {"odd", 37, 13, 9, true, false},
	} {
		b := newProg()
		x, w, y, pre := b.f("x", true, c.n, c.i), b.f("w", false, c.o, c.i), b.f("y", true, c.n, c.o), b.f("pre", true, c.n, c.o)
		in := []*engine.Buffer{x, w}
		var bias *engine.Buffer
		if c.bias {
			bias = b.f("b", false, c.o)
			in = append(in, bias)
		}
		st := b.step(engine.PhaseForward, ops.LinearGELU, ops.Attrs{Approximate: true}, false, in, y, pre)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 11)
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
		for _, buf := range in {
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
		var bp uintptr
		if bias != nil {
			bp = lt.ptr(bias)
		}
		call, callOK := linearGELUCall(c.n, c.i, c.o, c.bias, ltAlignment(lt.ptr(x), lt.ptr(w), bp, lt.ptr(y), lt.ptr(pre)), ltCompute32F)
		ran := callOK && lt.lt.calls[call] != nil && lt.lt.calls[call].ok
		ePre := relErr(download(t, lt, pre, c.n*c.o), download(t, plain, pre, c.n*c.o))
		eY := relErr(download(t, lt, y, c.n*c.o), download(t, plain, y, c.n*c.o))
		ok := ePre <= 1e-5 && eY <= 1e-4 && ran == c.lt
		jsonLine(map[string]any{"check": "lt_linear_gelu", "shape": c.name, "n": c.n, "in": c.i, "out": c.o, "bias": c.bias, "lt_ran": ran,
			"lt_us": ltUS, "unfused_us": plainUS, "lt_over_unfused": plainUS / ltUS, "rel_err_pre": ePre, "rel_err_y": eY, "ok": ok})
		if !ok {
			t.Errorf("%s: cuBLASLt ran %v (want %v); relative difference from the unfused kernels: pre %g (want ≤ 1e-5), y %g (want ≤ 1e-4)",
				c.name, ran, c.lt, ePre, eY)
		}
	}
}

// TestLinearGradInputGELUGPU: ops.LinearGradInputGELU (tanh form) through
// cuBLASLt's DGELU epilogue and, on a device opened with cublaslt =
// false, through SGEMM and gorun_binary's GELU gradient, at GPT-2 small's
// c_proj input gradient (4·1024 rows, dy 768 wide, w 768×3072) and the GPT
// example's (2048 rows, 128, 128×512), and an odd one the aux matrix
// cannot take: dx within 1e-4 (relative), the time of each.
func TestLinearGradInputGELUGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name    string
		n, o, i int
		lt      bool
	}{
		{"gpt2_small_c_proj", 4096, 768, 3072, true}, {"gpt_example_c_proj", 2048, 128, 512, true}, {"odd", 37, 13, 9, false},
	} {
		b := newProg()
		dy, w, pre, dx := b.f("dy", true, c.n, c.o), b.f("w", false, c.o, c.i), b.f("pre", true, c.n, c.i), b.f("dx", true, c.n, c.i)
		st := b.step(engine.PhaseBackward, ops.LinearGradInputGELU, ops.Attrs{Approximate: true}, false, []*engine.Buffer{dy, w, pre}, dx)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 12)
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
		for _, buf := range []*engine.Buffer{dy, w, pre} {
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
		call, callOK := linearGradInputGELUCall(c.n, c.o, c.i, ltAlignment(lt.ptr(dy), lt.ptr(w), lt.ptr(pre), lt.ptr(dx)), ltCompute32F)
		ran := callOK && lt.lt.calls[call] != nil && lt.lt.calls[call].ok
		e := relErr(download(t, lt, dx, c.n*c.i), download(t, plain, dx, c.n*c.i))
		ok := e <= 1e-4 && ran == c.lt
		jsonLine(map[string]any{"check": "lt_linear_dgelu", "shape": c.name, "n": c.n, "out": c.o, "in": c.i, "lt_ran": ran,
			"lt_us": ltUS, "unfused_us": plainUS, "lt_over_unfused": plainUS / ltUS, "rel_err": e, "ok": ok})
		if !ok {
			t.Errorf("%s: cuBLASLt ran %v (want %v); relative difference from the unfused kernels %g (want ≤ 1e-4)", c.name, ran, c.lt, e)
		}
	}
}

// TestLinearGradWeightBiasGPU: ops.LinearGradWeightBias through cuBLASLt's
// BGRADB epilogue and, on a device opened with cublaslt = false, through
// SGEMM and the split sum, at GPT-2 small's c_fc and c_proj (4·1024 rows;
// dy 3072 wide with x 768, and dy 768 with x 3072) and an odd one: dw and
// db within 1e-4 (relative), the time of each. A second call that
// accumulates runs the unfused kernels on both devices (BGRADB
// overwrites): dw and db then hold twice the gradient.
func TestLinearGradWeightBiasGPU(t *testing.T) {
	needGPU(t)
	for _, c := range []struct {
		name    string
		n, o, i int
	}{
		{"gpt2_small_c_fc", 4096, 3072, 768}, {"gpt2_small_c_proj", 4096, 768, 3072}, {"odd", 37, 9, 13},
	} {
		b := newProg()
		dy, x, dw, db := b.f("dy", true, c.n, c.o), b.f("x", true, c.n, c.i), b.f("dw", false, c.o, c.i), b.f("db", false, c.o)
		st := b.step(engine.PhaseBackward, ops.LinearGradWeightBias, ops.Attrs{}, true, []*engine.Buffer{dy, x}, dw, db)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 13)
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
		for _, buf := range []*engine.Buffer{dy, x} {
			if err := plain.UploadF32(buf, 0, download(t, lt, buf, buf.Elems())); err != nil {
				t.Fatal(err)
			}
		}
		rc := &once[0]
		ltUS := perCallOn(t, lt, 20, execSteps(lt, rc, st))
		plainUS := perCallOn(t, plain, 20, execSteps(plain, rc, st))
		call, callOK := linearGradWeightBiasCall(c.n, c.o, c.i, ltAlignment(lt.ptr(dy), lt.ptr(x), lt.ptr(dw), lt.ptr(db)), ltCompute32F)
		ran := callOK && lt.lt != nil && lt.lt.calls[call] != nil && lt.lt.calls[call].ok
		eW := relErr(download(t, lt, dw, c.o*c.i), download(t, plain, dw, c.o*c.i))
		eB := relErr(download(t, lt, db, c.o), download(t, plain, db, c.o))
		once1 := download(t, lt, db, c.o)
		if err := execSteps(lt, &accumulate[0], st)(); err != nil {
			t.Fatal(err)
		}
		twice := download(t, lt, db, c.o)
		for j := range once1 {
			once1[j] *= 2
		}
		eAcc := relErr(twice, once1)
		ok := eW <= 1e-4 && eB <= 1e-4 && eAcc <= 1e-5 && ran
		jsonLine(map[string]any{"check": "lt_linear_bgradb", "shape": c.name, "n": c.n, "out": c.o, "in": c.i, "lt_ran": ran,
			"lt_us": ltUS, "unfused_us": plainUS, "lt_over_unfused": plainUS / ltUS, "rel_err_dw": eW, "rel_err_db": eB, "rel_err_accumulated_db": eAcc, "ok": ok})
		if !ok {
			t.Errorf("%s: cuBLASLt ran %v; relative difference from the unfused kernels: dw %g, db %g (want ≤ 1e-4); accumulated db %g from twice the first", c.name, ran, eW, eB, eAcc)
		}
	}
}
