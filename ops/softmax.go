package ops

import (
	"fmt"
	"math"

	"gorun/ops/internal/vec"
)

// Softmax and log-softmax over the last dimension, and their gradients.
// Every kernel may write its output over input 0 (ReuseInput).

const (
	// LogSoftmax: in x[N,...,C]; out y (x's shape), over the last
	// dimension.
	LogSoftmax Op = "log_softmax"

	// LogSoftmaxGrad: in dy, y (the LogSoftmax output); out dx.
	LogSoftmaxGrad Op = "log_softmax_grad"

	// Softmax: in x[N,...,C]; out y (x's shape), over the last dimension.
	// With Attrs.Causal, x is scores[N,...,T,T] and row i of each T×T
	// matrix keeps columns j ≤ i: the others are 0 in y, as softmax of
	// scores masked with -inf would give (SoftmaxGrad needs no mask: the
	// masked probabilities are 0). Attrs: Causal.
	Softmax Op = "softmax"

	// SoftmaxGrad: in dy, y (the Softmax output); out dx.
	SoftmaxGrad Op = "softmax_grad"
)

var softmaxOps = []*Def{
	{
		Op: LogSoftmax, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: softmaxShape(LogSoftmax), Grad: gradWithOut(LogSoftmaxGrad, 0),
		Kernel32: logSoftmax[float32], Kernel64: logSoftmax[float64],
	},
	{
		Op: LogSoftmaxGrad, In: []Input{{Name: "dy"}, {Name: "y"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: logSoftmaxGrad[float32], Kernel64: logSoftmaxGrad[float64],
	},
	{
		Op: Softmax, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: softmaxShape(Softmax), Grad: gradWithOut(SoftmaxGrad, 0),
		Kernel32: softmax[float32], Kernel64: softmax[float64],
	},
	{
		Op: SoftmaxGrad, In: []Input{{Name: "dy"}, {Name: "y"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: softmaxGrad[float32], Kernel64: softmaxGrad[float64],
	},
}

// softmaxShape is the shape rule of LogSoftmax and Softmax (op): x[N,...,C]
// keeps its shape; causal masking (Softmax only) needs square scores.
func softmaxShape(op Op) func(a *Attrs, in [][]int) ([][]int, error) {
	return func(a *Attrs, in [][]int) ([][]int, error) {
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("%v: input must be [N ... C] with at least 2 dimensions, got %v", op, x)
		}
		if a.Causal {
			if op != Softmax {
				return nil, fmt.Errorf("%v: causal masking is for softmax only", op)
			}
			if r := len(x); r < 3 || x[r-1] != x[r-2] {
				return nil, fmt.Errorf("softmax: causal masking needs scores [N ... T T], got %v", x)
			}
		}
		return [][]int{clone(x)}, nil
	}
}

// rowMax returns the largest element of row (NaN when row holds one).
func rowMax[T Float](row []T) T {
	m := row[0]
	for _, v := range row[1:] {
		if v > m || v != v {
			m = v
		}
	}
	return m
}

// expSum returns Σ exp(v - m) over row, in float64.
func expSum[T Float](row []T, m T) float64 {
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v - m))
	}
	return s
}

// lastDim returns the rows of b's last dimension (live) and their length.
func lastDim[T Float](b *Buf[T]) (rows, k int) {
	k = b.Shape[len(b.Shape)-1]
	if k == 0 {
		return 0, 0
	}
	return b.Len() / k, k
}

// logSoftmax: in x[N,...,C]; out y = x - max - log Σ exp(x - max), per row
// of the last dimension.
func logSoftmax[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	n, k := lastDim(x)
	if r := lowRounder[T](a); r != nil {
		logSoftmaxLowp(r, view[float32](x.Data[:n*k]), view[float32](y.Data[:n*k]), k)
		return
	}
	for r := 0; r < n; r++ {
		xr, yr := x.Data[r*k:][:k], y.Data[r*k:][:k]
		m := rowMax(xr)
		ls := T(math.Log(expSum(xr, m)))
		for j, v := range xr {
			yr[j] = v - m - ls
		}
	}
}

// logSoftmaxGrad: in dy, y (the LogSoftmax output); out dx = dy - exp(y)·Σdy,
// per row of the last dimension.
func logSoftmaxGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, y, dx := in[0], in[1], out[0]
	n, k := lastDim(dy)
	if r := lowRounder[T](a); r != nil {
		logSoftmaxGradLowp(r, view[float32](dy.Data[:n*k]), view[float32](y.Data[:n*k]), view[float32](dx.Data[:n*k]), k)
		return
	}
	for r := 0; r < n; r++ {
		gr, yr, dr := dy.Data[r*k:][:k], y.Data[r*k:][:k], dx.Data[r*k:][:k]
		var s float64
		for _, g := range gr {
			s += float64(g)
		}
		for j, g := range gr {
			dr[j] = g - T(math.Exp(float64(yr[j]))*s)
		}
	}
}

// softmax: in x[N,...,C]; out y = exp(x - max) / Σ exp(x - max), per row of
// the last dimension. With Causal, row i of each T×T matrix (T = C) covers
// columns 0..i only, and y is 0 in the others. float32 runs vec.SoftmaxRows
// (exponentials and sums in float32); float64 the loop below (exponentials
// and sums in float64).
func softmax[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	n, k := lastDim(x)
	if is32[T]() {
		// float32: vec's kernel (exponentials and sums in float32).
		causal := 0
		if a != nil && a.Causal {
			causal = x.Shape[len(x.Shape)-2]
		}
		vec.SoftmaxRows(view[float32](x.Data[:n*k]), view[float32](y.Data[:n*k]), k, causal, nil)
		return
	}
	for r := 0; r < n; r++ {
		xr, yr := x.Data[r*k:][:k], y.Data[r*k:][:k]
		if a != nil && a.Causal {
			keep := min(r%x.Shape[len(x.Shape)-2]+1, k)
			clear(yr[keep:])
			xr, yr = xr[:keep], yr[:keep]
		}
		m := rowMax(xr)
		var s float64
		for j, v := range xr {
			e := math.Exp(float64(v - m))
			s += e
			yr[j] = T(e)
		}
		inv := 1 / s
		for j, v := range yr {
			yr[j] = T(float64(v) * inv)
		}
	}
}

// softmaxGrad: in dy, y (the Softmax output); out dx = y·(dy - Σ dy·y), per
// row of the last dimension.
func softmaxGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, y, dx := in[0], in[1], out[0]
	n, k := lastDim(dy)
	if r := lowRounder[T](a); r != nil {
		softmaxGradLowp(r, view[float32](dy.Data[:n*k]), view[float32](y.Data[:n*k]), view[float32](dx.Data[:n*k]), k)
		return
	}
	for r := 0; r < n; r++ {
		gr, yr, dr := dy.Data[r*k:][:k], y.Data[r*k:][:k], dx.Data[r*k:][:k]
		var s float64
		for j, g := range gr {
			s += float64(g) * float64(yr[j])
		}
		st := T(s)
		for j, g := range gr {
			dr[j] = yr[j] * (g - st)
		}
	}
}
