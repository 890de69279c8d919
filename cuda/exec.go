//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// supported reports a step the device cannot run.
func supported(st *engine.Step) error {
	switch st.Kind {
	case engine.KernelStep:
		if !supportsOp(st.Op) {
			return fmt.Errorf("no CUDA kernel for op %s (step %d, %s)", st.Op, st.ID, st.Layer)
		}
	case engine.CopyStep:
		if len(st.In) != 1 || len(st.Out) != 1 {
			return fmt.Errorf("copy step %d (%s) needs one input and one output", st.ID, st.Layer)
		}
	case engine.CollectiveStep:
	default:
		return fmt.Errorf("step %d (%s) has an unknown kind %d", st.ID, st.Layer, st.Kind)
	}
	return nil
}

// launch queues kernel k on the compute stream with args (per-step values
// resolved against d.dyn). While a graph is being captured, a launch with
// per-step arguments is remembered so that each replay can set them.
func (d *Device) launch(k kernelID, g geometry, args ...arg) error {
	if g.empty() {
		return nil
	}
	if err := checkArgs(k, args); err != nil {
		return err
	}
	dynamic := false
	for j, a := range args {
		d.bits[j] = a.resolve(&d.dyn)
		dynamic = dynamic || a.dyn != dynNone
	}
	d.args.set(d.bits[:len(args)])
	if err := launch(d.gpu.fn[k], g, d.stream, d.args); err != nil {
		return fmt.Errorf("%s: %s: %w", d.Name(), k, err)
	}
	if dynamic && d.capture != nil {
		node, err := lastNode(d.stream)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", d.Name(), k, err)
		}
		d.capture.dyn = append(d.capture.dyn, dynLaunch{node: node, k: k, geo: g,
			args: append([]arg(nil), args...), last: append([]uint64(nil), d.bits[:len(args)]...)})
	}
	return nil
}

// gemm runs the row-major product C = α·op(A)·op(B) + β·C mapped by g
// (rowMajorGemm), with a k of 0 handled as cuBLAS's quick return would
// not: C = β·C, that is C cleared when β is 0.
func (d *Device) gemm(g gemmCall, alpha, beta float32, a, b, c uintptr) error {
	if g.M == 0 || g.N == 0 {
		return nil
	}
	if g.K == 0 {
		if beta == 0 {
			return memset32(cu.DevicePtr(c), 0, g.M*g.N*max(g.Batch, 1), d.stream)
		}
		return nil
	}
	if err := d.blas.gemm(g, alpha, beta, a, b, c); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}

// Exec runs one kernel or copy step on the compute stream.
func (d *Device) Exec(st *engine.Step, rc *backend.RunCtx) error {
	if err := d.loaded(); err != nil {
		return err
	}
	if err := supported(st); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if st.Phase != engine.PhaseBackward {
		if err := d.joinComm(); err != nil {
			return err
		}
	}
	d.dyn = dynValues{lossScale: rc.LossScale, lrScale: rc.LRScale, step: rc.Step, seed: d.seed, offset: d.offset}
	d.rel = 0
	err := d.step(st, st.Acc && !rc.First)
	d.offset += d.rel
	return err
}

