package ops

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Op names one operation: its value is the name plans print ("conv2d",
// "relu_grad", "conv2d+maxpool2d"). Each op's constant is declared, with
// its doc comment, in its family's file next to its Def.
type Op string

// Invalid is the zero Op: no operation.
const Invalid Op = ""

// String returns the op's name ("invalid" for Invalid).
func (op Op) String() string {
	if op == Invalid {
		return "invalid"
	}
	return string(op)
}

// Def is everything gorun knows about one op: its signature, its flags,
// its shape, workspace and gradient rules, and its CPU kernels. Defs are
// declared in their family's file and never modified; Lookup finds them.
type Def struct {
	// Op is the op defined.
	Op Op
	// In lists the inputs in the order kernels take them; Out the
	// outputs. In-place ops (InPlace) have no outputs.
	In  []Input
	Out []Output

	// Alias: output 0 shares input 0's storage, a view with another shape
	// (Flatten); the kernel then has nothing to do.
	Alias bool
	// InPlace: the op updates its inputs and has no outputs (optimizer
	// steps, batch norm's running statistics).
	InPlace bool
	// Random: the op draws from Ctx.RNG in training.
	Random bool
	// ReuseInput: output 0 may be given input 0's buffer, and the kernel
	// then computes the same bits (elementwise and row-wise ops). Every
	// other kernel needs outputs distinct from its inputs.
	ReuseInput bool
	// Accumulates: the kernel honours Attrs.Accumulate, adding into its
	// output instead of overwriting it (parameter gradients, losses).
	Accumulates bool
	// EvalCopy: in evaluation the op is the identity: the engine copies
	// input 0 to output 0 instead of running the kernel, and its other
	// outputs are not computed (dropout).
	EvalCopy bool
	// EvalOnly: the op stands in for another in evaluation
	// (BatchNormEval for BatchNormNorm) and is never differentiated.
	EvalOnly bool
	// Autocast is what mixed precision (train(precision = "bf16")) does
	// with the op: take low-precision operands (matrix products), run in
	// float32 (losses), or follow its inputs (the default). See Autocast.
	Autocast Autocast

	// Shape is a forward op's shape rule: the output shapes for input
	// shapes in (one per input, nil for an absent one), called by Infer
	// once the shapes fit In; a is never nil. Backward and in-place ops
	// have none: the engine chooses their outputs (a gradient has its
	// primal's shape).
	Shape func(a *Attrs, in [][]int) ([][]int, error)
	// Workspace is how many elements of Ctx.Work the kernel needs for
	// input and output shapes at the planned maximum batch; nil when it
	// needs none. A kernel run on a smaller live batch needs no more.
	Workspace func(a *Attrs, in, out [][]int) int
	// Grad is a forward op's gradient rule; nil when nothing
	// differentiates through the op.
	Grad GradRule
	// StepName, when set, names a step of the op as plans print it, from
	// its attributes and which of its inputs it was given (given(i)): the
	// ops the engine fuses others into say what they took in
	// ("batch_norm_norm+add+relu", "add+relu_grad"). Without it a step
	// prints the op's name.
	StepName func(a *Attrs, given func(in int) bool) string

	// Kernel32 and Kernel64 are the CPU kernels: float32 for training,
	// float64 for finite-difference gradient checks.
	Kernel32 Kernel[float32]
	Kernel64 Kernel[float64]
}

// Input describes one input of an op.
type Input struct {
	// Name names the input in error messages ("input", "weight", "bias").
	Name string
	// Optional: the input may be absent: nil, or left off the end of the
	// inputs together with every input after it.
	Optional bool
	// Int: the input holds indices (Buf.Idx), not floats.
	Int bool
}

// Output describes one output of an op, and what the engine makes of the
// value it becomes.
type Output struct {
	// Name names the output (as the op's doc comment does).
	Name string
	// Int: the output holds indices (Buf.Idx); no gradient flows through
	// it.
	Int bool
	// NoGrad: no gradient flows through the output (a mask, saved
	// statistics); a gradient rule reads it, nothing differentiates it.
	NoGrad bool
	// Unbatched: the output has no batch dimension even when input 0 has
	// one (a loss, per-channel statistics).
	Unbatched bool
	// Optional: the output may be left off the end of the outputs
	// (Conv2DPoolGrad's bias gradient, for a convolution without bias).
	Optional bool
}

// Forward reports whether the op has a shape rule: a forward op, which a
// model or a gradient rule applies to values whose shapes it infers.
func (d *Def) Forward() bool { return d.Shape != nil }

// MinIn is the fewest inputs the op may be given: its inputs up to the
// last one that may not be absent.
func (d *Def) MinIn() int {
	n := len(d.In)
	for n > 0 && d.In[n-1].Optional {
		n--
	}
	return n
}

// mayOmit reports whether input i may be absent.
func (d *Def) mayOmit(i int) bool { return i >= 0 && i < len(d.In) && d.In[i].Optional }

// registry holds every op's definition, from the families' tables. It is
// filled once, when the package is initialised, and never changed.
var registry = index(
	activationOps, arithmeticOps, convOps, linearOps, poolOps, dropoutOps, softmaxOps, lossOps,
	batchNormOps, layerNormOps, embeddingOps, tensorOps, optimizerOps, attentionOps,
	precisionOps, classifierOps, linearGELUOps, linearBGradOps,
)

// all is every defined op, sorted.
var all = sortedOps(registry)

func index(families ...[]*Def) map[Op]*Def {
	m := map[Op]*Def{}
	for _, f := range families {
		for _, d := range f {
			if d.Op == Invalid || m[d.Op] != nil {
				panic(fmt.Sprintf("ops: op %q defined twice, or unnamed", string(d.Op)))
			}
			m[d.Op] = d
		}
	}
	return m
}

func sortedOps(m map[Op]*Def) []Op {
	ops := make([]Op, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

// Lookup returns op's definition, or nil when op is not defined. The Def
// must not be modified.
func Lookup(op Op) *Def { return registry[op] }

// All returns every defined op, sorted by name.
func All() []Op { return slices.Clone(all) }

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
	// Precision: Round's format.
	Precision Precision

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
// optional input is nil. Kernels never allocate. Every kernel writes all
// live elements of its outputs (a kernel that Accumulates, given
// Attrs.Accumulate, adds into them instead), so outputs need no clearing
// beforehand.
type Kernel[T Float] func(c *Ctx[T], a *Attrs, in, out []*Buf[T])
