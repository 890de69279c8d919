package cuda

import (
	"fmt"
	"math"
)

// kernelID names one gorun_* kernel of cuda/kernels (kernels.h), in the
// order of kernels.Names.
type kernelID int

// The kernels, in kernels.h's order.
const (
	kRelu kernelID = iota
	kReluGrad
	kUnary
	kBinary
	kCopy
	kFill
	kScale
	kAccumulate
	kAxpy
	kDropout
	kDropout2D
	kDropoutGrad
	kDropout2DGrad
	kIm2col
	kCol2im
	kONLToNOL
	kNOLToONL
	kBiasAdd
	kBiasGrad
	kBiasPartial
	kBiasFinish
	kBNPartial
	kBNFinish
	kBNParams
	kBNApply
	kBNGradInput
	kBNGradGamma
	kBNRunning
	kLayerNorm
	kLayerNormGradInput
	kMaxPool
	kMaxPoolGrad
	kAvgPool
	kAvgPoolGrad
	kGlobalAvgPool
	kGlobalAvgPoolGrad
	kLogSoftmax
	kSoftmax
	kLogSoftmaxGrad
	kSoftmaxGrad
	kNLLLoss
	kNLLLossGrad
	kCrossEntropy
	kCrossEntropyGrad
	kMSELoss
	kMSELossGrad
	kSGDStep
	kAdamStep
	kClipGradNorm
	kGatherRows
	kGatherRowsInt
	kCopySlice
	kPermute
	kPositions
	kEmbedding
	kEmbeddingGrad
	kCountCorrect
	kSum
	numKernels
)

// argKind is a kernel parameter's C type.
type argKind uint8

// The parameter types kernels.h allows.
const (
	argPtr   argKind = iota // float*, const float*, int*, const int*, double*, const double*
	argInt                  // int
	argFloat                // float
	argU64                  // unsigned long long
)

func (k argKind) String() string {
	return [...]string{"pointer", "int", "float", "unsigned long long"}[k]
}

// kernelSig is a kernel's name and parameter types.
type kernelSig struct {
	name string
	args []argKind
}

const (
	aP = argPtr
	aI = argInt
	aF = argFloat
	aU = argU64
)

