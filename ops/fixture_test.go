package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// A gradCase describes one forward op call and the backward kernels that
// differentiate it. The same descriptions drive the finite-difference
// gradient checks, the allocation checks and the tail checks (kernels must
// not touch elements past the live batch).
type gradCase struct {
	name   string
	op     Op
	attrs  Attrs
	in     [][]int // input shapes at the live batch; nil for an absent optional input
	capN   int     // buffer capacity in samples; 0 means the live batch
	scale  float64 // Ctx.LossScale; 0 means 1
	derive []deriveStep
	bwd    []bwdStep

	distinct     bool  // input 0 holds well-separated values (no max ties)
	awayFromZero bool  // input 0 keeps clear of 0 (ReLU's kink)
	positive     []int // inputs filled with values in [0.1, 1) (variances)
}

// A deriveStep is a forward kernel run before op that computes one of op's
// inputs from others (BatchNormNorm's statistics from its input), so that
// the finite differences go through both kernels.
type deriveStep struct {
	op   Op
	args []ref // inputs ('i') only
	in   int   // the input of op it writes
}

// A bwdStep is one backward kernel: its inputs, and the forward input whose
// gradient it writes, or (when tmp is set) the shape of an intermediate
// that later steps read as tmpOf(k), k counting such steps.
type bwdStep struct {
	op    Op
	args  []ref
	wrt   int
	tmp   []int
	attrs *Attrs // nil: the case's attrs
	// batched marks a tmp with a batch dimension (an intermediate
	// gradient, not per-channel sums).
	batched bool
}

// A ref names a buffer of the forward call: the cotangent of output i
// ('d'), input i ('i'), output i ('o') or backward intermediate i ('t').
type ref struct {
	kind byte
	i    int
}

func dyOf(i int) ref  { return ref{'d', i} }
func inOf(i int) ref  { return ref{'i', i} }
func outOf(i int) ref { return ref{'o', i} }
func tmpOf(i int) ref { return ref{'t', i} }

