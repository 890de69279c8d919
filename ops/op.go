// Package ops is gorun's op set: a typed enum of operations, each with a
// shape rule (for forward ops), a workspace rule, and CPU kernels for its
// forward and backward computations.
//
// ops belongs to the compile and run phases. Shape rules run at compile time
// and report problems as errors that say what was expected and what came;
// the engine adds the layer name and script position. Kernels run at step
// time, never fail and never allocate: every buffer they touch, including
// scratch space, is planned ahead of time by the engine. Kernels know nothing
// of ranks, devices or collectives.
//
// Kernels are generic over float32 (training) and float64 (finite-difference
// gradient checks); Kernels32 and Kernels64 hold the two instantiations.
package ops

import (
	"fmt"
	"math/rand/v2"
)

// Op identifies one operation.
type Op uint8

// The op set. Forward ops have a shape rule; backward and optimizer ops get
// their output shapes from the engine (a gradient has its primal's shape;
// BatchNormGradStats's output is [2,C]).
const (
	Invalid Op = iota

	// Forward ops.

	// Conv2D: in x[N,C,H,W], w[O,C/G,KH,KW], optional b[O]; out
	// y[N,O,OH,OW]. Attrs: Stride, Padding, Groups (G; 0 or 1 is an
	// ungrouped convolution; C and O must be multiples of G).
	Conv2D
	// Linear: in x[N,...,I] (rank at least 2), w[O,I], optional b[O]; out
	// y[N,...,O] = x·wᵀ + b over the last dimension (F.linear): every
	// dimension but the last is a row, N·prod(...) rows at the live batch.
	Linear
	// ReLU: in x; out y = max(x, 0).
	ReLU
	// MaxPool2D: in x[N,C,H,W]; out y[N,C,OH,OW] and the index (in Idx)
	// within each H×W plane of the element chosen. Attrs: Kernel, Stride.
	// No padding; floor division, as PyTorch's default.
	MaxPool2D
	// Dropout: in x; out y and mask (same shape as x, each 0 or 1/(1-P)).
	// Attrs: P. Draws from Ctx.RNG.
	Dropout
	// Dropout2D: in x[N,C,H,W]; out y and mask[N,C] (whole channels
	// dropped). Attrs: P. Draws from Ctx.RNG.
	Dropout2D
	// Flatten: in x[N,...]; out y[N,prod(...)]. Output aliases the input.
	Flatten
	// LogSoftmax: in x[N,...,C]; out y (x's shape), over the last
	// dimension.
	LogSoftmax
	// Softmax: in x[N,...,C]; out y (x's shape), over the last dimension.
	// With Attrs.Causal, x is scores[N,...,T,T] and row i of each T×T
	// matrix keeps columns j ≤ i: the others are 0 in y, as softmax of
	// scores masked with -inf would give (SoftmaxGrad needs no mask: the
	// masked probabilities are 0). Attrs: Causal.
	Softmax
	// NLLLoss: in logp[N,...,C], target[N,...] (Idx; logp's shape without
	// its last dimension); out loss[1] = -Ctx.LossScale · Σₚ logp[p,
	// targetₚ], summed over every position p, classes along the last
	// dimension. Attrs: IgnoreIndex, HasIgnore (below).
	NLLLoss
	// CrossEntropy: in logits[N,...,C], target[N,...] (Idx); out loss[1] =
	// Ctx.LossScale · Σₚ ((1-ε)·(-logpₚ[targetₚ]) + ε·mean_c(-logpₚ[c])),
	// logp = log_softmax(logits) over the last dimension, and probs (the
	// logits' shape) = softmax(logits), kept for the backward pass. Attrs:
	// LabelSmoothing (ε, 0 = none), IgnoreIndex, HasIgnore.
	//
	// With HasIgnore, positions whose target equals IgnoreIndex add 0 to
	// NLLLoss's and CrossEntropy's loss (both terms, with label smoothing)
	// and get 0 gradient; their target need not be a class. PyTorch's
	// reduction="mean" divides by the number of targets not ignored: the
	// engine is responsible for setting LossScale to 1/that count.
	CrossEntropy
	// MSELoss: in pred[N,...], target[N,...] (same shape, floats); out
	// loss[1] = Ctx.LossScale · Σₙ mean over sample n's elements of
	// (pred - target)². With LossScale 1/N it is PyTorch's mse_loss with
	// reduction="mean".
	MSELoss

	// NLLLoss, CrossEntropy and MSELoss honour Attrs.Accumulate: when set
	// they add the loss into their output instead of overwriting it.

	// BatchNormStats: in x[N,C,...]; out stats[3,C]: per channel, row 0 is
	// Σx, row 1 Σx², row 2 the count N·L (L = prod(...), 1 for [N,C]),
	// summed in float64. The engine may all-reduce (sum) stats across
	// devices before BatchNormNorm uses them (SyncBatchNorm).
	BatchNormStats
	// BatchNormNorm: in x[N,C,...], stats[3,C] (from BatchNormStats),
	// optional gamma[C], optional beta[C]; out y (x's shape) and save[3,C]
	// = (mean, biased variance, count) per channel, derived from stats in
	// float64 (variance Σx²/count - mean², clamped at 0; mean and variance
	// 0 when count is 0). y = (x-mean)/sqrt(var+Eps)·gamma + beta; an
	// absent gamma is 1, an absent beta 0 (affine=False). Attrs: Eps.
	//
	// Fused (the engine's rewrite of batch norm, then an add, then ReLU):
	// an optional fifth input res (x's shape) is added to y, and with
	// Attrs.ReLU the sum goes through ReLU's rule, each element rounded as
	// the separate ops round it. Attrs: ReLU.
	BatchNormNorm
	// BatchNormEval: in x[N,C,...], running_mean[C], running_var[C],
	// optional gamma[C], optional beta[C], optional res (x's shape); out
	// y = (x-running_mean) / sqrt(running_var+Eps)·gamma + beta, then + res
	// and ReLU as BatchNormNorm's. Attrs: Eps, ReLU.
	BatchNormEval
	// AvgPool2D: in x[N,C,H,W]; out y[N,C,OH,OW], the mean of each window
	// over Kernel×Kernel elements, padding included (PyTorch's
	// count_include_pad=True, floor mode). Attrs: Kernel, Stride (0 =
	// Kernel), Padding (at most Kernel/2).
	AvgPool2D
	// GlobalAvgPool2D: in x[N,C,H,W]; out y[N,C,1,1], the mean of each
	// H×W plane (adaptive_avg_pool2d(x, 1)).
	GlobalAvgPool2D
	// Sigmoid: in x; out y = 1/(1+exp(-x)).
	Sigmoid
	// Tanh: in x; out y = tanh(x).
	Tanh
	// LeakyReLU: in x; out y = x where x > 0, else NegativeSlope·x. Attrs:
	// NegativeSlope (used as given; PyTorch's default is 0.01).
	LeakyReLU
	// Add: in a, b (same shape); out a + b. Also sums the gradients of a
	// value used twice.
	Add
	// Sub: in a, b (same shape); out a - b.
	Sub
	// Mul: in a, b (same shape); out a·b, elementwise.
	Mul
	// Scale: in x; out Alpha·x. Attrs: Alpha.
	Scale
	// Concat: in a[N,A,...], b[N,B,...] (the same batch and trailing
	// dimensions); out [N,A+B,...], a then b along dimension 1, as
	// torch.cat((a, b), dim=1). Its gradients are Narrow of dy with
	// Offset 0 (for a) and Offset A (for b).
	Concat
	// Embedding: in ids[N,...] (Idx), weight[V,D]; out [N,...,D], row
	// ids[i] of weight for each id (F.embedding). Ids must lie in [0, V), a
	// precondition the engine checks on the data; the kernel clamps
	// nothing, but writes zeros for an id outside and never reads or
	// writes out of bounds.
	Embedding
	// LayerNorm: in x[N,...,D], optional gamma[D], optional beta[D]; out
	// y = (x-mean)·invstd·gamma + beta over the last dimension, invstd =
	// 1/sqrt(var+Eps) with the biased variance (F.layer_norm(x, (D,))),
	// and save[N,...,2] (x's shape with the last dimension 2; [N,2] for
	// x[N,D]): each row's mean and invstd, computed in float64. An absent
	// gamma is 1, an absent beta 0 (elementwise_affine=False). Attrs: Eps
	// (used as given; PyTorch's default is 1e-5).
	LayerNorm
	// GELU: in x; out y = x·Φ(x), Φ the standard normal CDF (erf, exact),
	// or with Approximate PyTorch's approximate="tanh" form
	// 0.5·x·(1+tanh(sqrt(2/π)·(x+0.044715·x³))). Attrs: Approximate.
	GELU
	// BatchMatMul: in a[B...,M,K] (or [B...,K,M] with TransA), b[B...,K,N]
	// (or [B...,N,K] with TransB); out c[B...,M,N] = op(a)·op(b) per
	// matrix. The leading dimensions B... (at least one: the batch comes
	// first) are equal in a and b, without broadcasting, and flattened into
	// one batch. Attrs: TransA, TransB. Its gradients are BatchMatMul with
	// other transposes, dc the gradient of c (in, then attrs):
	//
	//	TransA TransB  da                       db
	//	false  false   dc, b; TransB            a, dc; TransA
	//	false  true    dc, b                    dc, a; TransA
	//	true   false   b, dc; TransB            a, dc
	//	true   true    b, dc; TransA, TransB    dc, a; TransA, TransB
	BatchMatMul
	// Permute: in x of rank r ≤ 6; out y with dimension i of size
	// x.shape[Perm[i]] (x.permute(Perm[:r])), elements moved to match.
	// Perm[:r] must be a permutation of 0..r-1 that keeps the batch first
	// (Perm[0] = 0); Perm[r:] is ignored. Attrs: Perm. Its gradient is
	// Permute with InversePerm(Perm, r); [N,T,H,Dh] → [N,H,T,Dh] is Perm
	// {0, 2, 1, 3}, its own inverse.
	Permute
	// Narrow: in x[N,S,...]; out [N,L,...], the slice [Offset, Offset+L)
	// of dimension 1 (x.narrow(1, Offset, L)), rank at least 2. As a forward
	// op (splitting a tensor along dimension 1) its shape rule takes L from
	// Attrs.Length (at least 1, Offset+Length ≤ S); the kernel takes L from
	// the output's shape, so that Narrow also serves as Concat's gradient
	// with Offset alone. Its gradient is NarrowGrad with the same Offset.
	// Attrs: Offset, Length.
	Narrow
	// Positions: in x[N,T,...] (any element type: only its live shape is
	// read, never its data); out pos[N,T] (Idx), pos[n,t] = t: the
	// position ids a GPT's position embedding looks up
	// (torch.arange(T).expand(N, T)). No gradient: the output is integer.
	Positions
	// Conv2DPool: Conv2D, then MaxPool2D with a 2×2 window and stride 2,
	// then with Attrs.ReLU max(·, 0), in one pass that keeps the
	// convolution's output in the core's cache a few samples at a time
	// instead of writing it whole: in x[N,C,H,W], w[O,C/G,KH,KW], optional
	// b[O]; out y[N,O,OH/2,OW/2] and the index (Idx) as MaxPool2D's, within
	// each OH×OW plane of the convolution's output. Attrs: as Conv2D, and
	// ReLU. Each value is rounded as the three ops round it. The engine
	// fuses a convolution whose output only such a pooling reads where
	// ConvPoolFusable says so (the plan prints it "conv2d+maxpool2d", with
	// "+relu"); its gradient is the unfused ops' (ReLUGrad, MaxPool2DGrad,
	// the convolution's).
	Conv2DPool

	// Backward ops. Weight and bias gradients honour Attrs.Accumulate: when
	// set they add into their output instead of overwriting it.

	// Conv2DGradInput: in dy[N,O,OH,OW], w[O,C/G,KH,KW]; out dx[N,C,H,W].
	// Attrs: as Conv2D.
	Conv2DGradInput
	// Conv2DGradWeight: in dy[N,O,OH,OW], x[N,C,H,W]; out dw[O,C/G,KH,KW].
	// Attrs: as Conv2D.
	Conv2DGradWeight
	// Conv2DGradBias: in dy[N,O,OH,OW]; out db[O].
	Conv2DGradBias
	// LinearGradInput: in dy[N,...,O], w[O,I]; out dx[N,...,I] = dy·w.
	LinearGradInput
	// LinearGradWeight: in dy[N,...,O], x[N,...,I]; out dw[O,I] = dyᵀ·x,
	// summed over all rows (the leading dimensions, as Linear).
	LinearGradWeight
	// LinearGradBias: in dy[N,...,O]; out db[O] = Σ dy over all rows,
	// summed in float64.
	LinearGradBias
	// ReLUGrad: in dy, y, optional dy2; out dx = dy where y > 0, else 0;
	// with dy2 (the engine's fusion of the Add that sums a value's two
	// gradients) dy + dy2, rounded as Add rounds it, where y > 0.
	ReLUGrad
	// MaxPool2DGrad: in dy[N,C,OH,OW], index (Idx, from MaxPool2D); out
	// dx[N,C,H,W].
	MaxPool2DGrad
	// Conv2DPoolGrad: the weight and bias gradients of a Conv2DPool whose
	// input needs none (a first layer): in dy[N,O,OH/2,OW/2] (of the fused
	// output), idx (Idx, Conv2DPool's), y (its output, with Attrs.ReLU;
	// absent without), x[N,1,H,W]; out dw[O,1,KH,KW] and, with a bias,
	// db[O]. Bit for bit ReLUGrad, MaxPool2DGrad into the convolution's
	// output gradient, then Conv2DGradWeight and Conv2DGradBias, but that
	// gradient is built a chunk of samples at a time in the scratch instead
	// of whole (where ConvPoolGradFusable says so). Attrs: as Conv2D, ReLU.
	Conv2DPoolGrad
	// DropoutGrad: in dy, mask; out dx = dy·mask.
	DropoutGrad
	// Dropout2DGrad: in dy[N,C,H,W], mask[N,C]; out dx.
	Dropout2DGrad
	// LogSoftmaxGrad: in dy, y (the LogSoftmax output); out dx.
	LogSoftmaxGrad
	// SoftmaxGrad: in dy, y (the Softmax output); out dx.
	SoftmaxGrad
	// NLLLossGrad: in dloss[1], target[N,...] (Idx); out dx[N,...,C].
	// Attrs: IgnoreIndex, HasIgnore (as NLLLoss).
	NLLLossGrad
	// CrossEntropyGrad: in dloss[1], probs[N,...,C], target[N,...] (Idx);
	// out dx = LossScale·dloss·(probs - ((1-ε)·onehot(target) + ε/C)),
	// 0 at ignored positions. Attrs: LabelSmoothing (ε), IgnoreIndex,
	// HasIgnore.
	CrossEntropyGrad
	// MSELossGrad: in dloss[1], pred[N,...], target[N,...]; out dpred =
	// LossScale·dloss·2·(pred - target)/D, D the elements per sample.
	MSELossGrad
	// BatchNormGradStats: in dy[N,C,...], x[N,C,...], save[3,C] (from
	// BatchNormNorm); out gstats[2,C]: row 0 Σdy, row 1 Σdy·(x-mean), per
	// channel, summed in float64. Under SyncBatchNorm the engine may
	// all-reduce (sum) gstats before the ops below use it.
	BatchNormGradStats
	// BatchNormGradGamma: in gstats[2,C], save[3,C]; out dgamma[C] =
	// gstats[1]/sqrt(var+Eps). Attrs: Eps.
	BatchNormGradGamma
	// BatchNormGradBeta: in gstats[2,C]; out dbeta[C] = gstats[0].
	BatchNormGradBeta
	// BatchNormGradInput: in dy, x, save[3,C], gstats[2,C], optional
	// gamma[C]; out dx = gamma·invstd·(dy - gstats[0]/M -
	// (x-mean)·invstd²·gstats[1]/M), invstd = 1/sqrt(var+Eps), M = save's
	// count (an absent gamma is 1). Attrs: Eps.
	BatchNormGradInput
	// AvgPool2DGrad: in dy[N,C,OH,OW]; out dx[N,C,H,W]. Attrs: as
	// AvgPool2D.
	AvgPool2DGrad
	// GlobalAvgPool2DGrad: in dy[N,C,1,1]; out dx[N,C,H,W] = dy/(H·W).
	GlobalAvgPool2DGrad
	// SigmoidGrad: in dy, y (the Sigmoid output); out dx = dy·y·(1-y).
	SigmoidGrad
	// TanhGrad: in dy, y (the Tanh output); out dx = dy·(1-y²).
	TanhGrad
	// LeakyReLUGrad: in dy, x (the LeakyReLU input); out dx = dy where
	// x > 0, else NegativeSlope·dy. Attrs: NegativeSlope.
	LeakyReLUGrad
	// EmbeddingGradWeight: in dy[N,...,D], ids[N,...] (Idx); out dW[V,D]:
	// row v is the sum of the rows of dy whose id is v, added in input
	// order (deterministic); ids outside [0, V) add nothing.
	EmbeddingGradWeight
	// LayerNormGradInput: in dy, x, save (from LayerNorm), optional
	// gamma[D]; out dx = invstd·(g - mean(g) - x̂·mean(g·x̂)) per row, g =
	// dy·gamma, x̂ = (x-mean)·invstd (an absent gamma is 1).
	LayerNormGradInput
	// LayerNormGradGamma: in dy, x, save; out dgamma[D] = Σ over rows of
	// dy·x̂, summed in float64.
	LayerNormGradGamma
	// LayerNormGradBeta: in dy; out dbeta[D] = Σ over rows of dy, summed in
	// float64.
	LayerNormGradBeta
	// GELUGrad: in dy, x (the GELU input); out dx = dy·GELU'(x). Attrs:
	// Approximate.
	GELUGrad

	// NarrowGrad: in dy[N,L,...]; out dx[N,S,...] (S from the output's
	// shape; Offset+L ≤ S), zero but for the slice [Offset, Offset+L) of
	// dimension 1, which is dy: Narrow's gradient (torch.narrow's
	// backward). Attrs: Offset.
	NarrowGrad

	// The gradients of Add, Sub, Mul and Scale are Scale (dy, or -dy with
	// Alpha -1, or Alpha·dy) and Mul (dy·b, dy·a).

	// In-place updates of non-trainable state: no outputs.

	// BatchNormRunning: in save[3,C] (from BatchNormNorm), running_mean[C],
	// running_var[C], num_batches_tracked[1]; updates the last three in
	// place, as PyTorch's training-mode batch_norm with momentum m:
	//
	//	running_mean = (1-m)·running_mean + m·mean
	//	running_var  = (1-m)·running_var  + m·var·count/(count-1)
	//	num_batches_tracked += 1
	//
	// m is Attrs.BNMomentum, or 1/num_batches_tracked (after the
	// increment) when BNMomentum is negative (PyTorch's momentum=None, a
	// cumulative average). A count of 0 changes nothing; a count of 1
	// updates the mean and the counter but not the variance (PyTorch
	// refuses to train with one value per channel).
	BatchNormRunning

	// Optimizer ops update their inputs in place and have no outputs.

	// SGDStep: in param, grad, momentum buffer (unused when Momentum is 0).
	// PyTorch's torch.optim.SGD rule. Attrs: LR, Momentum, Dampening,
	// WeightDecay, Nesterov. Ctx.Step is the 1-based optimizer step.
	SGDStep
	// AdamStep: in param, grad, m, v. PyTorch's torch.optim.Adam rule.
	// Attrs: LR, Beta1, Beta2, Eps, WeightDecay. Ctx.Step is the 1-based
	// optimizer step.
	AdamStep
	// AdamWStep: in param, grad, m, v. PyTorch's torch.optim.AdamW rule
	// (amsgrad=False): param *= 1 - LR·WeightDecay (decoupled weight
	// decay), then Adam's update without weight decay in the gradient.
	// Attrs: LR, Beta1, Beta2, Eps, WeightDecay (PyTorch's default 1e-2,
	// used as given). Ctx.Step is the 1-based optimizer step.
	AdamWStep
	// ClipGradNorm: in grads (every gradient, one buffer); scales them in
	// place by min(1, MaxNorm/(‖grads‖₂ + 1e-6)), the norm summed in
	// float64 — torch.nn.utils.clip_grad_norm_ over all parameters.
	// Attrs: MaxNorm.
	ClipGradNorm

	numOps
)

