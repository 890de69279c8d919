package ops

import (
	"fmt"
	"slices"

	"gorun/ops/internal/vec"
)

// Matrix products: Linear (F.linear) and its gradients, and BatchMatMul,
// whose gradients are BatchMatMul again. Their kernels run package gemm
// through matmul (matmul.go).

const (
	// Linear: in x[N,...,I] (rank at least 2), w[O,I], optional b[O]; out
	// y[N,...,O] = x·wᵀ + b over the last dimension (F.linear): every
	// dimension but the last is a row, N·prod(...) rows at the live batch.
	Linear Op = "linear"

	// LinearGradInput: in dy[N,...,O], w[O,I]; out dx[N,...,I] = dy·w.
	LinearGradInput Op = "linear_grad_input"

	// LinearGradWeight: in dy[N,...,O], x[N,...,I]; out dw[O,I] = dyᵀ·x,
	// summed over all rows (the leading dimensions, as Linear).
	LinearGradWeight Op = "linear_grad_weight"

	// LinearGradBias: in dy[N,...,O]; out db[O] = Σ dy over all rows,
	// summed in float64.
	LinearGradBias Op = "linear_grad_bias"

	// BatchMatMul: in a[B...,M,K] (or [B...,K,M] with TransA), b[B...,K,N]
	// (or [B...,N,K] with TransB); out c[B...,M,N] = op(a)·op(b) per
	// matrix. The leading dimensions B... (at least one: the batch comes
	// first) are equal in a and b, without broadcasting, and flattened into
	// one batch. Attrs: TransA, TransB. Its gradients are BatchMatMul with
	// other transposes, dc the gradient of c (in, then attrs):
	//
	//	TransA TransB  da                       db
	//	false  false   dc, b; TransB            a, dc; TransA
	//	false  true    dc, b                    dc, a; TransA
	//	true   false   b, dc; TransB            a, dc
	//	true   true    b, dc; TransA, TransB    dc, a; TransA, TransB
	BatchMatMul Op = "batch_matmul"
)

var linearOps = []*Def{
	{
		Op: Linear, In: []Input{{Name: "input"}, {Name: "weight"}, {Name: "bias", Optional: true}}, Out: []Output{{Name: "y"}}, Autocast: AutocastLower,
		Shape:    func(a *Attrs, in [][]int) ([][]int, error) { return inferLinear(in) },
		Grad:     affineGrad(LinearGradInput, LinearGradWeight, LinearGradBias),
		Kernel32: linear[float32], Kernel64: linear[float64],
	},
	{
		Op: LinearGradInput, In: []Input{{Name: "dy"}, {Name: "w"}}, Out: []Output{{Name: "dx"}},
		Kernel32: linearGradInput[float32], Kernel64: linearGradInput[float64],
	},
	{
		Op: LinearGradWeight, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dw"}}, Accumulates: true,
		Kernel32: linearGradWeight[float32], Kernel64: linearGradWeight[float64],
	},
	{
		Op: LinearGradBias, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "db"}}, Accumulates: true,
		Kernel32: linearGradBias[float32], Kernel64: linearGradBias[float64],
	},
	{
		Op: BatchMatMul, In: []Input{{Name: "input"}, {Name: "input"}}, Out: []Output{{Name: "c"}}, Autocast: AutocastLower,
		Shape:    func(a *Attrs, in [][]int) ([][]int, error) { return inferBatchMatMul(a, in[0], in[1]) },
		Grad:     batchMatMulGrad,
		Kernel32: batchMatMul[float32], Kernel64: batchMatMul[float64],
	},
}

// batchMatMulGrad is PyTorch's rule for each transposition (the table in
// BatchMatMul's doc comment).
func batchMatMulGrad(b GradBuilder) []Value {
	a, c, dc := b.In(0), b.In(1), b.OutGrad(0)
	ta, tb := b.Attrs().TransA, b.Attrs().TransB
	out := make([]Value, 2)
	mm := func(wrt, x, y Value, transA, transB bool) Value {
		return b.Grad(BatchMatMul, Attrs{TransA: transA, TransB: transB}, wrt, x, y)
	}
	if b.NeedsGrad(a) {
		switch {
		case !ta && !tb:
			out[0] = mm(a, dc, c, false, true)
		case !ta && tb:
			out[0] = mm(a, dc, c, false, false)
		case ta && !tb:
			out[0] = mm(a, c, dc, false, true)
		default:
			out[0] = mm(a, c, dc, true, true)
		}
	}
	if b.NeedsGrad(c) {
		switch {
		case !ta && !tb:
			out[1] = mm(c, a, dc, true, false)
		case !ta && tb:
			out[1] = mm(c, dc, a, true, false)
		case ta && !tb:
			out[1] = mm(c, a, dc, false, false)
		default:
			out[1] = mm(c, dc, a, true, true)
		}
	}
	return out
}

