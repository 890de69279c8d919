package ops

import (
	"math"

	"gorun/ops/internal/vec"
)

// relu: in x; out y = max(x, 0). A NaN stays NaN, as in PyTorch.
func relu[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	if is32[T]() {
		vec.ReLU(view[float32](y), view[float32](x))
		return
	}
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		y[i] = v
	}
}

// reluGrad: in dy, y, optional dy2; out dx = dy (+ dy2) where y > 0, else 0.
func reluGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	y := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	var dy2 []T
	if b := optIn(in, 2); b != nil {
		dy2 = b.Data[:len(dy)]
	}
	if is32[T]() {
		vec.ReLUGradAdd(view[float32](dx), view[float32](dy), view[float32](dy2), view[float32](y))
		return
	}
	for i, g := range dy {
		if dy2 != nil {
			g += dy2[i]
		}
		if !(y[i] > 0) {
			g = 0
		}
		dx[i] = g
	}
}

// sigmoid: in x; out y = 1/(1+exp(-x)), computed in float64.
func sigmoid[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	for i, v := range x {
		y[i] = T(1 / (1 + math.Exp(-float64(v))))
	}
}

// sigmoidGrad: in dy, y (the Sigmoid output); out dx = dy·(1-y)·y.
func sigmoidGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	y := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	for i, g := range dy {
		dx[i] = g * (1 - y[i]) * y[i]
	}
}

// tanh: in x; out y = tanh(x), computed in float64.
func tanh[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	for i, v := range x {
		y[i] = T(math.Tanh(float64(v)))
	}
}

// tanhGrad: in dy, y (the Tanh output); out dx = dy·(1-y²).
func tanhGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	y := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	for i, g := range dy {
		dx[i] = g * (1 - y[i]*y[i])
	}
}

// leakyReLU: in x; out y = x where x > 0, else NegativeSlope·x.
func leakyReLU[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	slope := T(a.NegativeSlope)
	for i, v := range x {
		if !(v > 0) {
			v *= slope
		}
		y[i] = v
	}
}

// leakyReLUGrad: in dy, x (the LeakyReLU input); out dx = dy where x > 0,
// else NegativeSlope·dy.
func leakyReLUGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	x := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	slope := T(a.NegativeSlope)
	for i, g := range dy {
		if !(x[i] > 0) {
			g *= slope
		}
		dx[i] = g
	}
}

// The tanh form of GELU: 0.5·x·(1+tanh(k·(x + 0.044715·x³))), k =
// sqrt(2/π).
const (
	geluK     = 0.7978845608028654 // sqrt(2/π)
	geluC     = 0.044715
	invSqrt2  = 0.7071067811865476 // 1/sqrt(2)
	invSqrt2π = 0.3989422804014327 // 1/sqrt(2π)
)

// gelu: in x; out y = x·Φ(x) (erf), or the tanh form with Approximate,
// computed in float64 (float32's tanh form: vec.GELUTanh, in float32 within
// 2e-7 of the float64 formula). The output may alias the input.
func gelu[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	if a.Approximate && is32[T]() {
		vec.GELUTanh(view[float32](y), view[float32](x))
		return
	}
	if a.Approximate {
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + fastTanh(geluK*(f+geluC*f*f*f))))
		}
		return
	}
	for i, v := range x {
		f := float64(v)
		y[i] = T(0.5 * f * (1 + math.Erf(f*invSqrt2)))
	}
}

// geluGrad: in dy, x (the GELU input); out dx = dy·GELU'(x), computed in
// float64 (float32's tanh form: vec.GELUTanhGrad). The output may alias dy.
func geluGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	x := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	if a.Approximate && is32[T]() {
		vec.GELUTanhGrad(view[float32](dx), view[float32](dy), view[float32](x))
		return
	}
	if a.Approximate {
		for i, g := range dy {
			f := float64(x[i])
			th := fastTanh(geluK * (f + geluC*f*f*f))
			d := 0.5*(1+th) + 0.5*f*(1-th*th)*geluK*(1+3*geluC*f*f)
			dx[i] = T(float64(g) * d)
		}
		return
	}
	for i, g := range dy {
		f := float64(x[i])
		d := 0.5*(1+math.Erf(f*invSqrt2)) + f*invSqrt2π*math.Exp(-0.5*f*f)
		dx[i] = T(float64(g) * d)
	}
}

// fastTanh is tanh(u) = 1 − 2/(1 + e^{2u}) through one exponential: 9.3
// ns against math.Tanh's 12.5 here (go test -bench, one core), where
// GELU's tanh is a third of a GPT's CPU step; ±Inf and large |u| give ±1.
// Its absolute error is a few units of float64's last place, far below
// float32's.
func fastTanh(u float64) float64 {
	return 1 - 2/(1+math.Exp(2*u))
}
