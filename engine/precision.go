package engine

import (
	"fmt"
	"slices"

	"gorun/ops"
)

// Mixed precision (train(precision = "bf16" | "fp16")), as PyTorch 1.13's
// torch.autocast on the CPU does it, op by op (ops.Def.Autocast):
//
//   - a matrix product or convolution (ops.AutocastLower) takes its float
//     inputs — activations, weights, biases — cast to the low precision,
//     accumulates in float32, and its output is a low-precision tensor;
//   - a loss (ops.AutocastFP32) computes in float32;
//   - any other op follows its inputs: its output is low precision when
//     the float inputs that are not parameters all are (PyTorch's type
//     promotion: bf16 + fp32 is fp32; a norm's float32 weight does not
//     promote), and is then rounded, unless the op only selects or moves
//     values (ops.AutocastExact: ReLU, max pooling, reshapes);
//   - parameters, their gradients and the optimizer state stay float32
//     (master weights).
//
// Values are kept in float32 buffers holding numbers of the low format:
// every cast is an ops.Round node that rounds to the nearest bfloat16 (or
// float16), ties to even, as PyTorch's casts do. Round's gradient rule
// rounds the gradient, so backward mirrors autograd, where the gradient of
// a low-precision tensor is low precision. Nothing is stored in 16 bits:
// gorgonia.org/tensor has no bfloat16 dtype and the arena is float32
// throughout, so the casts save no memory. An output's cast rounds it in
// place (Value.castInPlace: no buffer); a cast of an input (a weight, a
// float32 activation entering a matrix product) adds a buffer, which
// `gorun plan` reports (Plan.describePrecision).

// autocast rewrites the forward nodes, before fusion and differentiation,
// for precision p: it inserts the Round nodes that the casts of
// torch.autocast are, and marks the values that hold low-precision
// numbers (Value.LowPrecision). The ops of fp32 run in float32 whatever
// their Def.Autocast (the target's own lists: CUDA's). FP32 leaves the
// graph as it is.
func (b *builder) autocast(p ops.Precision, fp32 []ops.Op) {
	if p == ops.FP32 {
		return
	}
	g := b.g
	low := map[*Value]bool{}
	cast := map[*Value]*Value{} // a float32 value → its rounded copy
	repl := map[*Value]*Value{} // a value → the rounded value later nodes read
	var out []*Node
	round := func(v *Value, at *Node) *Value {
		if r := cast[v]; r != nil {
			return r
		}
		r := b.value(fmt.Sprintf("%s(%s)", p, v.Name), v.Shape, v.Batched)
		r.needsGrad = v.needsGrad
		r.LowPrecision = true
		n := &Node{Op: ops.Round, Attrs: ops.Attrs{Precision: p}, In: []*Value{v}, Out: []*Value{r}, Layer: at.Layer, Pos: at.Pos}
		r.Producer = n
		out = append(out, n)
		cast[v] = r
		low[r] = true
		return r
	}
	swap := func(in []*Value) {
		for i, v := range in {
			if r := repl[v]; v != nil && r != nil {
				in[i] = r
			}
		}
	}
	for _, n := range g.Forward {
		swap(n.In)
		if n.Eval != nil {
			swap(n.Eval.In)
		}
		def := ops.Lookup(n.Op)
		rule := def.Autocast
		if slices.Contains(fp32, n.Op) {
			rule = ops.AutocastFP32
		}
		if rule == ops.AutocastLower {
			// The product's steps (and its gradient's, which the rules
			// give the same attributes) say their operands hold values of
			// p: the cuda backend runs them on tensor cores.
			n.Attrs.Precision = p
			for i, v := range n.In {
				if v != nil && !v.Int && !low[v] {
					n.In[i] = round(v, n)
				}
			}
			if n.Eval != nil {
				for i, v := range n.Eval.In {
					if r := cast[v]; r != nil {
						n.Eval.In[i] = r
					}
				}
			}
		}
		out = append(out, n)
		// A node left out of evaluation (batch statistics) or an output
		// no gradient flows through is no tensor autocast casts.
		if len(n.Out) == 0 || n.Out[0].Int || n.TrainOnly || def.Out[0].NoGrad || !lowOutput(rule, n.In, low) {
			continue
		}
		y := n.Out[0]
		if rule == ops.AutocastExact {
			y.LowPrecision = true
			low[y] = true
			continue
		}
		// Kernels that PyTorch runs with low-precision intermediates
		// (ops/precision.go) round where it does.
		if rule == ops.AutocastFollow {
			n.Attrs.Precision = p
			if n.Eval != nil {
				n.Eval.Attrs.Precision = p
			}
		}
		// The output cast rounds y where it lies: nothing else reads y
		// in the forward pass (later nodes read r), and the gradient rules
		// that read y (softmax's, sigmoid's) then see the low-precision
		// values PyTorch's saved output holds; no memory added.
		r := round(y, n)
		r.castInPlace = true
		repl[y] = r
	}
	g.Forward = out
	if r := repl[g.Output]; r != nil {
		g.Output = r
	}
}

// lowOutput reports whether an op of autocast rule r given in computes a
// low-precision output (see autocast).
func lowOutput(r ops.Autocast, in []*Value, low map[*Value]bool) bool {
	switch r {
	case ops.AutocastLower:
		return true
	case ops.AutocastFP32:
		return false
	}
	some := false
	for _, v := range in {
		if v == nil || v.Int || v.Param != nil {
			continue
		}
		if !low[v] {
			return false
		}
		some = true
	}
	return some
}

