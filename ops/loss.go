package ops

import (
	"fmt"
	"math"
)

// Targets must lie in [0, C); a kernel that meets one outside panics with a
// message naming it (the engine checks labels when it loads data).

// nllLoss: in logp[N,C], target[N] (Idx); out loss[1] =
// -LossScale·Σᵢ logp[i, targetᵢ].
func nllLoss[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, t := in[0], in[1]
	n, k := x.Shape[0], x.Shape[1]
	var s float64
	for i, ti := range t.Idx[:n] {
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

// nllLossGrad: in dloss[1], target[N] (Idx); out dx[N,C], zero except
// dx[i, targetᵢ] = -LossScale·dloss.
func nllLossGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	t, dx := in[1], out[0]
	n, k := dx.Shape[0], dx.Shape[1]
	g := T(-c.LossScale * float64(in[0].Data[0]))
	clear(dx.Data[:n*k])
	for i, ti := range t.Idx[:n] {
		checkTarget(NLLLossGrad, ti, k)
		dx.Data[i*k+int(ti)] = g
	}
}

// crossEntropy: in logits[N,C], target[N] (Idx); out loss[1] =
// -LossScale·Σᵢ log_softmax(logits)[i, targetᵢ] and probs[N,C] =
// softmax(logits).
func crossEntropy[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, t, probs := in[0], in[1], out[1]
	n, k := x.Shape[0], x.Shape[1]
	var loss float64
	for i, ti := range t.Idx[:n] {
		checkTarget(CrossEntropy, ti, k)
		xr, pr := x.Data[i*k:][:k], probs.Data[i*k:][:k]
		m := rowMax(xr)
		s := expSum(xr, m)
		loss += float64(xr[ti]-m) - math.Log(s)
		inv := 1 / s
		for j, v := range xr {
			pr[j] = T(math.Exp(float64(v-m)) * inv)
		}
	}
	setLoss(a, out[0], -c.LossScale*loss)
}

// crossEntropyGrad: in dloss[1], probs[N,C], target[N] (Idx); out dx[N,C] =
// LossScale·dloss·(probs - onehot(target)).
func crossEntropyGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	probs, t, dx := in[1], in[2], out[0]
	n, k := probs.Shape[0], probs.Shape[1]
	g := T(c.LossScale * float64(in[0].Data[0]))
	for i, ti := range t.Idx[:n] {
		checkTarget(CrossEntropyGrad, ti, k)
		pr, dr := probs.Data[i*k:][:k], dx.Data[i*k:][:k]
		for j, p := range pr {
			dr[j] = g * p
		}
		dr[ti] = g * (pr[ti] - 1)
	}
}

func checkTarget(op Op, t int32, classes int) {
	if t < 0 || int(t) >= classes {
		panic(fmt.Sprintf("%v: target %d out of range [0, %d)", op, t, classes))
	}
}
