//go:build !(cgo && amd64 && !purego && openblas)

package gemm

// haveOpenBLAS is false: this build does not link OpenBLAS (build with
// -tags openblas, and cgo, on amd64).
const haveOpenBLAS = false

// blasMaxWork is 0: Gemm sends nothing to OpenBLAS.
const blasMaxWork = 0

func blasFits(lda, ldb, ldc int) bool { return false }

func openBLASInfo() string { return "not linked" }

func sgemmOpenBLAS(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("gemm: OpenBLAS is not linked into this build (-tags openblas)")
}