var gradCases = []gradCase{
	{name: "conv2d", op: Conv2D, in: [][]int{{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, bwd: convBwd(true)},
	{name: "conv2d/stride2-pad1-bias-partial", op: Conv2D, attrs: Attrs{Stride: 2, Padding: 1},
		in: [][]int{{3, 2, 7, 8}, {5, 2, 3, 2}, {5}}, capN: 5, bwd: convBwd(true)},
	{name: "conv2d/stride2-pad1-nobias", op: Conv2D, attrs: Attrs{Stride: 2, Padding: 1},
		in: [][]int{{2, 2, 6, 5}, {3, 2, 3, 3}, nil}, bwd: convBwd(false)},
	{name: "conv2d/batch1-pad1", op: Conv2D, attrs: Attrs{Padding: 1},
		in: [][]int{{1, 2, 5, 4}, {3, 2, 2, 2}, {3}}, capN: 3, bwd: convBwd(true)},
	{name: "conv2d/stride3-pad2", op: Conv2D, attrs: Attrs{Stride: 3, Padding: 2},
		in: [][]int{{2, 1, 5, 6}, {2, 1, 3, 3}, {2}}, bwd: convBwd(true)},
	{name: "conv2d/groups2-partial", op: Conv2D, attrs: Attrs{Groups: 2},
		in: [][]int{{2, 4, 5, 5}, {6, 2, 3, 3}, {6}}, capN: 3, bwd: convBwd(true)},
	{name: "conv2d/depthwise-stride2-pad1-nobias", op: Conv2D, attrs: Attrs{Groups: 3, Stride: 2, Padding: 1},
		in: [][]int{{2, 3, 6, 5}, {3, 1, 3, 3}, nil}, bwd: convBwd(false)},
	{name: "conv2d/groups2-batch1-pad1", op: Conv2D, attrs: Attrs{Groups: 2, Padding: 1},
		in: [][]int{{1, 4, 4, 3}, {4, 2, 2, 2}, {4}}, capN: 2, bwd: convBwd(true)},
	// Single-channel inputs, stride 1, kernels 5 and 3: float32 takes the
	// direct kernels of package vec.
	{name: "conv2d/1ch-5x5-partial", op: Conv2D, in: [][]int{{2, 1, 8, 9}, {3, 1, 5, 5}, {3}}, capN: 3, bwd: convBwd(true)},
	{name: "conv2d/1ch-3x3-pad1-nobias", op: Conv2D, attrs: Attrs{Padding: 1},
		in: [][]int{{3, 1, 6, 18}, {9, 1, 3, 3}, nil}, bwd: convBwd(false)},
	{name: "linear", op: Linear, in: [][]int{{3, 5}, {4, 5}, {4}}, capN: 6, bwd: linearBwd(true)},
	{name: "linear/nobias", op: Linear, in: [][]int{{2, 3}, {4, 3}, nil}, bwd: linearBwd(false)},
	{name: "linear/3d", op: Linear, in: [][]int{{3, 4, 5}, {6, 5}, {6}}, capN: 5, bwd: linearBwd(true)},
	{name: "linear/4d-nobias", op: Linear, in: [][]int{{2, 3, 2, 4}, {3, 4}}, capN: 3, bwd: linearBwd(false)},
	// More than 8 outputs: LinearGradBias sums 8 columns at a time.
	{name: "linear/3d-wide", op: Linear, in: [][]int{{2, 3, 4}, {19, 4}, {19}}, capN: 3, bwd: linearBwd(true)},
	linearGELUCase("linear_gelu", [][]int{{3, 5}, {4, 5}, {4}}, 6),
	linearGELUCase("linear_gelu/3d-nobias", [][]int{{2, 3, 4}, {6, 4}, nil}, 3),
	{name: "relu", op: ReLU, in: [][]int{{3, 4, 2}}, capN: 4, awayFromZero: true,
		bwd: []bwdStep{{op: ReLUGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	convPoolCase("conv2d+maxpool2d/relu-partial", Attrs{ReLU: true}, [][]int{{2, 1, 9, 8}, {3, 1, 3, 3}, {3}}, 3),
	convPoolCase("conv2d+maxpool2d/pad1-nobias", Attrs{Padding: 1}, [][]int{{3, 1, 7, 6}, {2, 1, 3, 3}, nil}, 0),
	convPoolCase("conv2d+maxpool2d/5x5-relu", Attrs{ReLU: true}, [][]int{{2, 1, 9, 10}, {2, 1, 5, 5}, {2}}, 0),
	// The engine's fused gradient of a first layer's weight (no bias: the
	// check takes one output a step; TestConvPoolGradMatchesUnfused checks
	// the bias's bit for bit).
	{name: "conv2d+maxpool2d/relu-fused-grad-partial", op: Conv2DPool, attrs: Attrs{ReLU: true, Padding: 1},
		in: [][]int{{3, 1, 9, 8}, {3, 1, 3, 3}, nil}, capN: 4,
		bwd: []bwdStep{{op: Conv2DPoolGrad, args: []ref{dyOf(0), outOf(1), outOf(0), inOf(0)}, wrt: 1}}},
	{name: "maxpool2d/k2", op: MaxPool2D, attrs: Attrs{Kernel: 2}, in: [][]int{{2, 3, 6, 5}}, capN: 3, distinct: true,
		bwd: []bwdStep{{op: MaxPool2DGrad, args: []ref{dyOf(0), outOf(1)}, wrt: 0}}},
	{name: "maxpool2d/k3s2-overlap", op: MaxPool2D, attrs: Attrs{Kernel: 3, Stride: 2}, in: [][]int{{2, 2, 7, 8}}, distinct: true,
		bwd: []bwdStep{{op: MaxPool2DGrad, args: []ref{dyOf(0), outOf(1)}, wrt: 0}}},
	{name: "dropout", op: Dropout, attrs: Attrs{P: 0.5}, in: [][]int{{4, 6}}, capN: 6,
		bwd: []bwdStep{{op: DropoutGrad, args: []ref{dyOf(0), outOf(1)}, wrt: 0}}},
	{name: "dropout/p0", op: Dropout, attrs: Attrs{P: 0}, in: [][]int{{2, 3}},
		bwd: []bwdStep{{op: DropoutGrad, args: []ref{dyOf(0), outOf(1)}, wrt: 0}}},
	{name: "dropout2d", op: Dropout2D, attrs: Attrs{P: 0.4}, in: [][]int{{3, 4, 2, 3}}, capN: 4,
		bwd: []bwdStep{{op: Dropout2DGrad, args: []ref{dyOf(0), outOf(1)}, wrt: 0}}},
	{name: "flatten", op: Flatten, in: [][]int{{3, 2, 2, 3}}, capN: 4,
		bwd: []bwdStep{{op: Flatten, args: []ref{dyOf(0)}, wrt: 0}}}, // the gradient of a reshape is a reshape
	{name: "log_softmax", op: LogSoftmax, in: [][]int{{4, 5}}, capN: 5,
		bwd: []bwdStep{{op: LogSoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "softmax", op: Softmax, in: [][]int{{4, 5}}, capN: 6,
		bwd: []bwdStep{{op: SoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "log_softmax/3d", op: LogSoftmax, in: [][]int{{2, 3, 4}}, capN: 4,
		bwd: []bwdStep{{op: LogSoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "softmax/4d", op: Softmax, in: [][]int{{2, 2, 3, 5}}, capN: 3,
		bwd: []bwdStep{{op: SoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "softmax/causal", op: Softmax, attrs: Attrs{Causal: true}, in: [][]int{{2, 2, 4, 4}}, capN: 3,
		bwd: []bwdStep{{op: SoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "softmax/causal-3d", op: Softmax, attrs: Attrs{Causal: true}, in: [][]int{{3, 3, 3}},
		bwd: []bwdStep{{op: SoftmaxGrad, args: []ref{dyOf(0), outOf(0)}, wrt: 0}}},
	{name: "nll_loss", op: NLLLoss, in: [][]int{{5, 4}, {5}}, capN: 7, scale: 1.0 / 7,
		bwd: []bwdStep{{op: NLLLossGrad, args: []ref{dyOf(0), inOf(1)}, wrt: 0}}},
	{name: "cross_entropy", op: CrossEntropy, in: [][]int{{5, 4}, {5}}, capN: 6, scale: 0.25,
		bwd: []bwdStep{{op: CrossEntropyGrad, args: []ref{dyOf(0), outOf(1), inOf(1)}}}},
	{name: "cross_entropy/label_smoothing", op: CrossEntropy, attrs: Attrs{LabelSmoothing: 0.15},
		in: [][]int{{4, 5}, {4}}, capN: 6, scale: 0.5,
		bwd: []bwdStep{{op: CrossEntropyGrad, args: []ref{dyOf(0), outOf(1), inOf(1)}}}},
	{name: "nll_loss/3d-ignore", op: NLLLoss, attrs: Attrs{HasIgnore: true, IgnoreIndex: 2},
		in: [][]int{{3, 4, 5}, {3, 4}}, capN: 5, scale: 0.1,
		bwd: []bwdStep{{op: NLLLossGrad, args: []ref{dyOf(0), inOf(1)}, wrt: 0}}},
	{name: "cross_entropy/3d", op: CrossEntropy, in: [][]int{{2, 3, 4}, {2, 3}}, capN: 4, scale: 0.25,
		bwd: []bwdStep{{op: CrossEntropyGrad, args: []ref{dyOf(0), outOf(1), inOf(1)}}}},
	{name: "cross_entropy/3d-ignore", op: CrossEntropy, attrs: Attrs{HasIgnore: true, IgnoreIndex: 1},
		in: [][]int{{3, 4, 3}, {3, 4}}, capN: 4, scale: 0.2,
		bwd: []bwdStep{{op: CrossEntropyGrad, args: []ref{dyOf(0), outOf(1), inOf(1)}}}},
	{name: "cross_entropy/4d-ignore-smoothing", op: CrossEntropy, attrs: Attrs{HasIgnore: true, IgnoreIndex: 0, LabelSmoothing: 0.2},
		in: [][]int{{2, 2, 3, 4}, {2, 2, 3}}, capN: 3, scale: 0.5,
		bwd: []bwdStep{{op: CrossEntropyGrad, args: []ref{dyOf(0), outOf(1), inOf(1)}}}},
	{name: "mse_loss", op: MSELoss, in: [][]int{{3, 2, 3}, {3, 2, 3}}, capN: 5, scale: 0.2,
		bwd: []bwdStep{{op: MSELossGrad, args: []ref{dyOf(0), inOf(0), inOf(1)}}}},
	{name: "mse_loss/2d", op: MSELoss, in: [][]int{{4, 3}, {4, 3}}, scale: 0.25,
		bwd: []bwdStep{{op: MSELossGrad, args: []ref{dyOf(0), inOf(0), inOf(1)}}}},

	// Batch norm: BatchNormStats computes BatchNormNorm's statistics, so
	// the finite differences see the whole training-mode layer.
	bnCase("batch_norm/2d", [][]int{{5, 3}, {3, 3}, {3}, {3}}, 7),
	bnCase("batch_norm/4d", [][]int{{3, 2, 3, 2}, {3, 2}, {2}, {2}}, 4),
	bnCase("batch_norm/4d-noaffine", [][]int{{2, 3, 2, 2}, {3, 3}, nil, nil}, 0),
	bnCase("batch_norm/3d-partial", [][]int{{2, 2, 5}, {3, 2}, {2}, {2}}, 5),
	// Fused with a residual and ReLU (the engine's fuse pass): ReLU's
	// gradient first, which is also the residual's.
	bnFusedCase("batch_norm/fused-residual-relu", [][]int{{3, 2, 3, 2}, {3, 2}, {2}, {2}, {3, 2, 3, 2}}, 4),
	bnFusedCase("batch_norm/fused-relu-noaffine", [][]int{{4, 3, 2}, {3, 3}, nil, nil}, 0),
	// BatchNormEval runs in evaluation only, where nothing is
	// differentiated: the case checks its writes, tail and allocations.
	{name: "batch_norm_eval", op: BatchNormEval, attrs: Attrs{Eps: 1e-5},
		in: [][]int{{3, 2, 2, 2}, {2}, {2}, {2}, {2}}, capN: 4, positive: []int{2}},
	{name: "batch_norm_eval/noaffine", op: BatchNormEval, attrs: Attrs{Eps: 1e-3},
		in: [][]int{{3, 4}, {4}, {4}, nil, nil}, positive: []int{2}},

	{name: "avgpool2d/k2", op: AvgPool2D, attrs: Attrs{Kernel: 2}, in: [][]int{{2, 3, 5, 6}}, capN: 3,
		bwd: []bwdStep{{op: AvgPool2DGrad, args: []ref{dyOf(0)}}}},
	{name: "avgpool2d/k3s2p1", op: AvgPool2D, attrs: Attrs{Kernel: 3, Stride: 2, Padding: 1}, in: [][]int{{2, 2, 7, 6}},
		bwd: []bwdStep{{op: AvgPool2DGrad, args: []ref{dyOf(0)}}}},
	{name: "avgpool2d/k2s1p1", op: AvgPool2D, attrs: Attrs{Kernel: 2, Stride: 1, Padding: 1}, in: [][]int{{1, 2, 3, 4}}, capN: 2,
		bwd: []bwdStep{{op: AvgPool2DGrad, args: []ref{dyOf(0)}}}},
	{name: "global_avgpool2d", op: GlobalAvgPool2D, in: [][]int{{3, 4, 3, 2}}, capN: 5,
		bwd: []bwdStep{{op: GlobalAvgPool2DGrad, args: []ref{dyOf(0)}}}},

	{name: "sigmoid", op: Sigmoid, in: [][]int{{3, 4, 2}}, capN: 4,
		bwd: []bwdStep{{op: SigmoidGrad, args: []ref{dyOf(0), outOf(0)}}}},
	{name: "silu", op: SiLU, in: [][]int{{3, 4, 2}}, capN: 4,
		bwd: []bwdStep{{op: SiLUGrad, args: []ref{dyOf(0), inOf(0)}}}},
	{name: "tanh", op: Tanh, in: [][]int{{3, 5}}, capN: 4,
		bwd: []bwdStep{{op: TanhGrad, args: []ref{dyOf(0), outOf(0)}}}},
	{name: "leaky_relu", op: LeakyReLU, attrs: Attrs{NegativeSlope: 0.01}, in: [][]int{{3, 4, 2}}, capN: 4, awayFromZero: true,
		bwd: []bwdStep{{op: LeakyReLUGrad, args: []ref{dyOf(0), inOf(0)}}}},
	{name: "leaky_relu/slope-0.3", op: LeakyReLU, attrs: Attrs{NegativeSlope: -0.3}, in: [][]int{{2, 5}}, awayFromZero: true,
		bwd: []bwdStep{{op: LeakyReLUGrad, args: []ref{dyOf(0), inOf(0)}}}},

	// The gradients of the elementwise binary ops, as the engine builds
	// them: Scale passes dy on (negated for Sub's b), Mul multiplies it by
	// the other operand.
	{name: "add", op: Add, in: [][]int{{3, 2, 2}, {3, 2, 2}}, capN: 4, bwd: []bwdStep{
		{op: Scale, args: []ref{dyOf(0)}, wrt: 0, attrs: &Attrs{Alpha: 1}},
		{op: Scale, args: []ref{dyOf(0)}, wrt: 1, attrs: &Attrs{Alpha: 1}}}},
	{name: "sub", op: Sub, in: [][]int{{3, 4}, {3, 4}}, capN: 4, bwd: []bwdStep{
		{op: Scale, args: []ref{dyOf(0)}, wrt: 0, attrs: &Attrs{Alpha: 1}},
		{op: Scale, args: []ref{dyOf(0)}, wrt: 1, attrs: &Attrs{Alpha: -1}}}},
	{name: "mul", op: Mul, in: [][]int{{3, 4}, {3, 4}}, capN: 5, bwd: []bwdStep{
		{op: Mul, args: []ref{dyOf(0), inOf(1)}, wrt: 0},
		{op: Mul, args: []ref{dyOf(0), inOf(0)}, wrt: 1}}},
	{name: "scale", op: Scale, attrs: Attrs{Alpha: -2.5}, in: [][]int{{3, 2, 2}}, capN: 4,
		bwd: []bwdStep{{op: Scale, args: []ref{dyOf(0)}}}},

	// Concat's gradients are Narrow at each input's offset.
	{name: "concat", op: Concat, in: [][]int{{3, 2, 3}, {3, 4, 3}}, capN: 5, bwd: []bwdStep{
		{op: Narrow, args: []ref{dyOf(0)}, wrt: 0, attrs: &Attrs{Offset: 0}},
		{op: Narrow, args: []ref{dyOf(0)}, wrt: 1, attrs: &Attrs{Offset: 2}}}},
	{name: "concat/2d", op: Concat, in: [][]int{{2, 3}, {2, 1}}, bwd: []bwdStep{
		{op: Narrow, args: []ref{dyOf(0)}, wrt: 0, attrs: &Attrs{Offset: 0}},
		{op: Narrow, args: []ref{dyOf(0)}, wrt: 1, attrs: &Attrs{Offset: 3}}}},

	// Narrow as a forward op (a split along dimension 1); its gradient is
	// NarrowGrad at the same offset.
	narrowCase("narrow", []int{3, 5, 2}, 1, 3, 5),
	narrowCase("narrow/2d-head", []int{2, 4}, 0, 1, 0),
	narrowCase("narrow/4d-tail", []int{2, 6, 2, 3}, 4, 2, 3),
	narrowCase("narrow/whole", []int{2, 3, 2}, 0, 3, 4),

	// Positions has no gradient (its output is integer): the case checks
	// its writes, tail and allocations. Its input holds token ids.
	{name: "positions", op: Positions, in: [][]int{{3, 5}}, capN: 5},
	{name: "positions/3d", op: Positions, in: [][]int{{2, 4, 3}}},

	// Embedding: fewer rows than ids, so that rows repeat.
	{name: "embedding", op: Embedding, in: [][]int{{3, 4}, {5, 3}}, capN: 5,
		bwd: []bwdStep{{op: EmbeddingGradWeight, args: []ref{dyOf(0), inOf(0)}, wrt: 1}}},
	{name: "embedding/1d", op: Embedding, in: [][]int{{4}, {3, 2}},
		bwd: []bwdStep{{op: EmbeddingGradWeight, args: []ref{dyOf(0), inOf(0)}, wrt: 1}}},

	lnCase("layer_norm/3d", [][]int{{3, 4, 5}, {5}, {5}}, 5),
	lnCase("layer_norm/2d-noaffine", [][]int{{4, 6}, nil, nil}, 0),
	lnCase("layer_norm/4d-gamma-only", [][]int{{2, 2, 3, 4}, {4}}, 3),

	{name: "gelu", op: GELU, in: [][]int{{3, 4, 2}}, capN: 4,
		bwd: []bwdStep{{op: GELUGrad, args: []ref{dyOf(0), inOf(0)}}}},
	{name: "gelu/tanh", op: GELU, attrs: Attrs{Approximate: true}, in: [][]int{{3, 5}}, capN: 5,
		bwd: []bwdStep{{op: GELUGrad, args: []ref{dyOf(0), inOf(0)}}}},

	bmmCase("batch_matmul", false, false, [][]int{{3, 2, 4}, {3, 4, 5}}, 4),
	bmmCase("batch_matmul/trans_b-4d", false, true, [][]int{{2, 3, 4, 2}, {2, 3, 5, 2}}, 3),
	bmmCase("batch_matmul/trans_a", true, false, [][]int{{2, 3, 2}, {2, 3, 4}}, 0),
	bmmCase("batch_matmul/trans_ab", true, true, [][]int{{2, 2, 4, 3}, {2, 2, 5, 4}}, 3),

	permCase("permute/heads", []int{2, 3, 4, 2}, 0, 2, 1, 3),
	permCase("permute/3d", []int{3, 2, 4}, 0, 2, 1),
	permCase("permute/5d", []int{2, 2, 3, 4, 2}, 0, 3, 1, 4, 2),
	permCase("permute/6d", []int{1, 2, 3, 2, 2, 3}, 0, 5, 4, 1, 3, 2),
}

// narrowCase is a Narrow gradient check: the slice [off, off+n) of
// dimension 1, and back by NarrowGrad.
func narrowCase(name string, in []int, off, n, capN int) gradCase {
	return gradCase{name: name, op: Narrow, attrs: Attrs{Offset: off, Length: n}, in: [][]int{in}, capN: capN,
		bwd: []bwdStep{{op: NarrowGrad, args: []ref{dyOf(0)}}}}
}

// permCase is a Permute gradient check: Permute by perm, and back by its
// inverse.
func permCase(name string, in []int, perm ...int8) gradCase {
	var p [MaxPermRank]int8
	copy(p[:], perm)
	return gradCase{name: name, op: Permute, attrs: Attrs{Perm: p}, in: [][]int{in}, capN: in[0] + 2,
		bwd: []bwdStep{{op: Permute, args: []ref{dyOf(0)}, attrs: &Attrs{Perm: InversePerm(p, len(in))}}}}
}

// bmmCase is a BatchMatMul gradient check, with the gradients of a and b
// as BatchMatMul's doc comment lists them.
func bmmCase(name string, ta, tb bool, in [][]int, capN int) gradCase {
	da := bwdStep{op: BatchMatMul, wrt: 0, attrs: &Attrs{}}
	db := bwdStep{op: BatchMatMul, wrt: 1, attrs: &Attrs{}}
	switch {
	case !ta && !tb:
		da.args, da.attrs.TransB = []ref{dyOf(0), inOf(1)}, true
		db.args, db.attrs.TransA = []ref{inOf(0), dyOf(0)}, true
	case !ta && tb:
		da.args = []ref{dyOf(0), inOf(1)}
		db.args, db.attrs.TransA = []ref{dyOf(0), inOf(0)}, true
	case ta && !tb:
		da.args, da.attrs.TransB = []ref{inOf(1), dyOf(0)}, true
		db.args = []ref{inOf(0), dyOf(0)}
	default:
		da.args, da.attrs.TransA, da.attrs.TransB = []ref{inOf(1), dyOf(0)}, true, true
		db.args, db.attrs.TransA, db.attrs.TransB = []ref{dyOf(0), inOf(0)}, true, true
	}
	return gradCase{name: name, op: BatchMatMul, attrs: Attrs{TransA: ta, TransB: tb}, in: in, capN: capN,
		bwd: []bwdStep{da, db}}
}

// lnCase is a layer norm gradient check: inputs x, gamma and beta (nil or
// left off when absent).
func lnCase(name string, in [][]int, capN int) gradCase {
	bwd := []bwdStep{{op: LayerNormGradInput, args: []ref{dyOf(0), inOf(0), outOf(1), inOf(1)}, wrt: 0}}
	if len(in) < 2 || in[1] == nil {
		bwd[0].args = bwd[0].args[:3]
	} else {
		bwd = append(bwd, bwdStep{op: LayerNormGradGamma, args: []ref{dyOf(0), inOf(0), outOf(1)}, wrt: 1})
	}
	if len(in) > 2 && in[2] != nil {
		bwd = append(bwd, bwdStep{op: LayerNormGradBeta, args: []ref{dyOf(0)}, wrt: 2})
	}
	return gradCase{name: name, op: LayerNorm, attrs: Attrs{Eps: 1e-5}, in: in, capN: capN, bwd: bwd}
}

// bnFusedCase is bnCase for BatchNormNorm with Attrs.ReLU and, when in
// has a fifth shape, a residual input: the backward steps are those
// batchNormGrad emits.
func bnFusedCase(name string, in [][]int, capN int) gradCase {
	ch := in[0][1]
	bwd := []bwdStep{
		{op: ReLUGrad, args: []ref{dyOf(0), outOf(0)}, tmp: in[0], batched: true},
		{op: BatchNormGradStats, args: []ref{tmpOf(0), inOf(0), outOf(1)}, tmp: []int{2, ch}},
		{op: BatchNormGradInput, args: []ref{tmpOf(0), inOf(0), outOf(1), tmpOf(1), inOf(2)}, wrt: 0},
	}
	if in[2] != nil {
		bwd = append(bwd,
			bwdStep{op: BatchNormGradGamma, args: []ref{tmpOf(1), outOf(1)}, wrt: 2},
			bwdStep{op: BatchNormGradBeta, args: []ref{tmpOf(1)}, wrt: 3})
	}
	if len(in) > 4 {
		bwd = append(bwd, bwdStep{op: Scale, args: []ref{tmpOf(0)}, wrt: 4, attrs: &Attrs{Alpha: 1}})
	}
	return gradCase{name: name, op: BatchNormNorm, attrs: Attrs{Eps: 1e-5, ReLU: true}, in: in, capN: capN,
		derive: []deriveStep{{op: BatchNormStats, args: []ref{inOf(0)}, in: 1}}, bwd: bwd}
}

// bnCase is a training-mode batch norm gradient check: inputs x, stats
// (derived from x), gamma and beta (nil for affine=False).
func bnCase(name string, in [][]int, capN int) gradCase {
	ch := in[0][1]
	gs := []int{2, ch}
	bwd := []bwdStep{
		{op: BatchNormGradStats, args: []ref{dyOf(0), inOf(0), outOf(1)}, tmp: gs},
		{op: BatchNormGradInput, args: []ref{dyOf(0), inOf(0), outOf(1), tmpOf(0), inOf(2)}, wrt: 0},
	}
	if in[2] != nil {
		bwd = append(bwd,
			bwdStep{op: BatchNormGradGamma, args: []ref{tmpOf(0), outOf(1)}, wrt: 2},
			bwdStep{op: BatchNormGradBeta, args: []ref{tmpOf(0)}, wrt: 3})
	}
	return gradCase{name: name, op: BatchNormNorm, attrs: Attrs{Eps: 1e-5}, in: in, capN: capN,
		derive: []deriveStep{{op: BatchNormStats, args: []ref{inOf(0)}, in: 1}}, bwd: bwd}
}

// convPoolCase is a Conv2DPool gradient check: the backward steps are
// those engine's rule emits (ReLUGrad with Attrs.ReLU, MaxPool2DGrad into
// the convolution's output gradient, then the convolution's three), with
// the input's gradient too.
func convPoolCase(name string, a Attrs, in [][]int, capN int) gradCase {
	x, w := in[0], in[1]
	conv := []int{x[0], w[0], x[2] + 2*a.Padding - w[2] + 1, x[3] + 2*a.Padding - w[3] + 1}
	pooled := []int{conv[0], conv[1], conv[2] / 2, conv[3] / 2}
	dy := dyOf(0)
	var bwd []bwdStep
	if a.ReLU {
		bwd = append(bwd, bwdStep{op: ReLUGrad, args: []ref{dy, outOf(0)}, tmp: pooled, batched: true})
		dy = tmpOf(0)
	}
	bwd = append(bwd, bwdStep{op: MaxPool2DGrad, args: []ref{dy, outOf(1)}, tmp: conv, batched: true, attrs: &Attrs{Kernel: 2, Stride: 2}})
	dc := tmpOf(len(bwd) - 1)
	bwd = append(bwd,
		bwdStep{op: Conv2DGradInput, args: []ref{dc, inOf(1)}, wrt: 0},
		bwdStep{op: Conv2DGradWeight, args: []ref{dc, inOf(0)}, wrt: 1})
	if in[2] != nil {
		bwd = append(bwd, bwdStep{op: Conv2DGradBias, args: []ref{dc}, wrt: 2})
	}
	return gradCase{name: name, op: Conv2DPool, attrs: a, in: in, capN: capN, bwd: bwd}
}

func convBwd(bias bool) []bwdStep {
	s := []bwdStep{
		{op: Conv2DGradInput, args: []ref{dyOf(0), inOf(1)}, wrt: 0},
		{op: Conv2DGradWeight, args: []ref{dyOf(0), inOf(0)}, wrt: 1},
	}
	if bias {
		s = append(s, bwdStep{op: Conv2DGradBias, args: []ref{dyOf(0)}, wrt: 2})
	}
	return s
}

func linearBwd(bias bool) []bwdStep {
	s := []bwdStep{
		{op: LinearGradInput, args: []ref{dyOf(0), inOf(1)}, wrt: 0},
		{op: LinearGradWeight, args: []ref{dyOf(0), inOf(0)}, wrt: 1},
	}
	if bias {
		s = append(s, bwdStep{op: LinearGradBias, args: []ref{dyOf(0)}, wrt: 2})
	}
	return s
}

// linearGELUCase is the gradCase of LinearGELU (tanh form): GELUGrad on
// the pre-activation into an intermediate, then Linear's gradients of it,
// as linearGELUGrad emits them.
func linearGELUCase(name string, in [][]int, capN int) gradCase {
	pre := []int{in[0][0], in[1][0]}
	if len(in[0]) > 2 {
		pre = append(clone(in[0][:len(in[0])-1]), in[1][0])
	}
	bwd := []bwdStep{
		{op: GELUGrad, args: []ref{dyOf(0), outOf(1)}, tmp: pre, batched: true},
		{op: LinearGradInput, args: []ref{tmpOf(0), inOf(1)}, wrt: 0},
		{op: LinearGradWeight, args: []ref{tmpOf(0), inOf(0)}, wrt: 1},
	}
	if in[2] != nil {
		bwd = append(bwd, bwdStep{op: LinearGradBias, args: []ref{tmpOf(0)}, wrt: 2})
	}
	return gradCase{name: name, op: LinearGELU, attrs: Attrs{Approximate: true}, in: in, capN: capN, bwd: bwd}
}

func isLoss(op Op) bool { return op == NLLLoss || op == CrossEntropy || op == MSELoss }

// idxIn reports whether forward input i of op holds indices.
func idxIn(op Op, i int) bool {
	return (op == NLLLoss || op == CrossEntropy) && i == 1 || (op == Embedding || op == Positions) && i == 0
}

// idxRange is the number of valid indices of the case's index input: the
// embedding's rows, or the classes (the input's last dimension).
func idxRange(gc *gradCase) int {
	if gc.op == Embedding {
		return gc.in[1][0]
	}
	return gc.in[0][len(gc.in[0])-1]
}

// idxOut reports whether forward output i of op holds indices.
func idxOut(op Op, i int) bool {
	return (op == MaxPool2D || op == Conv2DPool) && i == 1 || op == Positions
}

// batchedIn reports whether forward input i of op has the batch as its
// first dimension (weights, biases and per-channel statistics do not).
func batchedIn(op Op, i int) bool {
	switch op {
	case MSELoss, Add, Sub, Mul, Concat, BatchMatMul:
		return true
	}
	return i == 0 || idxIn(op, i) || op == BatchNormNorm && i == 4 || op == BatchNormEval && i == 5 // residuals
}

// batchedOut reports whether forward output i of op is batched (losses and
// per-channel statistics are not).
func batchedOut(op Op, i int) bool {
	switch {
	case isLoss(op) && i == 0, op == BatchNormStats, op == BatchNormNorm && i == 1:
		return false
	}
	return true
}

// accumulates reports whether backward op honours Attrs.Accumulate (a
// parameter gradient, or CrossEntropyFused's loss).
func accumulates(op Op) bool {
	switch op {
	case CrossEntropyFused, Conv2DGradWeight, Conv2DGradBias, Conv2DPoolGrad, LinearGradWeight, LinearGradBias, LinearGradWeightBias, BatchNormGradGamma, BatchNormGradBeta,
		EmbeddingGradWeight, LayerNormGradGamma, LayerNormGradBeta, Round:
		return true
	}
	return false
}

// A fixture holds the buffers of one gradCase in T.
type fixture[T Float] struct {
	gc      *gradCase
	k       map[Op]Kernel[T]
	c       *Ctx[T]
	in, out []*Buf[T]
	dy      *Buf[T]     // cotangent of output 0
	din     [][]*Buf[T] // per derive step
	bin     [][]*Buf[T] // per backward step
	bout    []*Buf[T]
	tmps    []*Buf[T] // the outputs of the backward steps with tmp set
	work    []T
}

// newBuf returns a buffer of live shape whose storage holds capN samples
// when batched. Everything starts as NaN (or -7 for indices) so that
// reads of unset elements and missed writes show.
func newBuf[T Float](shape []int, batched bool, capN int, idx bool) *Buf[T] {
	n := prod(shape)
	if batched && capN > shape[0] {
		n = capN * prod(shape[1:])
	}
	b := &Buf[T]{Shape: clone(shape)}
	if idx {
		b.Idx = make([]int32, n)
		for i := range b.Idx {
			b.Idx[i] = -7
		}
	} else {
		b.Data = make([]T, n)
		fillNaN(b.Data)
	}
	return b
}

func fillNaN[T Float](s []T) {
	for i := range s {
		s[i] = T(math.NaN())
	}
}

func capShape(shape []int, batched bool, capN int) []int {
	s := clone(shape)
	if batched && capN > s[0] {
		s[0] = capN
	}
	return s
}

func newFixture[T Float](t testing.TB, gc *gradCase, k map[Op]Kernel[T]) *fixture[T] {
	t.Helper()
	outShapes, err := Infer(gc.op, &gc.attrs, gc.in)
	if err != nil {
		t.Fatalf("%s: Infer: %v", gc.name, err)
	}
	r := rand.New(rand.NewPCG(7, uint64(len(gc.name))))
	f := &fixture[T]{gc: gc, k: k, c: &Ctx[T]{LossScale: 1, Step: 1}}
	if gc.scale != 0 {
		f.c.LossScale = gc.scale
	}
	capN := max(gc.capN, gc.in[0][0])
	var capIn, capOut [][]int
	for i, s := range gc.in {
		if s == nil {
			f.in = append(f.in, nil)
			capIn = append(capIn, nil)
			continue
		}
		b := newBuf[T](s, batchedIn(gc.op, i), capN, idxIn(gc.op, i))
		if b.Idx != nil {
			classes := idxRange(gc)
			for j := range b.Len() {
				b.Idx[j] = int32(r.IntN(classes))
			}
		} else {
			fillInput(r, b.Data[:b.Len()], i == 0 && gc.distinct, i == 0 && gc.awayFromZero)
			if slices.Contains(gc.positive, i) {
				for j, v := range b.Data[:b.Len()] {
					b.Data[j] = T(0.1 + 0.9*math.Abs(float64(v)))
				}
			}
		}
		f.in = append(f.in, b)
		capIn = append(capIn, capShape(s, batchedIn(gc.op, i), capN))
	}
	for i, s := range outShapes {
		f.out = append(f.out, newBuf[T](s, batchedOut(gc.op, i), capN, idxOut(gc.op, i)))
		capOut = append(capOut, capShape(s, batchedOut(gc.op, i), capN))
	}
	f.dy = newBuf[T](outShapes[0], batchedOut(gc.op, 0), capN, false)
	fillInput(r, f.dy.Data[:f.dy.Len()], false, false)
	ws := Workspace(gc.op, &gc.attrs, capIn, capOut)
	var capTmp [][]int
	resolve := func(refs []ref) (args []*Buf[T], argShapes [][]int) {
		for _, a := range refs {
			var b *Buf[T]
			var s []int
			switch a.kind {
			case 'd':
				b, s = f.dy, capOut[0]
			case 'i':
				b, s = f.in[a.i], capIn[a.i]
			case 'o':
				b, s = f.out[a.i], capOut[a.i]
			case 't':
				b, s = f.tmps[a.i], capTmp[a.i]
			}
			args = append(args, b)
			argShapes = append(argShapes, s)
		}
		return args, argShapes
	}
	for _, d := range gc.derive {
		args, argShapes := resolve(d.args)
		f.din = append(f.din, args)
		ws = max(ws, Workspace(d.op, &gc.attrs, argShapes, [][]int{capIn[d.in]}))
	}
	for _, st := range gc.bwd {
		args, argShapes := resolve(st.args)
		var o *Buf[T]
		var os []int
		if st.tmp != nil {
			o, os = newBuf[T](st.tmp, false, capN, false), st.tmp
			f.tmps = append(f.tmps, o)
			capTmp = append(capTmp, os)
		} else {
			o, os = newBuf[T](gc.in[st.wrt], batchedIn(gc.op, st.wrt), capN, false), capIn[st.wrt]
		}
		f.bin = append(f.bin, args)
		f.bout = append(f.bout, o)
		ws = max(ws, Workspace(st.op, st.attrsOr(&gc.attrs), argShapes, [][]int{os}))
	}
	f.work = make([]T, ws)
	f.c.Work = f.work
	return f
}

// fillInput fills s with values in (-1, 1); distinct ones spread at least
// 1e-3 apart, or ones at least 0.1 away from 0.
func fillInput[T Float](r *rand.Rand, s []T, distinct, awayFromZero bool) {
	if distinct {
		for i, p := range r.Perm(len(s)) {
			s[i] = T((float64(p) + 0.8*r.Float64()) / float64(len(s)))
		}
		return
	}
	for i := range s {
		v := 2*r.Float64() - 1
		if awayFromZero {
			v = math.Copysign(0.1+0.9*math.Abs(v), v)
		}
		s[i] = T(v)
	}
}

// forward runs the derive steps and the forward kernel, reseeding the RNG
// so that dropout draws the same mask every time.
func (f *fixture[T]) forward() {
	if Lookup(f.gc.op).Random {
		f.c.RNG = rand.New(rand.NewPCG(11, 13))
	}
	for i, d := range f.gc.derive {
		fillNaN(f.work)
		f.k[d.op](f.c, &f.gc.attrs, f.din[i], []*Buf[T]{f.in[d.in]})
	}
	fillNaN(f.work)
	f.k[f.gc.op](f.c, &f.gc.attrs, f.in, f.out)
}

// attrsOr returns the step's own attrs, or a when it has none.
func (st *bwdStep) attrsOr(a *Attrs) *Attrs {
	if st.attrs != nil {
		return st.attrs
	}
	return a
}

// backward runs backward step i with attrs a (the step's own, if it has
// them, with a's Accumulate).
func (f *fixture[T]) backward(i int, a *Attrs) {
	st := &f.gc.bwd[i]
	if st.attrs != nil {
		sa := *st.attrs
		sa.Accumulate = a.Accumulate
		a = &sa
	}
	fillNaN(f.work)
	f.k[st.op](f.c, a, f.bin[i], []*Buf[T]{f.bout[i]})
}

// objective is Σ dy ⊙ out[0] over the live elements.
func (f *fixture[T]) objective() float64 {
	var s float64
	for i, v := range f.out[0].Data[:f.out[0].Len()] {
		s += float64(v) * float64(f.dy.Data[i])
	}
	return s
}

// checkWritten fails unless b's live elements are all set (not NaN, or not
// -7 for indices) and its tail is untouched.
func checkWritten[T Float](t *testing.T, what string, b *Buf[T]) {
	t.Helper()
	n := b.Len()
	if b.Idx != nil {
		for i, v := range b.Idx {
			if (i < n) == (v == -7) {
				t.Errorf("%s: index element %d = %d (live elements %d)", what, i, v, n)
				return
			}
		}
		return
	}
	for i, v := range b.Data {
		if (i < n) == (v != v) {
			t.Errorf("%s: element %d = %v (live elements %d)", what, i, v, n)
			return
		}
	}
}