// NumOps is the number of ops, for tables indexed by Op.
const NumOps = int(numOps)

// Info describes an op's signature.
type Info struct {
	Name    string
	NumIn   int  // inputs, counting optional ones
	NumOut  int  // outputs
	Forward bool // has a shape rule
	// OptionalLast is true when the last input may be absent (a bias).
	OptionalLast bool
	// Optional has bit i set when input i may be absent: nil, or left off
	// the end of the inputs together with every input after it. It
	// includes the last input when OptionalLast is set.
	Optional uint32
	// Alias is true when output 0 shares input 0's storage (a view).
	Alias bool
	// InPlace is true when the op updates its inputs (optimizer steps).
	InPlace bool
	// Random is true when the op draws from Ctx.RNG in training.
	Random bool
}

var infos = [NumOps]Info{
	Conv2D:          {Name: "conv2d", NumIn: 3, NumOut: 1, Forward: true, OptionalLast: true, Optional: 1 << 2},
	Linear:          {Name: "linear", NumIn: 3, NumOut: 1, Forward: true, OptionalLast: true, Optional: 1 << 2},
	ReLU:            {Name: "relu", NumIn: 1, NumOut: 1, Forward: true},
	MaxPool2D:       {Name: "maxpool2d", NumIn: 1, NumOut: 2, Forward: true},
	Dropout:         {Name: "dropout", NumIn: 1, NumOut: 2, Forward: true, Random: true},
	Dropout2D:       {Name: "dropout2d", NumIn: 1, NumOut: 2, Forward: true, Random: true},
	Flatten:         {Name: "flatten", NumIn: 1, NumOut: 1, Forward: true, Alias: true},
	LogSoftmax:      {Name: "log_softmax", NumIn: 1, NumOut: 1, Forward: true},
	Softmax:         {Name: "softmax", NumIn: 1, NumOut: 1, Forward: true},
	NLLLoss:         {Name: "nll_loss", NumIn: 2, NumOut: 1, Forward: true},
	CrossEntropy:    {Name: "cross_entropy", NumIn: 2, NumOut: 2, Forward: true},
	MSELoss:         {Name: "mse_loss", NumIn: 2, NumOut: 1, Forward: true},
	BatchNormStats:  {Name: "batch_norm_stats", NumIn: 1, NumOut: 1, Forward: true},
	BatchNormNorm:   {Name: "batch_norm_norm", NumIn: 5, NumOut: 2, Forward: true, OptionalLast: true, Optional: 1<<2 | 1<<3 | 1<<4},
	BatchNormEval:   {Name: "batch_norm_eval", NumIn: 6, NumOut: 1, Forward: true, OptionalLast: true, Optional: 1<<3 | 1<<4 | 1<<5},
	AvgPool2D:       {Name: "avgpool2d", NumIn: 1, NumOut: 1, Forward: true},
	GlobalAvgPool2D: {Name: "global_avgpool2d", NumIn: 1, NumOut: 1, Forward: true},
	Sigmoid:         {Name: "sigmoid", NumIn: 1, NumOut: 1, Forward: true},
	Tanh:            {Name: "tanh", NumIn: 1, NumOut: 1, Forward: true},
	LeakyReLU:       {Name: "leaky_relu", NumIn: 1, NumOut: 1, Forward: true},
	Add:             {Name: "add", NumIn: 2, NumOut: 1, Forward: true},
	Sub:             {Name: "sub", NumIn: 2, NumOut: 1, Forward: true},
	Mul:             {Name: "mul", NumIn: 2, NumOut: 1, Forward: true},
	Scale:           {Name: "scale", NumIn: 1, NumOut: 1, Forward: true},
	Concat:          {Name: "concat", NumIn: 2, NumOut: 1, Forward: true},
	Embedding:       {Name: "embedding", NumIn: 2, NumOut: 1, Forward: true},
	LayerNorm:       {Name: "layer_norm", NumIn: 3, NumOut: 2, Forward: true, OptionalLast: true, Optional: 1<<1 | 1<<2},
	GELU:            {Name: "gelu", NumIn: 1, NumOut: 1, Forward: true},
	BatchMatMul:     {Name: "batch_matmul", NumIn: 2, NumOut: 1, Forward: true},
	Permute:         {Name: "permute", NumIn: 1, NumOut: 1, Forward: true},
	Narrow:          {Name: "narrow", NumIn: 1, NumOut: 1, Forward: true},
	Positions:       {Name: "positions", NumIn: 1, NumOut: 1, Forward: true},
	Conv2DPool:      {Name: "conv2d+maxpool2d", NumIn: 3, NumOut: 2, Forward: true, OptionalLast: true, Optional: 1 << 2},

	Conv2DGradInput:     {Name: "conv2d_grad_input", NumIn: 2, NumOut: 1},
	Conv2DGradWeight:    {Name: "conv2d_grad_weight", NumIn: 2, NumOut: 1},
	Conv2DGradBias:      {Name: "conv2d_grad_bias", NumIn: 1, NumOut: 1},
	LinearGradInput:     {Name: "linear_grad_input", NumIn: 2, NumOut: 1},
	LinearGradWeight:    {Name: "linear_grad_weight", NumIn: 2, NumOut: 1},
	LinearGradBias:      {Name: "linear_grad_bias", NumIn: 1, NumOut: 1},
	ReLUGrad:            {Name: "relu_grad", NumIn: 3, NumOut: 1, OptionalLast: true, Optional: 1 << 2},
	MaxPool2DGrad:       {Name: "maxpool2d_grad", NumIn: 2, NumOut: 1},
	Conv2DPoolGrad:      {Name: "conv2d+maxpool2d_grad", NumIn: 4, NumOut: 2, Optional: 1 << 2},
	DropoutGrad:         {Name: "dropout_grad", NumIn: 2, NumOut: 1},
	Dropout2DGrad:       {Name: "dropout2d_grad", NumIn: 2, NumOut: 1},
	LogSoftmaxGrad:      {Name: "log_softmax_grad", NumIn: 2, NumOut: 1},
	SoftmaxGrad:         {Name: "softmax_grad", NumIn: 2, NumOut: 1},
	NLLLossGrad:         {Name: "nll_loss_grad", NumIn: 2, NumOut: 1},
	CrossEntropyGrad:    {Name: "cross_entropy_grad", NumIn: 3, NumOut: 1},
	MSELossGrad:         {Name: "mse_loss_grad", NumIn: 3, NumOut: 1},
	BatchNormGradStats:  {Name: "batch_norm_grad_stats", NumIn: 3, NumOut: 1},
	BatchNormGradGamma:  {Name: "batch_norm_grad_gamma", NumIn: 2, NumOut: 1},
	BatchNormGradBeta:   {Name: "batch_norm_grad_beta", NumIn: 1, NumOut: 1},
	BatchNormGradInput:  {Name: "batch_norm_grad_input", NumIn: 5, NumOut: 1, OptionalLast: true, Optional: 1 << 4},
	AvgPool2DGrad:       {Name: "avgpool2d_grad", NumIn: 1, NumOut: 1},
	GlobalAvgPool2DGrad: {Name: "global_avgpool2d_grad", NumIn: 1, NumOut: 1},
	SigmoidGrad:         {Name: "sigmoid_grad", NumIn: 2, NumOut: 1},
	TanhGrad:            {Name: "tanh_grad", NumIn: 2, NumOut: 1},
	LeakyReLUGrad:       {Name: "leaky_relu_grad", NumIn: 2, NumOut: 1},
	EmbeddingGradWeight: {Name: "embedding_grad_weight", NumIn: 2, NumOut: 1},
	LayerNormGradInput:  {Name: "layer_norm_grad_input", NumIn: 4, NumOut: 1, OptionalLast: true, Optional: 1 << 3},
	LayerNormGradGamma:  {Name: "layer_norm_grad_gamma", NumIn: 3, NumOut: 1},
	LayerNormGradBeta:   {Name: "layer_norm_grad_beta", NumIn: 1, NumOut: 1},
	GELUGrad:            {Name: "gelu_grad", NumIn: 2, NumOut: 1},
	NarrowGrad:          {Name: "narrow_grad", NumIn: 1, NumOut: 1},

	BatchNormRunning: {Name: "batch_norm_running", NumIn: 4, NumOut: 0, InPlace: true},

	SGDStep:   {Name: "sgd_step", NumIn: 3, NumOut: 0, InPlace: true},
	AdamStep:  {Name: "adam_step", NumIn: 4, NumOut: 0, InPlace: true},
	AdamWStep: {Name: "adamw_step", NumIn: 4, NumOut: 0, InPlace: true},

	ClipGradNorm: {Name: "clip_grad_norm", NumIn: 1, NumOut: 0, InPlace: true},
}

