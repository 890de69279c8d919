//go:build cuda

// The linear layer with its GELU (ops.LinearGELU, the compiler's fusion
// of a GPT MLP's c_fc and its tanh GELU): one cuBLASLt matmul with the
// GELU epilogue (ltgelu.go), else the linear layer's kernels into the
// pre-activation and the GELU kernel from it.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// linearGELUSteps are the fused linear+GELU's ops.
var linearGELUSteps = map[ops.Op]opStep{
	ops.LinearGELU: runLinearGELU,
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
