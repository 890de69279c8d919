// Package cudatarget describes the cuda backend to the compile half
// (package engine/target) in every build of gorun, with or without the
// build tag cuda: the backend's name, the keys of its table in the cluster
// file,
//
//	[cuda]
//	eager  = false   # true: launch each step on its own, no CUDA graph
//	cublas = ""      # path of libcublas.so to try first (default: .13, .12, .11)
//	nccl   = ""      # path of libnccl.so.2 to try first
//	tf32   = false   # true: float32 GEMMs on TF32 tensor cores (PyTorch's allow_tf32)
//	cublaslt = true  # false: a linear layer's bias after SGEMM, not in a cuBLASLt epilogue
//
// the transport that comes with it (nccl), and how to build a gorun that
// has it. Importing the package registers that description, without the
// ops (target.Target.Supports is nil: this build lacks the backend), so
// that cluster files naming cuda parse, are checked and plan everywhere,
// and a run says how to get a gorun that has it. Package cuda (-tags cuda)
// imports it and registers the built Target in its place, with the ops its
// devices run; its devices read the table's keys from
// backend.Options.Settings.
//
// The package imports only engine/target and ops: importing it costs a build
// nothing (no cgo, no CUDA).
package cudatarget

import (
	"gorun/engine/target"
	"gorun/ops"
)

func init() { target.Register(Target()) }

// Target is the cuda backend's Target as a build without it knows it: name,
// table keys, transport and hints, no ops. Package cuda adds Supports and
// Declines.
func Target() *target.Target {
	return &target.Target{
		Name: "cuda",
		Keys: []target.Key{
			target.Bool("eager", false, "true: launch each step on its own instead of replaying the step as one captured CUDA graph"),
			target.Path("cublas", "/usr/lib/x86_64-linux-gnu/libcublas.so.12", "the path of libcublas.so to try first (default: libcublas.so.13, .12, .11 where the loader finds them)"),
			target.Path("nccl", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "the path of libnccl.so.2 to try first (default: where the loader finds it)"),
			target.Bool("tf32", false, "true: float32 matrix products and convolutions (their GEMMs) run on tensor cores in TF32, 10-bit mantissas with float32 accumulation (cublasSetMathMode(CUBLAS_TF32_TENSOR_OP_MATH), PyTorch's torch.backends.cuda.matmul.allow_tf32)"),
			target.Bool("cublaslt", true, "false: a linear layer's bias is a kernel of its own after the cuBLAS SGEMM, instead of the epilogue of one cuBLASLt matmul (libcublasLt.so beside libcublas)"),
		},
		Transports: []target.Transport{{
			Name: "nccl",
			Hint: "build gorun with `make build-cuda` (-tags cuda); it needs the CUDA driver (libcuda.so.1), an NVIDIA GPU and NCCL (libnccl.so.2, loaded at run time)",
		}},
		Hint: "build gorun with `make build-cuda` (-tags cuda); it needs Debian's nvidia-cuda-dev to build, and the CUDA driver (libcuda.so.1) and an NVIDIA GPU to run",
		// torch.autocast("cuda")'s float32 list, of the ops gorun has.
		AutocastFP32: []ops.Op{ops.Softmax, ops.LogSoftmax, ops.LayerNorm},
		// F.scaled_dot_product_attention under autocast: the bf16
		// tensor-core attention kernels (ops/attention_bf16.go).
		FusedBF16: []ops.Op{ops.Attention, ops.AttentionGrad},
	}
}

// Settings are the [cuda] table's values as backend.Options.Settings
// carries them to the devices: by key, with the defaults filled in.
type Settings struct {
	// Eager runs every step on its own, never as a captured graph.
	Eager bool
	// Cublas and NCCL are paths of libcublas.so and libnccl.so.2 to try
	// before the defaults ("" for none).
	Cublas, NCCL string
	// TF32 lets cuBLAS run float32 GEMMs on TF32 tensor cores.
	TF32 bool
	// NoCublasLt (cublaslt = false) runs linear layers through cuBLAS and
	// the separate bias kernel, never cuBLASLt.
	NoCublasLt bool
}

// Read reads the [cuda] table's keys from a device's settings (keys left
// out take their defaults).
func Read(settings map[string]any) Settings {
	var s Settings
	s.Eager, _ = settings["eager"].(bool)
	s.Cublas, _ = settings["cublas"].(string)
	s.NCCL, _ = settings["nccl"].(string)
	s.TF32, _ = settings["tf32"].(bool)
	if lt, ok := settings["cublaslt"].(bool); ok {
		s.NoCublasLt = !lt
	}
	return s
}
