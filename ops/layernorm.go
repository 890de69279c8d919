package ops

import (
	"math"

	"gorun/ops/internal/vec"
)

// Layer normalisation over the last dimension: x[N,...,D] is seen as rows
// of D elements; save holds each row's mean and invstd.

// layerNorm: in x[N,...,D], optional gamma[D], optional beta[D]; out y and
// save[N,...,2] = (mean, invstd) per row. Float32 goes to package vec in
// one call.
func layerNorm[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, gamma, beta := in[0], optIn(in, 1), optIn(in, 2)
	y, save := out[0], out[1]
	rows, d := lastDim(x)
	if is32[T]() {
		vec.LayerNorm(view[float32](y.Data), view[float32](save.Data), view[float32](x.Data), opt32(gamma), opt32(beta),
			rows, d, a.Eps)
		return
	}
	for r := 0; r < rows; r++ {
		xr, yr := x.Data[r*d:][:d], y.Data[r*d:][:d]
		var s float64
		for _, v := range xr {
			s += float64(v)
		}
		mean := s / float64(d)
		var s2 float64
		for _, v := range xr {
			e := float64(v) - mean
			s2 += e * e
		}
		is := 1 / math.Sqrt(s2/float64(d)+a.Eps)
		save.Data[2*r], save.Data[2*r+1] = T(mean), T(is)
		m, k := T(mean), T(is)
		switch {
		case gamma == nil && beta == nil:
			for j, v := range xr {
				yr[j] = (v - m) * k
			}
		default:
			for j, v := range xr {
				yr[j] = T(optAt(gamma, j, 1))*((v-m)*k) + T(optAt(beta, j, 0))
			}
		}
	}
}

// layerNormGradInput: in dy, x, save, optional gamma[D]; out dx =
// invstd·(g - mean(g) - x̂·mean(g·x̂)), g = dy·gamma.
func layerNormGradInput[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, save, gamma, dx := in[0], in[1], in[2], optIn(in, 3), out[0]
	rows, d := lastDim(x)
	if is32[T]() {
		vec.LayerNormGradInput(view[float32](dx.Data), view[float32](dy.Data), view[float32](x.Data),
			view[float32](save.Data), opt32(gamma), rows, d)
		return
	}
	for r := 0; r < rows; r++ {
		xr, gr, dr := x.Data[r*d:][:d], dy.Data[r*d:][:d], dx.Data[r*d:][:d]
		mean, is := save.Data[2*r], save.Data[2*r+1]
		var s0, s1 float64 // Σg, Σg·x̂
		for j, g := range gr {
			gg := float64(g) * optAt(gamma, j, 1)
			s0 += gg
			s1 += gg * float64((xr[j]-mean)*is)
		}
		m0, m1 := T(s0/float64(d)), T(s1/float64(d))
		for j, g := range gr {
			gg := g * T(optAt(gamma, j, 1))
			dr[j] = is * (gg - m0 - (xr[j]-mean)*is*m1)
		}
	}
}

// layerNormGradGamma: in dy, x, save; out dgamma[D] = Σ dy·x̂ over rows,
// each column summed in float64 in row order.
func layerNormGradGamma[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, save, dg := in[0], in[1], in[2], out[0]
	rows, d := lastDim(x)
	if is32[T]() {
		vec.LayerNormGradGamma(view[float32](dg.Data), view[float32](dy.Data), view[float32](x.Data),
			view[float32](save.Data), rows, d, a.Accumulate)
		return
	}
	for j := range dg.Data[:d] {
		var s float64
		for r := 0; r < rows; r++ {
			o := r*d + j
			s += float64(dy.Data[o]) * float64((x.Data[o]-save.Data[2*r])*save.Data[2*r+1])
		}
		setGrad(a, &dg.Data[j], s)
	}
}

// layerNormGradBeta: in dy; out dbeta[D] = Σ dy over rows, each column
// summed in float64 in row order.
func layerNormGradBeta[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, db := in[0], out[0]
	rows, d := lastDim(dy)
	if is32[T]() {
		vec.ColSums(view[float32](db.Data), view[float32](dy.Data), rows, d, a.Accumulate)
		return
	}
	for j := range db.Data[:d] {
		var s float64
		for r := 0; r < rows; r++ {
			s += float64(dy.Data[r*d+j])
		}
		setGrad(a, &db.Data[j], s)
	}
}

// opt32 returns an optional buffer's data as float32 (T is float32), or
// nil when it is absent.
func opt32[T Float](b *Buf[T]) []float32 {
	if b == nil {
		return nil
	}
	return view[float32](b.Data)
}
