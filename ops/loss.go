package ops

import (
	"fmt"
	"math"
	"slices"

	"gorun/ops/internal/vec"
)

// Losses: negative log-likelihood, cross-entropy and mean squared error,
// each a [1] sum over the batch scaled by Ctx.LossScale, and their
// gradients. Losses accumulate over micro-batches (Accumulates).

const (
	// NLLLoss: in logp[N,...,C], target[N,...] (Idx; logp's shape without
	// its last dimension); out loss[1] = -Ctx.LossScale · Σₚ logp[p,
	// targetₚ], summed over every position p, classes along the last
	// dimension. Attrs: IgnoreIndex, HasIgnore (below).
	NLLLoss Op = "nll_loss"

	// NLLLossGrad: in dloss[1], target[N,...] (Idx); out dx[N,...,C].
	// Attrs: IgnoreIndex, HasIgnore (as NLLLoss).
	NLLLossGrad Op = "nll_loss_grad"

	// CrossEntropy: in logits[N,...,C], target[N,...] (Idx); out loss[1] =
	// Ctx.LossScale · Σₚ ((1-ε)·(-logpₚ[targetₚ]) + ε·mean_c(-logpₚ[c])),
	// logp = log_softmax(logits) over the last dimension, and probs (the
	// logits' shape) = softmax(logits), kept for the backward pass. Attrs:
	// LabelSmoothing (ε, 0 = none), IgnoreIndex, HasIgnore.
	//
	// With HasIgnore, positions whose target equals IgnoreIndex add 0 to
	// NLLLoss's and CrossEntropy's loss (both terms, with label smoothing)
	// and get 0 gradient; their target need not be a class. PyTorch's
	// reduction="mean" divides by the number of targets not ignored: the
	// engine is responsible for setting LossScale to 1/that count.
	CrossEntropy Op = "cross_entropy"

	// CrossEntropyGrad: in dloss[1], probs[N,...,C], target[N,...] (Idx);
	// out dx = LossScale·dloss·(probs - ((1-ε)·onehot(target) + ε/C)),
	// 0 at ignored positions. Attrs: LabelSmoothing (ε), IgnoreIndex,
	// HasIgnore.
	CrossEntropyGrad Op = "cross_entropy_grad"

	// MSELoss: in pred[N,...], target[N,...] (same shape, floats); out
	// loss[1] = Ctx.LossScale · Σₙ mean over sample n's elements of
	// (pred - target)². With LossScale 1/N it is PyTorch's mse_loss with
	// reduction="mean".
	MSELoss Op = "mse_loss"

	// MSELossGrad: in dloss[1], pred[N,...], target[N,...]; out dpred =
	// LossScale·dloss·2·(pred - target)/D, D the elements per sample.
	MSELossGrad Op = "mse_loss_grad"
)

var lossOps = []*Def{
	{
		Op: NLLLoss, In: []Input{{Name: "input"}, {Name: "target", Int: true}}, Out: []Output{{Name: "loss", Unbatched: true}}, Autocast: AutocastFP32,
		Accumulates: true, Shape: classLossShape(NLLLoss),
		Grad: func(b GradBuilder) []Value {
			return []Value{b.Grad(NLLLossGrad, b.Attrs(), b.In(0), b.OutGrad(0), b.In(1)), nil}
		},
		Kernel32: nllLoss[float32], Kernel64: nllLoss[float64],
	},
	{
		Op: NLLLossGrad, In: []Input{{Name: "dloss"}, {Name: "target", Int: true}}, Out: []Output{{Name: "dx"}},
		Kernel32: nllLossGrad[float32], Kernel64: nllLossGrad[float64],
	},
	{
		Op: CrossEntropy, In: []Input{{Name: "input"}, {Name: "target", Int: true}}, Autocast: AutocastFP32,
		Out:         []Output{{Name: "loss", Unbatched: true}, {Name: "probs", NoGrad: true}},
		Accumulates: true, Shape: classLossShape(CrossEntropy),
		Workspace: crossEntropyWork,
		Grad: func(b GradBuilder) []Value {
			return []Value{b.Grad(CrossEntropyGrad, b.Attrs(), b.In(0), b.OutGrad(0), b.Out(1), b.In(1)), nil}
		},
		Kernel32: crossEntropy[float32], Kernel64: crossEntropy[float64],
	},
	{
		Op: CrossEntropyGrad, In: []Input{{Name: "dloss"}, {Name: "probs"}, {Name: "target", Int: true}}, Out: []Output{{Name: "dx"}},
		Kernel32: crossEntropyGrad[float32], Kernel64: crossEntropyGrad[float64],
	},
	{
		Op: MSELoss, In: []Input{{Name: "input"}, {Name: "target"}}, Out: []Output{{Name: "loss", Unbatched: true}}, Autocast: AutocastFP32,
		Accumulates: true,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			p, t := in[0], in[1]
			if !slices.Equal(p, t) {
				return nil, fmt.Errorf("mse_loss: target shape %v differs from input shape %v", t, p)
			}
			return [][]int{{1}}, nil
		},
		Grad: func(b GradBuilder) []Value {
			return []Value{b.Grad(MSELossGrad, b.Attrs(), b.In(0), b.OutGrad(0), b.In(0), b.In(1)), nil}
		},
		Kernel32: mseLoss[float32], Kernel64: mseLoss[float64],
	},
	{
		Op: MSELossGrad, In: []Input{{Name: "dloss"}, {Name: "pred"}, {Name: "target"}}, Out: []Output{{Name: "dpred"}},
		Kernel32: mseLossGrad[float32], Kernel64: mseLossGrad[float64],
	},
}

