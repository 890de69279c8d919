// Package kernels holds gorun's CUDA kernels as PTX, compiled ahead of time
// by nvcc from the sources in this directory (see README.md and kernels.h,
// the ABI) and embedded in the binary, so that the CUDA backend needs only
// the driver (cuModuleLoadData) at run time. It has no build tag and no cgo:
// any build may import it.
//
// kernels.h is the one list of the kernels. `go generate ./cuda/kernels`
// (internal/genkernels) writes what mirrors it: Names here, the kernel ids
// and signatures of package cuda, and the CPU launchers of hostcheck.
package kernels

//go:generate go run ./internal/genkernels

import _ "embed"

//go:embed gorun_sm80.ptx
var srcSM80 []byte

//go:embed gorun_sm90.ptx
var srcSM90 []byte

// The modules with a terminating NUL byte, as cuModuleLoadData wants them.
var (
	ptxSM80 = nulTerminated(srcSM80)
	ptxSM90 = nulTerminated(srcSM90)
)

func nulTerminated(b []byte) []byte {
	return append(b[:len(b):len(b)], 0)
}

// PTX returns the PTX module for a GPU of compute capability major
// computeMajor: the compute_90 build for 9 and above, the compute_80 build
// for 8, and nil below 8 (unsupported). The driver JIT-compiles it for the
// actual GPU. The slice ends with a NUL byte, so that its first element's
// address can go to cuModuleLoadData as is. It is shared: do not modify it.
func PTX(computeMajor int) []byte {
	switch {
	case computeMajor >= 9:
		return ptxSM90
	case computeMajor == 8:
		return ptxSM80
	default:
		return nil
	}
}
