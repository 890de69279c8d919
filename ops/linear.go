package ops

import "gorun/ops/internal/vec"

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
