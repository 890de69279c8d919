//go:build cuda

// Dropout: the masks come from the device's counter-based RNG (seed,
// offset); each launch advances the step's offset by the draws it makes
// (d.rel), so a captured graph replays with the offset of its step.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// dropoutSteps are the dropout family's ops.
var dropoutSteps = map[ops.Op]opStep{
	ops.Dropout:       runDropout,
	ops.Dropout2D:     runDropout2D,
	ops.DropoutGrad:   runDropoutGrad,
	ops.Dropout2DGrad: runDropout2DGrad,
}

// runDropout queues Dropout: x → y, mask; draws one number per element.
func runDropout(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y, mask := st.In[0], st.Out[0], st.Out[1]
	n := d.live(x)
	rel := d.rel
	d.rel += uint64(n)
	return d.launch(kDropout, elementwise(n), d.bufArg(x), d.bufArg(y), d.bufArg(mask), intArg(n), floatArg(a.P), seedArg(), offsetArg(rel))
}

// runDropout2D queues Dropout2D: x → y, mask[N, C]; draws one number per
// plane.
func runDropout2D(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y, mask := st.In[0], st.Out[0], st.Out[1]
	planes := d.dim(x, 0) * x.Max[1]
	hw := 1
	for _, v := range x.Max[2:] {
		hw *= v
	}
	rel := d.rel
	d.rel += uint64(planes)
	return d.launch(kDropout2D, elementwise(planes*hw), d.bufArg(x), d.bufArg(y), d.bufArg(mask), intArg(planes), intArg(hw), floatArg(a.P), seedArg(), offsetArg(rel))
}

// runDropoutGrad queues DropoutGrad: dy, mask → dx.
func runDropoutGrad(d *Device, st *engine.Step, acc bool) error {
	n := d.live(st.In[0])
	return d.launch(kDropoutGrad, elementwise(n), d.bufArg(st.In[0]), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(n))
}

// runDropout2DGrad queues Dropout2DGrad: dy, mask → dx.
func runDropout2DGrad(d *Device, st *engine.Step, acc bool) error {
	dy := st.In[0]
	planes := d.dim(dy, 0) * dy.Max[1]
	hw := 1
	for _, v := range dy.Max[2:] {
		hw *= v
	}
	return d.launch(kDropout2DGrad, elementwise(planes*hw), d.bufArg(dy), d.bufArg(st.In[1]), d.bufArg(st.Out[0]), intArg(planes), intArg(hw))
}
