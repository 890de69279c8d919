//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stdint.h>

typedef int (*gorun_cublasCreate_t)(void **);
typedef int (*gorun_cublasDestroy_t)(void *);
typedef int (*gorun_cublasSetStream_t)(void *, void *);
typedef int (*gorun_cublasSetWorkspace_t)(void *, void *, size_t);
typedef int (*gorun_cublasSgemm_t)(void *, int, int, int, int, int, const float *,
	const float *, int, const float *, int, const float *, float *, int);
typedef int (*gorun_cublasSgemmStridedBatched_t)(void *, int, int, int, int, int, const float *,
	const float *, int, long long, const float *, int, long long, const float *, float *, int,
	long long, int);

typedef int (*gorun_cublasSetMathMode_t)(void *, int);
typedef int (*gorun_cublasGemmEx_t)(void *, int, int, int, int, int, const void *,
	const void *, int, int, const void *, int, int, const void *, void *, int, int, int, int);
typedef int (*gorun_cublasGemmStridedBatchedEx_t)(void *, int, int, int, int, int, const void *,
	const void *, int, int, long long, const void *, int, int, long long, const void *, void *, int,
	int, long long, int, int, int);

static void *gorun_dlopen(const char *name, char **err) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		*err = (char *)(e ? e : "unknown dlopen error");
	}
	return h;
}

static void *gorun_dlsym(void *h, const char *name) {
	dlerror();
	return dlsym(h, name);
}

static int gorun_cublas_create(void *f, void **h) { return ((gorun_cublasCreate_t)f)(h); }
static int gorun_cublas_destroy(void *f, void *h) { return ((gorun_cublasDestroy_t)f)(h); }
static int gorun_cublas_set_stream(void *f, void *h, void *s) { return ((gorun_cublasSetStream_t)f)(h, s); }
static int gorun_cublas_set_workspace(void *f, void *h, uintptr_t w, size_t n) {
	return ((gorun_cublasSetWorkspace_t)f)(h, (void *)w, n);
}

static int gorun_sgemm(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int lda, uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	return ((gorun_cublasSgemm_t)f)(h, ta, tb, m, n, k, &alpha, (const float *)a, lda,
		(const float *)b, ldb, &beta, (float *)c, ldc);
}

static int gorun_sgemm_batched(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb, float beta,
	uintptr_t c, int ldc, long long sc, int batch) {
	return ((gorun_cublasSgemmStridedBatched_t)f)(h, ta, tb, m, n, k, &alpha, (const float *)a,
		lda, sa, (const float *)b, ldb, sb, &beta, (float *)c, ldc, sc, batch);
}
static int gorun_cublas_set_math_mode(void *f, void *h, int mode) { return ((gorun_cublasSetMathMode_t)f)(h, mode); }

// A GEMM on float32 storage (CUDA_R_32F = 0) with a compute type, the
// default algorithm (CUBLAS_GEMM_DEFAULT = -1).
static int gorun_gemm_ex(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int lda, uintptr_t b, int ldb, float beta, uintptr_t c, int ldc, int compute) {
	return ((gorun_cublasGemmEx_t)f)(h, ta, tb, m, n, k, &alpha, (const void *)a, 0, lda,
		(const void *)b, 0, ldb, &beta, (void *)c, 0, ldc, compute, -1);
}

static int gorun_gemm_ex_batched(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
	uintptr_t a, int lda, long long sa, uintptr_t b, int ldb, long long sb, float beta,
	uintptr_t c, int ldc, long long sc, int batch, int compute) {
	return ((gorun_cublasGemmStridedBatchedEx_t)f)(h, ta, tb, m, n, k, &alpha, (const void *)a, 0,
		lda, sa, (const void *)b, 0, ldb, sb, &beta, (void *)c, 0, ldc, sc, batch, compute, -1);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"gorun/ops"
)

// dlopen opens a shared library, returning nil and dlerror's text when it
// cannot.
func dlopen(name string) (unsafe.Pointer, string) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var msg *C.char
	h := C.gorun_dlopen(cs, &msg)
	if h == nil {
		return nil, C.GoString(msg)
	}
	return h, ""
}

// dlsym looks a symbol up in an opened library.
func dlsym(h unsafe.Pointer, name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.gorun_dlsym(h, cs)
}

