package engine

import (
	"slices"

	"gorun/ops"
)

// OpName is the step's op as the plan prints it (ops.Def.StepName): a
// fused step says what it took in, "batch_norm_norm+add+relu",
// "add+relu_grad", "conv2d+maxpool2d+relu", "conv2d+maxpool2d+relu_grad".
func (s *Step) OpName() string {
	if d := ops.Lookup(s.Op); d != nil && d.StepName != nil {
		return d.StepName(&s.Attrs, func(i int) bool { return i < len(s.In) && s.In[i] != nil })
	}
	return s.Op.String()
}

// TargetFusions are the ops the compiler emits only for a backend that
// supports them (GraphOptions.Supports): the convolution, max pooling
// and ReLU fused into one Conv2DPool (fuseConvPool), and its gradient;
// the fused attention (ops.Attention, builder.fusedAttention; and
// ops.AttentionHeads, fuseAttention) and their gradients; the fused
// classifier (ops.CrossEntropyFused, fuseClassifier); the linear layer
// with its tanh GELU (ops.LinearGELU, fuseLinearGELU) and the next linear
// layer's input gradient with the GELU's (ops.LinearGradInputGELU,
// fuseLinearGELUGrad); a linear layer's weight and bias gradients
// (ops.LinearGradWeightBias, fuseLinearBiasGrad). Every other op
// a Plan may hold, every backend must run; a backend may decline only
// these (target.Target.Declines).
func TargetFusions() []ops.Op {
	return []ops.Op{ops.Conv2DPool, ops.Conv2DPoolGrad, ops.Attention, ops.AttentionGrad, ops.AttentionHeads, ops.AttentionHeadsGrad,
		ops.CrossEntropyFused, ops.LinearGELU, ops.LinearGradInputGELU, ops.LinearGradWeightBias}
}

// supports reports whether the Plan's backend runs every op of fused.
func (o *GraphOptions) supports(fused ...ops.Op) bool {
	if o.Supports == nil {
		return false
	}
	for _, op := range fused {
		if !o.Supports(op) {
			return false
		}
	}
	return true
}

