//go:build cuda

// Layer normalisation over rows along the last dimension; the gamma and
// beta gradients are sums over rows, in chunks as batch norm's.

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// layerNormSteps are the layer norm family's ops.
var layerNormSteps = map[ops.Op]opStep{
	ops.LayerNorm:          runLayerNorm,
	ops.LayerNormGradInput: runLayerNormGradInput,
	ops.LayerNormGradGamma: runLayerNormGradGamma,
	ops.LayerNormGradBeta:  runLayerNormGradBeta,
}

// runLayerNorm queues LayerNorm: x[, gamma, beta] → y, save.
func runLayerNorm(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x := st.In[0]
	rows, dd := d.rows(x)
	return d.launch(kLayerNorm, blockPer(rows), d.bufArg(x), d.bufArg(optIn(st, 1)), d.bufArg(optIn(st, 2)), d.bufArg(st.Out[0]), d.bufArg(st.Out[1]), intArg(rows), intArg(dd), floatArg(a.Eps))
}

// runLayerNormGradInput queues LayerNormGradInput: dy, x, save[, gamma] →
// dx.
func runLayerNormGradInput(d *Device, st *engine.Step, acc bool) error {
	x := st.In[1]
	rows, dd := d.rows(x)
	return d.launch(kLayerNormGradInput, blockPer(rows), d.bufArg(st.In[0]), d.bufArg(x), d.bufArg(st.In[2]), d.bufArg(optIn(st, 3)), d.bufArg(st.Out[0]), intArg(rows), intArg(dd))
}

// runLayerNormGradGamma queues LayerNormGradGamma: dy, x, save → dgamma, Σ
// over rows of dy·x̂.
func runLayerNormGradGamma(d *Device, st *engine.Step, acc bool) error {
	dy := st.In[0]
	rows, dd := d.rows(dy)
	s, chunk := splitSum(rows)
	if need := bnPartials(dd, rows); need > d.partN {
		return fmt.Errorf("%s: layer norm's gamma gradient over %d × %d needs %d partials, Load reserved %d", d.Name(), rows, dd, need, d.partN)
	}
	if err := d.launch(kBNPartial, blockPer(dd*s), d.bufArg(dy), d.bufArg(st.In[1]), d.bufArg(st.In[2]), ptrArg(uintptr(d.part)), intArg(rows), intArg(dd),
		intArg(1), intArg(s), intArg(chunk), intArg(lnGammaSums)); err != nil {
		return err
	}
	// The second half of the partials: Σdy·x̂.
	return d.launch(kBiasFinish, blockPer(dd), ptrArg(uintptr(d.part)+8*uintptr(dd*s)), d.bufArg(st.Out[0]), intArg(dd), intArg(s), boolArg(acc))
}

// runLayerNormGradBeta queues LayerNormGradBeta: dy → dbeta, Σ over rows of
// dy: the split sum of [rows, D, 1].
func runLayerNormGradBeta(d *Device, st *engine.Step, acc bool) error {
	dy := st.In[0]
	rows, dd := d.rows(dy)
	return d.splitSum(d.ptr(dy), d.ptr(st.Out[0]), rows, dd, 1, acc)
}