// MayOmit reports whether input i may be absent.
func (i Info) MayOmit(in int) bool {
	return in >= 0 && in < i.NumIn && (i.Optional>>uint(in)&1 != 0 || i.OptionalLast && in == i.NumIn-1)
}

// MinIn is the fewest inputs the op may be given: its inputs up to the
// last one that may not be absent.
func (i Info) MinIn() int {
	n := i.NumIn
	for n > 0 && i.MayOmit(n-1) {
		n--
	}
	return n
}

// Info returns op's signature.
func (op Op) Info() Info {
	if int(op) >= NumOps {
		return Info{}
	}
	return infos[op]
}

// String returns the op's name.
func (op Op) String() string {
	if op == Invalid || int(op) >= NumOps {
		return fmt.Sprintf("op(%d)", uint8(op))
	}
	return infos[op].Name
}

// Attrs holds the static attributes of one op instance. Each op reads only
// the fields its doc comment names.
type Attrs struct {
	// Stride, Padding: Conv2D and its gradients. Kernel and Stride:
	// MaxPool2D. Kernel, Stride and Padding: AvgPool2D. A zero Stride is
	// PyTorch's default: 1 for Conv2D, Kernel for the pools.
	Stride, Padding int
	Kernel          int
	// Groups: Conv2D and its gradients; 0 and 1 both mean ungrouped.
	Groups     int
	P          float64
	Accumulate bool // weight and bias gradients and losses add into their output

	// LabelSmoothing: CrossEntropy and CrossEntropyGrad, in [0, 1].
	LabelSmoothing float64
	// IgnoreIndex: with HasIgnore set, the target value that NLLLoss,
	// CrossEntropy and their gradients skip (PyTorch's ignore_index; its
	// default is -100). Without HasIgnore no target is skipped.
	IgnoreIndex int
	HasIgnore   bool
	// NegativeSlope: LeakyReLU and LeakyReLUGrad, used as given (the
	// script layer supplies PyTorch's default, 0.01).
	NegativeSlope float64
	// Alpha: Scale's factor.
	Alpha float64
	// Offset: Narrow's and NarrowGrad's first index along dimension 1.
	// Length: Narrow's length along dimension 1, read by its shape rule
	// only (the kernels take it from the buffers' shapes; Concat's
	// gradient leaves it 0).
	Offset, Length int
	// Approximate: GELU and GELUGrad use the tanh form (PyTorch's
	// approximate="tanh") instead of the exact erf one.
	Approximate bool
	// Causal: Softmax masks the columns after each row's index.
	Causal bool
	// TransA, TransB: BatchMatMul multiplies by the transpose of a, of b.
	TransA, TransB bool
	// Perm: Permute's order of dimensions; entries past the input's rank
	// are ignored.
	Perm [MaxPermRank]int8
	// BNMomentum: BatchNormRunning's momentum, PyTorch's meaning (the
	// weight of the new batch; PyTorch's default is 0.1), used as given; a
	// negative value means a cumulative average (momentum=None). Eps
	// (below) is also the batch-norm ops' epsilon (PyTorch's default 1e-5),
	// used as given. LayerNorm uses Eps too.
	BNMomentum float64
	// MaxNorm: ClipGradNorm's largest gradient norm.
	MaxNorm float64
	// ReLU: BatchNormNorm and BatchNormEval end with ReLU's max(·, 0)
	// (after the residual input, when there is one).
	ReLU bool

	// Optimizer hyper-parameters. Eps is also the batch-norm and
	// layer-norm ops'.
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	Beta1, Beta2, Eps                    float64
}

