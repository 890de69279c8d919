package ops

import (
	"math/rand/v2"
	"testing"
)

// Benchmarks of the MNIST Net's convolutions in float32 at batch 64. Each
// reports ns/sample. conv1 is the first layer, so its backward pass needs
// no input gradient; the fwd+bwd figures are what a training step spends.

type convBench struct {
	name     string
	x, w     []int
	a        *Attrs
	gradIn   bool // the backward pass includes the input gradient
	x1, w1   *Buf[float32]
	b, y, dy *Buf[float32]
	dx, dw   *Buf[float32]
	db       *Buf[float32]
	c        *Ctx[float32]
}

func newConvBench(name string, x, w []int, gradIn bool) *convBench {
	return newConvBenchAttrs(name, x, w, &Attrs{}, gradIn)
}

func newConvBenchAttrs(name string, x, w []int, a *Attrs, gradIn bool) *convBench {
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(shape []int) *Buf[float32] { return normalBuf[float32](r, shape) }
	g := geomFwd(a, x, w)
	y := []int{x[0], w[0], g.oh, g.ow}
	cb := &convBench{name: name, x: x, w: w, a: a, gradIn: gradIn,
		x1: rnd(x), w1: rnd(w), b: rnd(w[:1]), y: rnd(y), dy: rnd(y), dx: rnd(x), dw: rnd(w), db: rnd(w[:1])}
	ws := Workspace(Conv2D, a, [][]int{x, w, w[:1]}, [][]int{y})
	ws = max(ws, Workspace(Conv2DGradInput, a, [][]int{y, w}, [][]int{x}))
	ws = max(ws, Workspace(Conv2DGradWeight, a, [][]int{y, x}, [][]int{w}))
	cb.c = &Ctx[float32]{Work: make([]float32, ws)}
	return cb
}

func (cb *convBench) forward() {
	Kernels32[Conv2D](cb.c, cb.a, []*Buf[float32]{cb.x1, cb.w1, cb.b}, []*Buf[float32]{cb.y})
}

func (cb *convBench) gradInput() {
	Kernels32[Conv2DGradInput](cb.c, cb.a, []*Buf[float32]{cb.dy, cb.w1}, []*Buf[float32]{cb.dx})
}

func (cb *convBench) gradWeight() {
	Kernels32[Conv2DGradWeight](cb.c, cb.a, []*Buf[float32]{cb.dy, cb.x1}, []*Buf[float32]{cb.dw})
}

func (cb *convBench) gradBias() {
	Kernels32[Conv2DGradBias](cb.c, cb.a, []*Buf[float32]{cb.dy}, []*Buf[float32]{cb.db})
}

func (cb *convBench) fwdBwd() {
	cb.forward()
	if cb.gradIn {
		cb.gradInput()
	}
	cb.gradWeight()
	cb.gradBias()
}

