//go:build cuda

// Softmax and the losses: over rows along the last dimension, the losses
// scaled by the step's loss scale (a per-step argument of a captured
// graph).

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// softmaxSteps are the softmax and loss family's ops.
var softmaxSteps = map[ops.Op]opStep{
	ops.LogSoftmax:       runLogSoftmax,
	ops.Softmax:          runSoftmax,
	ops.LogSoftmaxGrad:   runSoftmaxGrad(kLogSoftmaxGrad),
	ops.SoftmaxGrad:      runSoftmaxGrad(kSoftmaxGrad),
	ops.NLLLoss:          runNLLLoss,
	ops.NLLLossGrad:      runNLLLossGrad,
	ops.CrossEntropy:     runCrossEntropy,
	ops.CrossEntropyGrad: runCrossEntropyGrad,
	ops.MSELoss:          runMSELoss,
	ops.MSELossGrad:      runMSELossGrad,
}

// runLogSoftmax queues LogSoftmax.
func runLogSoftmax(d *Device, st *engine.Step, acc bool) error {
	x := st.In[0]
	n, c := d.rows(x)
	return d.launch(kLogSoftmax, elementwise(n), d.bufArg(x), d.bufArg(st.Out[0]), intArg(n), intArg(c))
}

// runSoftmax queues Softmax (with Causal, over each T×T matrix's rows).
func runSoftmax(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x := st.In[0]
	n, c := d.rows(x)
	causal := 0 // the rows of each T×T matrix
	if a.Causal && len(x.Max) >= 2 {
		causal = d.dim(x, len(x.Max)-2)
	}
	return d.launch(kSoftmax, elementwise(n), d.bufArg(x), d.bufArg(st.Out[0]), intArg(n), intArg(c), intArg(causal))
}

// runNLLLoss queues NLLLoss: logp, target → loss (added to with acc).
func runNLLLoss(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, t := st.In[0], st.In[1]
	n, c := d.rows(x)
	return d.launch(kNLLLoss, oneBlock(), d.bufArg(x), d.bufArg(t), d.bufArg(st.Out[0]), intArg(n), intArg(c), lossScaleArg(), boolArg(acc),
		boolArg(a.HasIgnore), intArg(a.IgnoreIndex))
}

// runNLLLossGrad queues NLLLossGrad: dloss, target → dx.
func runNLLLossGrad(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dx := st.Out[0]
	n, c := d.rows(dx)
	return d.launch(kNLLLossGrad, elementwise(n*c), d.bufArg(st.In[0]), d.bufArg(st.In[1]), d.bufArg(dx), intArg(n), intArg(c), lossScaleArg(),
		boolArg(a.HasIgnore), intArg(a.IgnoreIndex))
}

// runCrossEntropy queues CrossEntropy: logits, target → loss (added to with
// acc), probs.
func runCrossEntropy(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, t := st.In[0], st.In[1]
	n, c := d.rows(x)
	return d.launch(kCrossEntropy, oneBlock(), d.bufArg(x), d.bufArg(t), d.bufArg(st.Out[0]), d.bufArg(st.Out[1]), intArg(n), intArg(c),
		floatArg(a.LabelSmoothing), lossScaleArg(), boolArg(acc), boolArg(a.HasIgnore), intArg(a.IgnoreIndex))
}

// runCrossEntropyGrad queues CrossEntropyGrad: dloss, probs, target → dx.
func runCrossEntropyGrad(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dx := st.Out[0]
	n, c := d.rows(dx)
	return d.launch(kCrossEntropyGrad, elementwise(n*c), d.bufArg(st.In[0]), d.bufArg(st.In[1]), d.bufArg(st.In[2]), d.bufArg(dx), intArg(n), intArg(c),
		floatArg(a.LabelSmoothing), lossScaleArg(), boolArg(a.HasIgnore), intArg(a.IgnoreIndex))
}

// runMSELoss queues MSELoss: pred, target → loss (added to with acc).
func runMSELoss(d *Device, st *engine.Step, acc bool) error {
	p := st.In[0]
	n, per := d.dim(p, 0), sampleElems(p)
	return d.launch(kMSELoss, oneBlock(), d.bufArg(p), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(n), intArg(per), lossScaleArg(), boolArg(acc))
}

// runMSELossGrad queues MSELossGrad: dloss, pred, target → dpred.
func runMSELossGrad(d *Device, st *engine.Step, acc bool) error {
	p := st.In[1]
	n, per := d.dim(p, 0), sampleElems(p)
	return d.launch(kMSELossGrad, elementwise(n*per), d.bufArg(st.In[0]), d.bufArg(p), d.bufArg(st.In[2]), d.bufArg(st.Out[0]), intArg(n), intArg(per), lossScaleArg())
}

// runSoftmaxGrad returns the step of LogSoftmaxGrad or SoftmaxGrad, whose
// kernels (k) take the same arguments: dy, y → dx.
func runSoftmaxGrad(k kernelID) opStep {
	return func(d *Device, st *engine.Step, acc bool) error {
		dy := st.In[0]
		n, c := d.rows(dy)
		return d.launch(k, elementwise(n), d.bufArg(dy), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(n), intArg(c))
	}
}
