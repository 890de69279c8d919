package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// checkWork reports a step whose kernels need more scratch than the
// program's Work buffer holds: the GEMMs would write past the arena, and a
// fault poisons the GPU's context for the rest of the process.
func checkWork(prog *engine.Program, st *engine.Step) error {
	if st.Kind != engine.KernelStep {
		return nil
	}
	shapes := func(bs []*engine.Buffer) [][]int {
		out := make([][]int, len(bs))
		for j, b := range bs {
			if b != nil {
				out[j] = b.Max
			}
		}
		return out
	}
	need := ops.Workspace(st.Op, &st.Attrs, shapes(st.In), shapes(st.Out))
	have := 0
	if prog.Work != nil {
		have = prog.Work.Elems()
	}
	if need > have {
		return fmt.Errorf("step %d (%s %s) needs %d elements of scratch, the program's Work buffer has %d", st.ID, st.Op, st.Layer, need, have)
	}
	return nil
}

// biasShape is a bias gradient's dy[N, C, plane…] as the split sum's
// (n, c, plane): a linear layer's dy[N, O] has plane 1. Batch norm's
// x[N, C, …] is cut the same way.
func biasShape(dy []int) (n, c, plane int) {
	plane = 1
	for _, v := range dy[2:] {
		plane *= v
	}
	return dy[0], dy[1], plane
}

// partialsNeeded is the scratch, in doubles, that the program's split sums
// and batch norms need at most: its bias gradients at the planned batch (a
// live batch is never larger, and fewer elements never take more chunks),
// the finiteness check over its largest float32 buffer, batch norm's
// per-channel sums (two partials per chunk, bnPartials) and its
// per-channel parameters (4·C floats, bnParamsDoubles), layer norm's
// gamma and beta gradients (sums over rows, per column), and the fused
// classifier's loss term of each row of the logits. The device
// allocates it at Load, since no memory may be allocated during a step or
// a graph capture.
func partialsNeeded(prog *engine.Program) int {
	need := 0
	for _, steps := range [][]*engine.Step{prog.Steps, prog.Eval} {
		for _, st := range steps {
			if st.Kind != engine.KernelStep || len(st.In) == 0 || st.In[0] == nil || len(st.In[0].Max) == 0 {
				continue
			}
			x := st.In[0].Max
			rows, d := lastDimShape(x)
			switch st.Op {
			case ops.ClipGradNorm, ops.GradNormSq:
				need = max(need, bnPartials(1, st.In[0].Elems()))
			case ops.ClipGradScale:
				need = max(need, bnPartials(1, st.In[1].Elems()))
			}
			if len(x) < 2 {
				continue
			}
			n, c, plane := biasShape(x)
			switch st.Op {
			case ops.Conv2DGradBias, ops.LinearGradBias, ops.LinearGradWeightBias:
				need = max(need, splitPartials(c, n*plane))
			case ops.BatchNormStats, ops.BatchNormGradStats:
				need = max(need, bnPartials(c, n*plane))
			case ops.BatchNormNorm, ops.BatchNormEval, ops.BatchNormGradInput:
				need = max(need, bnParamsDoubles(c))
			case ops.LayerNormGradGamma:
				need = max(need, bnPartials(d, rows))
			case ops.LayerNormGradBeta:
				need = max(need, splitPartials(d, rows))
			case ops.CrossEntropyFused:
				need = max(need, rows) // a loss term per row
			}
		}
	}
	for _, b := range prog.Buffers {
		if b.DType == engine.Float32 {
			need = max(need, splitPartials(1, b.Elems()))
		}
	}
	return need
}

// lastDimShape is shape as rows along its last dimension: their number
// and length.
func lastDimShape(shape []int) (rows, d int) {
	rows = 1
	for _, v := range shape[:len(shape)-1] {
		rows *= v
	}
	return rows, shape[len(shape)-1]
}

// bnPartials is the scratch, in doubles, of batch norm's per-channel sums
// over c channels of total elements: two partials per chunk, in two phases
// even with one chunk.
func bnPartials(c, total int) int {
	s, _ := splitSum(total)
	return 2 * c * s
}

// bnParamsDoubles is the scratch, in doubles, of gorun_bn_params' 4·C
// floats.
func bnParamsDoubles(c int) int { return 2 * c }
