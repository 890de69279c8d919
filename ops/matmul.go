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

// batchMatMul: in a[B...,M,K] (or [B...,K,M] with TransA), b[B...,K,N] (or
// [B...,N,K] with TransB); out c[B...,M,N] = op(a)·op(b), one GEMM per
// matrix of the (live) batch.
func batchMatMul[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y, z := in[0], in[1], out[0]
	r := len(x.Shape)
	batch := prod(x.Shape[:r-2])
	xr, xc := x.Shape[r-2], x.Shape[r-1]
	yr, yc := y.Shape[r-2], y.Shape[r-1]
	m, k := xr, xc
	if a.TransA {
		m, k = xc, xr
	}
	n := yc
	if a.TransB {
		n = yr
	}
	sx, sy, sz := xr*xc, yr*yc, m*n
	for i := 0; i < batch; i++ {
		matmul(a.TransA, a.TransB, m, n, k, 1, x.Data[i*sx:][:sx], xc, y.Data[i*sy:][:sy], yc, 0, z.Data[i*sz:][:sz], n)
	}
}