func BenchmarkConv(b *testing.B) {
	for _, cb := range []*convBench{
		newConvBench("conv1", []int{64, 1, 28, 28}, []int{10, 1, 5, 5}, false),
		newConvBench("conv2", []int{64, 10, 12, 12}, []int{20, 10, 5, 5}, true),
		// resnet_fashion.star's 3×3 convolutions (padding 1) at batch 64.
		newConvBenchAttrs("resnet_stem", []int{64, 1, 28, 28}, []int{16, 1, 3, 3}, &Attrs{Padding: 1}, false),
		newConvBenchAttrs("resnet_layer1", []int{64, 16, 28, 28}, []int{16, 16, 3, 3}, &Attrs{Padding: 1}, true),
		newConvBenchAttrs("resnet_layer2_s2", []int{64, 16, 28, 28}, []int{32, 16, 3, 3}, &Attrs{Padding: 1, Stride: 2}, true),
		newConvBenchAttrs("resnet_layer2", []int{64, 32, 14, 14}, []int{32, 32, 3, 3}, &Attrs{Padding: 1}, true),
		newConvBenchAttrs("resnet_layer3", []int{64, 64, 7, 7}, []int{64, 64, 3, 3}, &Attrs{Padding: 1}, true),
		newConvBenchAttrs("resnet_layer3_s2", []int{64, 32, 14, 14}, []int{64, 32, 3, 3}, &Attrs{Padding: 1, Stride: 2}, true),
		newConvBenchAttrs("resnet_down2", []int{64, 16, 28, 28}, []int{32, 16, 1, 1}, &Attrs{Stride: 2}, true),
		newConvBenchAttrs("resnet_down3", []int{64, 32, 14, 14}, []int{64, 32, 1, 1}, &Attrs{Stride: 2}, true),
	} {
		for _, part := range []struct {
			name string
			f    func()
		}{
			{"fwd+bwd", cb.fwdBwd},
			{"forward", cb.forward},
			{"grad_input", cb.gradInput},
			{"grad_weight", cb.gradWeight},
			{"grad_bias", cb.gradBias},
		} {
			b.Run(cb.name+"/"+part.name, func(b *testing.B) {
				for b.Loop() {
					part.f()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cb.x[0]), "ns/sample")
			})
			{ // im2col and GEMM instead of the direct kernels
				b.Run(cb.name+"_im2col/"+part.name, func(b *testing.B) {
					directConv = false
					defer func() { directConv = true }()
					for b.Loop() {
						part.f()
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(cb.x[0]), "ns/sample")
				})
			}
		}
	}
}

// BenchmarkLowering measures im2col and col2im alone (float32), the parts
// of a convolution that are not the matrix multiply.
func BenchmarkLowering(b *testing.B) {
	for _, tc := range []struct {
		name string
		x, w []int
	}{
		{"conv1", []int{64, 1, 28, 28}, []int{10, 1, 5, 5}},
		{"conv2", []int{64, 10, 12, 12}, []int{20, 10, 5, 5}},
	} {
		g := geomFwd(&Attrs{}, tc.x, tc.w)
		x := make([]float32, prod(tc.x))
		col := make([]float32, g.k()*g.l())
		b.Run(tc.name+"/im2col", func(b *testing.B) {
			for b.Loop() {
				im2col(&g, x, col)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.n), "ns/sample")
		})
		b.Run(tc.name+"/col2im", func(b *testing.B) {
			for b.Loop() {
				col2im(&g, col, x)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.n), "ns/sample")
		})
	}
}

