package ops

import (
	"fmt"
	"math"
	"strings"
)

// Precision: mixed precision as a script choice (train(precision =
// "bf16")). A Precision names the format values are computed in; Round
// rounds float32 values to it, so that a float32 arena holds exactly the
// values a bfloat16 or float16 tensor would. What the engine does with each
// op under mixed precision (torch.autocast's lists) is the op's
// Def.Autocast.

// Precision is the number format a train() call computes in: FP32 (the
// default), BF16 or FP16. Its String is the script's spelling.
type Precision uint8

const (
	// FP32 is full precision: every value a float32.
	FP32 Precision = iota
	// BF16 is bfloat16 (8 exponent bits, 8 significand bits): matrix
	// products and convolutions take bfloat16 operands and accumulate in
	// float32, as torch.autocast(dtype=torch.bfloat16).
	BF16
	// FP16 is IEEE half precision (5 exponent bits, 11 significand bits),
	// as BF16 plus dynamic loss scaling (GradScaler).
	FP16
)

// Precisions lists every Precision in the order scripts document them.
var Precisions = []Precision{FP32, BF16, FP16}

// String returns the script's spelling: "fp32", "bf16" or "fp16".
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// Dtype is the name PyTorch gives the format ("float32", "bfloat16",
// "float16"), as plans print each step's.
func (p Precision) Dtype() string {
	switch p {
	case BF16:
		return "bfloat16"
	case FP16:
		return "float16"
	}
	return "float32"
}

// ParsePrecision turns a script's precision = "..." into a Precision; the
// error lists the choices.
func ParsePrecision(s string) (Precision, error) {
	for _, p := range Precisions {
		if s == p.String() {
			return p, nil
		}
	}
	names := make([]string, len(Precisions))
	for i, p := range Precisions {
		names[i] = fmt.Sprintf("%q", p.String())
	}
	last := len(names) - 1
	return FP32, fmt.Errorf("precision must be %s or %s, got %q", strings.Join(names[:last], ", "), names[last], s)
}

// Autocast is what mixed precision does with an op (Def.Autocast), as
// PyTorch 1.13's CPU torch.autocast does: which ops take low-precision
// operands, which run in float32, and which follow their inputs.
type Autocast uint8

const (
	// AutocastFollow (the default): the output is low precision when the
	// op has a float input that is not a parameter and every such input is
	// low precision (PyTorch's type promotion: bf16 + fp32 is fp32); the
	// kernel computes in float32 and the engine rounds its output.
	// Parameters do not promote (a norm's weight and bias).
	AutocastFollow Autocast = iota
	// AutocastLower: a matrix product or convolution (autocast's lower
	// precision list): every float input is rounded to low precision, the
	// kernel accumulates in float32, and the output is rounded.
	AutocastLower
	// AutocastFP32: the op runs in float32 whatever its inputs (losses:
	// autocast's float32 list); low-precision inputs are read as they are
	// (bf16 → fp32 is exact).
	AutocastFP32
	// AutocastExact: as AutocastFollow, but the op only selects, moves or
	// zeroes its input's values (ReLU, max pooling, reshapes), so a
	// low-precision input gives a low-precision output with no rounding.
	AutocastExact
)

// Round: in x; out x rounded to the nearest value of Attrs.Precision's
// format (bfloat16 or float16), ties to even — the bits PyTorch's
// x.to(torch.bfloat16) or x.half() keep, held in float32. NaN stays NaN
// (bfloat16: PyTorch's 0x7FC0); float16 overflows to ±Inf past 65504;
// float16's subnormals are kept. FP32 is the identity. Gradient: Round of
// dy with the same format (autograd's gradient of a cast is the cast back,
// and the gradient of a low-precision tensor is low precision). With
// Attrs.Accumulate the rounded values add into y (a parameter's gradient
// summed over micro-batches, as PyTorch adds each backward's float32 copy
// of the bfloat16 gradient into .grad). Attrs: Precision, Accumulate.
//
// The float64 kernel, which exists for finite-difference gradient checks,
// is the identity: a cast's derivative is 1 (the straight-through rule
// autograd applies), which a rounding step function would hide from
// finite differences. Training runs the float32 kernel.
const Round Op = "round"

