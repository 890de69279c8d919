package ops

import (
	"math"

	"gorun/ops/internal/vec"
)

// Activations: elementwise functions of one tensor (ReLU, Sigmoid, Tanh,
// LeakyReLU, GELU, SiLU) and their gradients. Every kernel may write its output
// over its input (ReuseInput).

const (
	// ReLU: in x; out y = max(x, 0).
	ReLU Op = "relu"

	// ReLUGrad: in dy, y, optional dy2; out dx = dy where y > 0, else 0;
	// with dy2 (the engine's fusion of the Add that sums a value's two
	// gradients) dy + dy2, rounded as Add rounds it, where y > 0.
	ReLUGrad Op = "relu_grad"

	// Sigmoid: in x; out y = 1/(1+exp(-x)).
	Sigmoid Op = "sigmoid"

	// SigmoidGrad: in dy, y (the Sigmoid output); out dx = dy·y·(1-y).
	SigmoidGrad Op = "sigmoid_grad"

	// Tanh: in x; out y = tanh(x).
	Tanh Op = "tanh"

	// TanhGrad: in dy, y (the Tanh output); out dx = dy·(1-y²).
	TanhGrad Op = "tanh_grad"

	// LeakyReLU: in x; out y = x where x > 0, else NegativeSlope·x. Attrs:
	// NegativeSlope (used as given; PyTorch's default is 0.01).
	LeakyReLU Op = "leaky_relu"

	// LeakyReLUGrad: in dy, x (the LeakyReLU input); out dx = dy where
	// x > 0, else NegativeSlope·dy. Attrs: NegativeSlope.
	LeakyReLUGrad Op = "leaky_relu_grad"

	// GELU: in x; out y = x·Φ(x), Φ the standard normal CDF (erf, exact),
	// or with Approximate PyTorch's approximate="tanh" form
	// 0.5·x·(1+tanh(sqrt(2/π)·(x+0.044715·x³))). Attrs: Approximate.
	GELU Op = "gelu"

	// GELUGrad: in dy, x (the GELU input); out dx = dy·GELU'(x). Attrs:
	// Approximate.
	GELUGrad Op = "gelu_grad"

	// SiLU: in x; out y = x·sigmoid(x) = x/(1+exp(-x)) (F.silu, the swish
	// of EfficientNet and LLaMA's MLPs).
	SiLU Op = "silu"

	// SiLUGrad: in dy, x (the SiLU input); out dx = dy·s·(1 + x·(1-s)),
	// s = sigmoid(x) (PyTorch's silu_backward).
	SiLUGrad Op = "silu_grad"
)

var activationOps = []*Def{
	{
		Op: ReLU, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true, Autocast: AutocastExact,
		Shape: sameShape, Grad: gradWithOut(ReLUGrad, 0),
		Kernel32: relu[float32], Kernel64: relu[float64],
	},
	{
		Op: ReLUGrad, In: []Input{{Name: "dy"}, {Name: "y"}, {Name: "dy2", Optional: true}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		StepName: func(a *Attrs, given func(int) bool) string {
			if given(2) { // the Add of two gradients, fused
				return "add+" + string(ReLUGrad)
			}
			return string(ReLUGrad)
		},
		Kernel32: reluGrad[float32], Kernel64: reluGrad[float64],
	},
	{
		Op: Sigmoid, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradWithOut(SigmoidGrad, 0),
		Kernel32: sigmoid[float32], Kernel64: sigmoid[float64],
	},
	{
		Op: SigmoidGrad, In: []Input{{Name: "dy"}, {Name: "y"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: sigmoidGrad[float32], Kernel64: sigmoidGrad[float64],
	},
	{
		Op: Tanh, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradWithOut(TanhGrad, 0),
		Kernel32: tanh[float32], Kernel64: tanh[float64],
	},
	{
		Op: TanhGrad, In: []Input{{Name: "dy"}, {Name: "y"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: tanhGrad[float32], Kernel64: tanhGrad[float64],
	},
	{
		Op: LeakyReLU, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradWithIn(LeakyReLUGrad),
		Kernel32: leakyReLU[float32], Kernel64: leakyReLU[float64],
	},
	{
		Op: LeakyReLUGrad, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: leakyReLUGrad[float32], Kernel64: leakyReLUGrad[float64],
	},
	{
		Op: GELU, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradWithIn(GELUGrad),
		Kernel32: gelu[float32], Kernel64: gelu[float64],
	},
	{
		Op: GELUGrad, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: geluGrad[float32], Kernel64: geluGrad[float64],
	},
	{
		Op: SiLU, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradWithIn(SiLUGrad),
		Kernel32: silu[float32], Kernel64: silu[float64],
	},
	{
		Op: SiLUGrad, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: siluGrad[float32], Kernel64: siluGrad[float64],
	},
}

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

// silu: in x; out y = x/(1+exp(-x)), PyTorch's formula in T's precision
// (exp rounded to T, so that float32 overflows where PyTorch's does: +Inf
// gives +Inf, -Inf NaN, x ≤ -89 gives -0 in float32).
func silu[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	for i, v := range x {
		y[i] = v / (1 + T(math.Exp(-float64(v))))
	}
}

// siluGrad: in dy, x (the SiLU input); out dx = dy·s·(1 + x·(1-s)), s =
// 1/(1+exp(-x)), PyTorch's silu_backward in T's precision (±Inf give
// NaN, as there). The output may alias dy.
func siluGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	x := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	for i, g := range dy {
		v := x[i]
		s := 1 / (1 + T(math.Exp(-float64(v))))
		dx[i] = g * s * (1 + v*(1-s))
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
	if r := lowRounder[T](a); r != nil && a.Approximate {
		geluTanhLowp(r, view[float32](y), view[float32](x))
		return
	}
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
	if r := lowRounder[T](a); r != nil && a.Approximate {
		geluTanhGradLowp(r, view[float32](dx), view[float32](dy), view[float32](x))
		return
	}
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