// kernelSigs mirrors kernels.h; a test checks it against the header.
var kernelSigs = [numKernels]kernelSig{
	kRelu:               {"gorun_relu", []argKind{aP, aP, aI}},
	kReluGrad:           {"gorun_relu_grad", []argKind{aP, aP, aP, aP, aI}},
	kUnary:              {"gorun_unary", []argKind{aP, aP, aI, aI, aF}},
	kBinary:             {"gorun_binary", []argKind{aP, aP, aP, aI, aI, aF}},
	kCopy:               {"gorun_copy", []argKind{aP, aP, aI}},
	kFill:               {"gorun_fill", []argKind{aP, aI, aF}},
	kScale:              {"gorun_scale", []argKind{aP, aI, aF}},
	kAccumulate:         {"gorun_accumulate", []argKind{aP, aP, aI}},
	kAxpy:               {"gorun_axpy", []argKind{aP, aP, aI, aF}},
	kDropout:            {"gorun_dropout", []argKind{aP, aP, aP, aI, aF, aU, aU}},
	kDropout2D:          {"gorun_dropout2d", []argKind{aP, aP, aP, aI, aI, aF, aU, aU}},
	kDropoutGrad:        {"gorun_dropout_grad", []argKind{aP, aP, aP, aI}},
	kDropout2DGrad:      {"gorun_dropout2d_grad", []argKind{aP, aP, aP, aI, aI}},
	kIm2col:             {"gorun_im2col", []argKind{aP, aP, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI}},
	kCol2im:             {"gorun_col2im", []argKind{aP, aP, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI}},
	kONLToNOL:           {"gorun_onl_to_nol", []argKind{aP, aP, aI, aI, aI}},
	kNOLToONL:           {"gorun_nol_to_onl", []argKind{aP, aP, aI, aI, aI}},
	kBiasAdd:            {"gorun_bias_add", []argKind{aP, aP, aI, aI, aI}},
	kBiasGrad:           {"gorun_bias_grad", []argKind{aP, aP, aI, aI, aI, aI}},
	kBiasPartial:        {"gorun_bias_partial", []argKind{aP, aP, aI, aI, aI, aI, aI}},
	kBiasFinish:         {"gorun_bias_finish", []argKind{aP, aP, aI, aI, aI}},
	kBNPartial:          {"gorun_bn_partial", []argKind{aP, aP, aP, aP, aI, aI, aI, aI, aI, aI}},
	kBNFinish:           {"gorun_bn_finish", []argKind{aP, aP, aI, aI, aI}},
	kBNParams:           {"gorun_bn_params", []argKind{aP, aP, aP, aP, aP, aP, aI, aF, aI}},
	kBNApply:            {"gorun_bn_apply", []argKind{aP, aP, aP, aP, aI, aI, aI, aI}},
	kBNGradInput:        {"gorun_bn_grad_input", []argKind{aP, aP, aP, aP, aI, aI, aI}},
	kBNGradGamma:        {"gorun_bn_grad_gamma", []argKind{aP, aP, aP, aI, aF, aI}},
	kBNRunning:          {"gorun_bn_running", []argKind{aP, aP, aP, aP, aI, aF}},
	kLayerNorm:          {"gorun_layer_norm", []argKind{aP, aP, aP, aP, aP, aI, aI, aF}},
	kLayerNormGradInput: {"gorun_layer_norm_grad_input", []argKind{aP, aP, aP, aP, aP, aI, aI}},
	kMaxPool:            {"gorun_maxpool2d", []argKind{aP, aP, aP, aI, aI, aI, aI, aI, aI, aI}},
	kMaxPoolGrad:        {"gorun_maxpool2d_grad", []argKind{aP, aP, aP, aI, aI, aI, aI, aI, aI, aI}},
	kAvgPool:            {"gorun_avgpool2d", []argKind{aP, aP, aI, aI, aI, aI, aI, aI, aI, aI}},
	kAvgPoolGrad:        {"gorun_avgpool2d_grad", []argKind{aP, aP, aI, aI, aI, aI, aI, aI, aI, aI}},
	kGlobalAvgPool:      {"gorun_global_avgpool2d", []argKind{aP, aP, aI, aI}},
	kGlobalAvgPoolGrad:  {"gorun_global_avgpool2d_grad", []argKind{aP, aP, aI, aI}},
	kLogSoftmax:         {"gorun_log_softmax", []argKind{aP, aP, aI, aI}},
	kSoftmax:            {"gorun_softmax", []argKind{aP, aP, aI, aI, aI}},
	kLogSoftmaxGrad:     {"gorun_log_softmax_grad", []argKind{aP, aP, aP, aI, aI}},
	kSoftmaxGrad:        {"gorun_softmax_grad", []argKind{aP, aP, aP, aI, aI}},
	kNLLLoss:            {"gorun_nll_loss", []argKind{aP, aP, aP, aI, aI, aF, aI, aI, aI}},
	kNLLLossGrad:        {"gorun_nll_loss_grad", []argKind{aP, aP, aP, aI, aI, aF, aI, aI}},
	kCrossEntropy:       {"gorun_cross_entropy", []argKind{aP, aP, aP, aP, aI, aI, aF, aF, aI, aI, aI}},
	kCrossEntropyGrad:   {"gorun_cross_entropy_grad", []argKind{aP, aP, aP, aP, aI, aI, aF, aF, aI, aI}},
	kMSELoss:            {"gorun_mse_loss", []argKind{aP, aP, aP, aI, aI, aF, aI}},
	kMSELossGrad:        {"gorun_mse_loss_grad", []argKind{aP, aP, aP, aP, aI, aI, aF}},
	kSGDStep:            {"gorun_sgd_step", []argKind{aP, aP, aP, aI, aF, aF, aF, aF, aI, aI}},
	kAdamStep:           {"gorun_adam_step", []argKind{aP, aP, aP, aP, aI, aF, aF, aF, aF, aF, aI, aI}},
	kClipGradNorm:       {"gorun_clip_grad_norm", []argKind{aP, aP, aI, aI, aF}},
	kGatherRows:         {"gorun_gather_rows", []argKind{aP, aP, aP, aI, aI}},
	kGatherRowsInt:      {"gorun_gather_rows_int", []argKind{aP, aP, aP, aI, aI}},
	kCopySlice:          {"gorun_copy_slice", []argKind{aP, aP, aI, aI, aI, aI, aI, aI}},
	kPermute:            {"gorun_permute", []argKind{aP, aP, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI, aI}},
	kPositions:          {"gorun_positions", []argKind{aP, aI, aI}},
	kEmbedding:          {"gorun_embedding", []argKind{aP, aP, aP, aI, aI, aI}},
	kEmbeddingGrad:      {"gorun_embedding_grad", []argKind{aP, aP, aP, aI, aI, aI, aI, aI}},
	kCountCorrect:       {"gorun_count_correct", []argKind{aP, aP, aP, aI, aI, aI}},
	kSum:                {"gorun_sum", []argKind{aP, aP, aI, aI}},
}

