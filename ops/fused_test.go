package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBatchNormFusedMatchesUnfused checks BatchNormNorm and BatchNormEval
// with a residual input and Attrs.ReLU against the three ops the engine
// fuses (batch norm, Add, ReLU), bit for bit in float32 and float64, on odd
// sizes, an empty batch and values that straddle 0.
func TestBatchNormFusedMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkBNFused(t, &Kernels32) })
	t.Run("float64", func(t *testing.T) { checkBNFused(t, &Kernels64) })
}

func checkBNFused[T Float](t *testing.T, k *[NumOps]Kernel[T]) {
	r := rand.New(rand.NewPCG(3, 4))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, shape := range [][]int{{4, 3, 5, 7}, {2, 17, 3, 3}, {3, 5}, {1, 2, 33}, {0, 3, 2, 2}} {
		ch := shape[1]
		rnd := func(s []int) *Buf[T] {
			b := zeroBuf[T](s)
			for i := range b.Data {
				b.Data[i] = T(r.NormFloat64())
			}
			return b
		}
		x, res := rnd(shape), rnd(shape)
		gamma, beta := rnd([]int{ch}), rnd([]int{ch})
		stats := zeroBuf[T]([]int{3, ch})
		call(k, c, BatchNormStats, &Attrs{}, []*Buf[T]{x}, []*Buf[T]{stats})
		rm, rv := rnd([]int{ch}), zeroBuf[T]([]int{ch})
		for i := range rv.Data {
			rv.Data[i] = T(r.Float64() + 0.5)
		}
		for _, withRes := range []bool{false, true} {
			for _, relu := range []bool{false, true} {
				a := &Attrs{Eps: 1e-5}
				fa := *a
				fa.ReLU = relu
				var rs *Buf[T]
				if withRes {
					rs = res
				}
				unfused := func(y *Buf[T]) {
					if withRes {
						call(k, c, Add, a, []*Buf[T]{y, res}, []*Buf[T]{y})
					}
					if relu {
						call(k, c, ReLU, a, []*Buf[T]{y}, []*Buf[T]{y})
					}
				}
				// training
				y, save := zeroBuf[T](shape), zeroBuf[T]([]int{3, ch})
				call(k, c, BatchNormNorm, a, []*Buf[T]{x, stats, gamma, beta}, []*Buf[T]{y, save})
				unfused(y)
				f, fsave := zeroBuf[T](shape), zeroBuf[T]([]int{3, ch})
				call(k, c, BatchNormNorm, &fa, []*Buf[T]{x, stats, gamma, beta, rs}, []*Buf[T]{f, fsave})
				expectSame(t, shape, "batch_norm_norm", withRes, relu, f.Data, y.Data)
				expectSame(t, shape, "batch_norm_norm save", withRes, relu, fsave.Data, save.Data)
				// evaluation, affine=False
				ye, fe := zeroBuf[T](shape), zeroBuf[T](shape)
				call(k, c, BatchNormEval, a, []*Buf[T]{x, rm, rv, nil, nil}, []*Buf[T]{ye})
				unfused(ye)
				call(k, c, BatchNormEval, &fa, []*Buf[T]{x, rm, rv, nil, nil, rs}, []*Buf[T]{fe})
				expectSame(t, shape, "batch_norm_eval", withRes, relu, fe.Data, ye.Data)
			}
		}
	}
}

func expectSame[T Float](t *testing.T, shape []int, what string, res, relu bool, got, want []T) {
	t.Helper()
	for i := range want {
		if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
			t.Errorf("%v %s res %v relu %v: [%d] = %v fused, %v unfused", shape, what, res, relu, i, got[i], want[i])
			return
		}
	}
}

// TestReLUGradOfSumMatchesUnfused checks ReLUGrad with a second gradient
// (the engine's fused Add) against Add then ReLUGrad, bit for bit, and in
// place over either gradient.
func TestReLUGradOfSumMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkReLUGradSum(t, &Kernels32) })
	t.Run("float64", func(t *testing.T) { checkReLUGradSum(t, &Kernels64) })
}

func checkReLUGradSum[T Float](t *testing.T, k *[NumOps]Kernel[T]) {
	r := rand.New(rand.NewPCG(5, 6))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, shape := range [][]int{{3, 5, 7}, {1, 33}, {0, 4}} {
		rnd := func() *Buf[T] {
			b := zeroBuf[T](shape)
			for i := range b.Data {
				b.Data[i] = T(r.NormFloat64())
				if i%5 == 0 {
					b.Data[i] = 0 // ReLU's kink: y = 0 passes no gradient
				}
			}
			return b
		}
		a, b, y := rnd(), rnd(), rnd()
		sum, want := zeroBuf[T](shape), zeroBuf[T](shape)
		call(k, c, Add, &Attrs{}, []*Buf[T]{a, b}, []*Buf[T]{sum})
		call(k, c, ReLUGrad, &Attrs{}, []*Buf[T]{sum, y}, []*Buf[T]{want})
		got := zeroBuf[T](shape)
		call(k, c, ReLUGrad, &Attrs{}, []*Buf[T]{a, y, b}, []*Buf[T]{got})
		expectSame(t, shape, "relu_grad of a sum", true, true, got.Data, want.Data)
		over := &Buf[T]{Shape: shape, Data: append([]T(nil), b.Data...)}
		call(k, c, ReLUGrad, &Attrs{}, []*Buf[T]{a, y, over}, []*Buf[T]{over})
		expectSame(t, shape, "relu_grad of a sum over dy2", true, true, over.Data, want.Data)
	}
}
