// Package cuda is gorun's GPU backend, built only with the build tag cuda
// (`make build-cuda`): importing it registers the backend "cuda" with
// package engine/backend, its Target being package cudatarget's (the
// [cuda] table's keys, the nccl transport, which every build knows) with
// the ops the devices run.
//
// A Device is one Program on one NVIDIA GPU. It keeps the Program's buffers
// in one device-memory arena, a gorgonia tensor allocated through its
// tensor.Engine (Engine, on gorgonia.org/cu's driver API), whose memory
// lies on the GPU; a buffer is an offset in it. Steps run on the device's compute stream:
// the element-wise, normalisation, reduction, pooling, dropout, loss,
// embedding, layout and optimizer ops as the gorun_* kernels of package
// gorun/cuda/kernels (PTX, loaded with cuModuleLoadData), matrix products
// (batched too) and the GEMMs of convolutions (a group at a time) through
// cuBLAS. Per-channel and per-column sums are split into chunks summed in
// a fixed order, never with atomics, so a step gives the same bits run to
// run. A whole training micro-batch is captured once as a CUDA graph per
// (live batch, first, last) combination and replayed with one launch
// (backend.Replayer); kernel arguments that change from step to step (the
// loss scale, the optimizer step, the dropout RNG seed and offset) are set
// in the instantiated graph's kernel nodes before a launch
// (cuGraphExecKernelNodeSetParams), so the graph is captured only once.
//
// Data: LoadData holds a whole dataset in GPU memory in the layout its
// kind needs (datalayout.go: float32 samples with int32 class labels,
// int32 token windows with their next-token targets, float32 samples with
// float32 targets), and Gather sends only a batch's sample indices and
// gathers its rows there. The runner reads back one thing a step: the
// loss and whether the gradients are finite. On the deferred path
// (backend.Deferrer, verdict.go; one device of one process, fp32 or bf16,
// an update phase without collectives) nothing waits for the GPU inside a
// step: MarkStep queues the verdict on the GPU (the split sum of the
// gradients and the loss set a halt flag in device memory, which the
// optimizer and clipping kernels read through their last argument and
// obey by doing nothing), an asynchronous copy of it to page-locked host
// memory and an event, and the runner launches the update right behind
// it and reads the copy (Marked) during the next step. Otherwise
// (fp16's loss scaling, several devices or processes) it reads them in one
// transfer and one wait before the update (ReadStep, backend.StepReader).
//
// Kernel steps run by table: opSteps maps each op the device runs to a
// small function (runConv2D, runReLU, …) that queues its kernels and
// GEMMs, and each op family keeps its functions and its part of the
// table in one file: op_conv.go, op_linear.go (linear, batch_matmul),
// op_elementwise.go (activations, arithmetic), op_pool.go, op_dropout.go,
// op_softmax.go (softmax and losses), op_batchnorm.go, op_layernorm.go,
// op_data.go (embedding and data movement), op_optim.go and
// op_attention.go (the fused attention, ops.Attention) and
// op_classifier.go (the fused classifier, ops.CrossEntropyFused) and
// op_linear_gelu.go (ops.LinearGELU through cuBLASLt's GELU epilogue,
// ltgelu.go). Whether the
// backend supports an op (Backend.Supports) is a lookup there; the ops it
// declines, the CPU-only fusions, are listed with the reason
// (Backend.Declines), and a test fails an op that has neither.
//
// cuda/kernels/kernels.h is the one list of the kernels: the kernel ids
// (kReLU, …), their signatures, which checkArgs holds every launch to, and
// the op codes of the shared kernels are generated from it into
// gen_kernels.go. To add a kernel: write it in a .cu file of cuda/kernels,
// declare it in kernels.h, run `go generate ./cuda/kernels` (its id,
// signature, name and CPU launcher for cuda/kernels/hostcheck), `make
// kernels` for the PTX (nvcc 11.8), and launch it from the op's function
// in its family's file; a new op is one more entry in that file's table.
// cuda/kernels/README.md has the ABI and the checks.
//
// cuBLAS and NCCL are not linked: they are opened with dlopen when a device
// is opened (libcublas.so.13, .12, .11 or the cluster file's path; and
// libnccl.so.2), so a gorun built against Debian's CUDA 11.8 runs on a
// machine with CUDA 12 or 13. Only libcuda.so.1, the driver API, is linked.
// cuBLASLt (libcublasLt.so beside cuBLAS; cublaslt.go, its arguments
// built in ltcall.go) runs a linear layer's product and bias as one matmul
// with the bias in its epilogue; without it, or with the [cuda] table's
// cublaslt = false, SGEMM and gorun_bias_add do.
//
// Collectives: devices on distinct GPUs use NCCL (ncclCommInitAll, one
// process, many GPUs) on a communication stream of each device, ordered
// against the compute stream with events so that gradient all-reduces
// overlap the rest of backward. Replicas sharing one GPU use
// device-to-device copies and the gorun add and scale kernels through the
// same interface. With transport = "nccl" the devices of every process
// form one NCCL communicator instead (Backend.ConnectWorld, nccl_world.go:
// rank 0's ncclGetUniqueId shared over MPI, ncclCommInitRank bounded by
// comm.timeout; the checks before it, in plain Go, in nccl_place.go).
//
// gorgonia.org/cu calls cuInit in its package init and exits the process
// when that fails; this package intercepts that cuInit (see cuinit.c) so
// that a cuda build on a machine without a GPU still runs the cpu backend,
// and opening a cuda device then fails with one line that says why.
//
// The files without the cuda tag hold the pure logic (cuBLAS argument
// mapping, launch geometry, library search, graph cache keys, kernel
// signatures, scratch sizing) so that it is tested on every machine.
package cuda
