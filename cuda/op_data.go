//go:build cuda

// Embedding and data movement: flatten, concatenation and slices along
// dimension 1, permutes, positions, embedding lookups and their gradients.

package cuda

import (
	"gorgonia.org/cu"

	"gorun/engine"
	"gorun/ops"
)

// dataSteps are the embedding and data movement family's ops.
var dataSteps = map[ops.Op]opStep{
	ops.Flatten:             runFlatten,
	ops.Concat:              runConcat,
	ops.Narrow:              runNarrow,
	ops.NarrowGrad:          runNarrowGrad,
	ops.Positions:           runPositions,
	ops.Permute:             runPermute,
	ops.Embedding:           runEmbedding,
	ops.EmbeddingGradWeight: runEmbeddingGradWeight,
}

// runFlatten queues Flatten: nothing for a view (y at x's offset), else a
// copy.
func runFlatten(d *Device, st *engine.Step, acc bool) error {
	x, y := st.In[0], st.Out[0]
	if x.Offset == y.Offset {
		return nil // a view: nothing to do
	}
	return memcpyDtoD(cu.DevicePtr(d.ptr(y)), cu.DevicePtr(d.ptr(x)), 4*d.live(x), d.stream)
}

// runConcat queues Concat: a[N, A, ...], b[N, B, ...] → [N, A+B, ...], two
// slice copies.
func runConcat(d *Device, st *engine.Step, acc bool) error {
	x, y, z := st.In[0], st.In[1], st.Out[0]
	n, la, lb := d.dim(x, 0), sampleElems(x), sampleElems(y)
	if err := d.launch(kCopySlice, elementwise(n*la), d.bufArg(x), d.bufArg(z), intArg(n), intArg(la), intArg(la), intArg(0), intArg(la+lb), intArg(0)); err != nil {
		return err
	}
	return d.launch(kCopySlice, elementwise(n*lb), d.bufArg(y), d.bufArg(z), intArg(n), intArg(lb), intArg(lb), intArg(0), intArg(la+lb), intArg(la))
}

// runNarrow queues Narrow: x[N, S, ...] → [N, L, ...] from Offset.
func runNarrow(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, y := st.In[0], st.Out[0]
	n, ls, ll := d.dim(x, 0), sampleElems(x), sampleElems(y)
	inner := 1
	for _, v := range x.Max[2:] {
		inner *= v
	}
	off := a.Offset * inner
	return d.launch(kCopySlice, elementwise(n*ll), d.bufArg(x), d.bufArg(y), intArg(n), intArg(ll), intArg(ls), intArg(off), intArg(ll), intArg(0))
}

// runNarrowGrad queues NarrowGrad: dy[N, L, ...] → dx[N, S, ...], zero but
// for [Offset, Offset+L).
func runNarrowGrad(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	dy, dx := st.In[0], st.Out[0]
	n, ll, ls := d.dim(dy, 0), sampleElems(dy), sampleElems(dx)
	inner := 1
	for _, v := range dy.Max[2:] {
		inner *= v
	}
	if n*ls == 0 {
		return nil
	}
	if err := memset32(cu.DevicePtr(d.ptr(dx)), 0, n*ls, d.stream); err != nil {
		return err
	}
	return d.launch(kCopySlice, elementwise(n*ll), d.bufArg(dy), d.bufArg(dx), intArg(n), intArg(ll), intArg(ll), intArg(0), intArg(ls), intArg(a.Offset*inner))
}

// runPositions queues Positions: x[N, T, ...] → pos[N, T] = t.
func runPositions(d *Device, st *engine.Step, acc bool) error {
	x := st.In[0]
	n, t := d.dim(x, 0), x.Max[1]
	return d.launch(kPositions, elementwise(n*t), d.bufArg(st.Out[0]), intArg(n), intArg(t))
}

// runPermute queues Permute at the live batch.
func runPermute(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x := st.In[0]
	shape := make([]int, len(x.Max))
	for i := range shape {
		shape[i] = d.dim(x, i)
	}
	dims, strides, n, err := permuteArgs(shape, a.Perm)
	if err != nil {
		return err
	}
	args := []arg{d.bufArg(x), d.bufArg(st.Out[0]), intArg(n)}
	for _, v := range dims {
		args = append(args, intArg(v))
	}
	for _, v := range strides {
		args = append(args, intArg(v))
	}
	return d.launch(kPermute, elementwise(n), args...)
}

// runEmbedding queues Embedding: ids[N, ...], w[V, D] → [N, ..., D].
func runEmbedding(d *Device, st *engine.Step, acc bool) error {
	ids, w := st.In[0], st.In[1]
	n, v, dd := d.live(ids), w.Max[0], w.Max[1]
	return d.launch(kEmbedding, elementwise(n*dd), d.bufArg(ids), d.bufArg(w), d.bufArg(st.Out[0]), intArg(n), intArg(v), intArg(dd))
}

// runEmbeddingGradWeight queues EmbeddingGradWeight: dy[N, ..., D],
// ids[N, ...] → dW[V, D] (added to with acc).
func runEmbeddingGradWeight(d *Device, st *engine.Step, acc bool) error {
	ids, dw := st.In[1], st.Out[0]
	n, v, dd := d.live(ids), dw.Max[0], dw.Max[1]
	per := embeddingRowsPer(v, dd)
	return d.launch(kEmbeddingGrad, elementwise((v+per-1)/per*dd), d.bufArg(ids), d.bufArg(st.In[0]), d.bufArg(dw), intArg(n), intArg(v), intArg(dd),
		intArg(per), boolArg(acc))
}
