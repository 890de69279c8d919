package cuda

import (
	"fmt"
	"math"
)

// kernelID names one gorun_* kernel of cuda/kernels (kernels.h), in the
// order of kernels.Names. The ids (kReLU, …, numKernels), their signatures
// (kernelSigs) and the op codes of the shared kernels are generated from
// kernels.h into gen_kernels.go (go generate ./cuda/kernels).
type kernelID int

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
