//go:build cgo && amd64 && !purego

package gemm

/*
#cgo CFLAGS: -O3
int gorun_sgemm(int level, int transA, int transB, long m, long n, long k,
                float alpha, const float *A, long lda, const float *B, long ldb,
                float beta, float *C, long ldc);
float gorun_fma_peak_avx512(long iters);
float gorun_fma_peak_avx2(long iters);
*/
import "C"

import (
	"unsafe"

	"gorun/ops/internal/vec"
)

// cpuLevel is the best C kernel this CPU runs: 2 AVX-512, 1 AVX2+FMA,
// 0 portable (the same test as the vectorised kernels').
var cpuLevel = vec.Level()

// goMaxWork is the most multiply-adds (m·n·k) for which the pure-Go loop
// beats the ~250ns fixed cost of the C path (measured: they break even near
// 8×8×8).
const goMaxWork = 512

// sgemm is Gemm for float32 with checked arguments and m, n, k > 0.
// With the openblas build tag, problems of more than goMaxWork and at most
// blasMaxWork multiply-adds (fc2's shapes at batch 64, anything up to 64³)
// go to OpenBLAS, which wins there; the rest (the convolutions' long-n and
// long-k shapes, fc1, 512³) stay with the C kernel.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if w := m * n * k; haveOpenBLAS && w > goMaxWork && w <= blasMaxWork && blasFits(lda, ldb, ldc) {
		sgemmOpenBLAS(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	sgemmHand(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmHand is the hand-written float32 GEMM: the Go loop for tiny
// problems, the C kernel of cpuLevel otherwise.
func sgemmHand(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m*n*k <= goMaxWork {
		goGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	sgemmLevel(cpuLevel, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmLevel runs the C kernel of the given level (at most cpuLevel).
func sgemmLevel(level int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	rc := C.gorun_sgemm(C.int(level), cbool(transA), cbool(transB), C.long(m), C.long(n), C.long(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(unsafe.SliceData(a))), C.long(lda),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(b))), C.long(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(unsafe.SliceData(c))), C.long(ldc))
	if rc != 0 {
		panic("gemm: out of memory for packing buffers")
	}
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// fmaPeak runs a tight loop of independent fused multiply-adds at the
// widest vector width this CPU has (cpuLevel) and returns how many flops it
// did (an FMA is 2), or 0 where there is no FMA (cpuLevel 0). It is the
// one-core peak that the GEMM benchmarks are measured against.
func fmaPeak(iters int) (flops float64, sink float32) {
	switch cpuLevel {
	case 2:
		return 768 * float64(iters), float32(C.gorun_fma_peak_avx512(C.long(iters)))
	case 1:
		return 192 * float64(iters), float32(C.gorun_fma_peak_avx2(C.long(iters)))
	}
	return 0, 0
}
