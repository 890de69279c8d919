//go:build cuda

// Mixed precision: Round (gorun_unary's ROUND_BF16 and ROUND_FP16) and
// fp16's GradUnscale (gorun_unary's SCALE by the step's loss scale, which
// the runner sets to 1/S in the update phase).

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// precisionSteps are the precision family's ops.
var precisionSteps = map[ops.Op]opStep{
	ops.Round:       runRound,
	ops.GradUnscale: runGradUnscale,
}

// runRound queues Round: x rounded to its Precision's format, held in
// float32; with acc (a parameter's gradient summed over micro-batches)
// x is rounded in place, its one reader being this step, and added into
// y.
func runRound(d *Device, st *engine.Step, acc bool) error {
	code := unaryRoundBf16
	switch st.Attrs.Precision {
	case ops.BF16:
	case ops.FP16:
		code = unaryRoundFp16
	default:
		return fmt.Errorf("%s: round to %v: no such kernel", st.Layer, st.Attrs.Precision)
	}
	n := d.live(st.In[0])
	if !acc {
		return d.launch(kUnary, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.Out[0]), intArg(n), intArg(code), floatArg(0))
	}
	if err := d.launch(kUnary, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.In[0]), intArg(n), intArg(code), floatArg(0)); err != nil {
		return err
	}
	return d.launch(kBinary, elementwise(n), d.bufArg(st.Out[0]), d.bufArg(st.In[0]), d.bufArg(st.Out[0]), intArg(n), intArg(binaryAdd), floatArg(0))
}

// runGradUnscale queues GradUnscale: the gradients, in place, times the
// step's loss scale (a value each launch and each CUDA graph replay reads
// anew).
func runGradUnscale(d *Device, st *engine.Step, acc bool) error {
	n := d.live(st.In[0])
	return d.launch(kUnary, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.In[0]), intArg(n), intArg(unaryScale), lossScaleArg())
}
