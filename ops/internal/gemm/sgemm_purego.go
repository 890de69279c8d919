//go:build !cgo || !amd64 || purego

package gemm

// cpuLevel is -1: there are no C kernels in this build.
const cpuLevel = -1

// sgemm is Gemm for float32 with checked arguments and m, n, k > 0.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	goGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmHand is the hand-written float32 GEMM: here, the Go loop.
func sgemmHand(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	goGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmLevel is sgemm; there are no C kernels to choose from.
func sgemmLevel(_ int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// fmaPeak is 0: this build has no FMA loop to measure.
func fmaPeak(iters int) (flops float64, sink float32) { return 0, 0 }
