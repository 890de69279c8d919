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
	t.Run("float32", func(t *testing.T) { checkBNFused(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkBNFused(t, Kernels64) })
}

func checkBNFused[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(3, 4))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, shape := range [][]int{{4, 3, 5, 7}, {2, 17, 3, 3}, {3, 5}, {1, 2, 33}, {0, 3, 2, 2}} {
		ch := shape[1]
		x, res := normalBuf[T](r, shape), normalBuf[T](r, shape)
		gamma, beta := normalBuf[T](r, []int{ch}), normalBuf[T](r, []int{ch})
		stats := zeroBuf[T]([]int{3, ch})
		call(k, c, BatchNormStats, &Attrs{}, []*Buf[T]{x}, []*Buf[T]{stats})
		rm, rv := normalBuf[T](r, []int{ch}), zeroBuf[T]([]int{ch})
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
	t.Run("float32", func(t *testing.T) { checkReLUGradSum(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkReLUGradSum(t, Kernels64) })
}

func checkReLUGradSum[T Float](t *testing.T, k map[Op]Kernel[T]) {
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

// TestConvPoolMatchesUnfused checks Conv2DPool against Conv2D, MaxPool2D
// (2×2, stride 2) and ReLU run one after the other on the whole batch, bit
// for bit (values and indices) in float32 and float64: kernels 5×5, 3×3
// and non-square, padding, odd output planes (the pooling's floor), with
// and without bias and ReLU, batches of 0, 1, a chunk and a half and 64
// samples (the MNIST Net's first layer).
func TestConvPoolMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkConvPool(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkConvPool(t, Kernels64) })
}

func checkConvPool[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(7, 8))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, tc := range []struct {
		n, h, w, o, kh, kw, pad int
	}{
		{64, 28, 28, 10, 5, 5, 0}, {13, 28, 28, 10, 5, 5, 0}, {1, 28, 28, 10, 5, 5, 0}, {0, 28, 28, 10, 5, 5, 0},
		{5, 9, 8, 3, 3, 3, 1}, {3, 7, 6, 2, 3, 3, 0}, {4, 6, 11, 4, 4, 2, 2}, {2, 40, 33, 3, 7, 7, 3},
	} {
		x := normalBuf[T](r, []int{tc.n, 1, tc.h, tc.w})
		w := normalBuf[T](r, []int{tc.o, 1, tc.kh, tc.kw})
		oh, ow := tc.h+2*tc.pad-tc.kh+1, tc.w+2*tc.pad-tc.kw+1
		if !ConvPoolFusable(&Attrs{Padding: tc.pad}, x.Shape, w.Shape) {
			t.Fatalf("%+v: not fusable", tc)
		}
		ps := []int{tc.n, tc.o, oh / 2, ow / 2}
		for _, bias := range []bool{false, true} {
			for _, relu := range []bool{false, true} {
				in := []*Buf[T]{x, w}
				if bias {
					in = append(in, normalBuf[T](r, []int{tc.o}))
				}
				a := &Attrs{Padding: tc.pad}
				conv := zeroBuf[T]([]int{tc.n, tc.o, oh, ow})
				call(k, c, Conv2D, a, in, []*Buf[T]{conv})
				y, idx := zeroBuf[T](ps), &Buf[T]{Idx: make([]int32, prod(ps)), Shape: ps}
				call(k, c, MaxPool2D, &Attrs{Kernel: 2}, []*Buf[T]{conv}, []*Buf[T]{y, idx})
				if relu {
					call(k, c, ReLU, nil, []*Buf[T]{y}, []*Buf[T]{y})
				}
				fa := *a
				fa.ReLU = relu
				f, fidx := zeroBuf[T](ps), &Buf[T]{Idx: make([]int32, prod(ps)), Shape: ps}
				call(k, c, Conv2DPool, &fa, in, []*Buf[T]{f, fidx})
				expectSame(t, ps, "conv2d+maxpool2d", bias, relu, f.Data, y.Data)
				for i := range idx.Idx {
					if fidx.Idx[i] != idx.Idx[i] {
						t.Errorf("%v bias %v relu %v: index [%d] = %d fused, %d unfused", ps, bias, relu, i, fidx.Idx[i], idx.Idx[i])
						break
					}
				}
			}
		}
	}
	// Not fusable: several input channels, a stride, groups, an output
	// plane without a 2×2 window.
	for _, tc := range []struct {
		a    Attrs
		x, w []int
	}{
		{Attrs{}, []int{2, 3, 8, 8}, []int{4, 3, 3, 3}}, {Attrs{Stride: 2}, []int{2, 1, 8, 8}, []int{4, 1, 3, 3}},
		{Attrs{Groups: 2}, []int{2, 2, 8, 8}, []int{4, 1, 3, 3}}, {Attrs{}, []int{2, 1, 3, 8}, []int{4, 1, 3, 3}},
	} {
		if ConvPoolFusable(&tc.a, tc.x, tc.w) {
			t.Errorf("ConvPoolFusable(%+v, %v, %v) = true", tc.a, tc.x, tc.w)
		}
	}
}