// BenchmarkLinear measures Linear and its gradients in float32 on the
// MNIST Net's fully connected layers at batch 64 ([N,I] inputs, the fast
// path) and on a GPT-sized token projection ([N,T,I] inputs). Each reports
// ns/row, a row being one sample (or one token).
func BenchmarkLinear(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(shape ...int) *Buf[float32] { return normalBuf[float32](r, shape) }
	for _, tc := range []struct {
		name string
		x, w []int
	}{
		{"fc1", []int{64, 320}, []int{50, 320}},
		{"fc2", []int{64, 50}, []int{10, 50}},
		{"tokens", []int{8, 64, 128}, []int{128, 128}},
	} {
		out, err := Infer(Linear, nil, [][]int{tc.x, tc.w, tc.w[:1]})
		if err != nil {
			b.Logf("%s: %v (skipped)", tc.name, err)
			continue
		}
		x, w, bias, y, dy := rnd(tc.x...), rnd(tc.w...), rnd(tc.w[0]), rnd(out[0]...), rnd(out[0]...)
		dx, dw, db := rnd(tc.x...), rnd(tc.w...), rnd(tc.w[0])
		c, a := &Ctx[float32]{}, &Attrs{}
		rows := prod(tc.x[:len(tc.x)-1])
		for _, part := range []struct {
			name string
			f    func()
		}{
			{"forward", func() { Kernels32[Linear](c, a, []*Buf[float32]{x, w, bias}, []*Buf[float32]{y}) }},
			{"grad_input", func() { Kernels32[LinearGradInput](c, a, []*Buf[float32]{dy, w}, []*Buf[float32]{dx}) }},
			{"grad_weight", func() { Kernels32[LinearGradWeight](c, a, []*Buf[float32]{dy, x}, []*Buf[float32]{dw}) }},
			{"grad_bias", func() { Kernels32[LinearGradBias](c, a, []*Buf[float32]{dy}, []*Buf[float32]{db}) }},
		} {
			b.Run(tc.name+"/"+part.name, func(b *testing.B) {
				for b.Loop() {
					part.f()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row")
			})
		}
	}
}

// BenchmarkConvPool measures the MNIST Net's first block (conv1, 2×2 max
// pooling, ReLU) at batch 64 in float32, forward and parameter gradients,
// fused (Conv2DPool, Conv2DPoolGrad) and as the separate ops, in the same
// run; ns/sample. The unfused sequence writes and reads the convolution's
// 1.5 MB output and its gradient whole.
func BenchmarkConvPool(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	rnd := func(shape ...int) *Buf[float32] { return normalBuf[float32](r, shape) }
	const n = 64
	x, w, bias := rnd(n, 1, 28, 28), rnd(10, 1, 5, 5), rnd(10)
	conv, pool, y, dy := rnd(n, 10, 24, 24), rnd(n, 10, 12, 12), rnd(n, 10, 12, 12), rnd(n, 10, 12, 12)
	dz, dc, dw, db := rnd(n, 10, 12, 12), rnd(n, 10, 24, 24), rnd(10, 1, 5, 5), rnd(10)
	idx := &Buf[float32]{Shape: []int{n, 10, 12, 12}, Idx: make([]int32, n*10*144)}
	relu := &Attrs{ReLU: true}
	pa := &Attrs{Kernel: 2, Stride: 2}
	ws := max(Workspace(Conv2D, &Attrs{}, [][]int{x.Shape, w.Shape}, [][]int{conv.Shape}),
		Workspace(Conv2DGradWeight, &Attrs{}, [][]int{conv.Shape, x.Shape}, [][]int{w.Shape}),
		Workspace(Conv2DPool, relu, [][]int{x.Shape, w.Shape}, [][]int{y.Shape}),
		Workspace(Conv2DPoolGrad, relu, [][]int{dy.Shape, y.Shape, y.Shape, x.Shape}, [][]int{w.Shape, bias.Shape}))
	c := &Ctx[float32]{Work: make([]float32, ws)}
	k := Kernels32
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"fused/forward", func() {
			k[Conv2DPool](c, relu, []*Buf[float32]{x, w, bias}, []*Buf[float32]{y, idx})
		}},
		{"unfused/forward", func() {
			k[Conv2D](c, &Attrs{}, []*Buf[float32]{x, w, bias}, []*Buf[float32]{conv})
			k[MaxPool2D](c, pa, []*Buf[float32]{conv}, []*Buf[float32]{pool, idx})
			k[ReLU](c, nil, []*Buf[float32]{pool}, []*Buf[float32]{y})
		}},
		{"fused/grad", func() {
			k[Conv2DPoolGrad](c, relu, []*Buf[float32]{dy, idx, y, x}, []*Buf[float32]{dw, db})
		}},
		{"unfused/grad", func() {
			k[ReLUGrad](c, nil, []*Buf[float32]{dy, y}, []*Buf[float32]{dz})
			k[MaxPool2DGrad](c, pa, []*Buf[float32]{dz, idx}, []*Buf[float32]{dc})
			k[Conv2DGradWeight](c, &Attrs{}, []*Buf[float32]{dc, x}, []*Buf[float32]{dw})
			k[Conv2DGradBias](c, &Attrs{}, []*Buf[float32]{dc}, []*Buf[float32]{db})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				tc.f()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/sample")
		})
	}
}
