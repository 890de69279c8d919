package cuda

// cuBLASLt's GELU epilogue (llm.c's trick, issue 26): ops.LinearGELU —
// the compiler's fusion of a linear layer and the tanh GELU that alone
// reads it (engine's fuseLinearGELU) — runs as one cublasLtMatmul whose
// epilogue adds the bias, applies GELU and stores the pre-activation as
// its auxiliary output (CUBLASLT_EPILOGUE_GELU_AUX_BIAS; GELU_AUX without
// a bias), where the unfused plan runs the matmul, then reads the
// pre-activation back to write the GELU. cuBLASLt's GELU is the tanh
// approximation (PyTorch's approximate="tanh"), which is why only that
// form is fused. As for the bias epilogue (ltcall.go) the arguments are
// built here, in plain Go, and tested without a GPU (TestLtLinearGELUCall);
// the device falls back to the unfused kernels, with a note, when
// cuBLASLt is missing, offers no algorithm or refuses the call. The
// backward pass's ops.LinearGradInputGELU (the next linear layer's input
// gradient and the GELU's) is one matmul with CUBLASLT_EPILOGUE_DGELU,
// which reads the kept pre-activation as its auxiliary matrix; and a
// linear layer's weight and bias gradients (ops.LinearGradWeightBias) one
// matmul with CUBLASLT_EPILOGUE_BGRADB, the bias gradient summed as the
// weight gradient's product reads dy.

// The GELU epilogues (cublasLt.h of CUDA 11.8: CUBLASLT_EPILOGUE_GELU = 32,
// the _AUX bit 128, the _BIAS bit 4).
const (
	ltEpilogueGELUAux     ltEpilogue = 32 | 128     // CUBLASLT_EPILOGUE_GELU_AUX: D = GELU(A·B), aux = A·B
	ltEpilogueGELUAuxBias ltEpilogue = 32 | 128 | 4 // CUBLASLT_EPILOGUE_GELU_AUX_BIAS: D = GELU(A·B + bias), aux = A·B + bias
	ltEpilogueDGELU       ltEpilogue = 64 | 128     // CUBLASLT_EPILOGUE_DGELU: D = GELU'(aux)·(A·B), aux read
	ltEpilogueBGradB      ltEpilogue = 512          // CUBLASLT_EPILOGUE_BGRADB: bias = Σ over k of op(B), one per column of D
)

// The cublasLtMatmulDescAttributes_t and cudaDataType values a GELU call
// sets beyond the bias call's (cublasLt.h, library_types.h).
const (
	ltDescBiasPointer  = 8  // CUBLASLT_MATMUL_DESC_BIAS_POINTER (void *), set per call
	ltDescAuxPointer   = 11 // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER (void *), set per call
	ltDescAuxLD        = 12 // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (int64_t)
	ltDescAuxDataType  = 22 // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE (int32_t, a cudaDataType)
	ltDescBiasDataType = 26 // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE (int32_t, a cudaDataType)
	ltR32F             = 0  // CUDA_R_32F
)

// ltAuxAlign is what cuBLASLt requires of a GELU auxiliary matrix's
// leading dimension (in elements): a multiple of 8.
const ltAuxAlign = 8

// ltAttr is one cublasLtMatmulDescSetAttribute of a prepared call: the
// attribute and its value, Size bytes wide (4: int32_t, 8: int64_t).
type ltAttr struct {
	Attr  int
	Value int64
	Size  int
}

// hasAux reports whether the epilogue writes (or reads) an auxiliary
// matrix.
func (e ltEpilogue) hasAux() bool { return e&128 != 0 }

// hasBias reports whether the epilogue reads a bias vector.
func (e ltEpilogue) hasBias() bool { return e&4 != 0 }

