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
// their output shapes from the engine (a gradient has its primal's shape).
const (
	Invalid Op = iota

	// Forward ops.

	// Conv2D: in x[N,C,H,W], w[O,C,KH,KW], optional b[O]; out y[N,O,OH,OW].
	// Attrs: Stride, Padding.
	Conv2D
	// Linear: in x[N,I], w[O,I], optional b[O]; out y[N,O] = x·wᵀ + b.
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
	// LogSoftmax: in x[N,C]; out y[N,C], over dimension 1.
	LogSoftmax
	// Softmax: in x[N,C]; out y[N,C], over dimension 1.
	Softmax
	// NLLLoss: in logp[N,C], target[N] (Idx); out loss[1] =
	// -Ctx.LossScale · Σᵢ logp[i, targetᵢ].
	NLLLoss
	// CrossEntropy: in logits[N,C], target[N] (Idx); out loss[1] =
	// -Ctx.LossScale · Σᵢ log_softmax(logits)[i, targetᵢ], and probs[N,C] =
	// softmax(logits), kept for the backward pass.
	CrossEntropy

	// NLLLoss and CrossEntropy honour Attrs.Accumulate: when set they add
	// the loss into their output instead of overwriting it.

	// Backward ops. Weight and bias gradients honour Attrs.Accumulate: when
	// set they add into their output instead of overwriting it.

	// Conv2DGradInput: in dy[N,O,OH,OW], w[O,C,KH,KW]; out dx[N,C,H,W].
	Conv2DGradInput
	// Conv2DGradWeight: in dy[N,O,OH,OW], x[N,C,H,W]; out dw[O,C,KH,KW].
	Conv2DGradWeight
	// Conv2DGradBias: in dy[N,O,OH,OW]; out db[O].
	Conv2DGradBias
	// LinearGradInput: in dy[N,O], w[O,I]; out dx[N,I] = dy·w.
	LinearGradInput
	// LinearGradWeight: in dy[N,O], x[N,I]; out dw[O,I] = dyᵀ·x.
	LinearGradWeight
	// LinearGradBias: in dy[N,O]; out db[O] = Σₙ dy.
	LinearGradBias
	// ReLUGrad: in dy, y; out dx = dy where y > 0, else 0.
	ReLUGrad
	// MaxPool2DGrad: in dy[N,C,OH,OW], index (Idx, from MaxPool2D); out
	// dx[N,C,H,W].
	MaxPool2DGrad
	// DropoutGrad: in dy, mask; out dx = dy·mask.
	DropoutGrad
	// Dropout2DGrad: in dy[N,C,H,W], mask[N,C]; out dx.
	Dropout2DGrad
	// LogSoftmaxGrad: in dy, y (the LogSoftmax output); out dx.
	LogSoftmaxGrad
	// SoftmaxGrad: in dy, y (the Softmax output); out dx.
	SoftmaxGrad
	// NLLLossGrad: in dloss[1], target[N] (Idx); out dx[N,C].
	NLLLossGrad
	// CrossEntropyGrad: in dloss[1], probs[N,C], target[N] (Idx); out dx[N,C].
	CrossEntropyGrad
	// Add: in a, b (same shape); out a + b. Sums gradients of a value used
	// twice.
	Add

	// Optimizer ops update their inputs in place and have no outputs.

	// SGDStep: in param, grad, momentum buffer (unused when Momentum is 0).
	// PyTorch's torch.optim.SGD rule. Attrs: LR, Momentum, Dampening,
	// WeightDecay, Nesterov. Ctx.Step is the 1-based optimizer step.
	SGDStep
	// AdamStep: in param, grad, m, v. PyTorch's torch.optim.Adam rule.
	// Attrs: LR, Beta1, Beta2, Eps, WeightDecay. Ctx.Step is the 1-based
	// optimizer step.
	AdamStep

	numOps
)

// NumOps is the number of ops, for tables indexed by Op.
const NumOps = int(numOps)

