package ops

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
// column summed in float64 in row order. It walks the rows in order, eight
// columns at a time. Honours Attrs.Accumulate.
func linearGradBias[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, db := in[0], out[0]
	o := dy.Shape[len(dy.Shape)-1]
	g := dy.Data[:dy.Len()]
	var acc [8]float64 // in float64: the rows may be many
	for j := 0; j < o; j += len(acc) {
		s := acc[:min(len(acc), o-j)]
		clear(s)
		for r := j; r < len(g); r += o {
			for k, v := range g[r:][:len(s)] {
				s[k] += float64(v)
			}
		}
		d := db.Data[j:][:len(s)]
		for k, v := range s {
			if a.Accumulate {
				d[k] += T(v)
			} else {
				d[k] = T(v)
			}
		}
	}
}
