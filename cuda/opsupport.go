package cuda

import "gorun/ops"

// hasKernel marks the ops the CUDA device runs (Flatten as a view, with no
// work): every op of the set but Invalid. A test checks it against
// ops.NumOps so that a new op without a CUDA kernel fails.
var hasKernel = func() (h [ops.NumOps]bool) {
	for _, op := range []ops.Op{ops.Conv2D, ops.Linear, ops.ReLU, ops.MaxPool2D, ops.Dropout, ops.Dropout2D,
		ops.Flatten, ops.LogSoftmax, ops.Softmax, ops.NLLLoss, ops.CrossEntropy,
		ops.Conv2DGradInput, ops.Conv2DGradWeight, ops.Conv2DGradBias, ops.LinearGradInput,
		ops.LinearGradWeight, ops.LinearGradBias, ops.ReLUGrad, ops.MaxPool2DGrad, ops.DropoutGrad,
		ops.Dropout2DGrad, ops.LogSoftmaxGrad, ops.SoftmaxGrad, ops.NLLLossGrad, ops.CrossEntropyGrad,
		ops.Add, ops.SGDStep, ops.AdamStep} {
		h[op] = true
	}
	return h
}()

// supportsOp reports whether the CUDA device has a kernel for op.
func supportsOp(op ops.Op) bool { return op != ops.Invalid && int(op) < ops.NumOps && hasKernel[op] }