// Info describes an op's signature.
type Info struct {
	Name    string
	NumIn   int  // inputs, counting an optional bias
	NumOut  int  // outputs
	Forward bool // has a shape rule
	// OptionalLast is true when the last input may be absent (a bias).
	OptionalLast bool
	// Alias is true when output 0 shares input 0's storage (a view).
	Alias bool
	// InPlace is true when the op updates its inputs (optimizer steps).
	InPlace bool
	// Random is true when the op draws from Ctx.RNG in training.
	Random bool
}

var infos = [NumOps]Info{
	Conv2D:           {Name: "conv2d", NumIn: 3, NumOut: 1, Forward: true, OptionalLast: true},
	Linear:           {Name: "linear", NumIn: 3, NumOut: 1, Forward: true, OptionalLast: true},
	ReLU:             {Name: "relu", NumIn: 1, NumOut: 1, Forward: true},
	MaxPool2D:        {Name: "maxpool2d", NumIn: 1, NumOut: 2, Forward: true},
	Dropout:          {Name: "dropout", NumIn: 1, NumOut: 2, Forward: true, Random: true},
	Dropout2D:        {Name: "dropout2d", NumIn: 1, NumOut: 2, Forward: true, Random: true},
	Flatten:          {Name: "flatten", NumIn: 1, NumOut: 1, Forward: true, Alias: true},
	LogSoftmax:       {Name: "log_softmax", NumIn: 1, NumOut: 1, Forward: true},
	Softmax:          {Name: "softmax", NumIn: 1, NumOut: 1, Forward: true},
	NLLLoss:          {Name: "nll_loss", NumIn: 2, NumOut: 1, Forward: true},
	CrossEntropy:     {Name: "cross_entropy", NumIn: 2, NumOut: 2, Forward: true},
	Conv2DGradInput:  {Name: "conv2d_grad_input", NumIn: 2, NumOut: 1},
	Conv2DGradWeight: {Name: "conv2d_grad_weight", NumIn: 2, NumOut: 1},
	Conv2DGradBias:   {Name: "conv2d_grad_bias", NumIn: 1, NumOut: 1},
	LinearGradInput:  {Name: "linear_grad_input", NumIn: 2, NumOut: 1},
	LinearGradWeight: {Name: "linear_grad_weight", NumIn: 2, NumOut: 1},
	LinearGradBias:   {Name: "linear_grad_bias", NumIn: 1, NumOut: 1},
	ReLUGrad:         {Name: "relu_grad", NumIn: 2, NumOut: 1},
	MaxPool2DGrad:    {Name: "maxpool2d_grad", NumIn: 2, NumOut: 1},
	DropoutGrad:      {Name: "dropout_grad", NumIn: 2, NumOut: 1},
	Dropout2DGrad:    {Name: "dropout2d_grad", NumIn: 2, NumOut: 1},
	LogSoftmaxGrad:   {Name: "log_softmax_grad", NumIn: 2, NumOut: 1},
	SoftmaxGrad:      {Name: "softmax_grad", NumIn: 2, NumOut: 1},
	NLLLossGrad:      {Name: "nll_loss_grad", NumIn: 2, NumOut: 1},
	CrossEntropyGrad: {Name: "cross_entropy_grad", NumIn: 3, NumOut: 1},
	Add:              {Name: "add", NumIn: 2, NumOut: 1},
	SGDStep:          {Name: "sgd_step", NumIn: 3, NumOut: 0, InPlace: true},
	AdamStep:         {Name: "adam_step", NumIn: 4, NumOut: 0, InPlace: true},
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
	// MaxPool2D. A zero Stride is PyTorch's default: 1 for Conv2D, Kernel
	// for MaxPool2D.
	Stride, Padding int
	Kernel          int
	P               float64
	Accumulate      bool // weight and bias gradients and losses add into their output

	// Optimizer hyper-parameters.
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
}

// Kernel computes one op. in and out follow the op's doc comment; an absent
// optional input is nil. Kernels never allocate.
type Kernel[T Float] func(c *Ctx[T], a *Attrs, in, out []*Buf[T])
