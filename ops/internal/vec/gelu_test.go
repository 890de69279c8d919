package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGELUTanhMatchesGo compares every level with the Go loop bit for bit,
// in place too.
func TestGELUTanhMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, lv := range levels() {
		for _, n := range sizes {
			x, g := sample(r, n), sample(r, n)
			for i := range x { // a wide range: saturation and the clamps
				if r.IntN(4) == 0 {
					x[i] *= 30
				}
			}
			want, got := make([]float32, n), make([]float32, n+1)
			got[n] = 7
			geluTanhGo(want, x)
			geluTanh(lv, got, x)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d n %d: GELU differs from the Go loop", lv, n)
			}
			geluTanhGradGo(want, g, x)
			geluTanhGrad(lv, got, g, x)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d n %d: GELU gradient differs from the Go loop", lv, n)
			}
			inPlace := append([]float32(nil), g...)
			geluTanhGrad(lv, inPlace, inPlace, x)
			if !same(want, inPlace) {
				t.Errorf("level %d n %d: GELU gradient in place differs", lv, n)
			}
		}
	}
}

// TestGELUTanhAccuracy compares the float32 kernels with the float64
// formula (math.Tanh) over [-12, 12] and at the special values.
func TestGELUTanhAccuracy(t *testing.T) {
	const n = 200001
	x, g := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(-12 + 24*float64(i)/float64(n-1))
		g[i] = 1
	}
	y, d := make([]float32, n), make([]float32, n)
	GELUTanh(y, x)
	GELUTanhGrad(d, g, x)
	const k, c = 0.7978845608028654, 0.044715
	var worstY, worstD float64
	for i, v := range x {
		f := float64(v)
		th := math.Tanh(k * (f + c*f*f*f))
		wy := 0.5 * f * (1 + th)
		wd := 0.5*(1+th) + 0.5*f*(1-th*th)*k*(1+3*c*f*f)
		worstY = max(worstY, math.Abs(float64(y[i])-wy)/max(math.Abs(wy), 1))
		worstD = max(worstD, math.Abs(float64(d[i])-wd)/max(math.Abs(wd), 1))
	}
	// float32 has 6e-8 relative precision; tanh through 1 - 2/(1+e^{2u})
	// loses a few units near u = 0.
	if worstY > 1e-6 || worstD > 1e-6 {
		t.Errorf("worst error against float64: GELU %.3g, gradient %.3g (want ≤ 1e-6)", worstY, worstD)
	}
	t.Logf("worst error against float64: GELU %.3g, gradient %.3g", worstY, worstD)

	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	sp := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1))}
	ys, ds := make([]float32, len(sp)), make([]float32, len(sp))
	GELUTanh(ys, sp)
	GELUTanhGrad(ds, []float32{1, 1, 1, 1, 1}, sp)
	if ys[0] == ys[0] || ds[0] == ds[0] {
		t.Errorf("GELU(NaN) = %v, gradient %v: want NaN", ys[0], ds[0])
	}
	if ys[1] != inf || ys[3] != 0 || ds[3] != 0.5 {
		t.Errorf("GELU(+Inf) = %v, GELU(0) = %v, GELU'(0) = %v: want +Inf, 0, 0.5", ys[1], ys[3], ds[3])
	}
	// PyTorch's formula: 0.5·x·(1 + tanh) with tanh(-Inf) = -1 is NaN, and
	// the gradient's x·(1 - tanh²) term is NaN at ±Inf.
	if ys[2] == ys[2] || ds[1] == ds[1] || ds[2] == ds[2] {
		t.Errorf("GELU(-Inf) = %v, GELU'(+Inf) = %v, GELU'(-Inf) = %v: want NaN (as PyTorch)", ys[2], ds[1], ds[2])
	}
	// Far out, tanh is ±1 exactly: GELU(x) = x and 0, the gradient 1 and 0.
	far := []float32{50, -50}
	GELUTanh(ys[:2], far)
	GELUTanhGrad(ds[:2], []float32{1, 1}, far)
	if ys[0] != 50 || ys[1] != 0 || ds[0] != 1 || ds[1] != 0 {
		t.Errorf("GELU(±50) = %v, gradient %v: want [50 -0], [1 0]", ys[:2], ds[:2])
	}
}

// BenchmarkGELU measures GELUTanh and its gradient at every level next to
// the Go loop (level -1).
func BenchmarkGELU(b *testing.B) {
	const n = 32 * 64 * 512 // a GPT MLP's activations: batch 32, T 64, 4·128
	r := rand.New(rand.NewPCG(9, 10))
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, lv := range append(levels(), -1) {
		fwd, bwd := func() { geluTanh(lv, y, x) }, func() { geluTanhGrad(lv, y, x, x) }
		if lv < 0 {
			fwd, bwd = func() { geluTanhGo(y, x) }, func() { geluTanhGradGo(y, x, x) }
		}
		b.Run(fmt.Sprintf("forward/level=%d", lv), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				fwd()
			}
		})
		b.Run(fmt.Sprintf("grad/level=%d", lv), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				bwd()
			}
		})
	}
}
