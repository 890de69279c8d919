//go:build cuda

// Optimizers, in place: SGD, Adam and AdamW with the learning rate under the
// schedule (a per-step argument), and gradient clipping by the global norm.
// Their kernels read the device's halt flag (haltArg, MarkStep): set, they
// do nothing.

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// optimSteps are the optimizer family's ops.
var optimSteps = map[ops.Op]opStep{
	ops.SGDStep:       runSGDStep,
	ops.AdamStep:      runAdam(false),
	ops.AdamWStep:     runAdam(true),
	ops.ClipGradNorm:  runClipGradNorm,
	ops.GradNormSq:    runGradNormSq,
	ops.ClipGradScale: runClipGradScale,
}

// runSGDStep queues SGDStep: param, grad[, momentum buffer], in place.
func runSGDStep(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	param, grad, buf := st.In[0], st.In[1], optIn(st, 2)
	n := d.live(param)
	if a.Momentum != 0 && buf == nil {
		return fmt.Errorf("SGD with momentum %g has no momentum buffer", a.Momentum)
	}
	return d.launch(kSGDStep, elementwise(n), d.bufArg(param), d.bufArg(grad), d.bufArg(buf), intArg(n), lrArg(a.LR), floatArg(a.Momentum),
		floatArg(a.Dampening), floatArg(a.WeightDecay), boolArg(a.Nesterov), firstStepArg(), d.haltArg())
}

// runClipGradNorm queues ClipGradNorm: the gradients, in place: Σx² in
// chunks (gorun_bn_partial), then every block scales by the clipping
// coefficient.
func runClipGradNorm(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x := st.In[0]
	n := d.live(x)
	s, chunk := splitSum(n)
	if need := bnPartials(1, n); need > d.partN {
		return fmt.Errorf("%s: clipping %d gradients needs %d partials, Load reserved %d", d.Name(), n, need, d.partN)
	}
	if err := d.launch(kBNPartial, blockPer(s), d.bufArg(x), ptrArg(0), ptrArg(0), ptrArg(uintptr(d.part)), intArg(1), intArg(1), intArg(n),
		intArg(s), intArg(chunk), intArg(bnSums)); err != nil {
		return err
	}
	g := elementwise(n)
	g.Grid = min(g.Grid, clipGrid)
	return d.launch(kClipGradNorm, g, d.bufArg(x), ptrArg(uintptr(d.part)+8*uintptr(s)), intArg(n), intArg(s), floatArg(a.MaxNorm), d.haltArg())
}

// runAdam returns the step of AdamStep (decoupled false) or AdamWStep
// (decoupled weight decay): param, grad, m, v, in place.
func runAdam(decoupled bool) opStep {
	return func(d *Device, st *engine.Step, acc bool) error {
		a := &st.Attrs
		param := st.In[0]
		n := d.live(param)
		return d.launch(kAdamStep, elementwise(n), d.bufArg(param), d.bufArg(st.In[1]), d.bufArg(st.In[2]), d.bufArg(st.In[3]), intArg(n), lrArg(a.LR),
			floatArg(a.Beta1), floatArg(a.Beta2), floatArg(a.Eps), floatArg(a.WeightDecay), stepArg(), boolArg(decoupled), d.haltArg())
	}
}

// runGradNormSq queues GradNormSq: Σx² of the gradients in chunks
// (gorun_bn_partial), added in a fixed order into sq (gorun_bias_finish on
// the squares' half).
func runGradNormSq(d *Device, st *engine.Step, acc bool) error {
	x, sq := st.In[0], st.In[1]
	n := d.live(x)
	s, chunk := splitSum(n)
	if need := bnPartials(1, n); need > d.partN {
		return fmt.Errorf("%s: the norm of %d gradients needs %d partials, Load reserved %d", d.Name(), n, need, d.partN)
	}
	if err := d.launch(kBNPartial, blockPer(s), d.bufArg(x), ptrArg(0), ptrArg(0), ptrArg(uintptr(d.part)), intArg(1), intArg(1), intArg(n),
		intArg(s), intArg(chunk), intArg(bnSums)); err != nil {
		return err
	}
	return d.launch(kBiasFinish, blockPer(1), ptrArg(uintptr(d.part)+8*uintptr(s)), d.bufArg(sq), intArg(1), intArg(s), boolArg(false))
}

// runClipGradScale queues ClipGradScale: the sums of squares sq added in
// chunks (gorun_bn_partial's sums half), then every block scales the
// gradients by the clipping coefficient of their total
// (gorun_clip_grad_norm).
func runClipGradScale(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, sq := st.In[0], st.In[1]
	n, k := d.live(x), d.live(sq)
	s, chunk := splitSum(k)
	if need := bnPartials(1, k); need > d.partN {
		return fmt.Errorf("%s: clipping by %d sums needs %d partials, Load reserved %d", d.Name(), k, need, d.partN)
	}
	if err := d.launch(kBNPartial, blockPer(s), d.bufArg(sq), ptrArg(0), ptrArg(0), ptrArg(uintptr(d.part)), intArg(1), intArg(1), intArg(k),
		intArg(s), intArg(chunk), intArg(bnSums)); err != nil {
		return err
	}
	g := elementwise(n)
	g.Grid = min(g.Grid, clipGrid)
	return d.launch(kClipGradNorm, g, d.bufArg(x), ptrArg(uintptr(d.part)), intArg(n), intArg(s), floatArg(a.MaxNorm), d.haltArg())
}