// step queues the work of one kernel or copy step; acc says that steps
// that can accumulate add into their output.
func (d *Device) step(st *engine.Step, acc bool) error {
	switch st.Kind {
	case engine.KernelStep:
		if err := d.kernelStep(st, acc); err != nil {
			return fmt.Errorf("step %d (%s %s): %w", st.ID, st.Op, st.Layer, err)
		}
		return nil
	case engine.CopyStep:
		in, out := st.In[0], st.Out[0]
		return memcpyDtoD(cu.DevicePtr(d.ptr(out)), cu.DevicePtr(d.ptr(in)), 4*d.live(in), d.stream)
	}
	return fmt.Errorf("%s: step %d (%s) is not a kernel or copy step", d.Name(), st.ID, st.Layer)
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

// kernelStep queues one kernel step: the same computation as
// ops.Kernels32[st.Op] on the live batch.
func (d *Device) kernelStep(st *engine.Step, acc bool) error {
	a := &st.Attrs
	in := func(j int) *engine.Buffer {
		if j < len(st.In) {
			return st.In[j]
		}
		return nil
	}
	P := func(b *engine.Buffer) arg {
		if b == nil {
			return ptrArg(0)
		}
		return ptrArg(d.ptr(b))
	}
	var work uintptr
	if d.prog.Work != nil {
		work = d.ptr(d.prog.Work)
	}
	switch st.Op {
	case ops.Flatten:
		x, y := st.In[0], st.Out[0]
		if x.Offset == y.Offset {
			return nil // a view: nothing to do
		}
		return memcpyDtoD(cu.DevicePtr(d.ptr(y)), cu.DevicePtr(d.ptr(x)), 4*d.live(x), d.stream)

	case ops.Conv2D:
		x, w, b, y := st.In[0], st.In[1], in(2), st.Out[0]
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
			if err := d.launch(kONLToNOL, elementwise(g.n*g.o*g.plane()), ptrArg(dst), P(y), intArg(g.n), intArg(g.o), intArg(g.plane())); err != nil {
				return err
			}
		}
		if b != nil {
			return d.launch(kBiasAdd, elementwise(g.n*g.o*g.plane()), P(y), P(b), intArg(g.n), intArg(g.o), intArg(g.plane()))
		}
		return nil

	case ops.Conv2DGradInput:
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

	case ops.Conv2DGradWeight:
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

	case ops.Conv2DGradBias:
		dy, db := st.In[0], st.Out[0]
		_, o, plane := biasShape(dy.Max)
		return d.splitSum(d.ptr(dy), d.ptr(db), d.dim(dy, 0), o, plane, acc)

	case ops.Linear:
		x, w, b, y := st.In[0], st.In[1], in(2), st.Out[0]
		n, i, o := d.dim(x, 0), x.Max[1], w.Max[0]
		if n == 0 {
			return nil
		}
		if err := d.gemm(rowMajorGemm(false, true, n, o, i, i, i, o), 1, 0, d.ptr(x), d.ptr(w), d.ptr(y)); err != nil {
			return err
		}
		if b != nil {
			return d.launch(kBiasAdd, elementwise(n*o), P(y), P(b), intArg(n), intArg(o), intArg(1))
		}
		return nil

	case ops.LinearGradInput:
		dy, w, dx := st.In[0], st.In[1], st.Out[0]
		n, o, i := d.dim(dy, 0), w.Max[0], w.Max[1]
		return d.gemm(rowMajorGemm(false, false, n, i, o, o, i, i), 1, 0, d.ptr(dy), d.ptr(w), d.ptr(dx))

	case ops.LinearGradWeight:
		dy, x, dw := st.In[0], st.In[1], st.Out[0]
		n, o, i := d.dim(dy, 0), dy.Max[1], x.Max[1]
		return d.gemm(rowMajorGemm(true, false, o, i, n, o, i, i), 1, f32(acc), d.ptr(dy), d.ptr(x), d.ptr(dw))

	case ops.LinearGradBias:
		dy, db := st.In[0], st.Out[0]
		// plane 1: the chunks cut the batch, so a large batch still gets
		// many blocks however few the outputs.
		return d.splitSum(d.ptr(dy), d.ptr(db), d.dim(dy, 0), dy.Max[1], 1, acc)

	case ops.ReLU:
		n := d.live(st.In[0])
		return d.launch(kReLU, elementwise(n), P(st.In[0]), P(st.Out[0]), intArg(n))

	case ops.ReLUGrad:
		n := d.live(st.In[0])
		return d.launch(kReLUGrad, elementwise(n), P(st.In[0]), P(in(2)), P(st.In[1]), P(st.Out[0]), intArg(n))

	case ops.Sigmoid, ops.Tanh, ops.LeakyReLU, ops.Scale, ops.GELU:
		alpha := 0.0
		switch st.Op {
		case ops.LeakyReLU:
			alpha = a.NegativeSlope
		case ops.Scale:
			alpha = a.Alpha
		}
		n := d.live(st.In[0])
		code := unaryCode[st.Op]
		if st.Op == ops.GELU && a.Approximate {
			code = unaryGELUTanh
		}
		return d.launch(kUnary, elementwise(n), P(st.In[0]), P(st.Out[0]), intArg(n), intArg(code), floatArg(alpha))

	case ops.Add, ops.Sub, ops.Mul, ops.SigmoidGrad, ops.TanhGrad, ops.LeakyReLUGrad, ops.GELUGrad:
		n := d.live(st.In[0])
		code := binaryCode[st.Op]
		if st.Op == ops.GELUGrad && a.Approximate {
			code = binaryGELUTanhGrad
		}
		return d.launch(kBinary, elementwise(n), P(st.In[0]), P(st.In[1]), P(st.Out[0]), intArg(n), intArg(code), floatArg(a.NegativeSlope))

	case ops.BatchNormStats:
		x := st.In[0]
		_, c, plane := biasShape(x.Max)
		n := d.dim(x, 0)
		return d.bnSums(bnSums, P(x), ptrArg(0), ptrArg(0), P(st.Out[0]), n, c, plane, n*plane)

	case ops.BatchNormGradStats:
		dy, x, save := st.In[0], st.In[1], st.In[2]
		_, c, plane := biasShape(x.Max)
		return d.bnSums(bnGradSums, P(dy), P(x), P(save), P(st.Out[0]), d.dim(x, 0), c, plane, -1)

	case ops.BatchNormNorm, ops.BatchNormEval, ops.BatchNormGradInput:
		x := st.In[0]
		if st.Op == ops.BatchNormGradInput {
			x = st.In[1]
		}
		_, c, plane := biasShape(x.Max)
		n := d.dim(x, 0)
		if bnParamsDoubles(c) > d.partN {
			return fmt.Errorf("%s: batch norm over %d channels needs %d doubles of scratch, Load reserved %d", d.Name(), c, bnParamsDoubles(c), d.partN)
		}
		par := ptrArg(uintptr(d.part))
		var err error
		switch st.Op {
		case ops.BatchNormNorm: // x, stats, gamma, beta → y, save
			err = d.launch(kBNParams, elementwise(c), P(st.In[1]), ptrArg(0), P(in(2)), P(in(3)), P(st.Out[1]), par, intArg(c),
				floatArg(a.Eps), intArg(bnNorm))
		case ops.BatchNormEval: // x, running_mean, running_var, gamma, beta → y
			err = d.launch(kBNParams, elementwise(c), P(st.In[1]), P(st.In[2]), P(in(3)), P(in(4)), ptrArg(0), par, intArg(c),
				floatArg(a.Eps), intArg(bnEval))
		default: // dy, x, save, gstats, gamma → dx
			err = d.launch(kBNParams, elementwise(c), P(st.In[2]), P(st.In[3]), P(in(4)), ptrArg(0), ptrArg(0), par, intArg(c),
				floatArg(a.Eps), intArg(bnGrad))
		}
		if err != nil {
			return err
		}
		if st.Op == ops.BatchNormGradInput {
			return d.launch(kBNGradInput, elementwise(n*c*plane), P(st.In[0]), P(x), par, P(st.Out[0]), intArg(n), intArg(c), intArg(plane))
		}
		res := in(4) // fused: the residual (BatchNormNorm's fifth input, BatchNormEval's sixth)
		if st.Op == ops.BatchNormEval {
			res = in(5)
		}
		return d.launch(kBNApply, elementwise(n*c*plane), P(x), par, P(res), P(st.Out[0]), intArg(n), intArg(c), intArg(plane),
			boolArg(a.ReLU))

	case ops.BatchNormGradGamma: // gstats, save → dgamma
		dg := st.Out[0]
		c := dg.Max[0]
		return d.launch(kBNGradGamma, elementwise(c), P(st.In[0]), P(st.In[1]), P(dg), intArg(c), floatArg(a.Eps), boolArg(acc))

	case ops.BatchNormGradBeta: // gstats → dbeta = gstats[0]
		db := st.Out[0]
		c := db.Max[0]
		if acc {
			return d.launch(kAccumulate, elementwise(c), P(db), P(st.In[0]), intArg(c))
		}
		return d.launch(kCopy, elementwise(c), P(st.In[0]), P(db), intArg(c))

	case ops.BatchNormRunning: // save, running_mean, running_var, num_batches_tracked, in place
		save := st.In[0]
		return d.launch(kBNRunning, oneBlock(), P(save), P(st.In[1]), P(st.In[2]), P(st.In[3]), intArg(save.Max[1]), floatArg(a.BNMomentum))

	case ops.MaxPool2D:
		x, y, idx := st.In[0], st.Out[0], st.Out[1]
		planes, h, w := d.dim(x, 0)*x.Max[1], x.Max[2], x.Max[3]
		k, s := poolGeom(a)
		oh, ow := y.Max[2], y.Max[3]
		return d.launch(kMaxPool2D, elementwise(planes*oh*ow), P(x), P(y), P(idx), intArg(planes), intArg(h), intArg(w),
			intArg(oh), intArg(ow), intArg(k), intArg(s))

	case ops.MaxPool2DGrad:
		dy, idx, dx := st.In[0], st.In[1], st.Out[0]
		planes, h, w := d.dim(dy, 0)*dy.Max[1], dx.Max[2], dx.Max[3]
		k, s := poolGeom(a)
		oh, ow := dy.Max[2], dy.Max[3]
		return d.launch(kMaxPool2DGrad, elementwise(planes*h*w), P(dy), P(idx), P(dx), intArg(planes), intArg(h), intArg(w),
			intArg(oh), intArg(ow), intArg(k), intArg(s))

	case ops.AvgPool2D:
		x, y := st.In[0], st.Out[0]
		planes, h, w := d.dim(x, 0)*x.Max[1], x.Max[2], x.Max[3]
		k, s := poolGeom(a)
		oh, ow := y.Max[2], y.Max[3]
		return d.launch(kAvgPool2D, elementwise(planes*oh*ow), P(x), P(y), intArg(planes), intArg(h), intArg(w),
			intArg(oh), intArg(ow), intArg(k), intArg(s), intArg(a.Padding))

	case ops.AvgPool2DGrad:
		dy, dx := st.In[0], st.Out[0]
		planes, h, w := d.dim(dy, 0)*dy.Max[1], dx.Max[2], dx.Max[3]
		k, s := poolGeom(a)
		oh, ow := dy.Max[2], dy.Max[3]
		return d.launch(kAvgPool2DGrad, elementwise(planes*h*w), P(dy), P(dx), intArg(planes), intArg(h), intArg(w),
			intArg(oh), intArg(ow), intArg(k), intArg(s), intArg(a.Padding))

	case ops.GlobalAvgPool2D:
		x := st.In[0]
		planes, hw := d.dim(x, 0)*x.Max[1], x.Max[2]*x.Max[3]
		return d.launch(kGlobalAvgPool2D, elementwise(planes), P(x), P(st.Out[0]), intArg(planes), intArg(hw))

	case ops.GlobalAvgPool2DGrad:
		dx := st.Out[0]
		planes, hw := d.dim(dx, 0)*dx.Max[1], dx.Max[2]*dx.Max[3]
		return d.launch(kGlobalAvgPool2DGrad, elementwise(planes*hw), P(st.In[0]), P(dx), intArg(planes), intArg(hw))

	case ops.Dropout:
		x, y, mask := st.In[0], st.Out[0], st.Out[1]
		n := d.live(x)
		rel := d.rel
		d.rel += uint64(n)
		return d.launch(kDropout, elementwise(n), P(x), P(y), P(mask), intArg(n), floatArg(a.P), seedArg(), offsetArg(rel))

	case ops.Dropout2D:
		x, y, mask := st.In[0], st.Out[0], st.Out[1]
		planes := d.dim(x, 0) * x.Max[1]
		hw := 1
		for _, v := range x.Max[2:] {
			hw *= v
		}
		rel := d.rel
		d.rel += uint64(planes)
		return d.launch(kDropout2D, elementwise(planes*hw), P(x), P(y), P(mask), intArg(planes), intArg(hw), floatArg(a.P), seedArg(), offsetArg(rel))

	case ops.DropoutGrad:
		n := d.live(st.In[0])
		return d.launch(kDropoutGrad, elementwise(n), P(st.In[0]), P(st.In[1]), P(st.Out[0]), intArg(n))

	case ops.Dropout2DGrad:
		dy := st.In[0]
		planes := d.dim(dy, 0) * dy.Max[1]
		hw := 1
		for _, v := range dy.Max[2:] {
			hw *= v
		}
		return d.launch(kDropout2DGrad, elementwise(planes*hw), P(dy), P(st.In[1]), P(st.Out[0]), intArg(planes), intArg(hw))

	case ops.LogSoftmax:
		x := st.In[0]
		n, c := d.rows(x)
		return d.launch(kLogSoftmax, elementwise(n), P(x), P(st.Out[0]), intArg(n), intArg(c))

	case ops.Softmax:
		x := st.In[0]
		n, c := d.rows(x)
		causal := 0 // the rows of each T×T matrix
		if a.Causal && len(x.Max) >= 2 {
			causal = d.dim(x, len(x.Max)-2)
		}
		return d.launch(kSoftmax, elementwise(n), P(x), P(st.Out[0]), intArg(n), intArg(c), intArg(causal))

	case ops.LogSoftmaxGrad, ops.SoftmaxGrad:
		dy := st.In[0]
		n, c := d.rows(dy)
		k := kLogSoftmaxGrad
		if st.Op == ops.SoftmaxGrad {
			k = kSoftmaxGrad
		}
		return d.launch(k, elementwise(n), P(dy), P(st.In[1]), P(st.Out[0]), intArg(n), intArg(c))

	case ops.NLLLoss:
		x, t := st.In[0], st.In[1]
		n, c := d.rows(x)
		return d.launch(kNLLLoss, oneBlock(), P(x), P(t), P(st.Out[0]), intArg(n), intArg(c), lossScaleArg(), boolArg(acc),
			boolArg(a.HasIgnore), intArg(a.IgnoreIndex))

	case ops.NLLLossGrad:
		dx := st.Out[0]
		n, c := d.rows(dx)
		return d.launch(kNLLLossGrad, elementwise(n*c), P(st.In[0]), P(st.In[1]), P(dx), intArg(n), intArg(c), lossScaleArg(),
			boolArg(a.HasIgnore), intArg(a.IgnoreIndex))

	case ops.CrossEntropy:
		x, t := st.In[0], st.In[1]
		n, c := d.rows(x)
		return d.launch(kCrossEntropy, oneBlock(), P(x), P(t), P(st.Out[0]), P(st.Out[1]), intArg(n), intArg(c),
			floatArg(a.LabelSmoothing), lossScaleArg(), boolArg(acc), boolArg(a.HasIgnore), intArg(a.IgnoreIndex))

	case ops.CrossEntropyGrad:
		dx := st.Out[0]
		n, c := d.rows(dx)
		return d.launch(kCrossEntropyGrad, elementwise(n*c), P(st.In[0]), P(st.In[1]), P(st.In[2]), P(dx), intArg(n), intArg(c),
			floatArg(a.LabelSmoothing), lossScaleArg(), boolArg(a.HasIgnore), intArg(a.IgnoreIndex))

	case ops.Concat: // a[N, A, ...], b[N, B, ...] → [N, A+B, ...]
		x, y, z := st.In[0], st.In[1], st.Out[0]
		n, la, lb := d.dim(x, 0), sampleElems(x), sampleElems(y)
		if err := d.launch(kCopySlice, elementwise(n*la), P(x), P(z), intArg(n), intArg(la), intArg(la), intArg(0), intArg(la+lb), intArg(0)); err != nil {
			return err
		}
		return d.launch(kCopySlice, elementwise(n*lb), P(y), P(z), intArg(n), intArg(lb), intArg(lb), intArg(0), intArg(la+lb), intArg(la))

	case ops.Narrow: // dy[N, S, ...] → [N, L, ...] from Offset
		x, y := st.In[0], st.Out[0]
		n, ls, ll := d.dim(x, 0), sampleElems(x), sampleElems(y)
		inner := 1
		for _, v := range x.Max[2:] {
			inner *= v
		}
		off := a.Offset * inner
		return d.launch(kCopySlice, elementwise(n*ll), P(x), P(y), intArg(n), intArg(ll), intArg(ls), intArg(off), intArg(ll), intArg(0))

	case ops.NarrowGrad: // dy[N, L, ...] → dx[N, S, ...]: zero but for [Offset, Offset+L)
		dy, dx := st.In[0], st.Out[0]
		n, ll, ls := d.dim(dy, 0), sampleElems(dy), sampleElems(dx)
		inner := 1
		for _, v := range dy.Max[2:] {
			inner *= v
		}
		if n*ls == 0 {
			return nil
		}
		if err := memset32(cu.DevicePtr(d.ptr(dx)), 0, n*ls, d.stream); err != nil {
			return err
		}
		return d.launch(kCopySlice, elementwise(n*ll), P(dy), P(dx), intArg(n), intArg(ll), intArg(ll), intArg(0), intArg(ls), intArg(a.Offset*inner))

	case ops.Positions: // x[N, T, ...] → pos[N, T] = t
		x := st.In[0]
		n, t := d.dim(x, 0), x.Max[1]
		return d.launch(kPositions, elementwise(n*t), P(st.Out[0]), intArg(n), intArg(t))

	case ops.Permute:
		x := st.In[0]
		shape := make([]int, len(x.Max))
		for i := range shape {
			shape[i] = d.dim(x, i)
		}
		dims, strides, n, err := permuteArgs(shape, a.Perm)
		if err != nil {
			return err
		}
		args := []arg{P(x), P(st.Out[0]), intArg(n)}
		for _, v := range dims {
			args = append(args, intArg(v))
		}
		for _, v := range strides {
			args = append(args, intArg(v))
		}
		return d.launch(kPermute, elementwise(n), args...)

	case ops.Embedding: // ids[N, ...], w[V, D] → [N, ..., D]
		ids, w := st.In[0], st.In[1]
		n, v, dd := d.live(ids), w.Max[0], w.Max[1]
		return d.launch(kEmbedding, elementwise(n*dd), P(ids), P(w), P(st.Out[0]), intArg(n), intArg(v), intArg(dd))

	case ops.EmbeddingGradWeight: // dy[N, ..., D], ids[N, ...] → dW[V, D]
		ids, dw := st.In[1], st.Out[0]
		n, v, dd := d.live(ids), dw.Max[0], dw.Max[1]
		per := embeddingRowsPer(v, dd)
		return d.launch(kEmbeddingGrad, elementwise((v+per-1)/per*dd), P(ids), P(st.In[0]), P(dw), intArg(n), intArg(v), intArg(dd),
			intArg(per), boolArg(acc))

	case ops.LayerNorm: // x, gamma, beta → y, save
		x := st.In[0]
		rows, dd := d.rows(x)
		return d.launch(kLayerNorm, blockPer(rows), P(x), P(in(1)), P(in(2)), P(st.Out[0]), P(st.Out[1]), intArg(rows), intArg(dd), floatArg(a.Eps))

	case ops.LayerNormGradInput: // dy, x, save, gamma → dx
		x := st.In[1]
		rows, dd := d.rows(x)
		return d.launch(kLayerNormGradInput, blockPer(rows), P(st.In[0]), P(x), P(st.In[2]), P(in(3)), P(st.Out[0]), intArg(rows), intArg(dd))

	case ops.LayerNormGradGamma: // dy, x, save → dgamma: Σ over rows of dy·x̂
		dy := st.In[0]
		rows, dd := d.rows(dy)
		s, chunk := splitSum(rows)
		if need := bnPartials(dd, rows); need > d.partN {
			return fmt.Errorf("%s: layer norm's gamma gradient over %d × %d needs %d partials, Load reserved %d", d.Name(), rows, dd, need, d.partN)
		}
		if err := d.launch(kBNPartial, blockPer(dd*s), P(dy), P(st.In[1]), P(st.In[2]), ptrArg(uintptr(d.part)), intArg(rows), intArg(dd),
			intArg(1), intArg(s), intArg(chunk), intArg(lnGammaSums)); err != nil {
			return err
		}
		// The second half of the partials: Σdy·x̂.
		return d.launch(kBiasFinish, blockPer(dd), ptrArg(uintptr(d.part)+8*uintptr(dd*s)), P(st.Out[0]), intArg(dd), intArg(s), boolArg(acc))

	case ops.LayerNormGradBeta: // dy → dbeta: Σ over rows of dy, the split sum of [rows, D, 1]
		dy := st.In[0]
		rows, dd := d.rows(dy)
		return d.splitSum(d.ptr(dy), d.ptr(st.Out[0]), rows, dd, 1, acc)

	case ops.BatchMatMul:
		x, y, z := st.In[0], st.In[1], st.Out[0]
		g, ok := batchMatMulCall(a, x.Max, y.Max, d.live(x))
		if !ok {
			return nil // no matrices in the live batch
		}
		return d.gemm(g, 1, 0, d.ptr(x), d.ptr(y), d.ptr(z))

	case ops.MSELoss: // pred, target → loss
		p := st.In[0]
		n, per := d.dim(p, 0), sampleElems(p)
		return d.launch(kMSELoss, oneBlock(), P(p), P(st.In[1]), P(st.Out[0]), intArg(n), intArg(per), lossScaleArg(), boolArg(acc))

	case ops.MSELossGrad: // dloss, pred, target → dpred
		p := st.In[1]
		n, per := d.dim(p, 0), sampleElems(p)
		return d.launch(kMSELossGrad, elementwise(n*per), P(st.In[0]), P(p), P(st.In[2]), P(st.Out[0]), intArg(n), intArg(per), lossScaleArg())

	case ops.SGDStep:
		param, grad, buf := st.In[0], st.In[1], in(2)
		n := d.live(param)
		if a.Momentum != 0 && buf == nil {
			return fmt.Errorf("SGD with momentum %g has no momentum buffer", a.Momentum)
		}
		return d.launch(kSGDStep, elementwise(n), P(param), P(grad), P(buf), intArg(n), lrArg(a.LR), floatArg(a.Momentum),
			floatArg(a.Dampening), floatArg(a.WeightDecay), boolArg(a.Nesterov), firstStepArg())

	case ops.ClipGradNorm: // grads, in place: Σx² in chunks (gorun_bn_partial), then scale
		x := st.In[0]
		n := d.live(x)
		s, chunk := splitSum(n)
		if need := bnPartials(1, n); need > d.partN {
			return fmt.Errorf("%s: clipping %d gradients needs %d partials, Load reserved %d", d.Name(), n, need, d.partN)
		}
		if err := d.launch(kBNPartial, blockPer(s), P(x), ptrArg(0), ptrArg(0), ptrArg(uintptr(d.part)), intArg(1), intArg(1), intArg(n),
			intArg(s), intArg(chunk), intArg(bnSums)); err != nil {
			return err
		}
		g := elementwise(n)
		g.Grid = min(g.Grid, clipGrid)
		return d.launch(kClipGradNorm, g, P(x), ptrArg(uintptr(d.part)+8*uintptr(s)), intArg(n), intArg(s), floatArg(a.MaxNorm))

	case ops.AdamStep, ops.AdamWStep:
		param := st.In[0]
		n := d.live(param)
		return d.launch(kAdamStep, elementwise(n), P(param), P(st.In[1]), P(st.In[2]), P(st.In[3]), intArg(n), lrArg(a.LR),
			floatArg(a.Beta1), floatArg(a.Beta2), floatArg(a.Eps), floatArg(a.WeightDecay), stepArg(), boolArg(st.Op == ops.AdamWStep))
	}
	return fmt.Errorf("no CUDA kernel for op %s", st.Op)
}