// markLowGradients marks the gradients that Round's gradient rule rounds
// (the gradients of low-precision values) as LowPrecision, but for
// parameters' gradients: float32 values (combined across devices, summed
// over micro-batches) the optimizer reads.
func (b *builder) markLowGradients() {
	param := map[*Value]bool{}
	for _, p := range b.g.Params {
		param[p.Grad] = true
	}
	for _, n := range b.g.Backward {
		if n.Op == ops.Round && !param[n.Out[0]] {
			for _, o := range n.Out {
				o.LowPrecision = true
			}
		}
	}
}

// StepDtype names what a kernel step of a mixed-precision plan computes
// on, as `gorun plan` prints it: "fp32→bf16" for a cast (ops.Round),
// "bf16" for a step whose float inputs all hold low-precision numbers (a
// matrix product on bfloat16 operands accumulates in float32; a product
// step with Attrs.Precision, as the CUDA plan's fused attention and its
// gradient), "fp32" otherwise and for the ops autocast runs in float32 (losses); "i32" for a step with integer inputs alone.
func StepDtype(st *Step) string {
	if st.Kind != KernelStep {
		return ""
	}
	if st.Op == ops.Round {
		return "fp32→" + st.Attrs.Precision.String()
	}
	d := ops.Lookup(st.Op)
	if d != nil && d.Autocast == ops.AutocastFP32 {
		return "fp32" // a loss reads low-precision values as float32
	}
	if d != nil && d.Autocast == ops.AutocastLower && st.Attrs.Precision != ops.FP32 {
		// A product on operands of its Precision, whatever float32
		// statistics it reads beside them (the fused attention's
		// gradient: lse).
		return st.Attrs.Precision.String()
	}
	lowIn, floats := ops.FP32, 0
	for _, b := range st.In {
		if b == nil || b.DType == Int32 {
			continue
		}
		floats++
		v := b.Value
		if v == nil || !v.LowPrecision {
			return "fp32"
		}
		lowIn = lowPrecisionOf(v)
	}
	if floats == 0 {
		return "i32"
	}
	return lowIn.String()
}

// lowPrecisionOf is the format a LowPrecision value holds: its cast's,
// found by walking back through the ops that keep it (ReLU, pooling,
// reshapes) to a Round.
func lowPrecisionOf(v *Value) ops.Precision {
	for v != nil && v.Producer != nil {
		n := v.Producer
		if n.Op == ops.Round {
			return n.Attrs.Precision
		}
		if len(n.In) == 0 {
			break
		}
		v = n.In[0]
	}
	return ops.BF16
}

// describePrecision writes what mixed precision does to the plan: the
// precision, how values are held, the cast steps and the memory their
// buffers take, beside the arena of the same plan compiled in float32
// (precisionTwin).
func (p *Plan) describePrecision(ew *errWriter) {
	prec := p.Spec.Precision
	if prec == ops.FP32 {
		return
	}
	twin, err := p.precisionTwin()
	ew.printf("\nmixed precision %s (torch.autocast's lists: matrix products and convolutions on %s operands with float32 accumulation; losses in float32; parameters, their gradients and optimizer state float32)\n",
		prec, prec.Dtype())
	if prec == ops.FP16 {
		ew.printf("  dynamic loss scaling (GradScaler): initial scale 65536, ×2 after 2000 steps without inf/NaN, ×0.5 and the step skipped on inf/NaN; loss_scale in each metrics.jsonl step line\n")
	}
	ew.printf("  %s values are held in float32 buffers, rounded to %s (gorgonia.org/tensor has no 16-bit float dtype): the casts save no memory, they cost their buffers\n",
		prec, prec.Dtype())
	for _, prog := range p.Devices {
		casts, bytes := 0, int64(0)
		for _, st := range prog.Steps {
			if st.Kind == KernelStep && st.Op == ops.Round {
				casts++
				for _, b := range st.Out {
					bytes += b.Bytes()
				}
			}
		}
		line := fmt.Sprintf("  device %d: %d cast steps (%d forward, %d backward), whose buffers take %s", prog.Rank, casts,
			countRounds(p.Graph.Forward), countRounds(p.Graph.Backward), humanBytes(bytes))
		if twin != nil {
			fp32 := twin.Devices[prog.Rank-p.Devices[0].Rank].MemoryBytes()
			line += fmt.Sprintf("; arena %s, %s in fp32 (%+.1f%%: the cast buffers, and fusions the casts prevent)", humanBytes(prog.MemoryBytes()), humanBytes(fp32),
				100*float64(prog.MemoryBytes()-fp32)/float64(fp32))
		} else if err != nil {
			line += fmt.Sprintf(" (the fp32 plan does not compile: %v)", err)
		}
		ew.printf("%s\n", line)
	}
}

func countRounds(nodes []*Node) int {
	n := 0
	for _, x := range nodes {
		if x.Op == ops.Round {
			n++
		}
	}
	return n
}

// precisionTwin compiles the Plan's script again in float32, for the
// memory mixed precision's casts cost.
func (p *Plan) precisionTwin() (*Plan, error) {
	sc := *p.Spec
	sc.Precision = ops.FP32
	return compileProcess(&sc, p.Cluster, p.Process)
}

// unscaleSteps is fp16's first update step: the gradients, combined
// across devices and scaled by the runner's dynamic loss scale S, divided
// by it (ops.GradUnscale, GradScaler.unscale_) before clipping and the
// optimizer. Other precisions have none.
func (p *Plan) unscaleSteps(prog *Program) []*Step {
	if p.Spec.Precision != ops.FP16 {
		return nil
	}
	return []*Step{{Kind: KernelStep, Phase: PhaseUpdate, Op: ops.GradUnscale, In: []*Buffer{prog.SyncedGrads},
		Layer: "fp16 loss scaling (unscale)", Pos: p.Spec.Pos}}
}