// TestConvPoolGradMatchesUnfused checks Conv2DPoolGrad against the
// gradient the engine emits unfused (ReLUGrad, MaxPool2DGrad into the
// convolution's output gradient, Conv2DGradWeight, Conv2DGradBias), bit
// for bit in float32 (within 1e-12 in float64, whose chunks add in
// another order), with and without the bias and the ReLU, overwriting and
// accumulating, on batches of 0, 1, 17 and 64 samples.
func TestConvPoolGradMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkConvPoolGrad(t, Kernels32, 0) })
	t.Run("float64", func(t *testing.T) { checkConvPoolGrad(t, Kernels64, 1e-12) })
}

func checkConvPoolGrad[T Float](t *testing.T, k map[Op]Kernel[T], tol float64) {
	r := rand.New(rand.NewPCG(9, 10))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, tc := range []struct{ n, h, w, o, kh, kw, pad int }{
		{64, 28, 28, 10, 5, 5, 0}, {17, 28, 28, 10, 5, 5, 0}, {1, 9, 8, 3, 3, 3, 1}, {0, 28, 28, 10, 5, 5, 0}, {5, 11, 21, 4, 5, 5, 2},
	} {
		a := Attrs{Padding: tc.pad}
		x, w := normalBuf[T](r, []int{tc.n, 1, tc.h, tc.w}), normalBuf[T](r, []int{tc.o, 1, tc.kh, tc.kw})
		if !ConvPoolGradFusable(&a, x.Shape, w.Shape) {
			t.Fatalf("%+v: not fusable", tc)
		}
		oh, ow := tc.h+2*tc.pad-tc.kh+1, tc.w+2*tc.pad-tc.kw+1
		ps, cs := []int{tc.n, tc.o, oh / 2, ow / 2}, []int{tc.n, tc.o, oh, ow}
		for _, relu := range []bool{false, true} {
			fa := a
			fa.ReLU = relu
			y, idx := zeroBuf[T](ps), &Buf[T]{Idx: make([]int32, prod(ps)), Shape: ps}
			call(k, c, Conv2DPool, &fa, []*Buf[T]{x, w}, []*Buf[T]{y, idx})
			dy := normalBuf[T](r, ps)
			for _, bias := range []bool{false, true} {
				for _, acc := range []bool{false, true} {
					fill := func(s []int) *Buf[T] {
						b := zeroBuf[T](s)
						for i := range b.Data {
							b.Data[i] = T(i%5) - 2
						}
						return b
					}
					aa := a
					aa.Accumulate = acc
					// unfused
					d := dy
					if relu {
						d = zeroBuf[T](ps)
						call(k, c, ReLUGrad, nil, []*Buf[T]{dy, y}, []*Buf[T]{d})
					}
					dc := zeroBuf[T](cs)
					call(k, c, MaxPool2DGrad, &Attrs{Kernel: 2, Stride: 2}, []*Buf[T]{d, idx}, []*Buf[T]{dc})
					wantW, wantB := fill(w.Shape), fill([]int{tc.o})
					call(k, c, Conv2DGradWeight, &aa, []*Buf[T]{dc, x}, []*Buf[T]{wantW})
					call(k, c, Conv2DGradBias, &aa, []*Buf[T]{dc}, []*Buf[T]{wantB})
					// fused
					fa.Accumulate = acc
					gotW, gotB := fill(w.Shape), fill([]int{tc.o})
					var yIn *Buf[T]
					if relu {
						yIn = y
					}
					out := []*Buf[T]{gotW}
					if bias {
						out = append(out, gotB)
					}
					call(k, c, Conv2DPoolGrad, &fa, []*Buf[T]{dy, idx, yIn, x}, out)
					check := func(what string, got, want []T) {
						for i := range want {
							g, w := float64(got[i]), float64(want[i])
							if tol == 0 && math.Float64bits(g) != math.Float64bits(w) || math.Abs(g-w) > tol*max(1, math.Abs(w)) {
								t.Errorf("%v relu %v bias %v accumulate %v: %s[%d] = %v fused, %v unfused", ps, relu, bias, acc, what, i, g, w)
								return
							}
						}
					}
					check("dw", gotW.Data, wantW.Data)
					if bias {
						check("db", gotB.Data, wantB.Data)
					}
				}
			}
		}
	}
}

// normalBuf is a buffer of the given shape filled with draws from r's
// standard normal distribution, in order.
func normalBuf[T Float](r *rand.Rand, shape []int) *Buf[T] {
	b := zeroBuf[T](shape)
	for i := range b.Data {
		b.Data[i] = T(r.NormFloat64())
	}
	return b
}