// splitSum queues out[ch] = Σ_{i,k} x[i, ch, k] over x[n, c, plane] (in
// double; out[ch] += that with acc): kernels.h's split sum. A channel of up
// to sumChunk elements is one block of gorun_bias_grad; a longer one is cut
// into chunks summed by c·s blocks of gorun_bias_partial into d.part, which
// gorun_bias_finish then adds up per channel in a fixed order. No atomics:
// the result is the same run to run at a given live batch.
func (d *Device) splitSum(x, out uintptr, n, c, plane int, acc bool) error {
	s, chunk := splitSum(n * plane)
	if s == 1 {
		return d.launch(kBiasGrad, blockPer(c), ptrArg(x), ptrArg(out), intArg(n), intArg(c), intArg(plane), boolArg(acc))
	}
	if c*s > d.partN {
		// Load sized d.part for the program's shapes; allocating here could
		// happen inside a graph capture.
		return fmt.Errorf("%s: a split sum of %d channels × %d elements needs %d partials, Load reserved %d", d.Name(), c, n*plane, c*s, d.partN)
	}
	part := ptrArg(uintptr(d.part))
	if err := d.launch(kBiasPartial, blockPer(c*s), ptrArg(x), part, intArg(n), intArg(c), intArg(plane), intArg(s), intArg(chunk)); err != nil {
		return err
	}
	return d.launch(kBiasFinish, blockPer(c), part, ptrArg(out), intArg(c), intArg(s), boolArg(acc))
}

