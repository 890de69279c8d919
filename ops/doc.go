// Package ops is gorun's op set: a typed enum of operations, each with one
// definition (Def) that says everything about it: its signature and the
// facts of its outputs, its flags, its shape rule (for forward ops), its
// workspace rule, its gradient rule, and its CPU kernels for float32 and
// float64.
//
// ops belongs to the compile and run phases. Shape rules and gradient
// rules run at compile time; shape rules report problems as errors that say
// what was expected and what came, and the engine adds the layer name and
// script position. Kernels run at step time, never fail and never allocate:
// every buffer they touch, including scratch space, is planned ahead of
// time by the engine. Kernels know nothing of ranks, devices or
// collectives.
//
// # Organisation
//
// An Op is its name ("conv2d", "relu_grad"). The ops come in families, one
// file each, and a family's file declares its ops' constants (each with the
// doc comment that gives its inputs, outputs, shapes and attributes), their
// Defs in one table (activationOps, convOps, …), and their kernels or the
// helpers that run them:
//
//	activation.go  ReLU, Sigmoid, Tanh, LeakyReLU, GELU, SiLU and their
//	               gradients
//	arithmetic.go  Add, Sub, Mul, Scale
//	conv.go        Conv2D and its gradients; the fused Conv2DPool and its
//	               gradient (the lowering to matrix products: im2col.go)
//	linear.go      Linear and its gradients, BatchMatMul (matmul.go)
//	pool.go        MaxPool2D, AvgPool2D, GlobalAvgPool2D and their gradients
//	dropout.go     Dropout, Dropout2D and their gradients
//	softmax.go     Softmax, LogSoftmax and their gradients
//	loss.go        NLLLoss, CrossEntropy, MSELoss and their gradients
//	classifier.go  CrossEntropyFused: cross-entropy and its gradient in one
//	               pass (a target fusion)
//	linear_gelu.go LinearGELU: a linear layer and its tanh GELU in one op,
//	               the pre-activation kept; LinearGradInputGELU, the next
//	               layer's input gradient with the GELU's (target fusions)
//	linear_bgrad.go LinearGradWeightBias: a linear layer's weight and bias
//	               gradients in one op (a target fusion)
//	batchnorm.go   batch normalisation's statistics, normalisation,
//	               evaluation, running statistics and gradients
//	layernorm.go   LayerNorm and its gradients
//	embedding.go   Embedding and its weight's gradient
//	tensor.go      Flatten, Concat, Narrow, NarrowGrad, Permute, Positions
//	optim.go       SGDStep, AdamStep, AdamWStep, ClipGradNorm, GradNormSq, ClipGradScale
//	precision.go   Round (to bfloat16 or float16), Precision, Autocast: what
//	               train(precision = ...) does with each op
//
// op.go holds what every op shares: Op, Def, the registry (Lookup, All),
// Attrs and the kernels' types (Buf, Ctx, Kernel). shape.go runs shape and
// workspace rules (Infer, Workspace); grad.go declares the interface
// gradient rules are written against (GradBuilder), which the engine's
// graph builder implements, and the rules several ops share. Kernels32 and
// Kernels64 index the kernels by op. The registry is filled once, when the
// package is initialised, from the families' tables, and never changed.
//
// # Adding an op
//
// Add its constant, with its doc comment, and its Def to its family's
// file (a new family's table also joins the list in op.go's registry). A
// Def gives:
//
//   - Op, In and Out: the signature. Each input has the Name shape errors
//     use ("input", "weight", "bias"), and may be Optional or hold indices
//     (Int); each output says whether it holds indices (Int), carries no
//     gradient (NoGrad: a mask, saved statistics) or has no batch
//     dimension (Unbatched: a loss, per-channel statistics).
//   - The flags that apply: Alias (output 0 is a view of input 0),
//     InPlace (updates its inputs, no outputs), Random (draws from
//     Ctx.RNG), ReuseInput (may write output 0 over input 0),
//     Accumulates (honours Attrs.Accumulate), EvalCopy (the identity in
//     evaluation, as dropout), EvalOnly.
//   - Shape, for a forward op: its output shapes, or an error.
//   - Workspace, when the kernel needs scratch.
//   - Grad, for a forward op with a differentiable output: the backward
//     nodes, through a GradBuilder; a new backward op gets a Def of its
//     own (no Shape, no Grad).
//   - StepName, for an op the engine fuses others into: how its steps
//     print ("batch_norm_norm+add+relu").
//   - Autocast, when mixed precision (train(precision = "bf16")) should
//     not just follow the op's inputs: a matrix product takes
//     low-precision operands (AutocastLower), a loss runs in float32
//     (AutocastFP32), an op that only selects values needs no rounding
//     (AutocastExact).
//   - Kernel32 and Kernel64: the kernel, generic over Float, instantiated
//     twice.
//
// Attributes the op reads go in Attrs, with a zero value that means the
// default. The tests check every defined op: a consistent signature, a
// shape rule for forward ops, a gradient rule or no differentiable output,
// both kernels, no allocation, a finite-difference gradient check. Outside
// ops, an op needs its script builtin — one line with script's opLayer
// for a layer that is the op alone (nn.silu), or a spec.Layer kind and
// engine/graph.go's case for a layer with parameters or attributes — and
// the kernels of the other backends (cuda/). docs/howto/add-a-layer.md
// walks through nn.silu.
//
// Kernels are generic over float32 (training) and float64 (finite-difference
// gradient checks); Kernels32 and Kernels64 hold the two instantiations.
package ops
