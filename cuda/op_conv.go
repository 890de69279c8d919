//go:build cuda

// Convolution: conv2d and its gradients, lowered as ops/conv.go does
// (im2col, a cuBLAS GEMM per group, the layout permutes, the bias add; see
// kernels.h).

package cuda

import (
	"gorgonia.org/cu"

	"gorun/engine"
	"gorun/ops"
)

// convSteps are the convolution family's ops.
var convSteps = map[ops.Op]opStep{
	ops.Conv2D:           runConv2D,
	ops.Conv2DGradInput:  runConv2DGradInput,
	ops.Conv2DGradWeight: runConv2DGradWeight,
	ops.Conv2DGradBias:   runConv2DGradBias,
}

// runConv2D queues Conv2D: x, w[, b] → y, through the work buffer (col, and
// the product before its permute when N > 1).
func runConv2D(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	work := d.work()
	x, w, b, y := st.In[0], st.In[1], optIn(st, 2), st.Out[0]
	g := d.conv(a, d.dim(x, 0), x, w, y)
	if g.n == 0 {
		return nil
	}
	k, l := g.k(), g.l()
	col := work
	// [O, N·OH·OW] for one sample is already [N, O, OH, OW].
	dst := d.ptr(y)
	if g.n > 1 {
		dst = work + 4*uintptr(k*l)
	}
	for gi := range g.g {
		if err := d.im2col(g, d.ptr(x)+g.xGroup(gi), col); err != nil {
			return err
		}
		if err := d.gemm(rowMajorGemm(false, false, g.og(), l, k, k, l, l), 1, 0, d.ptr(w)+g.rows(gi, k), col, dst+g.rows(gi, l)); err != nil {
			return err
		}
	}
	if g.n > 1 {
		if err := d.launch(kONLToNOL, elementwise(g.n*g.o*g.plane()), ptrArg(dst), d.bufArg(y), intArg(g.n), intArg(g.o), intArg(g.plane())); err != nil {
			return err
		}
	}
	if b != nil {
		return d.launch(kBiasAdd, elementwise(g.n*g.o*g.plane()), d.bufArg(y), d.bufArg(b), intArg(g.n), intArg(g.o), intArg(g.plane()))
	}
	return nil
}

// runConv2DGradInput queues Conv2DGradInput: dy, w → dx.
func runConv2DGradInput(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	work := d.work()
	dy, w, dx := st.In[0], st.In[1], st.Out[0]
	g := d.conv(a, d.dim(dy, 0), dx, w, dy)
	if g.n == 0 {
		return nil
	}
	k, l := g.k(), g.l()
	dyT, err := d.dyT(g, d.ptr(dy), work+4*uintptr(k*l))
	if err != nil {
		return err
	}
	dcol := work
	for gi := range g.g {
		if err := d.gemm(rowMajorGemm(true, false, k, l, g.og(), k, l, l), 1, 0, d.ptr(w)+g.rows(gi, k), dyT+g.rows(gi, l), dcol); err != nil {
			return err
		}
		// Each group writes its own channels of dx, all of them.
		if err := d.launch(kCol2im, elementwise(g.n*g.c*g.h*g.w), ptrArg(dcol), ptrArg(d.ptr(dx)+g.xGroup(gi)), intArg(g.n),
			intArg(g.c), intArg(g.cx()), intArg(g.h), intArg(g.w), intArg(g.kh), intArg(g.kw), intArg(g.oh), intArg(g.ow),
			intArg(g.s), intArg(g.p)); err != nil {
			return err
		}
	}
	return nil
}