// fuse rewrites the forward nodes before they are differentiated, so that
// one pass does what the script wrote as two or three:
//
//   - batch norm whose output only a ReLU reads becomes one BatchNormNorm
//     with Attrs.ReLU (y = relu(bn(x)));
//   - batch norm whose output only an Add reads, whose sum only a ReLU
//     reads, becomes one BatchNormNorm with the Add's other input as its
//     residual (y = relu(bn(x) + res): a ResNet block's end), when that
//     input is computed before the batch norm (of two batch norms, the
//     later one takes the other's output).
//
// For a backend that runs them (TargetFusions), fuseConvPool and
// fuseAttention (a script's own attention into ops.AttentionHeads) follow;
// nn.multihead_attention's fused attention is chosen where the layer is
// built (builder.fusedAttention).
//
// The fused node keeps the batch norm's layer, its place and its Eval
// twin (fused the same way); the ReLU's output becomes its output, and the
// values in between disappear. Each element is rounded as the separate ops
// round it, so a fused plan trains bit for bit as the unfused one
// (TestFusionMatchesUnfused). The gradient is the ReLU's, then the batch
// norm's (ops.BatchNormNorm's rule); the residual's is the ReLU's.
func (b *builder) fuse() {
	g := b.g
	uses := map[*Value]int{g.Output: 1, g.Loss: 1}
	pos := map[*Node]int{}
	for i, n := range g.Forward {
		pos[n] = i
		for _, v := range n.In {
			uses[v]++
		}
		if n.Eval != nil {
			for _, v := range n.Eval.In {
				uses[v]++
			}
		}
	}
	// single reports whether v is a forward output that only one node reads.
	single := func(v *Value) bool { return v != nil && uses[v] == 1 }
	// bn returns v's producer when it is a batch norm not yet fused.
	bn := func(v *Value) *Node {
		if n := v.Producer; n != nil && n.Op == ops.BatchNormNorm && !n.Attrs.ReLU && len(n.In) == 4 && single(v) {
			return n
		}
		return nil
	}
	dead := map[*Node]bool{}
	gone := map[*Value]bool{}
	for _, r := range g.Forward {
		if r.Op != ops.ReLU || !single(r.In[0]) {
			continue
		}
		v := r.In[0]
		n := bn(v)
		var res *Value
		if a := v.Producer; n == nil && a != nil && a.Op == ops.Add {
			for j, u := range a.In {
				m, other := bn(u), a.In[1-j]
				if m == nil || (other.Producer != nil && pos[other.Producer] > pos[m]) {
					continue // the residual must exist where the batch norm runs
				}
				if n == nil || pos[m] > pos[n] {
					n, res = m, other
				}
			}
			if n == nil {
				continue
			}
			dead[a] = true
			gone[n.Out[0]] = true
		}
		if n == nil {
			continue
		}
		y := r.Out[0]
		dead[r] = true
		gone[v] = true
		for _, m := range []*Node{n, n.Eval} {
			if m == nil {
				continue
			}
			m.Attrs.ReLU = true
			m.Out[0] = y
			if res != nil {
				m.In = append(m.In, res)
			}
		}
		y.Producer = n
	}
	if b.opts.supports(ops.Conv2DPool, ops.Conv2DPoolGrad) {
		b.fuseConvPool(uses, dead, gone)
	}
	if b.opts.supports(ops.AttentionHeads, ops.AttentionHeadsGrad) {
		b.fuseAttention(uses, dead, gone)
	}
	if b.opts.supports(ops.LinearGELU) {
		b.fuseLinearGELU(uses, dead)
	}
	g.Forward = slices.DeleteFunc(g.Forward, func(n *Node) bool { return dead[n] })
	g.drop(gone)
}

// fuseConvPool rewrites a convolution whose output only a 2×2, stride-2
// max pooling reads, where ops.ConvPoolFusable allows it and the
// convolution's input needs no gradient (a first layer), into one
// Conv2DPool; a ReLU that alone reads the pooling's output joins it
// (Attrs.ReLU). The fused node keeps the convolution's layer, place and
// parameters, the pooling's index and the last op's output; the
// convolution's output (and the pooling's, with a ReLU) disappear. Each
// value is rounded as the separate ops round it and the gradient is theirs
// (ops.Conv2DPool's rule), so the plan trains bit for bit as the unfused one.
func (b *builder) fuseConvPool(uses map[*Value]int, dead map[*Node]bool, gone map[*Value]bool) {
	g := b.g
	reader := map[*Value]*Node{} // a forward value's reader, when it has one
	for _, n := range g.Forward {
		for _, v := range n.In {
			reader[v] = n
		}
	}
	for _, m := range g.Forward {
		if m.Op != ops.MaxPool2D || dead[m] || m.Attrs.Kernel != 2 || (m.Attrs.Stride != 0 && m.Attrs.Stride != 2) || m.Eval != nil {
			continue
		}
		v := m.In[0]
		c := v.Producer
		if c == nil || c.Op != ops.Conv2D || dead[c] || c.Eval != nil || uses[v] != 1 || c.In[0].needsGrad ||
			!ops.ConvPoolFusable(&c.Attrs, c.In[0].Shape, c.In[1].Shape) {
			continue
		}
		y, idx := m.Out[0], m.Out[1]
		if r := reader[y]; r != nil && r.Op == ops.ReLU && uses[y] == 1 && r.Eval == nil && !dead[r] {
			dead[r], gone[y] = true, true
			y = r.Out[0]
			c.Attrs.ReLU = true
		}
		dead[m], gone[v] = true, true
		c.Op = ops.Conv2DPool
		c.Out = []*Value{y, idx}
		y.Producer, idx.Producer = c, c
	}
}

