//go:build cuda

// Pooling: max, average and global average pooling and their gradients.

package cuda

import (
	"gorun/engine"
	"gorun/ops"
)

// poolSteps are the pooling family's ops.
var poolSteps = map[ops.Op]opStep{
	ops.MaxPool2D:           runMaxPool2D,
	ops.MaxPool2DGrad:       runMaxPool2DGrad,
	ops.AvgPool2D:           runAvgPool2D,
	ops.AvgPool2DGrad:       runAvgPool2DGrad,
	ops.GlobalAvgPool2D:     runGlobalAvgPool2D,
	ops.GlobalAvgPool2DGrad: runGlobalAvgPool2DGrad,
}

// runMaxPool2D queues MaxPool2D: x → y, idx.
func runMaxPool2D(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y, idx := st.In[0], st.Out[0], st.Out[1]
	planes, h, w := d.dim(x, 0)*x.Max[1], x.Max[2], x.Max[3]
	k, s := poolGeom(a)
	oh, ow := y.Max[2], y.Max[3]
	return d.launch(kMaxPool2D, elementwise(planes*oh*ow), d.bufArg(x), d.bufArg(y), d.bufArg(idx), intArg(planes), intArg(h), intArg(w),
		intArg(oh), intArg(ow), intArg(k), intArg(s))
}

// runMaxPool2DGrad queues MaxPool2DGrad: dy, idx → dx.
func runMaxPool2DGrad(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dy, idx, dx := st.In[0], st.In[1], st.Out[0]
	planes, h, w := d.dim(dy, 0)*dy.Max[1], dx.Max[2], dx.Max[3]
	k, s := poolGeom(a)
	oh, ow := dy.Max[2], dy.Max[3]
	return d.launch(kMaxPool2DGrad, elementwise(planes*h*w), d.bufArg(dy), d.bufArg(idx), d.bufArg(dx), intArg(planes), intArg(h), intArg(w),
		intArg(oh), intArg(ow), intArg(k), intArg(s))
}

// runAvgPool2D queues AvgPool2D.
func runAvgPool2D(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y := st.In[0], st.Out[0]
	planes, h, w := d.dim(x, 0)*x.Max[1], x.Max[2], x.Max[3]
	k, s := poolGeom(a)
	oh, ow := y.Max[2], y.Max[3]
	return d.launch(kAvgPool2D, elementwise(planes*oh*ow), d.bufArg(x), d.bufArg(y), intArg(planes), intArg(h), intArg(w),
		intArg(oh), intArg(ow), intArg(k), intArg(s), intArg(a.Padding))
}

// runAvgPool2DGrad queues AvgPool2DGrad.
func runAvgPool2DGrad(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dy, dx := st.In[0], st.Out[0]
	planes, h, w := d.dim(dy, 0)*dy.Max[1], dx.Max[2], dx.Max[3]
	k, s := poolGeom(a)
	oh, ow := dy.Max[2], dy.Max[3]
	return d.launch(kAvgPool2DGrad, elementwise(planes*h*w), d.bufArg(dy), d.bufArg(dx), intArg(planes), intArg(h), intArg(w),
		intArg(oh), intArg(ow), intArg(k), intArg(s), intArg(a.Padding))
}

// runGlobalAvgPool2D queues GlobalAvgPool2D: x[N, C, H, W] → y[N, C].
func runGlobalAvgPool2D(d *Device, st *engine.Step, acc bool) error {
	x := st.In[0]
	planes, hw := d.dim(x, 0)*x.Max[1], x.Max[2]*x.Max[3]
	return d.launch(kGlobalAvgPool2D, elementwise(planes), d.bufArg(x), d.bufArg(st.Out[0]), intArg(planes), intArg(hw))
}

// runGlobalAvgPool2DGrad queues GlobalAvgPool2DGrad.
func runGlobalAvgPool2DGrad(d *Device, st *engine.Step, acc bool) error {
	dx := st.Out[0]
	planes, hw := d.dim(dx, 0)*dx.Max[1], dx.Max[2]*dx.Max[3]
	return d.launch(kGlobalAvgPool2DGrad, elementwise(planes*hw), d.bufArg(st.In[0]), d.bufArg(dx), intArg(planes), intArg(hw))
}

// poolGeom is the pools' kernel and stride (0 means the kernel).
func poolGeom(a *ops.Attrs) (k, s int) {
	k, s = a.Kernel, a.Stride
	if s == 0 {
		s = k
	}
	return k, s
}
