package ops

import (
	"math"
	"testing"
)

func TestLayerNormForward(t *testing.T) {
	// Rows over D = 2: (1, 3), mean 2 and biased variance 1; (5, 5), a
	// constant row (variance 0: y = beta).
	x := buf64([]int{2, 2}, 1, 3, 5, 5)
	y, save := buf64([]int{2, 2}), buf64([]int{2, 2})
	run64(LayerNorm, &Attrs{Eps: 0}, nil, []*Buf[float64]{x, nil, nil}, []*Buf[float64]{y, save})
	expectData(t, "layer_norm", y.Data[:2], -1, 1)
	expectData(t, "layer_norm save", save.Data[:2], 2, 1)
	run64(LayerNorm, &Attrs{Eps: 1}, nil, []*Buf[float64]{x, buf64([]int{2}, 2, 3), buf64([]int{2}, 0.5, -1)}, []*Buf[float64]{y, save})
	is := 1 / math.Sqrt(2)
	expectData(t, "layer_norm affine", y.Data, -2*is+0.5, 3*is-1, 0.5, -1)
	expectData(t, "layer_norm affine save", save.Data, 2, is, 5, 1)
	// Gradients of a sum: dbeta counts rows, dgamma sums x̂.
	dy := buf64([]int{2, 2}, 1, 1, 1, 1)
	db, dg := buf64([]int{2}), buf64([]int{2})
	run64(LayerNormGradBeta, &Attrs{}, nil, []*Buf[float64]{dy}, []*Buf[float64]{db})
	expectData(t, "layer_norm_grad_beta", db.Data, 2, 2)
	run64(LayerNormGradGamma, &Attrs{Accumulate: true}, nil, []*Buf[float64]{dy, x, save}, []*Buf[float64]{dg})
	expectData(t, "layer_norm_grad_gamma", dg.Data, -is, is)
}
