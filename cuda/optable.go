//go:build cuda

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// opStep queues the work of one kernel step on d's compute stream: the
// same computation as ops.Kernels32[st.Op] on the live batch. acc says
// that a step that can accumulate adds into its output (the step's Acc,
// past the first micro-batch).
type opStep func(d *Device, st *engine.Step, acc bool) error

// opSteps is the CUDA backend's table of ops: the function that runs each
// op it has kernels for. It is gathered once, at package initialisation,
// from the tables of the op families (op_*.go, one file per family), and
// never changed after; an op in two families panics there. Adding an op
// to the backend is one entry in its family's table and its function.
// Which ops the backend supports is a lookup here (supportsOp).
var opSteps = joinSteps(convSteps, linearSteps, elementwiseSteps, poolSteps, dropoutSteps,
	softmaxSteps, batchNormSteps, layerNormSteps, dataSteps, optimSteps, attentionSteps, precisionSteps, classifierSteps,
	linearGELUSteps)

// declined lists the ops the CUDA backend has no kernel for, each with the
// reason (the Target's Declines). They are the CPU-only fusions: the
// engine fuses into them only for a target that supports them
// (engine.TargetFusions), so a CUDA plan never holds them.
var declined = map[ops.Op]string{
	ops.Conv2DPool:     "conv2d+maxpool2d is a CPU-only fusion of conv2d, maxpool2d and relu; the compiler emits it only for a target that supports it, and a CUDA plan runs the three ops",
	ops.Conv2DPoolGrad: "conv2d+maxpool2d_grad is the gradient of the CPU-only fusion conv2d+maxpool2d, which CUDA plans do not hold",

	ops.AttentionHeads:     "attention_heads is a CPU-only fusion of a script's batch_matmul, softmax and batch_matmul (q, k and v apart); the compiler emits it only for a target that supports it, and a CUDA plan runs the three ops (nn.multihead_attention's fused attention runs on CUDA)",
	ops.AttentionHeadsGrad: "attention_heads_grad is the gradient of the CPU-only fusion attention_heads, which CUDA plans do not hold",
}

// joinSteps merges the families' tables into one.
func joinSteps(families ...map[ops.Op]opStep) map[ops.Op]opStep {
	all := map[ops.Op]opStep{}
	for _, f := range families {
		for op, run := range f {
			if _, dup := all[op]; dup {
				panic(fmt.Sprintf("cuda: op %s is in two op families' tables", op))
			}
			all[op] = run
		}
	}
	return all
}

// supportsOp reports whether the CUDA device has a kernel for op: whether
// op is in opSteps.
func supportsOp(op ops.Op) bool {
	_, ok := opSteps[op]
	return ok
}

// Declines returns why the CUDA backend has no kernel for op, or "" when
// it is not one of the ops the backend declines (it has a kernel, or op
// is unknown).
func (Backend) Declines(op ops.Op) string { return declined[op] }
