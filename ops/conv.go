package ops

import (
	"fmt"

	"gorun/ops/internal/vec"
)

// Convolution: Conv2D and its gradients, and the CPU's fusion of a first
// convolution with the 2×2 max pooling (and ReLU) after it, Conv2DPool,
// with its gradient Conv2DPoolGrad. The lowering to matrix products
// (im2col, col2im) is in im2col.go.

const (
	// Conv2D: in x[N,C,H,W], w[O,C/G,KH,KW], optional b[O]; out
	// y[N,O,OH,OW]. Attrs: Stride, Padding, Groups (G; 0 or 1 is an
	// ungrouped convolution; C and O must be multiples of G).
	Conv2D Op = "conv2d"

	// Conv2DGradInput: in dy[N,O,OH,OW], w[O,C/G,KH,KW]; out dx[N,C,H,W].
	// Attrs: as Conv2D.
	Conv2DGradInput Op = "conv2d_grad_input"

	// Conv2DGradWeight: in dy[N,O,OH,OW], x[N,C,H,W]; out dw[O,C/G,KH,KW].
	// Attrs: as Conv2D.
	Conv2DGradWeight Op = "conv2d_grad_weight"

	// Conv2DGradBias: in dy[N,O,OH,OW]; out db[O].
	Conv2DGradBias Op = "conv2d_grad_bias"

	// Conv2DPool: Conv2D, then MaxPool2D with a 2×2 window and stride 2,
	// then with Attrs.ReLU max(·, 0), in one pass that keeps the
	// convolution's output in the core's cache a few samples at a time
	// instead of writing it whole: in x[N,C,H,W], w[O,C/G,KH,KW], optional
	// b[O]; out y[N,O,OH/2,OW/2] and the index (Idx) as MaxPool2D's, within
	// each OH×OW plane of the convolution's output. Attrs: as Conv2D, and
	// ReLU. Each value is rounded as the three ops round it. The engine
	// fuses a convolution whose output only such a pooling reads where
	// ConvPoolFusable says so (the plan prints it "conv2d+maxpool2d", with
	// "+relu"); its gradient is the unfused ops' (ReLUGrad, MaxPool2DGrad,
	// the convolution's).
	Conv2DPool Op = "conv2d+maxpool2d"

	// Conv2DPoolGrad: the weight and bias gradients of a Conv2DPool whose
	// input needs none (a first layer): in dy[N,O,OH/2,OW/2] (of the fused
	// output), idx (Idx, Conv2DPool's), y (its output, with Attrs.ReLU;
	// absent without), x[N,1,H,W]; out dw[O,1,KH,KW] and, with a bias,
	// db[O]. Bit for bit ReLUGrad, MaxPool2DGrad into the convolution's
	// output gradient, then Conv2DGradWeight and Conv2DGradBias, but that
	// gradient is built a chunk of samples at a time in the scratch instead
	// of whole (where ConvPoolGradFusable says so). Attrs: as Conv2D, ReLU.
	Conv2DPoolGrad Op = "conv2d+maxpool2d_grad"
)