// fuseAttention rewrites a script's own attention (two nn.matmul products:
// nn.multihead_attention's with fused = False stay apart), batch_matmul(q, kᵀ)
// (kᵀ by TransB, or by a transpose of k's last two dimensions), an
// optional scale, a softmax over the last dimension (causal or not) and
// batch_matmul(weights, v), into one ops.AttentionHeads, which never
// holds the T×T scores, when q, k and v have one shape [N, ..., T, dh]
// (dh at most ops.AttentionMaxHeadDim) and nothing else reads the scores,
// the scaled scores or the weights. The transpose of k goes too when only
// the product read it. The fused node is the second product's (its layer,
// place and output) with a new output, the rows' logsumexps; the values
// in between disappear. Within one tile of the CPU kernel (T ≤ 64) every
// value is rounded as the separate ops round it, so the plan trains bit
// for bit as the unfused one (TestAttentionPatternFused).
func (b *builder) fuseAttention(uses map[*Value]int, dead map[*Node]bool, gone map[*Value]bool) {
	g := b.g
	live := func(n *Node) bool { return n != nil && !dead[n] && n.Eval == nil }
	for _, m2 := range g.Forward {
		if m2.Op != ops.BatchMatMul || m2.Layer != matmulLayer || !live(m2) || m2.Attrs.TransA || m2.Attrs.TransB {
			continue
		}
		w, v := m2.In[0], m2.In[1]
		sm := w.Producer
		if !live(sm) || sm.Op != ops.Softmax || uses[w] != 1 {
			continue
		}
		x, alpha := sm.In[0], 1.0
		sc := x.Producer
		if live(sc) && sc.Op == ops.Scale && uses[x] == 1 {
			x, alpha = sc.In[0], sc.Attrs.Alpha
		} else {
			sc = nil
		}
		m1 := x.Producer
		if !live(m1) || m1.Op != ops.BatchMatMul || m1.Layer != matmulLayer || m1.Attrs.TransA || uses[x] != 1 {
			continue
		}
		q, k := m1.In[0], m1.In[1]
		var perm *Node
		if !m1.Attrs.TransB {
			if perm = k.Producer; !live(perm) || perm.Op != ops.Permute || !swapsLastTwo(perm.Attrs.Perm, len(k.Shape)) {
				continue
			}
			k = perm.In[0]
		}
		r := len(q.Shape)
		if r < 3 || !slices.Equal(q.Shape, k.Shape) || !slices.Equal(q.Shape, v.Shape) || q.Shape[r-1] > ops.AttentionMaxHeadDim ||
			q.Batched != k.Batched || q.Batched != v.Batched {
			continue
		}
		o := m2.Out[0]
		lse := b.value(o.Name+":lse", slices.Clone(q.Shape[:r-1]), q.Batched)
		lse.Producer = m2
		m2.Op, m2.Attrs = ops.AttentionHeads, ops.Attrs{Causal: sm.Attrs.Causal, Alpha: alpha}
		m2.In, m2.Out = []*Value{q, k, v}, []*Value{o, lse}
		dead[m1], dead[sm], gone[m1.Out[0]], gone[w] = true, true, true, true
		if sc != nil {
			dead[sc], gone[sc.Out[0]] = true, true
		}
		if perm != nil && uses[perm.Out[0]] == 1 {
			dead[perm], gone[perm.Out[0]] = true, true
		}
	}
}

// swapsLastTwo reports whether perm, over rank dimensions, swaps the last
// two and keeps the others.
func swapsLastTwo(perm [ops.MaxPermRank]int8, rank int) bool {
	if rank < 2 || rank > len(perm) {
		return false
	}
	for i := range rank - 2 {
		if int(perm[i]) != i {
			return false
		}
	}
	return int(perm[rank-2]) == rank-1 && int(perm[rank-1]) == rank-2
}

