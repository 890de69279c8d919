package cuda

import "gorun/ops"

// cuBLAS is column-major; gorun's matrices are row-major. A row-major
// m×n matrix C is, read column-major, the n×m matrix Cᵀ, so the row-major
// product C = op(A)·op(B) is the column-major product
// Cᵀ = op(B)ᵀ·op(A)ᵀ: the call swaps the operands (B first), swaps m and
// n, and keeps each operand's transpose flag and leading dimension (a
// row-major leading dimension is the column-major one of the transpose).

// gemmCall is one cublasSgemm_v2 (or, with Batch > 1,
// cublasSgemmStridedBatched) call, column-major: C = α·op(A)·op(B) + β·C
// with op(A) M×K and op(B) K×N. A, B and C are byte offsets from the
// operands' base pointers, and SwapOperands says that the call's A is the
// row-major product's B.
type gemmCall struct {
	TransA, TransB bool
	M, N, K        int
	LDA, LDB, LDC  int
	// Batch is the number of products of a strided batched call (1 for
	// a plain one); StrideA, StrideB and StrideC are the distances in
	// elements between consecutive products' matrices.
	Batch                     int
	StrideA, StrideB, StrideC int64
	SwapOperands              bool
}

// rowMajorGemm maps the row-major product C[m×n] = op(A)·op(B) (op(A)
// m×k, op(B) k×n, leading dimensions lda, ldb, ldc as ops' matmul takes
// them) onto a column-major cuBLAS call whose first operand is B and whose
// second is A.
func rowMajorGemm(transA, transB bool, m, n, k, lda, ldb, ldc int) gemmCall {
	return gemmCall{
		TransA: transB, TransB: transA,
		M: n, N: m, K: k,
		LDA: ldb, LDB: lda, LDC: ldc,
		Batch:        1,
		SwapOperands: true,
	}
}

// rowMajorGemmBatched is rowMajorGemm for batch products whose operands
// lie strideA, strideB and strideC elements apart (a stride of 0 reuses
// one matrix for every product).
func rowMajorGemmBatched(transA, transB bool, m, n, k, lda, ldb, ldc, batch int, strideA, strideB, strideC int64) gemmCall {
	g := rowMajorGemm(transA, transB, m, n, k, lda, ldb, ldc)
	g.Batch = batch
	g.StrideA, g.StrideB, g.StrideC = strideB, strideA, strideC
	return g
}

// cuBLAS operation codes (cublasOperation_t).
const (
	cublasOpN = 0
	cublasOpT = 1
)

func cublasOp(trans bool) int {
	if trans {
		return cublasOpT
	}
	return cublasOpN
}

// f32 is a GEMM's beta for an output that accumulates (1) or is
// overwritten (0).
func f32(acc bool) float32 {
	if acc {
		return 1
	}
	return 0
}

// batchMatMulCall maps ops.BatchMatMul over a[B...,M,K] (or [B...,K,M]
// with TransA) and b[B...,K,N] (or [B...,N,K] with TransB), with live
// elements of a, onto one strided batched GEMM: one product per matrix,
// as ops/matmul.go's loop. ok is false when the live batch holds no
// matrix (nothing to do).
func batchMatMulCall(a *ops.Attrs, x, y []int, live int) (g gemmCall, ok bool) {
	r := len(x)
	xr, xc := x[r-2], x[r-1]
	yr, yc := y[r-2], y[r-1]
	if xr*xc == 0 {
		return gemmCall{}, false
	}
	batch := live / (xr * xc)
	m, k := xr, xc
	if a.TransA {
		m, k = xc, xr
	}
	n := yc
	if a.TransB {
		n = yr
	}
	if batch == 0 {
		return gemmCall{}, false
	}
	return rowMajorGemmBatched(a.TransA, a.TransB, m, n, k, xc, yc, n, batch, int64(xr*xc), int64(yr*yc), int64(m*n)), true
}