// extraAttrs are the descriptor attributes c sets beyond the transposes
// and the epilogue: for an epilogue with an auxiliary matrix its leading
// dimension and data type (float32, as D), and with it the bias's data
// type (float32). The bias epilogue alone (ltcall.go) sets none: cuBLASLt
// takes D's type for its bias.
func (c ltCall) extraAttrs() []ltAttr {
	if !c.Epilogue.hasAux() {
		return nil
	}
	at := []ltAttr{{ltDescAuxLD, int64(c.AuxLD), 8}, {ltDescAuxDataType, ltR32F, 4}}
	if c.Epilogue.hasBias() {
		at = append(at, ltAttr{ltDescBiasDataType, ltR32F, 4})
	}
	return at
}

// linearGELUCall is ops.LinearGELU (tanh form) as one cuBLASLt matmul:
// the column-major product is yᵀ[o×n], so the bias (o elements) is added
// to each of its rows, GELU applied to every element, and the
// pre-activation stored as an o×n auxiliary matrix with leading dimension
// o (pre's row-major [n, o]): CUBLASLT_EPILOGUE_GELU_AUX_BIAS, or
// GELU_AUX without a bias. ok is false for an empty batch and where
// cuBLASLt cannot take the auxiliary matrix (o not a multiple of 8):
// the step then runs the unfused kernels.
func linearGELUCall(n, i, o int, bias bool, align, compute int) (ltCall, bool) {
	e := ltEpilogueGELUAux
	if bias {
		e = ltEpilogueGELUAuxBias
	}
	c, ok := ltCallFor(linearGemm(n, i, o), e)
	if !ok || o%ltAuxAlign != 0 {
		return ltCall{}, false
	}
	c.Align, c.Compute, c.AuxLD = align, compute, o
	return c, true
}

// linearGradInputGELUCall is ops.LinearGradInputGELU (tanh form), dx[n×i]
// = GELU'(pre)·(dy[n×o]·w[o×i]), as one cuBLASLt matmul: LinearGradInput's
// product (column-major dxᵀ[i×n]) with CUBLASLT_EPILOGUE_DGELU reading
// the pre-activation as its auxiliary matrix, laid out as D (leading
// dimension i). ok is false for an empty batch and where i is not a
// multiple of 8: the step then runs the unfused kernels.
func linearGradInputGELUCall(n, o, i, align, compute int) (ltCall, bool) {
	c, ok := ltCallFor(rowMajorGemm(false, false, n, i, o, o, i, i), ltEpilogueDGELU)
	if !ok || i%ltAuxAlign != 0 {
		return ltCall{}, false
	}
	c.Align, c.Compute, c.AuxLD = align, compute, i
	return c, true
}

// linearGradWeightBiasCall is ops.LinearGradWeightBias, dw[o×i] =
// dy[n×o]ᵀ·x[n×i] and db[o] = Σ dy's rows, as one cuBLASLt matmul:
// LinearGradWeight's product, column-major dwᵀ[i×o] = xᵀ·dy, whose B
// operand is dy (the operands swapped), so CUBLASLT_EPILOGUE_BGRADB sums
// op(B) over k — dy over the rows — into db, one per column of D (the
// output features), through the bias pointer. It overwrites both, so a
// step that accumulates (a later micro-batch) runs the unfused kernels;
// ok is false for an empty batch.
func linearGradWeightBiasCall(n, o, i, align, compute int) (ltCall, bool) {
	c, ok := ltCallFor(rowMajorGemm(true, false, o, i, n, o, i, i), ltEpilogueBGradB)
	if !ok || !c.SwapOperands {
		return ltCall{}, false
	}
	c.Align, c.Compute = align, compute
	return c, true
}

// instead says what a layer runs when cuBLASLt does not run c.
func (c ltCall) instead() string {
	switch {
	case c.Epilogue == ltEpilogueBGradB:
		return "the bias gradients of linear layers run a separate reduction kernel"
	case c.Epilogue == ltEpilogueDGELU:
		return "the input gradients of linear layers after a GELU run cuBLAS SGEMM and a separate GELU gradient kernel"
	case c.Epilogue.hasAux():
		return "linear layers with a GELU run cuBLAS SGEMM, a separate bias kernel and a separate GELU kernel"
	}
	return "linear layers run cuBLAS SGEMM and a separate bias kernel"
}
