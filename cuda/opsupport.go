package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// hasKernel marks the ops the CUDA device runs (Flatten as a view, with no
// work). A test checks it against ops.All so that a new op without a CUDA
// kernel fails.
var hasKernel = func() map[ops.Op]bool {
	h := map[ops.Op]bool{}
	for _, op := range []ops.Op{ops.Conv2D, ops.Linear, ops.ReLU, ops.MaxPool2D, ops.Dropout, ops.Dropout2D,
		ops.Flatten, ops.LogSoftmax, ops.Softmax, ops.NLLLoss, ops.CrossEntropy, ops.MSELoss,
		ops.BatchNormStats, ops.BatchNormNorm, ops.BatchNormEval, ops.AvgPool2D, ops.GlobalAvgPool2D,
		ops.Sigmoid, ops.Tanh, ops.LeakyReLU, ops.Add, ops.Sub, ops.Mul, ops.Scale, ops.Concat, ops.Embedding,
		ops.LayerNorm, ops.GELU, ops.BatchMatMul, ops.Permute, ops.Positions,
		ops.Conv2DGradInput, ops.Conv2DGradWeight, ops.Conv2DGradBias, ops.LinearGradInput,
		ops.LinearGradWeight, ops.LinearGradBias, ops.ReLUGrad, ops.MaxPool2DGrad, ops.DropoutGrad,
		ops.Dropout2DGrad, ops.LogSoftmaxGrad, ops.SoftmaxGrad, ops.NLLLossGrad, ops.CrossEntropyGrad,
		ops.MSELossGrad, ops.BatchNormGradStats, ops.BatchNormGradGamma, ops.BatchNormGradBeta,
		ops.BatchNormGradInput, ops.AvgPool2DGrad, ops.GlobalAvgPool2DGrad, ops.SigmoidGrad, ops.TanhGrad,
		ops.LeakyReLUGrad, ops.Narrow, ops.NarrowGrad, ops.EmbeddingGradWeight, ops.LayerNormGradInput, ops.LayerNormGradGamma,
		ops.LayerNormGradBeta, ops.GELUGrad, ops.BatchNormRunning, ops.SGDStep, ops.AdamStep, ops.AdamWStep, ops.ClipGradNorm} {
		h[op] = true
	}
	return h
}()

// cpuOnly marks the ops that only CPU plans hold: the engine fuses into
// them only when every device is a CPU (engine.GraphOptions.CPUFusions),
// so a CUDA plan never asks for them.
var cpuOnly = map[ops.Op]bool{ops.Conv2DPool: true, ops.Conv2DPoolGrad: true}

// supportsOp reports whether the CUDA device has a kernel for op.
func supportsOp(op ops.Op) bool { return hasKernel[op] }

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
// per-channel parameters (4·C floats, bnParamsDoubles), and layer norm's
// gamma and beta gradients (sums over rows, per column). The device
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
			if st.Op == ops.ClipGradNorm {
				need = max(need, bnPartials(1, st.In[0].Elems()))
			}
			if len(x) < 2 {
				continue
			}
			n, c, plane := biasShape(x)
			switch st.Op {
			case ops.Conv2DGradBias, ops.LinearGradBias:
				need = max(need, splitPartials(c, n*plane))
			case ops.BatchNormStats, ops.BatchNormGradStats:
				need = max(need, bnPartials(c, n*plane))
			case ops.BatchNormNorm, ops.BatchNormEval, ops.BatchNormGradInput:
				need = max(need, bnParamsDoubles(c))
			case ops.LayerNormGradGamma:
				need = max(need, bnPartials(d, rows))
			case ops.LayerNormGradBeta:
				need = max(need, splitPartials(d, rows))
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