// crossEntropyWork is CrossEntropy's (and CrossEntropyFused's)
// workspace: two elements per row of the logits.
func crossEntropyWork(a *Attrs, in, out [][]int) int {
	x := in[0]
	if len(x) == 0 || x[len(x)-1] == 0 {
		return 0
	}
	return 2 * prod(x) / x[len(x)-1]
}

// classLossShape is the shape rule of NLLLoss and CrossEntropy (op):
// logits or log-probabilities [N,...,C] and a target of their shape
// without the classes; out loss[1] and, for CrossEntropy, the
// probabilities.
func classLossShape(op Op) func(a *Attrs, in [][]int) ([][]int, error) {
	return func(a *Attrs, in [][]int) ([][]int, error) {
		if op == CrossEntropy && !(a.LabelSmoothing >= 0 && a.LabelSmoothing <= 1) {
			return nil, fmt.Errorf("cross_entropy: label_smoothing must be in [0, 1], got %v", a.LabelSmoothing)
		}
		x, t := in[0], in[1]
		if len(x) < 2 {
			return nil, fmt.Errorf("%v: input must be [N ... C] with at least 2 dimensions, got %v", op, x)
		}
		if want := x[:len(x)-1]; !slices.Equal(t, want) {
			return nil, fmt.Errorf("%v: target must be %v, the input's shape %v without its last dimension, got %v", op, want, x, t)
		}
		if op == NLLLoss {
			return [][]int{{1}}, nil
		}
		return [][]int{{1}, clone(x)}, nil
	}
}

// Targets must lie in [0, C); a kernel that meets one outside panics with a
// message naming it (the engine checks labels when it loads data). With
// Attrs.HasIgnore, a target equal to Attrs.IgnoreIndex is skipped instead:
// it adds nothing to the loss and gets a zero gradient.
//
// The classes lie along the last dimension: logits[N,...,C] are rows of C,
// one per target.

// ignored reports whether target t is skipped under a (which may be nil).
func ignored(a *Attrs, t int32) bool {
	return a != nil && a.HasIgnore && int(t) == a.IgnoreIndex
}

// nllLoss: in logp[N,...,C], target[N,...] (Idx); out loss[1] =
// -LossScale·Σₚ logp[p, targetₚ].
func nllLoss[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, t := in[0], in[1]
	n, k := lastDim(x)
	var s float64
	for i, ti := range t.Idx[:n] {
		if ignored(a, ti) {
			continue
		}
		checkTarget(NLLLoss, ti, k)
		s += float64(x.Data[i*k+int(ti)])
	}
	setLoss(a, out[0], -c.LossScale*s)
}

// setLoss writes a loss, or adds it with Attrs.Accumulate (the micro-batches
// of one optimizer step, the batches of an evaluation).
func setLoss[T Float](a *Attrs, out *Buf[T], v float64) {
	if a != nil && a.Accumulate {
		out.Data[0] = T(float64(out.Data[0]) + v)
	} else {
		out.Data[0] = T(v)
	}
}

// nllLossGrad: in dloss[1], target[N,...] (Idx); out dx[N,...,C], zero
// except dx[p, targetₚ] = -LossScale·dloss at positions not ignored.
func nllLossGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	t, dx := in[1], out[0]
	n, k := lastDim(dx)
	g := T(-c.LossScale * float64(in[0].Data[0]))
	clear(dx.Data[:n*k])
	for i, ti := range t.Idx[:n] {
		if ignored(a, ti) {
			continue
		}
		checkTarget(NLLLossGrad, ti, k)
		dx.Data[i*k+int(ti)] = g
	}
}