// unaryCode and binaryCode are the ops gorun_unary and gorun_binary run,
// by op code.
var (
	unaryCode = map[ops.Op]int{ops.Sigmoid: unarySigmoid, ops.Tanh: unaryTanh, ops.LeakyReLU: unaryLeakyReLU,
		ops.Scale: unaryScale, ops.GELU: unaryGELU}
	binaryCode = map[ops.Op]int{ops.Add: binaryAdd, ops.Sub: binarySub, ops.Mul: binaryMul,
		ops.SigmoidGrad: binarySigmoidGrad, ops.TanhGrad: binaryTanhGrad, ops.LeakyReLUGrad: binaryLeakyReLUGrad,
		ops.GELUGrad: binaryGELUGrad}
)

// bnSums queues batch norm's per-channel sums (gorun_bn_partial in mode,
// then gorun_bn_finish) over a[n, c, plane] (and b) into out: the split
// sum's chunks, two partials per chunk in d.part, added per channel in a
// fixed order; count >= 0 adds stats' count row. Always two phases, also
// with one chunk.
func (d *Device) bnSums(mode int, a, b, save, out arg, n, c, plane, count int) error {
	s, chunk := splitSum(n * plane)
	if need := bnPartials(c, n*plane); need > d.partN {
		return fmt.Errorf("%s: batch norm sums of %d channels × %d elements need %d partials, Load reserved %d", d.Name(), c, n*plane, need, d.partN)
	}
	part := ptrArg(uintptr(d.part))
	if err := d.launch(kBNPartial, blockPer(c*s), a, b, save, part, intArg(n), intArg(c), intArg(plane), intArg(s), intArg(chunk), intArg(mode)); err != nil {
		return err
	}
	return d.launch(kBNFinish, blockPer(c), part, out, intArg(c), intArg(s), intArg(count))
}

// rows is b's live elements as rows along its last dimension: their
// number and length (0 rows when the last dimension is 0).
func (d *Device) rows(b *engine.Buffer) (n, k int) {
	k = b.Max[len(b.Max)-1]
	if k == 0 {
		return 0, 0
	}
	return d.live(b) / k, k
}

// sampleElems is the elements of one sample of b: the product of its
// dimensions after the first.
func sampleElems(b *engine.Buffer) int {
	n := 1
	for _, v := range b.Max[1:] {
		n *= v
	}
	return n
}

// poolGeom is the pools' kernel and stride (0 means the kernel).
func poolGeom(a *ops.Attrs) (k, s int) {
	k, s = a.Kernel, a.Stride
	if s == 0 {
		s = k
	}
	return k, s
}
