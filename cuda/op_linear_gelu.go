//go:build cuda

// The linear layer with its GELU (ops.LinearGELU, the compiler's fusion
// of a GPT MLP's c_fc and its tanh GELU): one cuBLASLt matmul with the
// GELU epilogue (ltgelu.go), else the linear layer's kernels into the
// pre-activation and the GELU kernel from it; and in the backward pass
// the next layer's input gradient with the GELU's derivative
// (ops.LinearGradInputGELU): one matmul with the DGELU epilogue, else the
// GEMM and the GELU gradient kernel; and a linear layer's weight and bias
// gradients (ops.LinearGradWeightBias): one matmul with the BGRADB
// epilogue, else the GEMM and the split sum.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// linearGELUSteps are the fused linear+GELU's ops.
var linearGELUSteps = map[ops.Op]opStep{
	ops.LinearGELU:           runLinearGELU,
	ops.LinearGradInputGELU:  runLinearGradInputGELU,
	ops.LinearGradWeightBias: runLinearGradWeightBias,
}

// runLinearGELU queues LinearGELU: y = GELU(x·wᵀ + b), pre = x·wᵀ + b as
// one cuBLASLt matmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX
// without a bias) where the device has cuBLASLt and the step's GELU is
// the tanh form; else Linear's step into pre, then gorun_unary's GELU
// from pre into y, the kernels of the unfused plan.
func runLinearGELU(d *Device, st *engine.Step, acc bool) error {
	x, w, b, y, pre := st.In[0], st.In[1], optIn(st, 2), st.Out[0], st.Out[1]
	n, i, o := d.dim(x, 0), x.Max[1], w.Max[0]
	if n == 0 {
		return nil
	}
	var bp uintptr
	if b != nil {
		bp = d.ptr(b)
	}
	if st.Attrs.Approximate && i > 0 && d.linearGELU(n, i, o, d.ptr(x), d.ptr(w), bp, d.ptr(y), d.ptr(pre)) {
		return nil
	}
	lin := *st
	lin.Op, lin.Out = ops.Linear, st.Out[1:2]
	if err := runLinear(d, &lin, acc); err != nil {
		return err
	}
	code := unaryGELU
	if st.Attrs.Approximate {
		code = unaryGELUTanh
	}
	m := d.live(pre)
	return d.launch(kUnary, elementwise(m), d.bufArg(pre), d.bufArg(y), intArg(m), intArg(code), floatArg(0))
}

// runLinearGradInputGELU queues LinearGradInputGELU: dx = GELU'(pre)·(dy·w)
// as one cuBLASLt matmul with CUBLASLT_EPILOGUE_DGELU where the device has
// cuBLASLt and the GELU is the tanh form; else LinearGradInput's GEMM
// into dx, then gorun_binary's GELU gradient in place, the kernels of the
// unfused plan.
func runLinearGradInputGELU(d *Device, st *engine.Step, acc bool) error {
	dy, w, pre, dx := st.In[0], st.In[1], st.In[2], st.Out[0]
	n, o, i := d.dim(dy, 0), w.Max[0], w.Max[1]
	if n == 0 {
		return nil
	}
	if st.Attrs.Approximate && o > 0 && d.linearGradInputGELU(n, o, i, d.ptr(dy), d.ptr(w), d.ptr(pre), d.ptr(dx)) {
		return nil
	}
	if err := d.gemm(rowMajorGemm(false, false, n, i, o, o, i, i), 1, 0, d.ptr(dy), d.ptr(w), d.ptr(dx)); err != nil {
		return err
	}
	code := binaryGELUGrad
	if st.Attrs.Approximate {
		code = binaryGELUTanhGrad
	}
	m := d.live(dx)
	return d.launch(kBinary, elementwise(m), d.bufArg(dx), d.bufArg(pre), d.bufArg(dx), intArg(m), intArg(code), floatArg(0))
}

// runLinearGradWeightBias queues LinearGradWeightBias: dw = dyᵀ·x and db =
// Σ dy as one cuBLASLt matmul with CUBLASLT_EPILOGUE_BGRADB where the
// device has cuBLASLt and the step overwrites (the first micro-batch);
// else LinearGradWeight's GEMM and LinearGradBias's split sum, both added
// to with acc.
func runLinearGradWeightBias(d *Device, st *engine.Step, acc bool) error {
	dy, x, dw, db := st.In[0], st.In[1], st.Out[0], st.Out[1]
	n, o, i := d.dim(dy, 0), dy.Max[1], x.Max[1]
	if !acc && n > 0 && d.linearGradWeightBias(n, o, i, d.ptr(dy), d.ptr(x), d.ptr(dw), d.ptr(db)) {
		return nil
	}
	w := *st
	w.Op, w.Out = ops.LinearGradWeight, st.Out[:1]
	if err := runLinearGradWeight(d, &w, acc); err != nil {
		return err
	}
	b := *st
	b.Op, b.In, b.Out = ops.LinearGradBias, st.In[:1], st.Out[1:]
	return runLinearGradBias(d, &b, acc)
}
