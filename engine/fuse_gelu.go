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

// fuseLinearGELUGrad rewrites the backward nodes, for a target that runs
// ops.LinearGradInputGELU (cuBLASLt's CUBLASLT_EPILOGUE_DGELU): the
// GELUGrad of a LinearGELU's pre-activation whose incoming gradient only
// it reads and a LinearGradInput made (the next linear layer's input
// gradient: a GPT MLP's c_proj) becomes one LinearGradInputGELU, dx =
// GELU'(pre)·(dy·w), in the LinearGradInput's place; its output and the
// GELUGrad disappear. Each value is rounded as the separate ops round it
// (TestLinearGELUTrainsAsUnfused).
func (b *builder) fuseLinearGELUGrad(uses map[*Value]int, dead map[*Node]bool, gone map[*Value]bool) {
	g := b.g
	for _, r := range g.Backward {
		if r.Op != ops.GELUGrad || !r.Attrs.Approximate || dead[r] || len(r.In) != 2 {
			continue
		}
		s, pre := r.In[0], r.In[1]
		if f := pre.Producer; f == nil || f.Op != ops.LinearGELU || len(f.Out) != 2 || f.Out[1] != pre {
			continue
		}
		a := s.Producer
		if a == nil || a.Op != ops.LinearGradInput || dead[a] || uses[s] != 1 || s == g.LossSeed {
			continue
		}
		dx := r.Out[0]
		a.Op = ops.LinearGradInputGELU
		a.Attrs.Approximate = true
		a.In = []*Value{a.In[0], a.In[1], pre}
		a.Out = []*Value{dx}
		dx.Producer = a
		dead[r], gone[s] = true, true
	}
}

// fuseLinearBiasGrad rewrites the backward nodes, for a target that runs
// ops.LinearGradWeightBias (cuBLASLt's CUBLASLT_EPILOGUE_BGRADB): a
// linear layer's LinearGradWeight and LinearGradBias of the same dy
// become one LinearGradWeightBias in the weight gradient's place, writing
// dw and db; the bias node disappears. Each value is rounded as the
// separate ops round it (TestLinearGELUTrainsAsUnfused).
func (b *builder) fuseLinearBiasGrad(dead map[*Node]bool) {
	g := b.g
	weight := map[*Value]*Node{} // dy → its LinearGradWeight
	for _, n := range g.Backward {
		if n.Op == ops.LinearGradWeight && !dead[n] && len(n.Out) == 1 {
			weight[n.In[0]] = n
		}
	}
	for _, r := range g.Backward {
		if r.Op != ops.LinearGradBias || dead[r] || len(r.In) != 1 || len(r.Out) != 1 {
			continue
		}
		w := weight[r.In[0]]
		if w == nil || w.Layer != r.Layer || w.Op != ops.LinearGradWeight {
			continue
		}
		db := r.Out[0]
		w.Op = ops.LinearGradWeightBias
		w.Out = []*Value{w.Out[0], db}
		db.Producer = w
		dead[r] = true
	}
}
