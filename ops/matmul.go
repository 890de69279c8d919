package ops

import (
	"unsafe"

	"gorun/ops/internal/gemm"
)

// matmul is gemm.Gemm for any Float. gemm.Gemm takes exactly float32 or
// float64, while Float admits any type whose underlying type is one of
// them; such a type has the same memory layout, so its slices are viewed
// as []float32 or []float64 without copying.
func matmul[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if unsafe.Sizeof(alpha) == 4 {
		gemm.Gemm(transA, transB, m, n, k, float32(alpha), view[float32](a), lda, view[float32](b), ldb, float32(beta), view[float32](c), ldc)
		return
	}
	gemm.Gemm(transA, transB, m, n, k, float64(alpha), view[float64](a), lda, view[float64](b), ldb, float64(beta), view[float64](c), ldc)
}