// The op codes of gorun_unary and gorun_binary and the modes of the batch
// and layer norm kernels: kernels.h's GORUN_UNARY_*, GORUN_BINARY_*,
// GORUN_BN_* and GORUN_LN_* (a test checks them against the header).
const (
	unarySigmoid   = 0 // GORUN_UNARY_SIGMOID
	unaryTanh      = 1 // GORUN_UNARY_TANH
	unaryLeakyReLU = 2 // GORUN_UNARY_LEAKY_RELU
	unaryScale     = 3 // GORUN_UNARY_SCALE
	unaryGELU      = 4 // GORUN_UNARY_GELU
	unaryGELUTanh  = 5 // GORUN_UNARY_GELU_TANH

	binaryAdd           = 0 // GORUN_BINARY_ADD
	binarySub           = 1 // GORUN_BINARY_SUB
	binaryMul           = 2 // GORUN_BINARY_MUL
	binarySigmoidGrad   = 3 // GORUN_BINARY_SIGMOID_GRAD
	binaryTanhGrad      = 4 // GORUN_BINARY_TANH_GRAD
	binaryLeakyReLUGrad = 5 // GORUN_BINARY_LEAKY_RELU_GRAD
	binaryGELUGrad      = 6 // GORUN_BINARY_GELU_GRAD
	binaryGELUTanhGrad  = 7 // GORUN_BINARY_GELU_TANH_GRAD

	bnSums      = 0 // GORUN_BN_SUMS (gorun_bn_partial)
	bnGradSums  = 1 // GORUN_BN_GRAD_SUMS
	lnGammaSums = 2 // GORUN_LN_GAMMA_SUMS
	bnNorm      = 0 // GORUN_BN_NORM (gorun_bn_params)
	bnEval      = 1 // GORUN_BN_EVAL
	bnGrad      = 2 // GORUN_BN_GRAD
)

// kernelConsts maps each of kernels.h's op-code and mode macros to its
// value here.
var kernelConsts = map[string]int{
	"GORUN_UNARY_SIGMOID":          unarySigmoid,
	"GORUN_UNARY_TANH":             unaryTanh,
	"GORUN_UNARY_LEAKY_RELU":       unaryLeakyReLU,
	"GORUN_UNARY_SCALE":            unaryScale,
	"GORUN_UNARY_GELU":             unaryGELU,
	"GORUN_UNARY_GELU_TANH":        unaryGELUTanh,
	"GORUN_BINARY_ADD":             binaryAdd,
	"GORUN_BINARY_SUB":             binarySub,
	"GORUN_BINARY_MUL":             binaryMul,
	"GORUN_BINARY_SIGMOID_GRAD":    binarySigmoidGrad,
	"GORUN_BINARY_TANH_GRAD":       binaryTanhGrad,
	"GORUN_BINARY_LEAKY_RELU_GRAD": binaryLeakyReLUGrad,
	"GORUN_BINARY_GELU_GRAD":       binaryGELUGrad,
	"GORUN_BINARY_GELU_TANH_GRAD":  binaryGELUTanhGrad,
	"GORUN_BN_SUMS":                bnSums,
	"GORUN_BN_GRAD_SUMS":           bnGradSums,
	"GORUN_LN_GAMMA_SUMS":          lnGammaSums,
	"GORUN_BN_NORM":                bnNorm,
	"GORUN_BN_EVAL":                bnEval,
	"GORUN_BN_GRAD":                bnGrad,
}