// Float is the element type kernels compute in.
type Float interface{ ~float32 | ~float64 }

// Buf is what a kernel reads and writes: a buffer's backing memory and its
// live shape. Shape[0] of a batched buffer is the batch size of the current
// step, which may be smaller than the planned maximum; Data is sized for the
// maximum and a kernel only touches the first prod(Shape) elements. Integer
// buffers (targets, pooling indices) use Idx instead of Data.
type Buf[T Float] struct {
	Data  []T
	Idx   []int32
	Shape []int
}

// Len is the number of live elements: the product of Shape.
func (b *Buf[T]) Len() int {
	n := 1
	for _, d := range b.Shape {
		n *= d
	}
	return n
}

// Ctx is the per-device state kernels may use.
type Ctx[T Float] struct {
	// RNG feeds dropout masks; one per device, seeded by the engine. When
	// nil (evaluation), Dropout and Dropout2D are the identity, with masks
	// of 1.
	RNG *rand.Rand
	// LossScale multiplies the summed per-sample losses: 1/global batch.
	LossScale float64
	// Step is the 1-based optimizer step, for momentum and Adam's bias
	// correction.
	Step int
	// Work is scratch space, at least as long as the largest Workspace of
	// the program's steps. Its contents do not survive between kernels.
	Work []T
	// shapes holds the shapes of the buffers a fused kernel makes over
	// parts of its own (Conv2DPool's chunks), so that they need no
	// allocation.
	shapes [3][4]int
}

// Kernel computes one op. in and out follow the op's doc comment; an absent
// optional input is nil. Kernels never allocate.
type Kernel[T Float] func(c *Ctx[T], a *Attrs, in, out []*Buf[T])
