package ops

// The fused classifier (llm.c's fused_classifier): cross-entropy's loss
// and its gradient in one pass over the logits, for a target whose
// compiler knows, when it plans the forward pass, the loss's gradient
// (the loss seed, engine.Graph.LossSeed). The engine makes it from a
// CrossEntropy whose probabilities only its CrossEntropyGrad reads, only
// for a target that runs it (engine.TargetFusions): the probabilities are
// then never kept, the backward pass starts from dlogits.

const (
	// CrossEntropyFused: in logits[N,...,C], target[N,...] (Idx), dloss[1];
	// out loss[1] (CrossEntropy's, added to with Attrs.Accumulate) and
	// dx[N,...,C] (CrossEntropyGrad's for that dloss). Attrs:
	// LabelSmoothing, IgnoreIndex, HasIgnore, as CrossEntropy. Each value
	// is rounded as CrossEntropy then CrossEntropyGrad round it: dx holds
	// the probabilities CrossEntropy would have written, turned in place
	// into the gradient, so the fused plan trains bit for bit as the
	// unfused one on the CPU (TestCrossEntropyFusedMatchesUnfused); its
	// finite-difference check is TestCrossEntropyFusedGradient, its
	// PyTorch 1.13 check TestOpsGolden's cross_entropy cases.
	CrossEntropyFused Op = "cross_entropy_fused"
)

var classifierOps = []*Def{
	{
		Op: CrossEntropyFused, In: []Input{{Name: "input"}, {Name: "target", Int: true}, {Name: "dloss"}},
		Out:         []Output{{Name: "loss", Unbatched: true}, {Name: "dx"}},
		Accumulates: true,
		Workspace:   crossEntropyWork,
		StepName:    func(*Attrs, func(int) bool) string { return "cross_entropy+cross_entropy_grad" },
		Kernel32:    crossEntropyFused[float32], Kernel64: crossEntropyFused[float64],
	},
}

// crossEntropyFused: CrossEntropy's kernel writing the probabilities
// into dx, then CrossEntropyGrad's arithmetic in place (each row's
// target probability read before the row is overwritten).
func crossEntropyFused[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, t, dloss := in[0], in[1], in[2]
	dx := out[1]
	crossEntropy(c, a, []*Buf[T]{x, t}, []*Buf[T]{out[0], dx})
	n, k := lastDim(x)
	g := T(c.LossScale * float64(dloss.Data[0]))
	eps := labelSmoothing(a)
	off, hit := T(eps/float64(k)), T(1-eps+eps/float64(k))
	for i, ti := range t.Idx[:n] {
		dr := dx.Data[i*k:][:k]
		if ignored(a, ti) {
			clear(dr)
			continue
		}
		pt := dr[ti]
		if eps == 0 {
			for j, p := range dr {
				dr[j] = g * p
			}
		} else {
			for j, p := range dr {
				dr[j] = g * (p - off)
			}
		}
		dr[ti] = g * (pt - hit)
	}
}