// GradUnscale: in grads (every gradient, one buffer); multiplies them in
// place by Ctx.LossScale, which in the update phase of an fp16 plan the
// runner sets to 1/S, S the dynamic loss scale the step's gradients were
// computed under: GradScaler.unscale_ (its inverse scale, 1/S in float32,
// exact for powers of two), before clipping and the optimizer.
const GradUnscale Op = "grad_unscale"

var precisionOps = []*Def{
	{
		Op: Round, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true, Accumulates: true,
		Shape: sameShape, Grad: gradOfDy(Round),
		StepName: func(a *Attrs, _ func(int) bool) string {
			return "round_" + a.Precision.String()
		},
		Kernel32: round32, Kernel64: round64,
	},
	{
		Op: GradUnscale, InPlace: true, In: []Input{{Name: "grads"}},
		Kernel32: gradUnscale[float32], Kernel64: gradUnscale[float64],
	},
}

// gradUnscale is GradUnscale's kernel: grads ·= float32(LossScale).
func gradUnscale[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	inv := T(float32(c.LossScale))
	g := live(in[0])
	for i := range g {
		g[i] *= inv
	}
}

// round32 is Round's float32 kernel.
func round32(c *Ctx[float32], a *Attrs, in, out []*Buf[float32]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	if a.Accumulate {
		r := rounder(a.Precision)
		if r == nil {
			r = func(v float32) float32 { return v }
		}
		for i, v := range x {
			y[i] += r(v)
		}
		return
	}
	switch a.Precision {
	case BF16:
		for i, v := range x {
			y[i] = RoundBF16(v)
		}
	case FP16:
		for i, v := range x {
			y[i] = RoundFP16(v)
		}
	default:
		copy(y, x)
	}
}

// round64 is Round's float64 kernel: the identity (see Round).
func round64(c *Ctx[float64], a *Attrs, in, out []*Buf[float64]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	if a.Accumulate {
		for i, v := range x {
			y[i] += v
		}
		return
	}
	copy(y, x)
}

// RoundBF16 rounds v to the nearest bfloat16, ties to even, as PyTorch's
// c10::BFloat16 does (round_to_nearest_even: NaN becomes 0x7FC0, values past
// the largest bfloat16 round to ±Inf).
func RoundBF16(v float32) float32 {
	u := math.Float32bits(v)
	if v != v {
		return math.Float32frombits(0x7FC00000)
	}
	u += 0x7FFF + (u>>16)&1
	return math.Float32frombits(u &^ 0xFFFF)
}

// RoundFP16 rounds v to the nearest IEEE float16, ties to even, with
// float16's subnormals (multiples of 2⁻²⁴) and ±Inf from 65520 on, as
// PyTorch's x.half() does. NaN stays NaN.
func RoundFP16(v float32) float32 {
	u := math.Float32bits(v)
	sign, a := u&0x80000000, u&^0x80000000
	switch {
	case a >= 0x7F800000: // ±Inf, NaN
		return v
	case a >= 0x477FF000: // 65520 and up
		return math.Float32frombits(sign | 0x7F800000)
	case a < 0x38800000: // below 2⁻¹⁴: float16's subnormals, multiples of 2⁻²⁴
		r := math.RoundToEven(math.Abs(float64(v))*(1<<24)) / (1 << 24)
		return math.Float32frombits(sign | math.Float32bits(float32(r)))
	}
	// A normal float16: keep 10 of float32's 23 fraction bits, ties to
	// even; a carry moves into the exponent, as it should.
	a += 0xFFF + (a>>13)&1
	return math.Float32frombits(sign | a&^0x1FFF)
}

// Low-precision kernels. PyTorch's CPU kernels for bfloat16 tensors do not
// all compute in float32 and round once: some round intermediates to
// bfloat16 (Vectorized<BFloat16> arithmetic, bfloat16 scratch). Under
// autocast the engine gives the ops whose kernels do so (GELU's tanh form,
// LogSoftmax, and the gradients of those and of Softmax) Attrs.Precision,
// and their float32 kernels then round where PyTorch 1.13's do, found
// value by value against it (testdata/gen_lowp_golden.py). The float64
// kernels ignore Attrs.Precision, as Round's does.