// cublasLib is cuBLAS opened with dlopen: its path and the entry points
// gorun calls.
type cublasLib struct {
	path                                     string
	create, destroy, setStream, setWorkspace unsafe.Pointer
	sgemm, sgemmStridedBatched               unsafe.Pointer
	// Optional: mixed precision's tensor-core GEMMs and [cuda] tf32.
	gemmEx, gemmStridedBatchedEx, setMathMode unsafe.Pointer
}

var (
	cublasOnce sync.Map // override path → *cublasResult
)

type cublasResult struct {
	once sync.Once
	lib  *cublasLib
	err  error
}

// openCublas opens cuBLAS once per override path: override (the cluster
// file's [cuda] cublas) first, then libcublas.so.13, .12, .11 and
// libcublas.so.
func openCublas(override string) (*cublasLib, error) {
	v, _ := cublasOnce.LoadOrStore(override, &cublasResult{})
	r := v.(*cublasResult)
	r.once.Do(func() { r.lib, r.err = loadCublas(override) })
	return r.lib, r.err
}

func loadCublas(override string) (*cublasLib, error) {
	h, path, err := openFirst("cublas", librarySearch("cublas", override), dlopen)
	if err != nil {
		return nil, err
	}
	l := &cublasLib{path: path}
	syms := []struct {
		name     string
		dst      *unsafe.Pointer
		optional bool
	}{
		{"cublasCreate_v2", &l.create, false},
		{"cublasDestroy_v2", &l.destroy, false},
		{"cublasSetStream_v2", &l.setStream, false},
		{"cublasSgemm_v2", &l.sgemm, false},
		{"cublasSgemmStridedBatched", &l.sgemmStridedBatched, false},
		{"cublasSetWorkspace_v2", &l.setWorkspace, true},
		{"cublasGemmEx", &l.gemmEx, true},
		{"cublasGemmStridedBatchedEx", &l.gemmStridedBatchedEx, true},
		{"cublasSetMathMode", &l.setMathMode, true},
	}
	for _, s := range syms {
		*s.dst = dlsym(h, s.name)
		if *s.dst == nil && !s.optional {
			return nil, fmt.Errorf("cuda: %s has no symbol %s (is it cuBLAS 11 or later?)", path, s.name)
		}
	}
	return l, nil
}

