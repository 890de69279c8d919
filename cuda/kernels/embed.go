// Package kernels holds gorun's CUDA kernels as PTX, compiled ahead of time
// by nvcc from the sources in this directory (see README.md and kernels.h,
// the ABI) and embedded in the binary, so that the CUDA backend needs only
// the driver (cuModuleLoadData) at run time. It has no build tag and no cgo:
// any build may import it.
package kernels

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

// Names lists the kernels the PTX modules define, in kernels.h's order
// (the names for cuModuleGetFunction).
var Names = []string{
	"gorun_relu", "gorun_relu_grad", "gorun_unary", "gorun_binary", "gorun_copy", "gorun_fill",
	"gorun_scale", "gorun_accumulate", "gorun_axpy",
	"gorun_dropout", "gorun_dropout2d", "gorun_dropout_grad", "gorun_dropout2d_grad",
	"gorun_im2col", "gorun_col2im", "gorun_onl_to_nol", "gorun_nol_to_onl",
	"gorun_bias_add", "gorun_bias_grad", "gorun_bias_partial", "gorun_bias_finish",
	"gorun_bn_partial", "gorun_bn_finish", "gorun_bn_params", "gorun_bn_apply",
	"gorun_bn_grad_input", "gorun_bn_grad_gamma", "gorun_bn_running",
	"gorun_layer_norm", "gorun_layer_norm_grad_input",
	"gorun_maxpool2d", "gorun_maxpool2d_grad", "gorun_avgpool2d", "gorun_avgpool2d_grad",
	"gorun_global_avgpool2d", "gorun_global_avgpool2d_grad",
	"gorun_log_softmax", "gorun_softmax", "gorun_log_softmax_grad", "gorun_softmax_grad",
	"gorun_nll_loss", "gorun_nll_loss_grad", "gorun_cross_entropy", "gorun_cross_entropy_grad",
	"gorun_mse_loss", "gorun_mse_loss_grad",
	"gorun_sgd_step", "gorun_adam_step", "gorun_clip_grad_norm",
	"gorun_gather_rows", "gorun_gather_rows_int", "gorun_copy_slice", "gorun_permute", "gorun_positions",
	"gorun_embedding",
	"gorun_embedding_grad", "gorun_count_correct", "gorun_sum",
}
