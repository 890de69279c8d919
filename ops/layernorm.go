package ops

import (
	"fmt"
	"math"
	"slices"

	"gorun/ops/internal/vec"
)

// Layer normalisation over the last dimension: x[N,...,D] is seen as rows
// of D elements; save holds each row's mean and invstd.

const (
	// LayerNorm: in x[N,...,D], optional gamma[D], optional beta[D]; out
	// y = (x-mean)·invstd·gamma + beta over the last dimension, invstd =
	// 1/sqrt(var+Eps) with the biased variance (F.layer_norm(x, (D,))),
	// and save[N,...,2] (x's shape with the last dimension 2; [N,2] for
	// x[N,D]): each row's mean and invstd, computed in float64. An absent
	// gamma is 1, an absent beta 0 (elementwise_affine=False). Attrs: Eps
	// (used as given; PyTorch's default is 1e-5).
	LayerNorm Op = "layer_norm"

	// LayerNormGradInput: in dy, x, save (from LayerNorm), optional
	// gamma[D]; out dx = invstd·(g - mean(g) - x̂·mean(g·x̂)) per row, g =
	// dy·gamma, x̂ = (x-mean)·invstd (an absent gamma is 1).
	LayerNormGradInput Op = "layer_norm_grad_input"

	// LayerNormGradGamma: in dy, x, save; out dgamma[D] = Σ over rows of
	// dy·x̂, summed in float64.
	LayerNormGradGamma Op = "layer_norm_grad_gamma"

	// LayerNormGradBeta: in dy; out dbeta[D] = Σ over rows of dy, summed in
	// float64.
	LayerNormGradBeta Op = "layer_norm_grad_beta"
)

var layerNormIn = []Input{{Name: "input"}, {Name: "weight", Optional: true}, {Name: "bias", Optional: true}}

var layerNormOps = []*Def{
	{
		Op: LayerNorm, In: layerNormIn, Out: []Output{{Name: "y"}, {Name: "save", NoGrad: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			if len(x) < 2 {
				return nil, fmt.Errorf("layer_norm: input must be [N ... D] with at least 2 dimensions, got %v", x)
			}
			if !(a.Eps >= 0) {
				return nil, fmt.Errorf("layer_norm: eps must not be negative, got %v", a.Eps)
			}
			d := x[len(x)-1]
			for i := 1; i < len(in); i++ {
				if s := in[i]; s != nil && !slices.Equal(s, []int{d}) {
					return nil, fmt.Errorf("layer_norm: %s must be [%d], the last dimension of input %v, got %v", layerNormIn[i].Name, d, x, s)
				}
			}
			save := clone(x)
			save[len(save)-1] = 2
			return [][]int{clone(x), save}, nil
		},
		Grad: func(b GradBuilder) []Value {
			a, dy := b.Attrs(), b.OutGrad(0)
			x, gamma, beta, save := b.In(0), b.In(1), b.In(2), b.Out(1)
			out := make([]Value, 3)
			if b.NeedsGrad(x) {
				out[0] = b.Grad(LayerNormGradInput, a, x, dy, x, save, gamma)
			}
			if b.NeedsGrad(gamma) {
				out[1] = b.Grad(LayerNormGradGamma, a, gamma, dy, x, save)
			}
			if b.NeedsGrad(beta) {
				out[2] = b.Grad(LayerNormGradBeta, a, beta, dy)
			}
			return out
		},
		Kernel32: layerNorm[float32], Kernel64: layerNorm[float64],
	},
	{
		Op: LayerNormGradInput, In: []Input{{Name: "dy"}, {Name: "x"}, {Name: "save"}, {Name: "gamma", Optional: true}},
		Out:      []Output{{Name: "dx"}},
		Kernel32: layerNormGradInput[float32], Kernel64: layerNormGradInput[float64],
	},
	{
		Op: LayerNormGradGamma, In: []Input{{Name: "dy"}, {Name: "x"}, {Name: "save"}}, Out: []Output{{Name: "dgamma"}},
		Accumulates: true,
		Kernel32:    layerNormGradGamma[float32], Kernel64: layerNormGradGamma[float64],
	},
	{
		Op: LayerNormGradBeta, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "dbeta"}}, Accumulates: true,
		Kernel32: layerNormGradBeta[float32], Kernel64: layerNormGradBeta[float64],
	},
}

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
