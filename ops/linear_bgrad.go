package ops

// The bias gradient in the weight gradient's product (llm.c's BGRADB):
// a linear layer's LinearGradWeight and LinearGradBias, which read the
// same dy, as one op, for a target whose matrix product can sum dy's rows
// as it reads them (cuBLASLt's CUBLASLT_EPILOGUE_BGRADB) instead of
// running a separate reduction over dy. The engine makes it only for a
// target that runs it (engine.TargetFusions); the CPU declines it.

const (
	// LinearGradWeightBias: in dy[N,...,O], x[N,...,I]; out dw[O,I] =
	// dyᵀ·x and db[O] = Σ dy over all rows, both added to with
	// Attrs.Accumulate: LinearGradWeight then LinearGradBias, the same
	// bits (TestLinearGradWeightBiasMatchesUnfused); their
	// finite-difference and PyTorch checks are theirs.
	LinearGradWeightBias Op = "linear_grad_weight_bias"
)

var linearBGradOps = []*Def{
	{
		Op: LinearGradWeightBias, In: []Input{{Name: "dy"}, {Name: "x"}}, Out: []Output{{Name: "dw"}, {Name: "db"}}, Accumulates: true,
		StepName: func(*Attrs, func(int) bool) string { return "linear_grad_weight+linear_grad_bias" },
		Kernel32: linearGradWeightBias[float32], Kernel64: linearGradWeightBias[float64],
	},
}

// linearGradWeightBias: LinearGradWeight's kernel into dw, then
// LinearGradBias's into db.
func linearGradWeightBias[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	linearGradWeight(c, a, in, out[:1])
	linearGradBias(c, a, in[:1], out[1:])
}
