package cuda

import (
	"fmt"
	"io"
	"sync"
)

// cuBLASLt (cublaslt.go, loaded with dlopen like cuBLAS) runs a linear
// layer's product and its bias add as one matmul whose epilogue adds the
// bias (llm.c's trick): y is written once instead of written by SGEMM,
// then read and written again by gorun_bias_add. The arguments are built
// here, in plain Go, so that they are tested without a GPU
// (TestLtLinearCall); when libcublasLt cannot be opened, or its heuristic
// offers no algorithm for a shape, the layer runs cuBLAS SGEMM and the
// separate bias kernel, and the device says so once (ltNotes).

// ltEpilogue is a cublasLtEpilogue_t.
type ltEpilogue uint32

// The epilogues gorun asks for (cublasLt.h's values).
const (
	ltEpilogueDefault ltEpilogue = 1 // CUBLASLT_EPILOGUE_DEFAULT: D = α·op(A)·op(B) + β·C
	ltEpilogueBias    ltEpilogue = 4 // CUBLASLT_EPILOGUE_BIAS: + bias[row], broadcast over D's columns
)

// ltLayout is a cublasLtMatrixLayout_t of float32 (CUDA_R_32F),
// column-major: rows, columns and leading dimension.
type ltLayout struct {
	Rows, Cols, LD int
}

// ltCall is one cublasLtMatmul, column-major as gemmCall (D = C, in
// place): the transposes, the three layouts as the matrices are stored
// (op(A) is M×K, so a transposed A is stored K×M) and the epilogue. With
// ltEpilogueBias the bias has C.Rows elements. SwapOperands is gemmCall's:
// the call's A is the row-major product's B. It is comparable: a device
// keeps one prepared descriptor and algorithm per distinct call.
type ltCall struct {
	TransA, TransB bool
	A, B, C        ltLayout
	Epilogue       ltEpilogue
	SwapOperands   bool
	// Compute is the cublasComputeType_t (ltCompute).
	Compute int
	// Align is the bytes every operand's address is a multiple of (a
	// power of two, at most 256: ltAlignment), which the heuristic is told
	// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), since by default it assumes
	// 256 and gorun's buffers start on 64-byte boundaries (views anywhere).
	Align int
	// AuxLD is the auxiliary matrix's leading dimension for an epilogue
	// that has one (the GELU epilogues, ltgelu.go: the pre-activation, laid
	// out as C), else 0.
	AuxLD int
}

// cuBLAS compute types the cuBLASLt path uses besides mixed precision's
// (cublas.go's cublasCompute32FFast16F and cublasCompute32FFast16BF).
const (
	ltCompute32F         = 68 // CUBLAS_COMPUTE_32F: as cublasSgemm without TF32
	ltCompute32FFastTF32 = 77 // CUBLAS_COMPUTE_32F_FAST_TF32: as cublasSgemm under [cuda] tf32
)

// ltCompute is the compute type of a cuBLASLt matmul on float32 operands:
// a mixed-precision step's (lowp, computeType's, when not 0), else TF32's
// when the [cuda] table's tf32 is set, else plain float32: what the cuBLAS
// call it replaces computes with.
func ltCompute(lowp int, tf32 bool) int {
	switch {
	case lowp != 0:
		return lowp
	case tf32:
		return ltCompute32FFastTF32
	}
	return ltCompute32F
}

// ltMaxAlign is the alignment cuBLASLt assumes unless told less.
const ltMaxAlign = 256

// ltAlignment is the largest power of two, at most ltMaxAlign, that
// divides every non-zero address of ptrs (an absent operand is 0).
func ltAlignment(ptrs ...uintptr) int {
	a := uintptr(ltMaxAlign)
	for _, p := range ptrs {
		if p == 0 {
			continue
		}
		for p%a != 0 {
			a /= 2
		}
	}
	return int(a)
}

// k is the call's inner dimension (op(A)'s columns).
func (c ltCall) k() int {
	if c.TransA {
		return c.A.Rows
	}
	return c.A.Cols
}

// ltCallFor is g as a cublasLtMatmul with epilogue e; ok is false for what
// gorun leaves to cuBLAS: a batched product, or an empty one.
func ltCallFor(g gemmCall, e ltEpilogue) (c ltCall, ok bool) {
	if g.Batch > 1 || g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return ltCall{}, false
	}
	a := ltLayout{g.M, g.K, g.LDA}
	if g.TransA {
		a = ltLayout{g.K, g.M, g.LDA}
	}
	b := ltLayout{g.K, g.N, g.LDB}
	if g.TransB {
		b = ltLayout{g.N, g.K, g.LDB}
	}
	return ltCall{TransA: g.TransA, TransB: g.TransB, A: a, B: b, C: ltLayout{g.M, g.N, g.LDC}, Epilogue: e, SwapOperands: g.SwapOperands}, true
}

// linearGemm is ops.Linear's product y[n×o] = x[n×i]·w[o×i]ᵀ as a cuBLAS
// call (runLinear).
func linearGemm(n, i, o int) gemmCall { return rowMajorGemm(false, true, n, o, i, i, i, o) }

// linearBiasCall is ops.Linear with a bias as one cuBLASLt matmul with
// compute type compute (ltCompute), its operands at addresses aligned to
// align bytes (ltAlignment): the
// column-major product is yᵀ[o×n], so the bias (o elements) is added to
// each of its rows: CUBLASLT_EPILOGUE_BIAS. ok is false for an empty
// batch.
func linearBiasCall(n, i, o, align, compute int) (ltCall, bool) {
	c, ok := ltCallFor(linearGemm(n, i, o), ltEpilogueBias)
	c.Align, c.Compute = align, compute
	return c, ok
}

// ltNotes says once per device and reason why the device runs a linear
// layer's bias apart from its product (no libcublasLt, no algorithm for a
// shape): a one-line note on w (standard error), never an error.
type ltNotes struct {
	mu   sync.Mutex
	seen map[string]bool
	w    io.Writer
}

// fallback writes the note for why, the first time, for a linear layer
// with a bias.
func (n *ltNotes) fallback(device, why string) {
	n.fallbackAs(device, why, "linear layers run cuBLAS SGEMM and a separate bias kernel")
}

// fallbackAs writes the note for why, the first time, saying what runs
// instead.
func (n *ltNotes) fallbackAs(device, why, instead string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	key := why + "\x00" + instead
	if n.seen[key] {
		return
	}
	if n.seen == nil {
		n.seen = map[string]bool{}
	}
	n.seen[key] = true
	fmt.Fprintf(n.w, "gorun: %s: %s; %s\n", device, why, instead)
}
