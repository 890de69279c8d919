package ops

import (
	"math"

	"gorun/ops/internal/vec"
)

// Optimizer steps and gradient clipping: they update their inputs in place
// (InPlace) and have no outputs.

const (
	// SGDStep: in param, grad, momentum buffer (unused when Momentum is 0).
	// PyTorch's torch.optim.SGD rule. Attrs: LR, Momentum, Dampening,
	// WeightDecay, Nesterov. Ctx.Step is the 1-based optimizer step.
	SGDStep Op = "sgd_step"

	// AdamStep: in param, grad, m, v. PyTorch's torch.optim.Adam rule.
	// Attrs: LR, Beta1, Beta2, Eps, WeightDecay. Ctx.Step is the 1-based
	// optimizer step.
	AdamStep Op = "adam_step"

	// AdamWStep: in param, grad, m, v. PyTorch's torch.optim.AdamW rule
	// (amsgrad=False): param *= 1 - LR·WeightDecay (decoupled weight
	// decay), then Adam's update without weight decay in the gradient.
	// Attrs: LR, Beta1, Beta2, Eps, WeightDecay (PyTorch's default 1e-2,
	// used as given). Ctx.Step is the 1-based optimizer step.
	AdamWStep Op = "adamw_step"

	// ClipGradNorm: in grads (every gradient, one buffer); scales them in
	// place by min(1, MaxNorm/(‖grads‖₂ + 1e-6)), the norm summed in
	// float64 — torch.nn.utils.clip_grad_norm_ over all parameters.
	// Attrs: MaxNorm.
	ClipGradNorm Op = "clip_grad_norm"

	// GradNormSq: in grads (a part of the gradients), sq [1]: writes the
	// sum of squares of grads (summed in float64) into sq — ClipGradNorm's
	// first half, for gradients sharded across ranks, whose parts' sums an
	// all-reduce adds before ClipGradScale. Updates sq in place.
	GradNormSq Op = "grad_norm_sq"

	// ClipGradScale: in grads (a part of the gradients), sq [k] (sums of
	// squares whose total is the squared norm of every gradient, added in
	// float64 in order); scales grads in place by min(1, MaxNorm/(√Σsq +
	// 1e-6)) — ClipGradNorm's second half. Attrs: MaxNorm.
	ClipGradScale Op = "clip_grad_scale"
)

var optimizerOps = []*Def{
	{
		Op: SGDStep, InPlace: true, In: []Input{{Name: "param"}, {Name: "grad"}, {Name: "momentum_buffer"}},
		Kernel32: sgdStep[float32], Kernel64: sgdStep[float64],
	},
	{
		Op: AdamStep, InPlace: true, In: []Input{{Name: "param"}, {Name: "grad"}, {Name: "m"}, {Name: "v"}},
		Kernel32: adamStep[float32], Kernel64: adamStep[float64],
	},
	{
		Op: AdamWStep, InPlace: true, In: []Input{{Name: "param"}, {Name: "grad"}, {Name: "m"}, {Name: "v"}},
		Kernel32: adamWStep[float32], Kernel64: adamWStep[float64],
	},
	{
		Op: ClipGradNorm, InPlace: true, In: []Input{{Name: "grads"}},
		Kernel32: clipGradNorm[float32], Kernel64: clipGradNorm[float64],
	},
	{
		Op: GradNormSq, InPlace: true, In: []Input{{Name: "grads"}, {Name: "sq"}},
		Kernel32: gradNormSq[float32], Kernel64: gradNormSq[float64],
	},
	{
		Op: ClipGradScale, InPlace: true, In: []Input{{Name: "grads"}, {Name: "sq"}},
		Kernel32: clipGradScale[float32], Kernel64: clipGradScale[float64],
	},
}

// The optimizer kernels follow PyTorch 1.13's single-tensor implementations
// (torch/optim/sgd.py _single_tensor_sgd, adam.py _single_tensor_adam,
// adamw.py _single_tensor_adamw)
// operation by operation, with the hyper-parameters rounded to T as PyTorch
// rounds Python scalars to the tensor's dtype. PyTorch's CPU kernels (built
// for AVX2 and later) compute add(x, alpha=a) and addcmul as fused
// multiply-adds; fma does the same here (and vec.SGD, which runs the
// float32 SGD step in C), so float32 results are bit-identical to
// PyTorch's on such machines.

