//go:build cuda

// Activations and elementwise arithmetic: gorun_relu, gorun_relu_grad, and
// the shared gorun_unary and gorun_binary with an op code each.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// elementwiseSteps are the activation and elementwise family's ops.
var elementwiseSteps = map[ops.Op]opStep{
	ops.ReLU:          runReLU,
	ops.ReLUGrad:      runReLUGrad,
	ops.Sigmoid:       runUnary(unarySigmoid),
	ops.Tanh:          runUnary(unaryTanh),
	ops.LeakyReLU:     runUnary(unaryLeakyReLU),
	ops.Scale:         runUnary(unaryScale),
	ops.GELU:          runUnary(unaryGELU),
	ops.SiLU:          runUnary(unarySilu),
	ops.Add:           runBinary(binaryAdd),
	ops.Sub:           runBinary(binarySub),
	ops.Mul:           runBinary(binaryMul),
	ops.SigmoidGrad:   runBinary(binarySigmoidGrad),
	ops.TanhGrad:      runBinary(binaryTanhGrad),
	ops.LeakyReLUGrad: runBinary(binaryLeakyReLUGrad),
	ops.GELUGrad:      runBinary(binaryGELUGrad),
	ops.SiLUGrad:      runBinary(binarySiluGrad),
}

// runReLU queues ReLU.
func runReLU(d *Device, st *engine.Step, acc bool) error {
	n := d.live(st.In[0])
	return d.launch(kReLU, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.Out[0]), intArg(n))
}

// runReLUGrad queues ReLUGrad: dy, y[, dy2] → dx (the engine's fused Add
// passes a second gradient).
func runReLUGrad(d *Device, st *engine.Step, acc bool) error {
	n := d.live(st.In[0])
	return d.launch(kReLUGrad, elementwise(n), d.bufArg(st.In[0]), d.bufArg(optIn(st, 2)), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(n))
}

// runUnary returns the step of an op that gorun_unary runs as code: GELU
// with Approximate as its tanh form; alpha is LeakyReLU's negative slope and
// Scale's factor.
func runUnary(code int) opStep {
	return func(d *Device, st *engine.Step, acc bool) error {
		a := &st.Attrs
		alpha := 0.0
		switch st.Op {
		case ops.LeakyReLU:
			alpha = a.NegativeSlope
		case ops.Scale:
			alpha = a.Alpha
		}
		n := d.live(st.In[0])
		code := code
		if st.Op == ops.GELU && a.Approximate {
			code = unaryGELUTanh
		}
		return d.launch(kUnary, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.Out[0]), intArg(n), intArg(code), floatArg(alpha))
	}
}

// runBinary returns the step of an op that gorun_binary runs as code:
// GELUGrad with Approximate as the tanh form's; alpha is the step's
// negative slope, which the kernel reads for LeakyReLUGrad only.
func runBinary(code int) opStep {
	return func(d *Device, st *engine.Step, acc bool) error {
		a := &st.Attrs
		n := d.live(st.In[0])
		code := code
		if st.Op == ops.GELUGrad && a.Approximate {
			code = binaryGELUTanhGrad
		}
		return d.launch(kBinary, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(n), intArg(code), floatArg(a.NegativeSlope))
	}
}