// cublasStatus names a cublasStatus_t.
func cublasStatus(s C.int) string {
	switch s {
	case 0:
		return "CUBLAS_STATUS_SUCCESS"
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return fmt.Sprintf("cublasStatus %d", int(s))
}

func cublasCheck(call string, s C.int) error {
	if s == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", call, cublasStatus(s))
}

// blasHandle is one cuBLAS handle, bound to a device's compute stream.
type blasHandle struct {
	lib *cublasLib
	h   unsafe.Pointer
}

// cublasWorkspaceBytes is the workspace each handle gets for its own, so
// that cuBLAS never allocates while a stream is being captured.
const cublasWorkspaceBytes = 32 << 20

// cuBLAS math modes (cublasMath_t) and compute types
// (cublasComputeType_t).
const (
	cublasDefaultMath        = 0
	cublasTF32TensorOpMath   = 3
	cublasCompute32FFast16F  = 74 // CUBLAS_COMPUTE_32F_FAST_16F
	cublasCompute32FFast16BF = 75 // CUBLAS_COMPUTE_32F_FAST_16BF
)

// newBlasHandle creates a handle (in the calling thread's current
// context) on stream s, with workspace ws (cublasWorkspaceBytes) when
// cuBLAS can take one, and with TF32 tensor-core math for float32 GEMMs
// when tf32 is set ([cuda] tf32: PyTorch's allow_tf32).
func newBlasHandle(lib *cublasLib, s cu.Stream, ws cu.DevicePtr, tf32 bool) (*blasHandle, error) {
	b := &blasHandle{lib: lib}
	if err := cublasCheck("cublasCreate_v2", C.gorun_cublas_create(lib.create, &b.h)); err != nil {
		return nil, fmt.Errorf("%w (cuBLAS from %s)", err, lib.path)
	}
	if err := cublasCheck("cublasSetStream_v2", C.gorun_cublas_set_stream(lib.setStream, b.h, unsafe.Pointer(cStream(s)))); err != nil {
		b.close()
		return nil, err
	}
	if lib.setWorkspace != nil && ws != 0 {
		if err := cublasCheck("cublasSetWorkspace_v2", C.gorun_cublas_set_workspace(lib.setWorkspace, b.h, C.uintptr_t(ws), cublasWorkspaceBytes)); err != nil {
			b.close()
			return nil, err
		}
	}
	if tf32 {
		if lib.setMathMode == nil {
			b.close()
			return nil, fmt.Errorf("cuda: [cuda] tf32 = true, but %s has no cublasSetMathMode (TF32 needs cuBLAS 11 or later)", lib.path)
		}
		if err := cublasCheck("cublasSetMathMode(CUBLAS_TF32_TENSOR_OP_MATH)", C.gorun_cublas_set_math_mode(lib.setMathMode, b.h, cublasTF32TensorOpMath)); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

// computeType is the cuBLAS compute type of a GEMM on operands that hold
// values of precision p (mixed precision's casts: float32 storage holding
// bfloat16 or float16 numbers): CUBLAS_COMPUTE_32F_FAST_16BF or _16F,
// which lets cuBLAS convert the inputs to that format (exactly: they hold
// its numbers) and run tensor cores with float32 accumulation, as
// torch.autocast's GEMMs on bfloat16 or float16 operands do. 0 for fp32:
// cublasSgemm.
func computeType(p ops.Precision) int {
	switch p {
	case ops.BF16:
		return cublasCompute32FFast16BF
	case ops.FP16:
		return cublasCompute32FFast16F
	}
	return 0
}

// gemm runs g with the row-major operands a and b (device addresses) into
// c: with g.SwapOperands the call's first operand is b.
//
// With a compute type (computeType: a mixed-precision step's operands)
// and cuBLAS's GemmEx entry points, the product runs through
// cublasGemmEx or cublasGemmStridedBatchedEx with that compute type;
// without them, through cublasSgemm, which computes the same numbers on
// operands that hold low-precision values (exact products, float32
// accumulation), only without tensor cores.
func (b *blasHandle) gemm(g gemmCall, alpha, beta float32, a, bm, c uintptr, compute int) error {
	x, y := a, bm
	if g.SwapOperands {
		x, y = bm, a
	}
	if compute != 0 && g.Batch <= 1 && b.lib.gemmEx != nil {
		return cublasCheck("cublasGemmEx", C.gorun_gemm_ex(b.lib.gemmEx, b.h, C.int(cublasOp(g.TransA)), C.int(cublasOp(g.TransB)),
			C.int(g.M), C.int(g.N), C.int(g.K), C.float(alpha), C.uintptr_t(x), C.int(g.LDA), C.uintptr_t(y), C.int(g.LDB),
			C.float(beta), C.uintptr_t(c), C.int(g.LDC), C.int(compute)))
	}
	if compute != 0 && g.Batch > 1 && b.lib.gemmStridedBatchedEx != nil {
		return cublasCheck("cublasGemmStridedBatchedEx", C.gorun_gemm_ex_batched(b.lib.gemmStridedBatchedEx, b.h,
			C.int(cublasOp(g.TransA)), C.int(cublasOp(g.TransB)), C.int(g.M), C.int(g.N), C.int(g.K), C.float(alpha),
			C.uintptr_t(x), C.int(g.LDA), C.longlong(g.StrideA), C.uintptr_t(y), C.int(g.LDB), C.longlong(g.StrideB),
			C.float(beta), C.uintptr_t(c), C.int(g.LDC), C.longlong(g.StrideC), C.int(g.Batch), C.int(compute)))
	}
	if g.Batch <= 1 {
		return cublasCheck("cublasSgemm_v2", C.gorun_sgemm(b.lib.sgemm, b.h, C.int(cublasOp(g.TransA)), C.int(cublasOp(g.TransB)),
			C.int(g.M), C.int(g.N), C.int(g.K), C.float(alpha), C.uintptr_t(x), C.int(g.LDA), C.uintptr_t(y), C.int(g.LDB),
			C.float(beta), C.uintptr_t(c), C.int(g.LDC)))
	}
	return cublasCheck("cublasSgemmStridedBatched", C.gorun_sgemm_batched(b.lib.sgemmStridedBatched, b.h,
		C.int(cublasOp(g.TransA)), C.int(cublasOp(g.TransB)), C.int(g.M), C.int(g.N), C.int(g.K), C.float(alpha),
		C.uintptr_t(x), C.int(g.LDA), C.longlong(g.StrideA), C.uintptr_t(y), C.int(g.LDB), C.longlong(g.StrideB),
		C.float(beta), C.uintptr_t(c), C.int(g.LDC), C.longlong(g.StrideC), C.int(g.Batch)))
}

func (b *blasHandle) close() {
	if b.h != nil {
		C.gorun_cublas_destroy(b.lib.destroy, b.h)
		b.h = nil
	}
}