// crossEntropy: in logits[N,...,C], target[N,...] (Idx); out loss[1] =
// LossScale·Σₚ ((1-ε)·(-logpₚ[targetₚ]) + ε·mean_c(-logpₚ[c])), logp =
// log_softmax(logits), ε = Attrs.LabelSmoothing, and probs =
// softmax(logits) (at ignored positions too). In float32 the probabilities
// and each row's maximum and sum of exponentials come from
// vec.SoftmaxRows (the latter two through Ctx.Work), the loss from them in
// float64; in float64 everything is computed in float64.
func crossEntropy[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, t, probs := in[0], in[1], out[1]
	n, k := lastDim(x)
	eps := labelSmoothing(a)
	var loss float64 // Σ log-likelihoods, negated at the end
	var ms []T       // float32: each row's maximum and Σ exp, from vec
	if is32[T]() && n > 0 {
		ms = c.Work[:2*n]
		vec.SoftmaxRows(view[float32](x.Data[:n*k]), view[float32](probs.Data[:n*k]), k, 0, view[float32](ms))
	}
	for i, ti := range t.Idx[:n] {
		skip := ignored(a, ti)
		if !skip {
			checkTarget(CrossEntropy, ti, k)
		}
		xr, pr := x.Data[i*k:][:k], probs.Data[i*k:][:k]
		var m T
		var s float64
		if ms != nil {
			m, s = ms[2*i], float64(ms[2*i+1])
		} else {
			m = rowMax(xr)
			s = expSum(xr, m)
		}
		ls := math.Log(s)
		switch {
		case skip:
		case eps == 0:
			loss += float64(xr[ti]-m) - ls
		default:
			var sx float64 // Σ_c logp[c] + C·ls
			for _, v := range xr {
				sx += float64(v - m)
			}
			loss += (1-eps)*(float64(xr[ti]-m)-ls) + eps*(sx/float64(k)-ls)
		}
		if ms != nil {
			continue // probs written by vec
		}
		inv := 1 / s
		for j, v := range xr {
			pr[j] = T(math.Exp(float64(v-m)) * inv)
		}
	}
	setLoss(a, out[0], -c.LossScale*loss)
}

// crossEntropyGrad: in dloss[1], probs[N,...,C], target[N,...] (Idx); out
// dx = LossScale·dloss·(probs - ((1-ε)·onehot(target) + ε/C)), ε =
// Attrs.LabelSmoothing, and 0 at ignored positions.
func crossEntropyGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	probs, t, dx := in[1], in[2], out[0]
	n, k := lastDim(probs)
	g := T(c.LossScale * float64(in[0].Data[0]))
	eps := labelSmoothing(a)
	off, hit := T(eps/float64(k)), T(1-eps+eps/float64(k))
	for i, ti := range t.Idx[:n] {
		pr, dr := probs.Data[i*k:][:k], dx.Data[i*k:][:k]
		if ignored(a, ti) {
			clear(dr)
			continue
		}
		checkTarget(CrossEntropyGrad, ti, k)
		if eps == 0 {
			for j, p := range pr {
				dr[j] = g * p
			}
		} else {
			for j, p := range pr {
				dr[j] = g * (p - off)
			}
		}
		dr[ti] = g * (pr[ti] - hit)
	}
}

// mseLoss: in pred[N,...], target[N,...]; out loss[1] = LossScale·Σₙ
// mean over sample n's D elements of (pred - target)², summed in float64.
func mseLoss[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	p := live(in[0])
	t := in[1].Data[:len(p)]
	var s float64
	for i, v := range p {
		d := float64(v) - float64(t[i])
		s += d * d
	}
	if len(p) > 0 {
		s /= float64(prod(in[0].Shape[1:]))
	}
	setLoss(a, out[0], c.LossScale*s)
}

// mseLossGrad: in dloss[1], pred[N,...], target[N,...]; out dpred =
// LossScale·dloss·2·(pred - target)/D, D the elements per sample.
func mseLossGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	p := live(in[1])
	t := in[2].Data[:len(p)]
	dx := out[0].Data[:len(p)]
	if len(p) == 0 {
		return
	}
	g := T(2 * c.LossScale * float64(in[0].Data[0]) / float64(prod(in[1].Shape[1:])))
	for i, v := range p {
		dx[i] = g * (v - t[i])
	}
}

// labelSmoothing is a's LabelSmoothing; a may be nil.
func labelSmoothing(a *Attrs) float64 {
	if a == nil {
		return 0
	}
	return a.LabelSmoothing
}

func checkTarget(op Op, t int32, classes int) {
	if t < 0 || int(t) >= classes {
		panic(fmt.Sprintf("%v: target %d out of range [0, %d)", op, t, classes))
	}
}
