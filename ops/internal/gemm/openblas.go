//go:build cgo && amd64 && !purego && openblas

package gemm

/*
#cgo LDFLAGS: -lopenblas

// Declared here rather than taken from <cblas.h>, which Debian points at
// whichever BLAS the alternatives system selects.
enum { gorunRowMajor = 101, gorunNoTrans = 111, gorunTrans = 112 };
void cblas_sgemm(int order, int transA, int transB, int m, int n, int k,
                 float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);
char *openblas_get_config(void);
*/
import "C"

import (
	"math"
	"unsafe"
)

// haveOpenBLAS is true when this build links OpenBLAS (the openblas tag).
const haveOpenBLAS = true

// blasMaxWork is the most multiply-adds (m·n·k) that Gemm sends to OpenBLAS
// rather than to the hand-written kernel. Measured with BenchmarkSGEMMShapes
// (AMD EPYC Zen 4, OpenBLAS 0.3.21 Cooperlake kernels, one thread): up to
// 64³ = 2¹⁸ OpenBLAS is 1.3–1.9× faster (the Net's fc2 shapes, fc1 at batch
// ≤ 16, 64³, the convolutions at batch 1); from about 2²⁰ the two tie (fc1
// at batch 64, 128³, 512³), and on the convolutions at batch ≥ 4 the
// hand-written kernel is 1.1–3.7× faster.
const blasMaxWork = 1 << 18

// blasFits reports whether the strides fit cblas_sgemm's int arguments
// (m, n and k do when m·n·k ≤ blasMaxWork).
func blasFits(lda, ldb, ldc int) bool {
	return lda <= math.MaxInt32 && ldb <= math.MaxInt32 && ldc <= math.MaxInt32
}

func init() {
	// One device is one goroutine on its own core: OpenBLAS must not
	// start threads of its own; each call runs on the calling thread.
	C.openblas_set_num_threads(1)
}

// openBLASInfo names OpenBLAS's build and the kernel it chose for this CPU.
func openBLASInfo() string {
	return C.GoString(C.openblas_get_config()) + " core=" + C.GoString(C.openblas_get_corename())
}

// sgemmOpenBLAS is sgemm through OpenBLAS's cblas_sgemm, single-threaded.
// Arguments are checked and m, n, k > 0.
func sgemmOpenBLAS(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	C.cblas_sgemm(C.gorunRowMajor, cblasTrans(transA), cblasTrans(transB), C.int(m), C.int(n), C.int(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(unsafe.SliceData(a))), C.int(lda),
		(*C.float)(unsafe.Pointer(unsafe.SliceData(b))), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(unsafe.SliceData(c))), C.int(ldc))
}

func cblasTrans(t bool) C.int {
	if t {
		return C.gorunTrans
	}
	return C.gorunNoTrans
}
