package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCrossEntropyFusedMatchesUnfused checks CrossEntropyFused against
// CrossEntropy then CrossEntropyGrad, bit for bit in float32 and float64:
// odd sizes, rows of 3 dimensions, an empty batch, label smoothing 0, 0.1
// and 1, ignore_index (-100 and a class), a loss scale and a dloss other
// than 1, the loss accumulated and not.
func TestCrossEntropyFusedMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkCEFused(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkCEFused(t, Kernels64) })
}

func checkCEFused[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, shape := range [][]int{{7, 5}, {3, 4, 11}, {1, 2}, {13, 257}, {0, 3}} {
		cls := shape[len(shape)-1]
		rows := prod(shape) / cls
		x := normalBuf[T](r, shape)
		for i := range x.Data {
			x.Data[i] *= 4
		}
		tgt := &Buf[T]{Shape: shape[:len(shape)-1], Idx: make([]int32, rows)}
		for i := range tgt.Idx {
			tgt.Idx[i] = int32(r.IntN(cls))
		}
		for _, eps := range []float64{0, 0.1, 1} {
			for _, ign := range []int{0, -100, 1} {
				for _, acc := range []bool{false, true} {
					a := &Attrs{LabelSmoothing: eps, Accumulate: acc}
					if ign != 0 {
						a.HasIgnore, a.IgnoreIndex = true, ign
						if rows > 1 {
							tgt.Idx[rows/2] = int32(ign)
						}
					}
					c := &Ctx[T]{LossScale: 1 / 3.0, Step: 1}
					dloss := &Buf[T]{Shape: []int{1}, Data: []T{T(1.5)}}
					loss, probs, dx := &Buf[T]{Shape: []int{1}, Data: []T{2}}, zeroBuf[T](shape), zeroBuf[T](shape)
					call(k, c, CrossEntropy, a, []*Buf[T]{x, tgt}, []*Buf[T]{loss, probs})
					call(k, c, CrossEntropyGrad, a, []*Buf[T]{dloss, probs, tgt}, []*Buf[T]{dx})
					floss, fdx := &Buf[T]{Shape: []int{1}, Data: []T{2}}, zeroBuf[T](shape)
					for i := range fdx.Data {
						fdx.Data[i] = T(math.NaN()) // every element must be written
					}
					call(k, c, CrossEntropyFused, a, []*Buf[T]{x, tgt, dloss}, []*Buf[T]{floss, fdx})
					what := "cross_entropy_fused"
					expectSame(t, shape, what+" loss", ign != 0, acc, floss.Data, loss.Data)
					expectSame(t, shape, what+" dx", ign != 0, acc, fdx.Data, dx.Data)
				}
			}
		}
	}
}

// TestCrossEntropyFusedGradient checks the fused op's dx against finite
// differences of its own loss in float64, label smoothing and an ignored
// row included: dx = dloss·∂loss/∂logits.
func TestCrossEntropyFusedGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	shape := []int{5, 7}
	x := normalBuf[float64](r, shape)
	tgt := &Buf[float64]{Shape: []int{5}, Idx: []int32{3, 0, -100, 6, 2}}
	a := &Attrs{LabelSmoothing: 0.2, HasIgnore: true, IgnoreIndex: -100}
	c := &Ctx[float64]{LossScale: 0.25, Step: 1}
	const dl = 0.75
	dloss := &Buf[float64]{Shape: []int{1}, Data: []float64{dl}}
	lossAt := func() float64 {
		l, d := zeroBuf[float64]([]int{1}), zeroBuf[float64](shape)
		call(Kernels64, c, CrossEntropyFused, a, []*Buf[float64]{x, tgt, dloss}, []*Buf[float64]{l, d})
		return l.Data[0]
	}
	l, dx := zeroBuf[float64]([]int{1}), zeroBuf[float64](shape)
	call(Kernels64, c, CrossEntropyFused, a, []*Buf[float64]{x, tgt, dloss}, []*Buf[float64]{l, dx})
	const h = 1e-6
	for i := range x.Data {
		v := x.Data[i]
		x.Data[i] = v + h
		up := lossAt()
		x.Data[i] = v - h
		down := lossAt()
		x.Data[i] = v
		want := dl * (up - down) / (2 * h)
		if math.Abs(dx.Data[i]-want) > 1e-7*math.Max(1, math.Abs(want)) {
			t.Errorf("dx[%d] = %v, finite differences %v", i, dx.Data[i], want)
		}
	}
}
