package vec

import "math"

// GELUTanh sets y[i] to GELU(x[i]) with PyTorch's tanh approximation,
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed in float32 with 1 ± tanh
// through one exponential (Cephes' expf polynomial; within a few float32
// units in the last place of the float64 formula). y may be x.
func GELUTanh(y, x []float32) {
	if len(x) == 0 {
		return
	}
	_ = y[len(x)-1]
	geluTanh(level, y, x)
}

// GELUTanhGrad sets dx[i] = dy[i]·GELU'(x[i]) for the tanh approximation,
// in float32 as GELUTanh. dx may be dy.
func GELUTanhGrad(dx, dy, x []float32) {
	if len(dy) == 0 {
		return
	}
	_, _ = dx[len(dy)-1], x[len(dy)-1]
	geluTanhGrad(level, dx, dy, x)
}

// The constants of gelu.c.
const (
	geluK  float32 = 0.7978845608028654
	geluC  float32 = 0.044715
	expHi  float32 = 88
	expLo  float32 = -87
	log2e  float32 = 1.44269504088896341
	expC1  float32 = 0.693359375
	expC2  float32 = -2.12194440e-4
	expP0  float32 = 1.9875691500e-4
	expP1  float32 = 1.3981999507e-3
	expP2  float32 = 8.3334519073e-3
	expP3  float32 = 4.1665795894e-2
	expP4  float32 = 1.6666665459e-1
	expP5  float32 = 5.0000001201e-1
	three  float32 = 3
	halfF  float32 = 0.5
	oneF   float32 = 1
	twoF   float32 = 2
	geluC3         = three * geluC
)

// The Go loops below are gelu.c's scalar code operation for operation; the
// float32 conversions round every product, so the compiler fuses nothing.

func expGo(x float32) float32 {
	fx := float32(math.Floor(float64(float32(x*log2e) + halfF)))
	x = x - float32(fx*expC1)
	x = x - float32(fx*expC2)
	z := float32(x * x)
	y := expP0
	y = float32(y*x) + expP1
	y = float32(y*x) + expP2
	y = float32(y*x) + expP3
	y = float32(y*x) + expP4
	y = float32(y*x) + expP5
	y = float32(y*z) + x
	y = y + oneF
	return y * math.Float32frombits(uint32(int32(fx)+127)<<23)
}

// spGo is gelu.c's sp_s: 1 - tanh(u) and 1 + tanh(u).
func spGo(u float32) (s, p float32) {
	t := twoF * u
	if t > expHi {
		return 0, twoF
	}
	if t < expLo {
		return twoF, 0
	}
	e := expGo(t)
	s = twoF / (oneF + e)
	return s, s * e
}

func geluArg(f float32) float32 {
	f3 := float32(float32(float32(geluC*f)*f) * f)
	return geluK * (f + f3)
}

func geluTanhGo(y, x []float32) {
	y = y[:len(x)]
	for i, f := range x {
		_, p := spGo(geluArg(f))
		y[i] = float32(halfF*f) * p
	}
}

func geluTanhGradGo(dx, dy, x []float32) {
	dx, x = dx[:len(dy)], x[:len(dy)]
	for i, g := range dy {
		f := x[i]
		s, p := spGo(geluArg(f))
		a := halfF * p
		b := float32(float32(halfF*f)*float32(s*p)) * geluK
		b = b * (oneF + float32(float32(geluC3*f)*f))
		dx[i] = g * (a + b)
	}
}
