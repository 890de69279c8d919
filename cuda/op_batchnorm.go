//go:build cuda

// Batch normalisation: the per-channel sums in chunks (gorun_bn_partial,
// gorun_bn_finish, no atomics), the per-channel parameters derived in
// double (gorun_bn_params, into the partials' scratch) and applied
// elementwise.

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// batchNormSteps are the batch norm family's ops.
var batchNormSteps = map[ops.Op]opStep{
	ops.BatchNormStats:     runBatchNormStats,
	ops.BatchNormGradStats: runBatchNormGradStats,
	ops.BatchNormNorm:      runBatchNormNorm,
	ops.BatchNormEval:      runBatchNormEval,
	ops.BatchNormGradInput: runBatchNormGradInput,
	ops.BatchNormGradGamma: runBatchNormGradGamma,
	ops.BatchNormGradBeta:  runBatchNormGradBeta,
	ops.BatchNormRunning:   runBatchNormRunning,
}

// runBatchNormStats queues BatchNormStats: x → stats[3, C] (Σx, Σx², count).
func runBatchNormStats(d *Device, st *engine.Step, acc bool) error {
	x := st.In[0]
	_, c, plane := biasShape(x.Max)
	n := d.dim(x, 0)
	return d.bnSums(bnSums, d.bufArg(x), ptrArg(0), ptrArg(0), d.bufArg(st.Out[0]), n, c, plane, n*plane)
}

// runBatchNormGradStats queues BatchNormGradStats: dy, x, save →
// gstats[2, C].
func runBatchNormGradStats(d *Device, st *engine.Step, acc bool) error {
	dy, x, save := st.In[0], st.In[1], st.In[2]
	_, c, plane := biasShape(x.Max)
	return d.bnSums(bnGradSums, d.bufArg(dy), d.bufArg(x), d.bufArg(save), d.bufArg(st.Out[0]), d.dim(x, 0), c, plane, -1)
}

// runBatchNormGradGamma queues BatchNormGradGamma: gstats, save → dgamma
// (added to with acc).
func runBatchNormGradGamma(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dg := st.Out[0]
	c := dg.Max[0]
	return d.launch(kBNGradGamma, elementwise(c), d.bufArg(st.In[0]), d.bufArg(st.In[1]), d.bufArg(dg), intArg(c), floatArg(a.Eps), boolArg(acc))
}

// runBatchNormGradBeta queues BatchNormGradBeta: gstats → dbeta = gstats[0]
// (added to with acc).
func runBatchNormGradBeta(d *Device, st *engine.Step, acc bool) error {
	db := st.Out[0]
	c := db.Max[0]
	if acc {
		return d.launch(kAccumulate, elementwise(c), d.bufArg(db), d.bufArg(st.In[0]), intArg(c))
	}
	return d.launch(kCopy, elementwise(c), d.bufArg(st.In[0]), d.bufArg(db), intArg(c))
}

// runBatchNormRunning queues BatchNormRunning: save, running_mean,
// running_var, num_batches_tracked, in place.
func runBatchNormRunning(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	save := st.In[0]
	return d.launch(kBNRunning, oneBlock(), d.bufArg(save), d.bufArg(st.In[1]), d.bufArg(st.In[2]), d.bufArg(st.In[3]), intArg(save.Max[1]), floatArg(a.BNMomentum))
}

// runBatchNormNorm queues BatchNormNorm: x, stats, gamma, beta[, res] → y,
// save. The fifth input, when there, is the engine's fused residual;
// Attrs.ReLU applies ReLU's rule after it.
func runBatchNormNorm(d *Device, st *engine.Step, acc bool) error {
	return d.bnNormalise(st, bnNorm, [5]arg{d.bufArg(st.In[1]), ptrArg(0), d.bufArg(optIn(st, 2)), d.bufArg(optIn(st, 3)), d.bufArg(st.Out[1])}, optIn(st, 4))
}

// runBatchNormEval queues BatchNormEval: x, running_mean, running_var,
// gamma, beta[, res] → y, with the fused residual and ReLU as
// runBatchNormNorm's.
func runBatchNormEval(d *Device, st *engine.Step, acc bool) error {
	return d.bnNormalise(st, bnEval, [5]arg{d.bufArg(st.In[1]), d.bufArg(st.In[2]), d.bufArg(optIn(st, 3)), d.bufArg(optIn(st, 4)), ptrArg(0)}, optIn(st, 5))
}

// bnNormalise queues the normalisation of x = st.In[0] (BatchNormNorm,
// BatchNormEval): gorun_bn_params in mode with its five buffer arguments
// (a, b, gamma, beta, save), then gorun_bn_apply with the residual res
// (nil when the step has none) and Attrs.ReLU.
func (d *Device) bnNormalise(st *engine.Step, mode int, params [5]arg, res *engine.Buffer) error {
	x := st.In[0]
	_, c, plane := biasShape(x.Max)
	n := d.dim(x, 0)
	par, err := d.bnParams(c)
	if err != nil {
		return err
	}
	if err := d.launch(kBNParams, elementwise(c), params[0], params[1], params[2], params[3], params[4], par, intArg(c),
		floatArg(st.Attrs.Eps), intArg(mode)); err != nil {
		return err
	}
	return d.launch(kBNApply, elementwise(n*c*plane), d.bufArg(x), par, d.bufArg(res), d.bufArg(st.Out[0]), intArg(n), intArg(c), intArg(plane),
		boolArg(st.Attrs.ReLU))
}

// runBatchNormGradInput queues BatchNormGradInput: dy, x, save,
// gstats[, gamma] → dx.
func runBatchNormGradInput(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x := st.In[1]
	_, c, plane := biasShape(x.Max)
	n := d.dim(x, 0)
	par, err := d.bnParams(c)
	if err != nil {
		return err
	}
	if err := d.launch(kBNParams, elementwise(c), d.bufArg(st.In[2]), d.bufArg(st.In[3]), d.bufArg(optIn(st, 4)), ptrArg(0), ptrArg(0), par, intArg(c),
		floatArg(a.Eps), intArg(bnGrad)); err != nil {
		return err
	}
	return d.launch(kBNGradInput, elementwise(n*c*plane), d.bufArg(st.In[0]), d.bufArg(x), par, d.bufArg(st.Out[0]), intArg(n), intArg(c), intArg(plane))
}

// bnParams returns the scratch gorun_bn_params writes c channels'
// parameters into (d.part, as a kernel argument), or an error when Load
// reserved too little.
func (d *Device) bnParams(c int) (arg, error) {
	if bnParamsDoubles(c) > d.partN {
		return arg{}, fmt.Errorf("%s: batch norm over %d channels needs %d doubles of scratch, Load reserved %d", d.Name(), c, bnParamsDoubles(c), d.partN)
	}
	return ptrArg(uintptr(d.part)), nil
}

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