// fuseBackward rewrites the backward nodes once they exist: the Add that
// sums the two gradients of a value read twice (a ResNet block's input:
// its first convolution and its shortcut) feeds, when a ReLU made that
// value, only the ReLU's gradient, which then takes both addends (dx =
// dy + dy2 where y > 0, the sum rounded as Add rounds it).
func (b *builder) fuseBackward() {
	g := b.g
	uses := map[*Value]int{}
	for _, n := range g.Backward {
		for _, v := range n.In {
			uses[v]++
		}
	}
	for _, p := range g.Params {
		uses[p.Grad]++
	}
	dead := map[*Node]bool{}
	gone := map[*Value]bool{}
	for _, r := range g.Backward {
		if r.Op != ops.ReLUGrad || len(r.In) != 2 {
			continue
		}
		s := r.In[0]
		a := s.Producer
		if a == nil || a.Op != ops.Add || uses[s] != 1 || s == g.LossSeed {
			continue
		}
		r.In = []*Value{a.In[0], r.In[1], a.In[1]}
		dead[a], gone[s] = true, true
	}
	if b.opts.supports(ops.CrossEntropyFused) {
		b.fuseClassifier(dead, gone)
	}
	if b.opts.supports(ops.LinearGradInputGELU) {
		b.fuseLinearGELUGrad(uses, dead, gone)
	}
	if b.opts.supports(ops.LinearGradWeightBias) {
		b.fuseLinearBiasGrad(dead)
	}
	g.Backward = slices.DeleteFunc(g.Backward, func(n *Node) bool { return dead[n] })
	g.drop(gone)
}

// fuseClassifier rewrites the loss (llm.c's fused classifier): a
// CrossEntropy whose probabilities only its CrossEntropyGrad reads, and
// whose gradient is the loss seed (the loss is the graph's, not scaled or
// summed further), becomes one ops.CrossEntropyFused in the forward pass,
// taking the seed as its dloss and writing the loss and dlogits; the
// gradient node and the probabilities disappear. Label smoothing and
// ignore_index are the fused op's too. The node keeps its place, layer and
// attributes, so evaluation runs it as well (computing a dlogits nobody
// reads, where the unfused plan writes probabilities nobody reads). Each
// value is rounded as the separate ops round it, so the plan trains bit
// for bit as the unfused one (TestClassifierFusedTrainsAsUnfused).
func (b *builder) fuseClassifier(dead map[*Node]bool, gone map[*Value]bool) {
	g := b.g
	reads := map[*Value]int{g.Output: 1}
	for _, n := range slices.Concat(g.Forward, g.Backward) {
		for _, v := range n.In {
			reads[v]++
		}
		if n.Eval != nil {
			for _, v := range n.Eval.In {
				reads[v]++
			}
		}
	}
	for _, r := range g.Backward {
		if r.Op != ops.CrossEntropyGrad || dead[r] || len(r.In) != 3 || r.In[0] != g.LossSeed {
			continue
		}
		probs := r.In[1]
		f := probs.Producer
		if f == nil || f.Op != ops.CrossEntropy || f.Eval != nil || f.TrainOnly || f.Out[0] != g.Loss ||
			reads[probs] != 1 || f.In[1] != r.In[2] {
			continue
		}
		dx := r.Out[0]
		f.Op = ops.CrossEntropyFused
		f.In = []*Value{f.In[0], f.In[1], g.LossSeed}
		f.Out = []*Value{f.Out[0], dx}
		dx.Producer = f
		dead[r], gone[probs] = true, true
	}
}

// drop removes the values in gone from g.Values and numbers the rest again.
func (g *Graph) drop(gone map[*Value]bool) {
	if len(gone) == 0 {
		return
	}
	g.Values = slices.DeleteFunc(g.Values, func(v *Value) bool { return gone[v] })
	for i, v := range g.Values {
		v.ID = i
	}
}
