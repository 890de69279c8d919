//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"gorun/engine"
	"gorun/engine/backend"
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
	if err := d.blas.gemm(g, alpha, beta, a, b, c, computeType(d.lowp)); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}

// Exec runs one kernel or copy step on the compute stream.
func (d *Device) Exec(st *engine.Step, rc *backend.RunCtx) error {
	if err := d.loaded(); err != nil {
		return err
	}
	if st.ID < 0 || st.ID >= len(d.stepFn) {
		// Load checked every step of its program (supported).
		return fmt.Errorf("%s: step %d (%s) is not a step of the program the device loaded", d.Name(), st.ID, st.Layer)
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
		d.lowp = st.Attrs.Precision
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

// kernelStep queues one kernel step of the loaded program: the same
// computation as ops.Kernels32[st.Op] on the live batch, by the op's
// function in opSteps (bound to the step at Load).
func (d *Device) kernelStep(st *engine.Step, acc bool) error {
	if st.ID < 0 || st.ID >= len(d.stepFn) || d.stepFn[st.ID] == nil {
		return fmt.Errorf("no CUDA kernel bound for op %s (not a kernel step of the program the device loaded)", st.Op)
	}
	return d.stepFn[st.ID](d, st, acc)
}

// optIn is st's j-th input, or nil when the step has fewer (an optional
// input left out at the end).
func optIn(st *engine.Step, j int) *engine.Buffer {
	if j < len(st.In) {
		return st.In[j]
	}
	return nil
}

// bufArg is buffer b as a kernel's pointer argument: a null pointer for an
// absent (nil) buffer.
func (d *Device) bufArg(b *engine.Buffer) arg {
	if b == nil {
		return ptrArg(0)
	}
	return ptrArg(d.ptr(b))
}

// work is the address of the program's scratch (its Work buffer), or 0
// when it has none.
func (d *Device) work() uintptr {
	if d.prog.Work != nil {
		return d.ptr(d.prog.Work)
	}
	return 0
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
