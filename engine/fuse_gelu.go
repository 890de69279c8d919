package engine

import "gorun/ops"

// fuseLinearGELU rewrites, for a target that runs ops.LinearGELU (the
// CUDA backend: cuBLASLt's GELU epilogue), a Linear whose output only a
// GELU in the tanh form reads (a GPT MLP's c_fc and
// nn.gelu(approximate = "tanh")) into one LinearGELU: the linear node
// keeps its layer, place and parameters and takes the GELU's output as
// its first; its own output stays as the second, the pre-activation that
// the gradient reads (GELUGrad on it, then the linear layer's gradients:
// ops.LinearGELU's rule). The GELU node disappears. Only the tanh form is
// fused, since cuBLASLt's epilogue computes no other (an exact,
// erf GELU keeps its own kernel), and only in float32 plans: under mixed
// precision the linear layer's output is cast before the GELU reads it.
// Each value is rounded as the separate ops round it, so the plan trains
// bit for bit as the unfused one (TestLinearGELUTrainsAsUnfused).
func (b *builder) fuseLinearGELU(uses map[*Value]int, dead map[*Node]bool) {
	if b.opts.Precision != ops.FP32 {
		return
	}
	for _, r := range b.g.Forward {
		if r.Op != ops.GELU || !r.Attrs.Approximate || dead[r] || r.Eval != nil || r.TrainOnly {
			continue
		}
		v := r.In[0]
		l := v.Producer
		if l == nil || l.Op != ops.Linear || dead[l] || l.Eval != nil || l.TrainOnly || uses[v] != 1 || v.LowPrecision {
			continue
		}
		y := r.Out[0]
		l.Op = ops.LinearGELU
		l.Attrs.Approximate = true
		l.Out = []*Value{y, v}
		y.Producer = l
		dead[r] = true
	}
}
