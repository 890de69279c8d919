//go:build cuda

// Linear layers and matrix products: the GEMMs through cuBLAS, the bias
// add and the split sum of the bias gradient.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// linearSteps are the linear and matrix-product family's ops.
var linearSteps = map[ops.Op]opStep{
	ops.Linear:           runLinear,
	ops.LinearGradInput:  runLinearGradInput,
	ops.LinearGradWeight: runLinearGradWeight,
	ops.LinearGradBias:   runLinearGradBias,
	ops.BatchMatMul:      runBatchMatMul,
}

// runLinear queues Linear: y = x·wᵀ + b as one cuBLASLt matmul with the
// bias in its epilogue (cublaslt.go) where the device has cuBLASLt, else
// y = x·wᵀ (cuBLAS), then + b.
func runLinear(d *Device, st *engine.Step, acc bool) error {
	x, w, b, y := st.In[0], st.In[1], optIn(st, 2), st.Out[0]
	n, i, o := d.dim(x, 0), x.Max[1], w.Max[0]
	if n == 0 {
		return nil
	}
	if b != nil && i > 0 && d.linearBias(n, i, o, d.ptr(x), d.ptr(w), d.ptr(b), d.ptr(y)) {
		return nil
	}
	if err := d.gemm(rowMajorGemm(false, true, n, o, i, i, i, o), 1, 0, d.ptr(x), d.ptr(w), d.ptr(y)); err != nil {
		return err
	}
	if b != nil {
		return d.launch(kBiasAdd, elementwise(n*o), d.bufArg(y), d.bufArg(b), intArg(n), intArg(o), intArg(1))
	}
	return nil
}

// runLinearGradInput queues LinearGradInput: dx = dy·w.
func runLinearGradInput(d *Device, st *engine.Step, acc bool) error {
	dy, w, dx := st.In[0], st.In[1], st.Out[0]
	n, o, i := d.dim(dy, 0), w.Max[0], w.Max[1]
	return d.gemm(rowMajorGemm(false, false, n, i, o, o, i, i), 1, 0, d.ptr(dy), d.ptr(w), d.ptr(dx))
}

// runLinearGradWeight queues LinearGradWeight: dw = dyᵀ·x (added to with
// acc).
func runLinearGradWeight(d *Device, st *engine.Step, acc bool) error {
	dy, x, dw := st.In[0], st.In[1], st.Out[0]
	n, o, i := d.dim(dy, 0), dy.Max[1], x.Max[1]
	return d.gemm(rowMajorGemm(true, false, o, i, n, o, i, i), 1, f32(acc), d.ptr(dy), d.ptr(x), d.ptr(dw))
}

// runLinearGradBias queues LinearGradBias: db = Σ over the batch of dy.
func runLinearGradBias(d *Device, st *engine.Step, acc bool) error {
	dy, db := st.In[0], st.Out[0]
	// plane 1: the chunks cut the batch, so a large batch still gets
	// many blocks however few the outputs.
	return d.splitSum(d.ptr(dy), d.ptr(db), d.dim(dy, 0), dy.Max[1], 1, acc)
}

// runBatchMatMul queues BatchMatMul as one strided batched GEMM.
func runBatchMatMul(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y, z := st.In[0], st.In[1], st.Out[0]
	g, ok := batchMatMulCall(a, x.Max, y.Max, d.live(x))
	if !ok {
		return nil // no matrices in the live batch
	}
	return d.gemm(g, 1, 0, d.ptr(x), d.ptr(y), d.ptr(z))
}