// sgdStep: in param, grad, momentum buffer (unused, and may be nil, when
// Momentum is 0). Updates param and the buffer in place:
//
//	d = grad + wd·param
//	buf = d (Step 1) or momentum·buf + (1-dampening)·d
//	d = nesterov ? d + momentum·buf : buf
//	param -= lr·d
func sgdStep[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	p := live(in[0])
	g := in[1].Data[:len(p)]
	if is32[T]() {
		va := vec.SGDArgs{LR: float32(a.LR), WeightDecay: float32(a.WeightDecay), Momentum: float32(a.Momentum),
			Keep: float32(1 - a.Dampening), Nesterov: a.Nesterov, First: c.Step <= 1}
		var buf []float32
		if a.Momentum != 0 {
			buf = view[float32](in[2].Data)
		}
		vec.SGD(&va, view[float32](p), view[float32](g), buf)
		return
	}
	wd, negLR := T(a.WeightDecay), T(-a.LR)
	decay := a.WeightDecay != 0
	if a.Momentum == 0 {
		for i, d := range g {
			if decay {
				d = fma(wd, p[i], d)
			}
			p[i] = fma(negLR, d, p[i])
		}
		return
	}
	buf := in[2].Data[:len(p)]
	mom, damp := T(a.Momentum), T(1-a.Dampening)
	first := c.Step <= 1
	for i, d := range g {
		if decay {
			d = fma(wd, p[i], d) // d_p.add(param, alpha=wd)
		}
		b := d // torch.clone(d_p)
		if !first {
			b = fma(damp, d, buf[i]*mom) // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
		}
		buf[i] = b
		if a.Nesterov {
			d = fma(mom, b, d) // d_p.add(buf, alpha=momentum)
		} else {
			d = b
		}
		p[i] = fma(negLR, d, p[i]) // param.add_(d_p, alpha=-lr)
	}
}

// adamStep: in param, grad, m, v. Updates all but grad in place (t =
// Ctx.Step):
//
//	g = grad + wd·param
//	m = β1·m + (1-β1)·g
//	v = β2·v + (1-β2)·g²
//	param -= (lr/(1-β1ᵗ))·m / (sqrt(v)/sqrt(1-β2ᵗ) + eps)
func adamStep[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) { adam(c, a, in, false) }

// adamWStep: in param, grad, m, v. Updates all but grad in place (t =
// Ctx.Step), as torch.optim.AdamW (adamw.py _single_tensor_adamw):
//
//	param *= 1 - lr·wd
//	m = β1·m + (1-β1)·grad
//	v = β2·v + (1-β2)·grad²
//	param -= (lr/(1-β1ᵗ))·m / (sqrt(v)/sqrt(1-β2ᵗ) + eps)
func adamWStep[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) { adam(c, a, in, true) }

// adam is both rules: the weight decay added to the gradient (Adam) or
// applied to the parameter first (AdamW, decoupled).
func adam[T Float](c *Ctx[T], a *Attrs, in []*Buf[T], decoupled bool) {
	p := live(in[0])
	g := in[1].Data[:len(p)]
	m := in[2].Data[:len(p)]
	v := in[3].Data[:len(p)]
	step := float64(c.Step)
	bc1 := 1 - math.Pow(a.Beta1, step)
	bc2 := 1 - math.Pow(a.Beta2, step)
	negStep := T(-(a.LR / bc1))
	bc2Sqrt := T(math.Sqrt(bc2))
	b1, c1 := T(a.Beta1), T(1-a.Beta1)
	b2, c2 := T(a.Beta2), T(1-a.Beta2)
	wd, eps := T(a.WeightDecay), T(a.Eps)
	coupled := a.WeightDecay != 0 && !decoupled
	shrink := T(1 - a.LR*a.WeightDecay)
	for i, gi := range g {
		pi := p[i]
		if decoupled {
			pi *= shrink // param.mul_(1 - lr * weight_decay)
		} else if coupled {
			gi = fma(wd, pi, gi) // grad.add(param, alpha=wd)
		}
		mi := fma(c1, gi, m[i]*b1)    // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
		vi := fma(c2*gi, gi, v[i]*b2) // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
		m[i], v[i] = mi, vi
		denom := T(math.Sqrt(float64(vi)))/bc2Sqrt + eps // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
		p[i] = pi + negStep*mi/denom                     // param.addcdiv_(exp_avg, denom, value=-step_size)
	}
}

// fma returns a·b + c rounded once (for float32, through float64: the
// product is exact there, so this is float32's fused multiply-add except in
// vanishingly rare double-rounding cases).
func fma[T Float](a, b, c T) T {
	return T(math.FMA(float64(a), float64(b), float64(c)))
}

// clipGradNorm scales the gradients by min(1, MaxNorm/(norm + 1e-6)), as
// torch.nn.utils.clip_grad_norm_ (which multiplies by the clamped
// coefficient even when it is 1).
func clipGradNorm[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	g := live(in[0])
	var s float64
	for _, x := range g {
		s += float64(x) * float64(x)
	}
	coef := T(min(a.MaxNorm/(math.Sqrt(s)+1e-6), 1))
	for i := range g {
		g[i] *= coef
	}
}

// gradNormSq writes the sum of squares of the gradients in[0] (a part of
// them), summed in float64 as clipGradNorm does, into in[1][0].
func gradNormSq[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	var s float64
	for _, x := range live(in[0]) {
		s += float64(x) * float64(x)
	}
	in[1].Data[0] = T(s)
}

// clipGradScale scales the gradients (a part of them) by min(1,
// MaxNorm/(norm + 1e-6)), the norm the square root of the sums in in[1]
// added in float64, as clipGradNorm does with the norm of all gradients.
func clipGradScale[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	g := live(in[0])
	var s float64
	for _, x := range live(in[1]) {
		s += float64(x)
	}
	coef := T(min(a.MaxNorm/(math.Sqrt(s)+1e-6), 1))
	for i := range g {
		g[i] *= coef
	}
}
