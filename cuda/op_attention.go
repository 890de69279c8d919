//go:build cuda

// Fused attention (ops.Attention, ops.AttentionGrad): FlashAttention-2's
// tiling in cuda/kernels/attention.cu, one block per tile of
// GORUN_ATT_TILE rows of each sample and head; the backward is two
// kernels (dq; dk and dv) so that no atomics are needed. A step with
// Attrs.Precision bf16 (a plan of precision "bf16": the compiler keeps
// the attention fused for this backend, cudatarget's FusedBF16) runs the
// bf16 tensor-core kernels, which compute what ops/attention_bf16.go
// defines; fp32 steps the scalar fp32 kernels.

package cuda

import (
	"fmt"
	"math"

	"gorun/engine"
	"gorun/ops"
)

// attentionSteps are the fused attention's ops.
var attentionSteps = map[ops.Op]opStep{
	ops.Attention:     runAttention,
	ops.AttentionGrad: runAttentionGrad,
}

// attnDims are qkv[N, T, 3, H, dh]'s dimensions at the live batch and
// the scale 1/√dh, as the kernels take them, and kernels.h's geometry
// ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)).
func attnDims(d *Device, qkv *engine.Buffer) (n, t, h, dh int, scale float64, geom geometry) {
	n, t, h, dh = d.dim(qkv, 0), qkv.Max[1], qkv.Max[3], qkv.Max[4]
	geom = geometry{Grid: n * h * ((t + attTile - 1) / attTile), Block: attThreads}
	return n, t, h, dh, 1 / math.Sqrt(float64(dh)), geom
}

// attnKernels are the kernels of an attention step's precision: the
// forward, and the backward's dq and dk-dv kernels.
func attnKernels(st *engine.Step) (fwd, gradQ, gradKv kernelID, err error) {
	switch st.Attrs.Precision {
	case ops.FP32:
		return kAttention, kAttentionGradQ, kAttentionGradKv, nil
	case ops.BF16:
		return kAttentionBf16, kAttentionBf16GradQ, kAttentionBf16GradKv, nil
	}
	return 0, 0, 0, fmt.Errorf("%s: %s in %v: the fused attention has fp32 and bf16 kernels only", st.Layer, st.Op, st.Attrs.Precision)
}

// runAttention queues Attention: qkv → o, lse.
func runAttention(d *Device, st *engine.Step, acc bool) error {
	fwd, _, _, err := attnKernels(st)
	if err != nil {
		return err
	}
	qkv := st.In[0]
	n, t, h, dh, scale, geom := attnDims(d, qkv)
	return d.launch(fwd, geom, d.bufArg(qkv), d.bufArg(st.Out[0]), d.bufArg(st.Out[1]),
		intArg(n), intArg(t), intArg(h), intArg(dh), boolArg(st.Attrs.Causal), floatArg(scale))
}

// runAttentionGrad queues AttentionGrad: do, qkv, o, lse → dqkv, its q
// part by gorun_attention_grad_q and its k and v parts by
// gorun_attention_grad_kv (their _bf16 twins under bf16).
func runAttentionGrad(d *Device, st *engine.Step, acc bool) error {
	_, gradQ, gradKv, err := attnKernels(st)
	if err != nil {
		return err
	}
	do, qkv, o, lse, dqkv := st.In[0], st.In[1], st.In[2], st.In[3], st.Out[0]
	n, t, h, dh, scale, geom := attnDims(d, qkv)
	for _, k := range []kernelID{gradQ, gradKv} {
		if err := d.launch(k, geom, d.bufArg(do), d.bufArg(qkv), d.bufArg(o), d.bufArg(lse), d.bufArg(dqkv),
			intArg(n), intArg(t), intArg(h), intArg(dh), boolArg(st.Attrs.Causal), floatArg(scale)); err != nil {
			return err
		}
	}
	return nil
}
