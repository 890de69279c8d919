package ops

import (
	"fmt"

	"gorun/ops/internal/vec"
)

// Dropout: elements (Dropout) or whole channels (Dropout2D) zeroed at
// random in training, the rest scaled by 1/(1-P); the identity in
// evaluation (EvalCopy). Every kernel may write its output over input 0
// (ReuseInput).

const (
	// Dropout: in x; out y and mask (same shape as x, each 0 or 1/(1-P)).
	// Attrs: P. Draws from Ctx.RNG.
	Dropout Op = "dropout"

	// DropoutGrad: in dy, mask; out dx = dy·mask.
	DropoutGrad Op = "dropout_grad"

	// Dropout2D: in x[N,C,H,W]; out y and mask[N,C] (whole channels
	// dropped). Attrs: P. Draws from Ctx.RNG.
	Dropout2D Op = "dropout2d"

	// Dropout2DGrad: in dy[N,C,H,W], mask[N,C]; out dx.
	Dropout2DGrad Op = "dropout2d_grad"
)

var dropoutOps = []*Def{
	{
		Op: Dropout, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}, {Name: "mask", NoGrad: true}},
		Random: true, EvalCopy: true, ReuseInput: true,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			if err := checkP(Dropout, a.P); err != nil {
				return nil, err
			}
			return [][]int{clone(in[0]), clone(in[0])}, nil
		},
		Grad:     gradWithOut(DropoutGrad, 1),
		Kernel32: dropout[float32], Kernel64: dropout[float64],
	},
	{
		Op: DropoutGrad, In: []Input{{Name: "dy"}, {Name: "mask"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: dropoutGrad[float32], Kernel64: dropoutGrad[float64],
	},
	{
		Op: Dropout2D, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}, {Name: "mask", NoGrad: true}},
		Random: true, EvalCopy: true, ReuseInput: true,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			if err := checkP(Dropout2D, a.P); err != nil {
				return nil, err
			}
			x := in[0]
			if len(x) != 4 {
				return nil, fmt.Errorf("dropout2d: input must be [N C H W], got %v", x)
			}
			return [][]int{clone(x), {x[0], x[1]}}, nil
		},
		Grad:     gradWithOut(Dropout2DGrad, 1),
		Kernel32: dropout2D[float32], Kernel64: dropout2D[float64],
	},
	{
		Op: Dropout2DGrad, In: []Input{{Name: "dy"}, {Name: "mask"}}, Out: []Output{{Name: "dx"}}, ReuseInput: true,
		Kernel32: dropout2DGrad[float32], Kernel64: dropout2DGrad[float64],
	},
}

func checkP(op Op, p float64) error {
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%v: p must be in [0, 1], got %v", op, p)
	}
	return nil
}

// dropout: in x; out y and mask (same shape as x), mask = Bernoulli(1-P) /
// (1-P), y = x·mask, as PyTorch's training-mode dropout. One draw from
// Ctx.RNG per element when 0 < P < 1; P = 0 keeps everything and P = 1
// drops everything without drawing. A nil Ctx.RNG (evaluation) makes it the
// identity, with mask 1.
func dropout[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	mask := out[1].Data[:len(x)]
	fillMask(c, a.P, mask)
	for i, v := range x {
		y[i] = v * mask[i]
	}
}

// dropout2D: in x[N,C,H,W]; out y and mask[N,C]: whole channels are kept
// (scaled by 1/(1-P)) or zeroed, one draw per channel, otherwise as dropout.
func dropout2D[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	planes := x.Shape[0] * x.Shape[1]
	hw := prod(x.Shape[2:])
	mask := out[1].Data[:planes]
	fillMask(c, a.P, mask)
	if is32[T]() {
		vec.ScalePlanes(view[float32](y.Data), view[float32](x.Data), view[float32](mask), hw)
		return
	}
	for p, m := range mask {
		yp := y.Data[p*hw:][:hw]
		for i, v := range x.Data[p*hw:][:hw] {
			yp[i] = v * m
		}
	}
}

// fillMask fills mask with independent Bernoulli(1-p)/(1-p) draws.
func fillMask[T Float](c *Ctx[T], p float64, mask []T) {
	switch {
	case c.RNG == nil || p <= 0:
		for i := range mask {
			mask[i] = 1
		}
	case p >= 1:
		clear(mask)
	default:
		keep := 1 - p
		scale := T(1) / T(keep) // as PyTorch: noise.div_(1 - p) in T
		for i := range mask {
			if c.RNG.Float64() < keep {
				mask[i] = scale
			} else {
				mask[i] = 0
			}
		}
	}
}

// dropoutGrad: in dy, mask; out dx = dy·mask.
func dropoutGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy := live(in[0])
	mask := in[1].Data[:len(dy)]
	dx := out[0].Data[:len(dy)]
	for i, g := range dy {
		dx[i] = g * mask[i]
	}
}

// dropout2DGrad: in dy[N,C,H,W], mask[N,C]; out dx = dy·mask per channel.
func dropout2DGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, dx := in[0], out[0]
	planes := dy.Shape[0] * dy.Shape[1]
	hw := prod(dy.Shape[2:])
	if is32[T]() {
		vec.ScalePlanes(view[float32](dx.Data), view[float32](dy.Data), view[float32](in[1].Data[:planes]), hw)
		return
	}
	for p, m := range in[1].Data[:planes] {
		dp := dx.Data[p*hw:][:hw]
		for i, g := range dy.Data[p*hw:][:hw] {
			dp[i] = g * m
		}
	}
}