func (k kernelID) String() string {
	if k < 0 || k >= numKernels {
		return fmt.Sprintf("kernel(%d)", int(k))
	}
	return kernelSigs[k].name
}

// dynKind marks a kernel argument whose value changes from one optimizer
// step to the next without changing the work: a captured graph gets the
// current value before each launch.
type dynKind uint8

// The per-step values.
const (
	dynNone      dynKind = iota
	dynLossScale         // float: RunCtx.LossScale
	dynStep              // int: RunCtx.Step
	dynStepFirst         // int: 1 on the first optimizer step, 2 after it
	dynLR                // float: the step's learning rate, Attrs.LR × RunCtx.LRScale
	dynSeed              // unsigned long long: the dropout RNG seed
	dynOffset            // unsigned long long: the dropout RNG offset + rel
)

// arg is one kernel argument: its type and value (its bits, as the 8-byte
// slot cuLaunchKernel reads its first 4 or 8 bytes from), or a per-step
// value resolved at launch.
type arg struct {
	kind argKind
	bits uint64
	dyn  dynKind
}

func ptrArg(p uintptr) arg   { return arg{kind: argPtr, bits: uint64(p)} }
func intArg(v int) arg       { return arg{kind: argInt, bits: uint64(uint32(int32(v)))} }
func boolArg(v bool) arg     { return intArg(b2i(v)) }
func floatArg(v float64) arg { return arg{kind: argFloat, bits: uint64(math.Float32bits(float32(v)))} }

// lossScaleArg, stepArg, seedArg and offsetArg are per-step arguments;
// offsetArg's value is the RNG offset at the start of the launch plus rel.
func lossScaleArg() arg { return arg{kind: argFloat, dyn: dynLossScale} }
func stepArg() arg      { return arg{kind: argInt, dyn: dynStep} }

// lrArg is an optimizer's learning rate lr under the schedule: lr times
// the step's RunCtx.LRScale.
func lrArg(lr float64) arg { return arg{kind: argFloat, dyn: dynLR, bits: math.Float64bits(lr)} }

// firstStepArg is the optimizer step for a kernel that only tells the
// first step from the others (SGD's momentum): 1 or 2, so that a captured
// graph's argument stops changing after the second step.
func firstStepArg() arg        { return arg{kind: argInt, dyn: dynStepFirst} }
func seedArg() arg             { return arg{kind: argU64, dyn: dynSeed} }
func offsetArg(rel uint64) arg { return arg{kind: argU64, dyn: dynOffset, bits: rel} }

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// dynValues are the per-step values arguments resolve to.
type dynValues struct {
	lossScale float64
	lrScale   float64 // 0 means 1
	step      int
	seed      uint64
	offset    uint64
}

// resolve returns the argument's slot bits.
func (a arg) resolve(v *dynValues) uint64 {
	switch a.dyn {
	case dynLossScale:
		return uint64(math.Float32bits(float32(v.lossScale)))
	case dynStep:
		return uint64(uint32(int32(v.step)))
	case dynLR:
		lr := math.Float64frombits(a.bits)
		if v.lrScale != 0 {
			lr *= v.lrScale
		}
		return uint64(math.Float32bits(float32(lr)))
	case dynStepFirst:
		if v.step <= 1 {
			return 1
		}
		return 2
	case dynSeed:
		return v.seed
	case dynOffset:
		return v.offset + a.bits
	}
	return a.bits
}

// checkArgs reports an argument list that does not match kernel k's
// parameters.
func checkArgs(k kernelID, args []arg) error {
	sig := kernelSigs[k].args
	if len(args) != len(sig) {
		return fmt.Errorf("cuda: %s takes %d arguments, got %d", k, len(sig), len(args))
	}
	for j, a := range args {
		if a.kind != sig[j] {
			return fmt.Errorf("cuda: %s argument %d is a %s, got a %s", k, j, sig[j], a.kind)
		}
	}
	if len(args) > maxArgs {
		return fmt.Errorf("cuda: %s takes %d arguments, more than %d", k, len(args), maxArgs)
	}
	return nil
}

// maxArgs is the most arguments any gorun kernel takes.
const maxArgs = 16
