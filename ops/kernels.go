package ops

import "unsafe"

// Kernels32 holds the float32 kernel of every op, indexed by Op. It is never
// modified; Kernels32[Invalid] is nil.
//
// Every kernel writes all live elements of its outputs (weight and bias
// gradients with Attrs.Accumulate add into them instead), so outputs need
// no clearing beforehand. The elementwise and row-wise kernels (ReLU,
// ReLUGrad, Sigmoid, SigmoidGrad, Tanh, TanhGrad, LeakyReLU, LeakyReLUGrad,
// GELU, GELUGrad, Add, Sub, Mul, Scale, Dropout, Dropout2D, DropoutGrad,
// Dropout2DGrad, LogSoftmax, Softmax, LogSoftmaxGrad, SoftmaxGrad) may write
// output 0 over input 0; every other kernel needs outputs distinct from its
// inputs.
var Kernels32 = kernels[float32]()

// Kernels64 holds the float64 kernel of every op, indexed by Op, for
// finite-difference gradient checks. It is never modified; Kernels64[Invalid]
// is nil.
var Kernels64 = kernels[float64]()

func kernels[T Float]() [NumOps]Kernel[T] {
	return [NumOps]Kernel[T]{
		Conv2D:       conv2D[T],
		Linear:       linear[T],
		ReLU:         relu[T],
		MaxPool2D:    maxPool2D[T],
		Dropout:      dropout[T],
		Dropout2D:    dropout2D[T],
		Flatten:      flatten[T],
		LogSoftmax:   logSoftmax[T],
		Softmax:      softmax[T],
		NLLLoss:      nllLoss[T],
		CrossEntropy: crossEntropy[T],
		MSELoss:      mseLoss[T],

		BatchNormStats:  batchNormStats[T],
		BatchNormNorm:   batchNormNorm[T],
		BatchNormEval:   batchNormEval[T],
		AvgPool2D:       avgPool2D[T],
		GlobalAvgPool2D: globalAvgPool2D[T],
		Sigmoid:         sigmoid[T],
		Tanh:            tanh[T],
		LeakyReLU:       leakyReLU[T],
		Add:             add[T],
		Sub:             sub[T],
		Mul:             mul[T],
		Scale:           scale[T],
		Concat:          concat[T],
		Embedding:       embedding[T],
		LayerNorm:       layerNorm[T],
		GELU:            gelu[T],
		BatchMatMul:     batchMatMul[T],
		Permute:         permute[T],
		Narrow:          narrow[T],
		Positions:       positions[T],
		Conv2DPool:      conv2DPool[T],

		Conv2DGradInput:  conv2DGradInput[T],
		Conv2DGradWeight: conv2DGradWeight[T],
		Conv2DGradBias:   conv2DGradBias[T],
		LinearGradInput:  linearGradInput[T],
		LinearGradWeight: linearGradWeight[T],
		LinearGradBias:   linearGradBias[T],
		ReLUGrad:         reluGrad[T],
		MaxPool2DGrad:    maxPool2DGrad[T],
		Conv2DPoolGrad:   conv2DPoolGrad[T],
		DropoutGrad:      dropoutGrad[T],
		Dropout2DGrad:    dropout2DGrad[T],
		LogSoftmaxGrad:   logSoftmaxGrad[T],
		SoftmaxGrad:      softmaxGrad[T],
		NLLLossGrad:      nllLossGrad[T],
		CrossEntropyGrad: crossEntropyGrad[T],
		MSELossGrad:      mseLossGrad[T],

		BatchNormGradStats:  batchNormGradStats[T],
		BatchNormGradGamma:  batchNormGradGamma[T],
		BatchNormGradBeta:   batchNormGradBeta[T],
		BatchNormGradInput:  batchNormGradInput[T],
		AvgPool2DGrad:       avgPool2DGrad[T],
		GlobalAvgPool2DGrad: globalAvgPool2DGrad[T],
		SigmoidGrad:         sigmoidGrad[T],
		TanhGrad:            tanhGrad[T],
		LeakyReLUGrad:       leakyReLUGrad[T],
		EmbeddingGradWeight: embeddingGradWeight[T],
		LayerNormGradInput:  layerNormGradInput[T],
		LayerNormGradGamma:  layerNormGradGamma[T],
		LayerNormGradBeta:   layerNormGradBeta[T],
		GELUGrad:            geluGrad[T],
		NarrowGrad:          narrowGrad[T],

		BatchNormRunning: batchNormRunning[T],

		SGDStep:   sgdStep[T],
		AdamStep:  adamStep[T],
		AdamWStep: adamWStep[T],

		ClipGradNorm: clipGradNorm[T],
	}
}

// optIn returns input i, or nil when it is absent.
func optIn[T Float](in []*Buf[T], i int) *Buf[T] {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// optData returns optIn(in, i)'s Data, or nil when the input is absent.
func optData[T Float](in []*Buf[T], i int) []T {
	if b := optIn(in, i); b != nil {
		return b.Data
	}
	return nil
}

// live returns the first b.Len() elements of b.Data.
func live[T Float](b *Buf[T]) []T { return b.Data[:b.Len()] }

// same reports whether two slices start at the same element.
func same[T Float](a, b []T) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// is32 reports whether T is float32 (the type the vectorised kernels of
// package vec take).
func is32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// view reinterprets s as a slice of E, a type of the same size (T's
// underlying type).
func view[E float32 | float64, T Float](s []T) []E {
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