var convOps = []*Def{
	{
		Op: Conv2D, In: []Input{{Name: "input"}, {Name: "weight"}, {Name: "bias", Optional: true}}, Out: []Output{{Name: "y"}}, Autocast: AutocastLower,
		Shape: inferConv2D,
		Workspace: func(a *Attrs, in, out [][]int) int {
			x, w, y := in[0], in[1], out[0]
			return convWork(w[1]*w[2]*w[3], w[0], x[0]*y[2]*y[3])
		},
		Grad:     affineGrad(Conv2DGradInput, Conv2DGradWeight, Conv2DGradBias),
		Kernel32: conv2D[float32], Kernel64: conv2D[float64],
	},
	{
		Op: Conv2DGradInput, In: []Input{{Name: "dy"}, {Name: "w"}}, Out: []Output{{Name: "dx"}},
		Workspace: func(a *Attrs, in, out [][]int) int {
			dy, w := in[0], in[1]
			return convWork(w[1]*w[2]*w[3], w[0], dy[0]*dy[2]*dy[3])
		},
		Kernel32: conv2DGradInput[float32], Kernel64: conv2DGradInput[float64],
	},
	{
		Op: Conv2DGradWeight, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dw"}}, Accumulates: true,
		Workspace: func(a *Attrs, in, out [][]int) int {
			dy, dw := in[0], out[0]
			return convWork(dw[1]*dw[2]*dw[3], dw[0], dy[0]*dy[2]*dy[3])
		},
		Kernel32: conv2DGradWeight[float32], Kernel64: conv2DGradWeight[float64],
	},
	{
		Op: Conv2DGradBias, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "db"}}, Accumulates: true,
		Kernel32: conv2DGradBias[float32], Kernel64: conv2DGradBias[float64],
	},
	{
		Op: Conv2DPool, In: []Input{{Name: "input"}, {Name: "weight"}, {Name: "bias", Optional: true}},
		Out: []Output{{Name: "y"}, {Name: "index", Int: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			conv, err := inferConv2D(a, in)
			if err != nil {
				return nil, err
			}
			return inferMaxPool2D(&Attrs{Kernel: 2, Stride: 2}, conv[0])
		},
		Workspace: func(a *Attrs, in, out [][]int) int { return convPoolWork(in[0], in[1], a) },
		Grad:      convPoolGrad,
		StepName: func(a *Attrs, given func(int) bool) string {
			if a.ReLU {
				return string(Conv2DPool) + "+relu"
			}
			return string(Conv2DPool)
		},
		Kernel32: conv2DPool[float32], Kernel64: conv2DPool[float64],
	},
	{
		Op: Conv2DPoolGrad, In: []Input{{Name: "dy"}, {Name: "index", Int: true}, {Name: "y", Optional: true}, {Name: "x"}},
		Out: []Output{{Name: "dw"}, {Name: "db", Optional: true}}, Accumulates: true,
		Workspace: func(a *Attrs, in, out [][]int) int { return convPoolGradWork(in[3], out[0], a) },
		StepName: func(a *Attrs, given func(int) bool) string {
			if a.ReLU {
				return "conv2d+maxpool2d+relu_grad"
			}
			return string(Conv2DPoolGrad)
		},
		Kernel32: conv2DPoolGrad[float32], Kernel64: conv2DPoolGrad[float64],
	},
}

// convPoolGrad differentiates Conv2DPool (in x, w and a bias; out y and
// the pooling's index) as the ops it fuses: ReLU's gradient first (with
// Attrs.ReLU), max pooling's into the convolution's output, then the
// convolution's (affineGrads), so that the gradient is the unfused plan's
// bit for bit. Where x needs no gradient and ConvPoolGradFusable allows,
// one Conv2DPoolGrad node does all of it for the weight and the bias, the
// same bits again.
func convPoolGrad(b GradBuilder) []Value {
	a := b.Attrs()
	y, idx, dy := b.Out(0), b.Out(1), b.OutGrad(0)
	x, w, bias := b.In(0), b.In(1), b.In(2)
	if !b.NeedsGrad(x) && ConvPoolGradFusable(&a, b.Shape(x), b.Shape(w)) {
		// One node for both parameters' gradients, the convolution's
		// output gradient built a chunk of samples at a time.
		var yIn Value
		if a.ReLU {
			yIn = y
		}
		g := b.Grads(Conv2DPoolGrad, a, []Value{w, bias}, dy, idx, yIn, x)
		return []Value{nil, g[0], g[1]}
	}
	if a.ReLU {
		dy = b.Temp(ReLUGrad, Attrs{}, "grad "+b.Name(y)+" (before relu)", b.Shape(y), b.Batched(y), dy, y)
	}
	conv := a // the convolution alone
	conv.ReLU = false
	shapes, err := inferConv2D(&conv, [][]int{b.Shape(x), b.Shape(w)})
	if err != nil {
		panic(fmt.Sprintf("conv2d+maxpool2d: its convolution's shape: %v", err)) // the fused op's shape rule passed
	}
	dc := b.Temp(MaxPool2DGrad, Attrs{Kernel: 2, Stride: 2}, "grad "+b.Name(y)+" (before maxpool)", shapes[0], b.Batched(y), dy, idx)
	return affineGrads(b, conv, dc, Conv2DGradInput, Conv2DGradWeight, Conv2DGradBias)
}