// rounder is Precision p's rounding; nil for FP32.
func rounder(p Precision) func(float32) float32 {
	switch p {
	case BF16:
		return RoundBF16
	case FP16:
		return RoundFP16
	}
	return nil
}

// logSoftmaxLowp is LogSoftmax on low-precision rows: y = r((x - max) -
// r(log r(Σ exp(x - max)))), the sum and its log held in the low format.
func logSoftmaxLowp(r func(float32) float32, x, y []float32, k int) {
	for o := 0; o+k <= len(x); o += k {
		xr, yr := x[o:o+k], y[o:o+k]
		m := rowMax(xr)
		var s float64
		for _, v := range xr {
			s += math.Exp(float64(v - m))
		}
		ls := r(float32(math.Log(float64(r(float32(s))))))
		for j, v := range xr {
			yr[j] = r((v - m) - ls)
		}
	}
}

// logSoftmaxGradLowp is LogSoftmaxGrad on low-precision rows: dx =
// r(dy - exp(y)·r(Σ dy)).
func logSoftmaxGradLowp(r func(float32) float32, dy, y, dx []float32, k int) {
	for o := 0; o+k <= len(dy); o += k {
		gr, yr, dr := dy[o:o+k], y[o:o+k], dx[o:o+k]
		var s float64
		for _, g := range gr {
			s += float64(g)
		}
		sr := float64(r(float32(s)))
		for j, g := range gr {
			dr[j] = r(float32(float64(g) - math.Exp(float64(yr[j]))*sr))
		}
	}
}

// softmaxGradLowp is SoftmaxGrad on low-precision rows: dx =
// r(y·(dy - r(Σ dy·y))).
func softmaxGradLowp(r func(float32) float32, dy, y, dx []float32, k int) {
	for o := 0; o+k <= len(dy); o += k {
		gr, yr, dr := dy[o:o+k], y[o:o+k], dx[o:o+k]
		var s float64
		for j, g := range gr {
			s += float64(g) * float64(yr[j])
		}
		sr := float64(r(float32(s)))
		for j, g := range gr {
			dr[j] = r(float32(float64(yr[j]) * (float64(g) - sr)))
		}
	}
}

// geluTanhLowp is GELU's tanh form as PyTorch's kernel computes it on
// low-precision values, every operation rounded:
// r(r(0.5·x)·r(1 + r(tanh(r(k·r(x + r(c·r(r(x·x)·x)))))))), k and c
// rounded too.
func geluTanhLowp(r func(float32) float32, y, x []float32) {
	k, c := r(geluK), r(geluC)
	for i, v := range x {
		cube := r(r(v*v) * v)
		inner := r(k * r(v+r(c*cube)))
		t := r(float32(math.Tanh(float64(inner))))
		y[i] = r(r(0.5*v) * r(1+t))
	}
}

// geluTanhGradLowp is GELUGrad's tanh form as PyTorch's kernel computes
// it on low-precision values, every operation rounded.
func geluTanhGradLowp(r func(float32) float32, dx, dy, x []float32) {
	k, c := r(geluK), r(geluC)
	c3 := r(3 * c)
	for i, v := range x[:len(dy)] {
		sq := r(v * v)
		cube := r(sq * v)
		inner := r(k * r(v+r(c*cube)))
		t := r(float32(math.Tanh(float64(inner))))
		left := r(0.5 * v)
		leftD := r(0.5 * r(1+t))
		tanhD := r(1 - r(t*t))
		innerD := r(k * r(1+r(c3*sq)))
		rightD := r(r(left*tanhD) * innerD)
		dx[i] = r(dy[i] * r(leftD+rightD))
	}
}

// lowRounder is the rounding a float32 kernel given a applies to mirror
// PyTorch's CPU kernel for bfloat16 tensors (Attrs.Precision BF16); nil
// for float64 kernels, for no attributes, for FP32 and for FP16: PyTorch
// 1.13 has no float16 CPU kernels for these ops, and its CUDA ones compute
// in float32 and round once, as the engine's Round after the op does.
func lowRounder[T Float](a *Attrs) func(float32) float32 {
	if a == nil || !is32[T]() || a.Precision != BF16 {
		return nil
	}
	return RoundBF16
}