// inferLinear: x is [N ... I] (any rank from 2), w [O I], the bias [O]; y
// is x's shape with its last dimension O.
func inferLinear(in [][]int) ([][]int, error) {
	x, w := in[0], in[1]
	if len(x) < 2 {
		return nil, fmt.Errorf("linear: input must be [N ... features] with at least 2 dimensions, got %v", x)
	}
	if len(w) != 2 {
		return nil, fmt.Errorf("linear: weight must be [out in], got %v", w)
	}
	if f := x[len(x)-1]; f != w[1] {
		return nil, fmt.Errorf("linear: input has %d features, weight expects %d (input shape %v, weight shape %v)", f, w[1], x, w)
	}
	if b := optShape(in, 2); b != nil && (len(b) != 1 || b[0] != w[0]) {
		return nil, fmt.Errorf("linear: bias must be [%d], one per output feature of weight %v, got %v", w[0], w, b)
	}
	y := clone(x)
	y[len(y)-1] = w[0]
	return [][]int{y}, nil
}

// inferBatchMatMul: a is [B... M K] ([B... K M] with TransA), b [B... K N]
// ([B... N K] with TransB).
func inferBatchMatMul(a *Attrs, x, y []int) ([][]int, error) {
	r := len(x)
	if r < 3 || len(y) != r {
		return nil, fmt.Errorf("batch_matmul: inputs must be [B ... M K] and [B ... K N] with the same rank, at least 3, got %v and %v", x, y)
	}
	if !slices.Equal(x[:r-2], y[:r-2]) {
		return nil, fmt.Errorf("batch_matmul: leading dimensions differ: %v and %v (no broadcasting)", x, y)
	}
	m, k := x[r-2], x[r-1]
	if a.TransA {
		m, k = k, m
	}
	kb, n := y[r-2], y[r-1]
	if a.TransB {
		kb, n = n, kb
	}
	if k != kb {
		return nil, fmt.Errorf("batch_matmul: a %v (trans_a %v) has inner dimension %d, b %v (trans_b %v) has %d", x, a.TransA, k, y, a.TransB, kb)
	}
	z := clone(x)
	z[r-2], z[r-1] = m, n
	return [][]int{z}, nil
}

// Linear and its gradients treat every dimension of x but the last as rows:
// x[N,...,I] is a rows×I matrix, rows = N·prod(...) at the live batch N,
// and y[N,...,O] a rows×O one. An [N,I] input is the rank-2 case (rows =
// N); the kernels are one matrix multiply either way.

// linear: in x[N,...,I], w[O,I], optional b[O]; out y[N,...,O] = x·wᵀ + b.
func linear[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, w, b, y := in[0], in[1], optIn(in, 2), out[0]
	i, o := w.Shape[1], w.Shape[0]
	n := x.Len() / i
	yd := y.Data[:n*o]
	var beta T
	if b != nil {
		bd := b.Data[:o]
		for r := 0; r < n; r++ {
			copy(yd[r*o:][:o], bd)
		}
		beta = 1
	}
	matmul(false, true, n, o, i, 1, x.Data, i, w.Data, i, beta, yd, o)
}

// linearGradInput: in dy[N,...,O], w[O,I]; out dx[N,...,I] = dy·w.
func linearGradInput[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, w, dx := in[0], in[1], out[0]
	o, i := w.Shape[0], w.Shape[1]
	n := dy.Len() / o
	matmul(false, false, n, i, o, 1, dy.Data, o, w.Data, i, 0, dx.Data[:n*i], i)
}

// linearGradWeight: in dy[N,...,O], x[N,...,I]; out dw[O,I] = dyᵀ·x over
// all rows. Honours Attrs.Accumulate.
func linearGradWeight[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, dw := in[0], in[1], out[0]
	o, i := dw.Shape[0], dw.Shape[1]
	n := dy.Len() / o
	var beta T
	if a.Accumulate {
		beta = 1
	}
	matmul(true, false, o, i, n, 1, dy.Data, o, x.Data, i, beta, dw.Data[:o*i], i)
}

// linearGradBias: in dy[N,...,O]; out db[O] = Σ over rows of dy, each
// column summed in float64 in row order (float32 in one call to package
// vec, the same sums). Eight columns at a time walk the rows together; the
// last o mod 8 go one by one. Honours Attrs.Accumulate.
func linearGradBias[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, db := in[0], out[0]
	o := dy.Shape[len(dy.Shape)-1]
	g := dy.Data[:dy.Len()]
	if is32[T]() {
		if o > 0 {
			vec.ColSums(view[float32](db.Data), view[float32](g), len(g)/o, o, a.Accumulate)
		}
		return
	}
	put := func(j int, s float64) {
		if a.Accumulate {
			db.Data[j] += T(s)
		} else {
			db.Data[j] = T(s)
		}
	}
	j := 0
	for ; j+8 <= o; j += 8 {
		var s0, s1, s2, s3, s4, s5, s6, s7 float64 // in float64: the rows may be many
		for r := j; r < len(g); r += o {
			v := g[r : r+8 : r+8]
			s0 += float64(v[0])
			s1 += float64(v[1])
			s2 += float64(v[2])
			s3 += float64(v[3])
			s4 += float64(v[4])
			s5 += float64(v[5])
			s6 += float64(v[6])
			s7 += float64(v[7])
		}
		put(j, s0)
		put(j+1, s1)
		put(j+2, s2)
		put(j+3, s3)
		put(j+4, s4)
		put(j+5, s5)
		put(j+6, s6)
		put(j+7, s7)
	}
	for ; j < o; j++ {
		var s float64
		for r := j; r < len(g); r += o {
			s += float64(g[r])
		}
		put(j, s)
	}
}