func inferConv2D(a *Attrs, in [][]int) ([][]int, error) {
	x, w := in[0], in[1]
	if len(x) != 4 {
		return nil, fmt.Errorf("conv2d: input must be [N C H W], got %v", x)
	}
	if len(w) != 4 {
		return nil, fmt.Errorf("conv2d: weight must be [O C KH KW], got %v", w)
	}
	if g := a.Groups; g < 0 {
		return nil, fmt.Errorf("conv2d: groups must be at least 1, got %d", g)
	}
	if g := convGroups(a); g == 1 {
		if x[1] != w[1] {
			return nil, fmt.Errorf("conv2d: input has %d channels, weight expects %d (input shape %v, weight shape %v)", x[1], w[1], x, w)
		}
	} else {
		if x[1]%g != 0 {
			return nil, fmt.Errorf("conv2d: input channels %d are not divisible by groups %d (input shape %v)", x[1], g, x)
		}
		if w[0]%g != 0 {
			return nil, fmt.Errorf("conv2d: output channels %d are not divisible by groups %d (weight shape %v)", w[0], g, w)
		}
		if x[1] != w[1]*g {
			return nil, fmt.Errorf("conv2d: input has %d channels, weight expects %d per group × %d groups = %d (input shape %v, weight shape %v)", x[1], w[1], g, w[1]*g, x, w)
		}
	}
	if b := optShape(in, 2); b != nil && (len(b) != 1 || b[0] != w[0]) {
		return nil, fmt.Errorf("conv2d: bias must be [%d], one per output channel of weight %v, got %v", w[0], w, b)
	}
	s, p := convStride(a), a.Padding
	if s < 1 {
		return nil, fmt.Errorf("conv2d: stride must be at least 1, got %d", s)
	}
	if p < 0 {
		return nil, fmt.Errorf("conv2d: padding must not be negative, got %d", p)
	}
	if x[2]+2*p < w[2] || x[3]+2*p < w[3] {
		msg := fmt.Sprintf("conv2d: kernel %d×%d does not fit input %d×%d", w[2], w[3], x[2], x[3])
		if p > 0 {
			msg += fmt.Sprintf(" with padding %d", p)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	oh := (x[2]+2*p-w[2])/s + 1
	ow := (x[3]+2*p-w[3])/s + 1
	return [][]int{{x[0], w[0], oh, ow}}, nil
}

// convStride is Conv2D's stride; 0 means PyTorch's default, 1.
func convStride(a *Attrs) int {
	if a.Stride == 0 {
		return 1
	}
	return a.Stride
}

// convGroups is Conv2D's number of groups; 0 means 1.
func convGroups(a *Attrs) int { return max(a.Groups, 1) }

// Convolution is lowered to one matrix multiply over the whole batch
// (im2col): the input is unrolled into col[K×L], K = C·KH·KW rows (ordered
// as the weight's C, KH, KW) and L = N·OH·OW columns (ordered N, OH, OW), so
// that W[O×K]·col is the output in [O, N, OH, OW] order. The scratch
// (Ctx.Work) holds col and one [O×L] matrix: the product before it is
// permuted to [N, O, OH, OW] (forward), or the output gradient permuted to
// [O, N·OH·OW] (backward). See Workspace.
//
// A grouped convolution (G groups) runs the same matrix multiply once per
// group: col then holds one group's C/G channels, and group i's O/G rows of
// the weight multiply it into rows [i·O/G, (i+1)·O/G) of the [O×L] matrix.

// convGeom is the geometry of one convolution. With groups, c is the
// channels of one group, and a sample of x spans c·groups·h·w elements.
type convGeom struct {
	n, c, h, w int // input [N C H W] (c per group)
	o, kh, kw  int // weight [O C KH KW]
	oh, ow     int // output [N O OH OW]
	s, p       int // stride, padding
	groups     int // 0 or 1: ungrouped
}

// k is the number of rows of col: C·KH·KW (one group's channels).
func (g *convGeom) k() int { return g.c * g.kh * g.kw }

// ng is the number of groups, at least 1.
func (g *convGeom) ng() int { return max(g.groups, 1) }

// xs is the distance between samples in x: all groups' channels.
func (g *convGeom) xs() int { return g.ng() * g.c * g.h * g.w }

// l is the number of columns of col: N·OH·OW.
func (g *convGeom) l() int { return g.n * g.oh * g.ow }

// convWork is the scratch a convolution kernel needs: col[K×L] and one
// [O×L] matrix.
func convWork(k, o, l int) int { return (k + o) * l }

// geomFwd derives the geometry from the input and weight shapes.
func geomFwd(a *Attrs, x, w []int) convGeom {
	g := convGeom{n: x[0], c: w[1], h: x[2], w: x[3], o: w[0], kh: w[2], kw: w[3], s: convStride(a), p: a.Padding, groups: a.Groups}
	g.oh = (g.h+2*g.p-g.kh)/g.s + 1
	g.ow = (g.w+2*g.p-g.kw)/g.s + 1
	return g
}

// geomBwd derives the geometry from the output-gradient, input and weight
// shapes.
func geomBwd(a *Attrs, dy, x, w []int) convGeom {
	return convGeom{n: dy[0], c: w[1], h: x[2], w: x[3], o: w[0], kh: w[2], kw: w[3], oh: dy[2], ow: dy[3], s: convStride(a), p: a.Padding, groups: a.Groups}
}

// colBudget is the most elements of col a convolution lowers at once: the
// batch is lowered and multiplied a chunk of samples at a time (convChunk),
// so that col and the product stay in the core's L2 cache between im2col,
// the matrix multiply and the permute, instead of making a round trip
// through memory. Measured with BenchmarkConv (AMD EPYC Zen 4, 1 MiB L2):
// see convChunk.
var colBudget = 1 << 17

// colMin is the fewest columns of col a chunk has (when the batch has
// them): narrower products waste the matrix multiply's 32-wide panels.
var colMin = 256

// convChunk is how many samples a convolution lowers and multiplies at
// once: as many as keep col within colBudget, at least one. It depends on
// the geometry only, so a kernel's floating-point order does not depend on
// the live batch beyond its last, shorter chunk.
func convChunk(g *convGeom) int {
	plane := g.oh * g.ow
	return max(1, colBudget/(g.k()*plane), (colMin+plane-1)/plane)
}

// directConv sends float32 convolutions with no groups to vec's direct
// kernels (no im2col buffer, no matrix multiply) where they beat lowering:
// inputs of one channel with stride 1 (a first layer on greyscale images,
// where im2col would copy each input element KH·KW times for a product with
// k = KH·KW), and, where vec runs them with vector bodies (AVX-512, or AVX2
// on CPUs without it), the passes that BenchmarkConv measured faster
// (vec.ConvFast; see direct). BenchmarkConv turns it off to compare both in
// one run.
var directConv = true

// direct returns g as vec's geometry, and which passes the direct kernels
// take.
func (g *convGeom) direct() (cg vec.ConvGeom, fwd, wgrad, dgrad bool) {
	if !directConv || g.ng() != 1 || g.kw > vec.ConvMaxKW || g.oh < 1 || g.ow < 1 {
		return cg, false, false, false
	}
	cg = vecGeom(*g)
	if g.c == 1 && g.s == 1 {
		return cg, true, true, false
	}
	fwd, wgrad, dgrad = vec.ConvFast(&cg)
	return cg, fwd, wgrad, dgrad
}

// chunk returns the geometry of samples [n0, n0+cs) of g.
func (g *convGeom) chunk(cs int) convGeom {
	c := *g
	c.n = cs
	return c
}

// conv2D: in x[N,C,H,W], w[O,C/G,KH,KW], optional b[O]; out
// y[N,O,OH,OW].
func conv2D[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, w, b, y := in[0], in[1], optIn(in, 2), out[0]
	g := geomFwd(a, x.Shape, w.Shape)
	if cg, ok, _, _ := g.direct(); ok && is32[T]() {
		var bias []float32
		if b != nil {
			bias = view[float32](b.Data)
		}
		vec.ConvForward(&cg, view[float32](x.Data), view[float32](w.Data), bias, view[float32](y.Data))
		return
	}
	k, plane, xs := g.k(), g.oh*g.ow, g.xs()
	og, xg := g.o/g.ng(), g.c*g.h*g.w // per group: output channels, x offset
	step := convChunk(&g)
	for n0 := 0; n0 < g.n; n0 += step {
		gc := g.chunk(min(step, g.n-n0))
		l := gc.l()
		col := c.Work[:k*l]
		yc := y.Data[n0*g.o*plane:][:g.o*l]
		// [O, N·OH·OW] for one sample is already [N, O, OH, OW].
		prodBuf := c.Work[k*l:][:g.o*l]
		if gc.n == 1 {
			prodBuf = yc
		}
		for gi := range g.ng() {
			im2col(&gc, x.Data[n0*xs+gi*xg:], col)
			matmul(false, false, og, l, k, 1, w.Data[gi*og*k:], k, col, l, 0, prodBuf[gi*og*l:][:og*l], l)
		}
		if gc.n == 1 {
			if b != nil {
				for o, bv := range b.Data[:g.o] {
					addScalar(yc[o*plane:][:plane], bv)
				}
			}
			continue
		}
		for n := 0; n < gc.n; n++ {
			for o := 0; o < g.o; o++ {
				dst := yc[(n*g.o+o)*plane:][:plane]
				src := prodBuf[o*l+n*plane:][:plane]
				if b == nil {
					copy(dst, src)
					continue
				}
				bv := b.Data[o]
				for i, v := range src {
					dst[i] = v + bv
				}
			}
		}
	}
}

// conv2DGradInput: in dy[N,O,OH,OW], w[O,C/G,KH,KW]; out dx[N,C,H,W].
func conv2DGradInput[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, w, dx := in[0], in[1], out[0]
	g := geomBwd(a, dy.Shape, dx.Shape, w.Shape)
	if cg, _, _, ok := g.direct(); ok && is32[T]() {
		vec.ConvGradInput(&cg, view[float32](dy.Data), view[float32](w.Data), view[float32](dx.Data))
		return
	}
	k, plane, xs := g.k(), g.oh*g.ow, g.xs()
	og, xg := g.o/g.ng(), g.c*g.h*g.w
	step := convChunk(&g)
	for n0 := 0; n0 < g.n; n0 += step {
		gc := g.chunk(min(step, g.n-n0))
		l := gc.l()
		dyT := permuteDy(&gc, dy.Data[n0*g.o*plane:], c.Work[k*l:][:g.o*l])
		dcol := c.Work[:k*l]
		dxd := dx.Data[n0*xs:][:gc.n*xs]
		clear(dxd)
		for gi := range g.ng() {
			matmul(true, false, k, l, og, 1, w.Data[gi*og*k:], k, dyT[gi*og*l:], l, 0, dcol, l)
			col2im(&gc, dcol, dxd[gi*xg:])
		}
	}
}

// conv2DGradWeight: in dy[N,O,OH,OW], x[N,C,H,W]; out dw[O,C/G,KH,KW].
func conv2DGradWeight[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, x, dw := in[0], in[1], out[0]
	g := geomBwd(a, dy.Shape, x.Shape, dw.Shape)
	if cg, _, ok, _ := g.direct(); ok && is32[T]() {
		vec.ConvGradWeight(&cg, view[float32](dy.Data), view[float32](x.Data), view[float32](dw.Data), a.Accumulate)
		return
	}
	var beta T
	if a.Accumulate {
		beta = 1
	}
	if g.n == 0 {
		// An empty batch contributes nothing to the gradient.
		if beta == 0 {
			clear(dw.Data[:dw.Len()])
		}
		return
	}
	k, plane, xs := g.k(), g.oh*g.ow, g.xs()
	og, xg := g.o/g.ng(), g.c*g.h*g.w
	step := convChunk(&g)
	for n0 := 0; n0 < g.n; n0 += step {
		gc := g.chunk(min(step, g.n-n0))
		l := gc.l()
		col := c.Work[:k*l]
		dyT := permuteDy(&gc, dy.Data[n0*g.o*plane:], c.Work[k*l:][:g.o*l])
		for gi := range g.ng() {
			im2col(&gc, x.Data[n0*xs+gi*xg:], col)
			matmul(false, true, og, k, l, 1, dyT[gi*og*l:], l, col, l, beta, dw.Data[gi*og*k:][:og*k], k)
		}
		beta = 1 // later chunks add to the first's
	}
}

// conv2DGradBias: in dy[N,O,OH,OW]; out db[O].
func conv2DGradBias[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, db := in[0], out[0]
	n, o := dy.Shape[0], dy.Shape[1]
	plane := prod(dy.Shape[2:])
	if is32[T]() {
		vec.BiasGrad(view[float32](dy.Data), n, o, plane, view[float32](db.Data), a.Accumulate)
		return
	}
	for j := 0; j < o; j++ {
		var s float64
		for i := 0; i < n; i++ {
			s += float64(sum(dy.Data[(i*o+j)*plane:][:plane]))
		}
		if a.Accumulate {
			db.Data[j] += T(s)
		} else {
			db.Data[j] = T(s)
		}
	}
}

// permuteDy returns dy[N,O,OH,OW] as an [O, N·OH·OW] matrix, written into
// buf unless N is 1 (then dy already has that layout).
func permuteDy[T Float](g *convGeom, dy, buf []T) []T {
	plane := g.oh * g.ow
	if g.n == 1 {
		return dy[:g.o*plane]
	}
	l := g.l()
	for n := 0; n < g.n; n++ {
		for o := 0; o < g.o; o++ {
			copy(buf[o*l+n*plane:][:plane], dy[(n*g.o+o)*plane:][:plane])
		}
	}
	return buf
}

// ConvPoolFusable reports whether the engine may fuse a Conv2D of input
// shape x and weight shape w (attributes a) with a 2×2, stride-2 max
// pooling of its output into one Conv2DPool: an ungrouped convolution of
// one input channel with stride 1 (a first layer on greyscale images),
// which the direct kernels run sample by sample on every CPU, so that
// convolving a few samples at a time gives the whole batch's bits. Its
// output must have at least one 2×2 window.
func ConvPoolFusable(a *Attrs, x, w []int) bool {
	if len(x) != 4 || len(w) != 4 || convGroups(a) != 1 || convStride(a) != 1 || w[1] != 1 || x[1] != 1 || w[3] > vec.ConvMaxKW {
		return false
	}
	oh, ow := x[2]+2*a.Padding-w[2]+1, x[3]+2*a.Padding-w[3]+1
	return oh >= 2 && ow >= 2
}

// convPoolChunk is how many samples Conv2DPool convolves at a time, for a
// convolution output of per elements a sample: as many as keep their
// output within 96 Ki elements (384 KiB of float32, in the core's 1 MiB L2
// cache between the convolution and the pooling), at least one: 16 for the
// MNIST Net's conv1, as many as Conv2DPoolGrad's chunks.
func convPoolChunk(per int) int { return max(1, (96<<10)/max(per, 1)) }

// convPoolWork is Conv2DPool's scratch: one chunk's convolution output,
// then the scratch of that chunk's convolution (lowered, as Conv2D's, where
// the direct kernels do not run it).
func convPoolWork(x, w []int, a *Attrs) int {
	g := geomFwd(a, x, w)
	per := g.o * g.oh * g.ow
	cs := min(convPoolChunk(per), max(g.n, 1))
	return cs*per + convWork(g.k(), g.o, cs*g.oh*g.ow)
}

// conv2DPool: in x[N,C,H,W], w[O,C/G,KH,KW], optional b[O]; out
// y[N,O,OH/2,OW/2] and idx (Idx): Conv2DPool. Each chunk of samples is
// convolved into the scratch, pooled from there into y, and with Attrs.ReLU
// clamped at 0 in place, by the kernels of the three ops.
func conv2DPool[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, w, b := in[0], in[1], optIn(in, 2)
	y, idx := out[0], out[1]
	g := geomFwd(a, x.Shape, w.Shape)
	per, xs := g.o*g.oh*g.ow, g.xs()
	ph, pw := g.oh/2, g.ow/2
	pper := g.o * ph * pw
	step := min(convPoolChunk(per), max(g.n, 1)) // as convPoolWork at the planned batch
	tmp := c.Work[:step*per]
	if cg, ok, _, _ := g.direct(); ok && is32[T]() {
		var bias []float32
		if b != nil {
			bias = view[float32](b.Data)
		}
		for n0 := 0; n0 < g.n; n0 += step {
			cs := min(step, g.n-n0)
			cc := cg
			cc.N = cs
			t := view[float32](tmp[:cs*per])
			yc := view[float32](y.Data[n0*pper:][:cs*pper])
			vec.ConvForward(&cc, view[float32](x.Data[n0*xs:][:cs*xs]), view[float32](w.Data), bias, t)
			vec.MaxPool2x2(t, yc, idx.Idx[n0*pper:][:cs*pper], cs*g.o, g.oh, g.ow, ph, pw)
			if a.ReLU {
				vec.ReLU(yc, yc)
			}
		}
		return
	}
	// Any other geometry or float64 (gradient checks): the three kernels on
	// buffers over each chunk.
	sub := *c
	sub.Work = c.Work[step*per:]
	pool := Attrs{Kernel: 2, Stride: 2}
	xs4, ts4, ys4 := &c.shapes[0], &c.shapes[1], &c.shapes[2]
	var xc, tc, yc, ic Buf[T]
	var cin [3]*Buf[T]
	var cout [2]*Buf[T]
	for n0 := 0; n0 < g.n; n0 += step {
		cs := min(step, g.n-n0)
		*xs4, *ts4, *ys4 = [4]int{cs, x.Shape[1], g.h, g.w}, [4]int{cs, g.o, g.oh, g.ow}, [4]int{cs, g.o, ph, pw}
		xc = Buf[T]{Data: x.Data[n0*xs:][:cs*xs], Shape: xs4[:]}
		tc = Buf[T]{Data: tmp[:cs*per], Shape: ts4[:]}
		yc = Buf[T]{Data: y.Data[n0*pper:][:cs*pper], Shape: ys4[:]}
		ic = Buf[T]{Idx: idx.Idx[n0*pper:][:cs*pper], Shape: ys4[:]}
		cin, cout = [3]*Buf[T]{&xc, w, b}, [2]*Buf[T]{&tc}
		conv2D(&sub, a, cin[:len(in)], cout[:1])
		cin[0], cout[0], cout[1] = &tc, &yc, &ic
		maxPool2D(&sub, &pool, cin[:1], cout[:2])
		if a.ReLU {
			cin[0], cout[0] = &yc, &yc
			relu(&sub, nil, cin[:1], cout[:1])
		}
	}
}

// ConvPoolGradFusable reports whether the engine may give a Conv2DPool of
// input shape x and weight shape w (attributes a), whose input needs no
// gradient, one Conv2DPoolGrad for its parameters' gradients: where
// vec.ConvPoolGrad takes the geometry (weight gradients that add by column
// into sixteen partial sums, which carry from chunk to chunk). The
// geometry alone decides, so every machine compiles the same plan.
func ConvPoolGradFusable(a *Attrs, x, w []int) bool {
	if !ConvPoolFusable(a, x, w) {
		return false
	}
	cg := vecGeom(geomFwd(a, x, w))
	return vec.ConvPoolGradOK(&cg)
}

// vecGeom is g as vec's geometry.
func vecGeom(g convGeom) vec.ConvGeom {
	return vec.ConvGeom{N: g.n, C: g.c, O: g.o, H: g.h, W: g.w, KH: g.kh, KW: g.kw, P: g.p, OH: g.oh, OW: g.ow, S: g.s}
}

// convPoolGradWork is Conv2DPoolGrad's scratch for input x and weight
// gradient dw: vec.ConvPoolGrad's, or for the other geometries and float64
// one chunk of the pooled and the convolution's output gradients and the
// chunk's lowering.
func convPoolGradWork(x, dw []int, a *Attrs) int {
	g := geomFwd(a, x, dw)
	cg := vecGeom(g)
	cs := vec.ConvPoolChunk
	pooled, conv := g.o*(g.oh/2)*(g.ow/2), g.o*g.oh*g.ow
	return max(vec.ConvPoolGradWork(&cg), cs*(pooled+conv)+convWork(g.k(), g.o, cs*g.oh*g.ow))
}

// conv2DPoolGrad: in dy[N,O,OH/2,OW/2], idx (Idx), optional y, x[N,1,H,W];
// out dw[O,1,KH,KW], optional db[O]: Conv2DPoolGrad.
func conv2DPoolGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, idx, y, x := in[0], in[1], optIn(in, 2), in[3]
	dw := out[0]
	var db *Buf[T]
	if len(out) > 1 {
		db = out[1]
	}
	g := geomFwd(a, x.Shape, dw.Shape)
	if cg := vecGeom(g); is32[T]() && vec.ConvPoolGradOK(&cg) {
		var yd, dbd []float32
		if y != nil {
			yd = view[float32](y.Data)
		}
		if db != nil {
			dbd = view[float32](db.Data)
		}
		vec.ConvPoolGrad(&cg, view[float32](dy.Data), idx.Idx, yd, view[float32](x.Data), view[float32](dw.Data), dbd, a.Accumulate, view[float32](c.Work))
		return
	}
	// Any other geometry or float64 (gradient checks): the four kernels a
	// chunk at a time, the parameter gradients added up over the chunks.
	if g.n == 0 {
		if !a.Accumulate {
			clear(dw.Data[:dw.Len()])
			if db != nil {
				clear(db.Data[:db.Len()])
			}
		}
		return
	}
	cs0 := vec.ConvPoolChunk
	ph, pw := g.oh/2, g.ow/2
	pooled, conv, xs := g.o*ph*pw, g.o*g.oh*g.ow, g.xs()
	dz, dc := c.Work[:cs0*pooled], c.Work[cs0*pooled:][:cs0*conv]
	sub := *c
	sub.Work = c.Work[cs0*(pooled+conv):]
	ps, cvs, xs4 := &c.shapes[0], &c.shapes[1], &c.shapes[2]
	var dyc, ic, yc, dzc, dcc, xc Buf[T]
	var bin [3]*Buf[T]
	var bout [1]*Buf[T]
	pool := Attrs{Kernel: 2, Stride: 2}
	acc := *a
	for n0 := 0; n0 < g.n; n0 += cs0 {
		cs := min(cs0, g.n-n0)
		*ps, *cvs, *xs4 = [4]int{cs, g.o, ph, pw}, [4]int{cs, g.o, g.oh, g.ow}, [4]int{cs, x.Shape[1], g.h, g.w}
		dyc = Buf[T]{Data: dy.Data[n0*pooled:][:cs*pooled], Shape: ps[:]}
		ic = Buf[T]{Idx: idx.Idx[n0*pooled:][:cs*pooled], Shape: ps[:]}
		dcc = Buf[T]{Data: dc[:cs*conv], Shape: cvs[:]}
		xc = Buf[T]{Data: x.Data[n0*xs:][:cs*xs], Shape: xs4[:]}
		d := &dyc
		if y != nil {
			yc = Buf[T]{Data: y.Data[n0*pooled:][:cs*pooled], Shape: ps[:]}
			dzc = Buf[T]{Data: dz[:cs*pooled], Shape: ps[:]}
			bin[0], bin[1], bout[0] = &dyc, &yc, &dzc
			reluGrad(&sub, nil, bin[:2], bout[:])
			d = &dzc
		}
		bin[0], bin[1], bout[0] = d, &ic, &dcc
		maxPool2DGrad(&sub, &pool, bin[:2], bout[:])
		bin[0], bin[1], bout[0] = &dcc, &xc, dw
		conv2DGradWeight(&sub, &acc, bin[:2], bout[:])
		if db != nil {
			bin[0], bout[0] = &dcc, db
			conv2DGradBias(&sub, &acc, bin[:1], bout[:])
		}
		acc.Accumulate = true // later chunks add to the first's
	}
}