// runConv2DGradWeight queues Conv2DGradWeight: dy, x → dw (added to with
// acc).
func runConv2DGradWeight(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	work := d.work()
	dy, x, dw := st.In[0], st.In[1], st.Out[0]
	g := d.conv(a, d.dim(dy, 0), x, dw, dy)
	if g.n == 0 {
		if acc {
			return nil
		}
		return memset32(cu.DevicePtr(d.ptr(dw)), 0, dw.Elems(), d.stream)
	}
	k, l := g.k(), g.l()
	col := work
	dyT, err := d.dyT(g, d.ptr(dy), work+4*uintptr(k*l))
	if err != nil {
		return err
	}
	for gi := range g.g {
		if err := d.im2col(g, d.ptr(x)+g.xGroup(gi), col); err != nil {
			return err
		}
		if err := d.gemm(rowMajorGemm(false, true, g.og(), k, l, l, l, k), 1, f32(acc), dyT+g.rows(gi, l), col, d.ptr(dw)+g.rows(gi, k)); err != nil {
			return err
		}
	}
	return nil
}

// runConv2DGradBias queues Conv2DGradBias: dy → db, the split sum over
// N·OH·OW.
func runConv2DGradBias(d *Device, st *engine.Step, acc bool) error {
	dy, db := st.In[0], st.Out[0]
	_, o, plane := biasShape(dy.Max)
	return d.splitSum(d.ptr(dy), d.ptr(db), d.dim(dy, 0), o, plane, acc)
}

// convShape is one convolution's geometry (ops/conv.go's convGeom): c is
// one group's input channels (the weight's dimension 1), o all output
// channels, g the groups (at least 1).
type convShape struct {
	n, c, h, w, o, kh, kw, oh, ow, s, p, g int
}

func (g convShape) k() int     { return g.c * g.kh * g.kw }
func (g convShape) l() int     { return g.n * g.oh * g.ow }
func (g convShape) plane() int { return g.oh * g.ow }

// cx is the channels of a sample of x: all groups'.
func (g convShape) cx() int { return g.c * g.g }

// og is one group's output channels.
func (g convShape) og() int { return g.o / g.g }

// xGroup is the byte offset of group gi's first channel in x (or dx).
func (g convShape) xGroup(gi int) uintptr { return 4 * uintptr(gi*g.c*g.h*g.w) }

// rows is the byte offset of group gi's rows in an [O, cols] matrix.
func (g convShape) rows(gi, cols int) uintptr { return 4 * uintptr(gi*g.og()*cols) }

func convStride(a *ops.Attrs) int {
	if a.Stride == 0 {
		return 1
	}
	return a.Stride
}

// conv builds a convolution's geometry from x's (or dx's) and w's shapes
// and y's (or dy's) spatial size, at the live batch n.
func (d *Device) conv(a *ops.Attrs, n int, x, w, y *engine.Buffer) convShape {
	return convShape{n: n, c: w.Max[1], h: x.Max[2], w: x.Max[3], o: w.Max[0], kh: w.Max[2], kw: w.Max[3],
		oh: y.Max[2], ow: y.Max[3], s: convStride(a), p: a.Padding, g: max(a.Groups, 1)}
}

// im2col unrolls one group's channels of x (x pointing at the group's
// first channel) into col.
func (d *Device) im2col(g convShape, x, col uintptr) error {
	return d.launch(kIm2col, elementwise(g.k()*g.l()), ptrArg(x), ptrArg(col), intArg(g.n), intArg(g.c), intArg(g.cx()),
		intArg(g.h), intArg(g.w), intArg(g.kh), intArg(g.kw), intArg(g.oh), intArg(g.ow), intArg(g.s), intArg(g.p))
}

// dyT returns dy[N,O,OH,OW] as an [O, N·OH·OW] matrix: dy itself when N
// is 1, else permuted into buf.
func (d *Device) dyT(g convShape, dy, buf uintptr) (uintptr, error) {
	if g.n == 1 {
		return dy, nil
	}
	return buf, d.launch(kNOLToONL, elementwise(g.n*g.o*g.plane()), ptrArg(dy), ptrArg(buf), intArg(g.n), intArg(g.o), intArg(g.plane()))
}
