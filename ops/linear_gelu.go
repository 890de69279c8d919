package ops

// The linear layer with its GELU (llm.c's GELU epilogue): a GPT MLP's
// c_fc followed by nn.gelu(approximate = "tanh") as one op, for a target
// whose matrix product can apply the activation as it writes its result
// (cuBLASLt's CUBLASLT_EPILOGUE_GELU_AUX_BIAS, which also stores the
// pre-activation for the backward pass). The engine makes it from a
// Linear whose output only a tanh-form GELU reads, only for a target that
// runs it (engine.TargetFusions); the CPU declines it and keeps the two
// ops, and its CPU kernel serves the checks.

const (
	// LinearGELU: in x[N,...,I], w[O,I], optional b[O]; out y[N,...,O] =
	// GELU(x·wᵀ + b) and pre[N,...,O] = x·wᵀ + b (the pre-activation,
	// kept for the gradient; nothing differentiates it). Attrs:
	// Approximate (the tanh form, the only one the engine fuses: cuBLASLt's
	// epilogue computes it). Each value is rounded as Linear then GELU
	// round it, so a fused plan trains bit for bit as the unfused one on
	// the CPU (TestLinearGELUMatchesUnfused, TestLinearGELUTrainsAsUnfused);
	// its gradient is GELUGrad's on pre, then Linear's (LinearGradInput,
	// LinearGradWeight, LinearGradBias). Its finite-difference check is
	// the gradCase "linear_gelu", its PyTorch 1.13 check TestOpsGolden's
	// "linear_gelu" cases.
	LinearGELU Op = "linear_gelu"

	// LinearGradInputGELU: in dy[N,...,O], w[O,I], pre[N,...,I] (a
	// LinearGELU's pre-activation); out dx[N,...,I] = GELU'(pre)·(dy·w):
	// the next linear layer's input gradient (a GPT MLP's c_proj) and the
	// GELU's gradient in one op, for a target whose matrix product applies
	// the GELU's derivative as it writes (cuBLASLt's
	// CUBLASLT_EPILOGUE_DGELU). Attrs: Approximate. Each value is rounded
	// as LinearGradInput then GELUGrad round it (the product, then the
	// derivative in place), so a fused plan trains bit for bit as the
	// unfused one on the CPU (TestLinearGradInputGELUMatchesUnfused); its
	// parts' finite-difference and PyTorch checks are theirs.
	LinearGradInputGELU Op = "linear_grad_input_gelu"
)

var linearGELUOps = []*Def{
	{
		Op: LinearGELU, In: []Input{{Name: "input"}, {Name: "weight"}, {Name: "bias", Optional: true}},
		Out: []Output{{Name: "y"}, {Name: "pre", NoGrad: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			y, err := inferLinear(in)
			if err != nil {
				return nil, err
			}
			return [][]int{y[0], clone(y[0])}, nil
		},
		Grad:     linearGELUGrad,
		StepName: func(*Attrs, func(int) bool) string { return "linear+gelu" },
		Kernel32: linearGELU[float32], Kernel64: linearGELU[float64],
	},
	{
		Op: LinearGradInputGELU, In: []Input{{Name: "dy"}, {Name: "w"}, {Name: "pre"}}, Out: []Output{{Name: "dx"}},
		StepName: func(*Attrs, func(int) bool) string { return "linear_grad_input+gelu_grad" },
		Kernel32: linearGradInputGELU[float32], Kernel64: linearGradInputGELU[float64],
	},
}

// linearGELUGrad: dpre = GELUGrad(dy, pre), then Linear's gradients of
// dpre; the GELU's attributes go to GELUGrad, the linear layer's (without
// Approximate) to the others, as the unfused ops' rules give them.
func linearGELUGrad(b GradBuilder) []Value {
	dy := b.OutGrad(0)
	if dy == nil {
		return make([]Value, 3)
	}
	a := b.Attrs()
	pre := b.Out(1)
	dpre := b.Temp(GELUGrad, Attrs{Approximate: a.Approximate}, "grad "+b.Name(pre), b.Shape(pre), b.Batched(pre), dy, pre)
	la := a
	la.Approximate = false
	return affineGrads(b, la, dpre, LinearGradInput, LinearGradWeight, LinearGradBias)
}

// linearGELU: Linear's kernel into pre, then GELU's from pre into y.
func linearGELU[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	la := *a
	la.Approximate = false
	linear(c, &la, in, out[1:2])
	gelu(c, &Attrs{Approximate: a.Approximate, Precision: a.Precision}, out[1:2], out[0:1])
}

// linearGradInputGELU: LinearGradInput's kernel into dx, then GELUGrad's
// in place (dx as its dy, pre as its x).
func linearGradInputGELU[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	la := *a
	la.Approximate = false
	linearGradInput(c, &la, in[:2], out)
	geluGrad(c, &Attrs{Approximate: a.Approximate, Precision: a.Precision}, []*Buf[T]{out[0], in[2]}, out)
}
