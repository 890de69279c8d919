//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdint.h>
#include <stddef.h>

// cublasLtMatmulAlgo_t and cublasLtMatmulHeuristicResult_t as cublasLt.h
// (CUDA 11 to 13) lays them out; gorun needs no CUDA headers but cuda.h.
typedef struct { uint64_t data[8]; } gorun_lt_algo;
typedef struct {
	gorun_lt_algo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} gorun_lt_heuristic;

typedef struct {
	void *create, *destroy, *descCreate, *descDestroy, *descSet, *layoutCreate, *layoutDestroy,
		*prefCreate, *prefDestroy, *prefSet, *heuristic, *matmul;
} gorun_lt_fns;

typedef int (*gorun_ltCreate_t)(void **);
typedef int (*gorun_ltDestroy_t)(void *);
typedef int (*gorun_ltDescCreate_t)(void **, int, int);
typedef int (*gorun_ltDestroyObj_t)(void *);
typedef int (*gorun_ltSetAttr_t)(void *, int, const void *, size_t);
typedef int (*gorun_ltLayoutCreate_t)(void **, int, uint64_t, uint64_t, int64_t);
typedef int (*gorun_ltPrefCreate_t)(void **);
typedef int (*gorun_ltHeuristic_t)(void *, void *, void *, void *, void *, void *, void *, int,
	gorun_lt_heuristic *, int *);
typedef int (*gorun_ltMatmul_t)(void *, void *, const void *, const void *, void *, const void *,
	void *, const void *, const void *, void *, void *, void *, const gorun_lt_algo *, void *,
	size_t, void *);

enum {
	GORUN_LT_R_32F = 0,         // CUDA_R_32F
	GORUN_LT_DESC_TRANSA = 3,   // CUBLASLT_MATMUL_DESC_TRANSA (int32)
	GORUN_LT_DESC_TRANSB = 4,   // CUBLASLT_MATMUL_DESC_TRANSB (int32)
	GORUN_LT_DESC_EPILOGUE = 7, // CUBLASLT_MATMUL_DESC_EPILOGUE (uint32)
	GORUN_LT_DESC_BIAS = 8,     // CUBLASLT_MATMUL_DESC_BIAS_POINTER (void *)
	GORUN_LT_DESC_AUX = 11,     // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER (void *)
	GORUN_LT_PREF_WORKSPACE = 1, // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64)
	GORUN_LT_PREF_ALIGN_A = 5    // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (uint32); B, C, D follow
};

static int gorun_lt_create(gorun_lt_fns *f, void **h) { return ((gorun_ltCreate_t)f->create)(h); }
static void gorun_lt_destroy(gorun_lt_fns *f, void *h) { ((gorun_ltDestroy_t)f->destroy)(h); }

// gorun_lt_prepare creates the descriptor and layouts of one call and
// asks the heuristic for one algorithm within ws bytes of workspace:
// *found is 1 when it offered one. The objects are left for
// gorun_lt_release whatever the outcome.
static int gorun_lt_prepare(gorun_lt_fns *f, void *h, int compute, int ta, int tb, int epilogue,
	uint64_t ar, uint64_t ac, int64_t ald, uint64_t br, uint64_t bc, int64_t bld,
	uint64_t cr, uint64_t cc, int64_t cld, uint64_t ws, uint32_t align,
	const int32_t *extraAttr, const int64_t *extraVal, const int32_t *extraSize, int nextra,
	void **desc, void **la, void **lb, void **lc, gorun_lt_algo *algo, int *found) {
	*found = 0;
	int s = ((gorun_ltDescCreate_t)f->descCreate)(desc, compute, GORUN_LT_R_32F);
	if (s) return s;
	int32_t opa = ta, opb = tb;
	uint32_t ep = (uint32_t)epilogue;
	gorun_ltSetAttr_t set = (gorun_ltSetAttr_t)f->descSet;
	if ((s = set(*desc, GORUN_LT_DESC_TRANSA, &opa, sizeof opa))) return s;
	if ((s = set(*desc, GORUN_LT_DESC_TRANSB, &opb, sizeof opb))) return s;
	if ((s = set(*desc, GORUN_LT_DESC_EPILOGUE, &ep, sizeof ep))) return s;
	// The epilogue's own attributes (ltCall.extraAttrs): int32_t or int64_t.
	for (int i = 0; i < nextra; i++) {
		int32_t v32 = (int32_t)extraVal[i];
		int64_t v64 = extraVal[i];
		if ((s = set(*desc, extraAttr[i], extraSize[i] == 8 ? (const void *)&v64 : (const void *)&v32, (size_t)extraSize[i]))) return s;
	}
	gorun_ltLayoutCreate_t lay = (gorun_ltLayoutCreate_t)f->layoutCreate;
	if ((s = lay(la, GORUN_LT_R_32F, ar, ac, ald))) return s;
	if ((s = lay(lb, GORUN_LT_R_32F, br, bc, bld))) return s;
	if ((s = lay(lc, GORUN_LT_R_32F, cr, cc, cld))) return s;
	void *pref = NULL;
	if ((s = ((gorun_ltPrefCreate_t)f->prefCreate)(&pref))) return s;
	s = ((gorun_ltSetAttr_t)f->prefSet)(pref, GORUN_LT_PREF_WORKSPACE, &ws, sizeof ws);
	for (int i = 0; i < 4 && !s; i++)
		s = ((gorun_ltSetAttr_t)f->prefSet)(pref, GORUN_LT_PREF_ALIGN_A + i, &align, sizeof align);
	gorun_lt_heuristic res;
	int n = 0;
	if (!s) s = ((gorun_ltHeuristic_t)f->heuristic)(h, *desc, *la, *lb, *lc, *lc, pref, 1, &res, &n);
	((gorun_ltDestroyObj_t)f->prefDestroy)(pref);
	if (!s && n > 0 && res.state == 0 && res.workspaceSize <= ws) {
		*algo = res.algo;
		*found = 1;
	}
	return s;
}

static void gorun_lt_release(gorun_lt_fns *f, void *desc, void *la, void *lb, void *lc) {
	void *ls[3] = {la, lb, lc};
	for (int i = 0; i < 3; i++)
		if (ls[i]) ((gorun_ltDestroyObj_t)f->layoutDestroy)(ls[i]);
	if (desc) ((gorun_ltDestroyObj_t)f->descDestroy)(desc);
}

// gorun_lt_matmul queues D = C = α·op(A)·op(B) + β·C with the prepared
// descriptor, its bias and auxiliary-matrix pointers set first (0: none).
static int gorun_lt_matmul(gorun_lt_fns *f, void *h, void *desc, void *la, void *lb, void *lc,
	const gorun_lt_algo *algo, float alpha, uintptr_t a, uintptr_t b, float beta, uintptr_t c,
	uintptr_t bias, uintptr_t aux, uintptr_t ws, uint64_t wsBytes, void *stream) {
	if (bias) {
		void *p = (void *)bias;
		int s = ((gorun_ltSetAttr_t)f->descSet)(desc, GORUN_LT_DESC_BIAS, &p, sizeof p);
		if (s) return s;
	}
	if (aux) {
		void *p = (void *)aux;
		int s = ((gorun_ltSetAttr_t)f->descSet)(desc, GORUN_LT_DESC_AUX, &p, sizeof p);
		if (s) return s;
	}
	return ((gorun_ltMatmul_t)f->matmul)(h, desc, &alpha, (const void *)a, la, (const void *)b, lb,
		&beta, (const void *)c, lc, (void *)c, lc, algo, (void *)ws, (size_t)wsBytes, stream);
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
)

// ltLib is cuBLASLt opened with dlopen: its path and entry points.
type ltLib struct {
	path string
	fns  C.gorun_lt_fns
}

var ltOnce sync.Map // cuBLAS override path → *ltResult

type ltResult struct {
	once sync.Once
	lib  *ltLib
	err  error
}

// openCublasLt opens cuBLASLt once per cuBLAS override path: the
// libcublasLt.so.* next to the cluster file's [cuda] cublas first, then
// libcublasLt.so.13, .12, .11 and libcublasLt.so where the loader finds
// them.
func openCublasLt(cublasOverride string) (*ltLib, error) {
	v, _ := ltOnce.LoadOrStore(cublasOverride, &ltResult{})
	r := v.(*ltResult)
	r.once.Do(func() { r.lib, r.err = loadCublasLt(cublasOverride) })
	return r.lib, r.err
}

// ltBesideCublas is the cuBLASLt beside an overriding libcublas path
// (libcublas.so.12 → libcublasLt.so.12), or "".
func ltBesideCublas(cublas string) string {
	if cublas == "" {
		return ""
	}
	dir, base := filepath.Split(cublas)
	if !strings.HasPrefix(base, "libcublas.") {
		return ""
	}
	return dir + "libcublasLt." + strings.TrimPrefix(base, "libcublas.")
}

func loadCublasLt(cublasOverride string) (*ltLib, error) {
	h, path, err := openFirst("cublasLt", librarySearch("cublasLt", ltBesideCublas(cublasOverride)), dlopen)
	if err != nil {
		return nil, err
	}
	l := &ltLib{path: path}
	f := &l.fns
	for _, s := range []struct {
		name string
		dst  *unsafe.Pointer
	}{
		{"cublasLtCreate", &f.create}, {"cublasLtDestroy", &f.destroy},
		{"cublasLtMatmulDescCreate", &f.descCreate}, {"cublasLtMatmulDescDestroy", &f.descDestroy},
		{"cublasLtMatmulDescSetAttribute", &f.descSet},
		{"cublasLtMatrixLayoutCreate", &f.layoutCreate}, {"cublasLtMatrixLayoutDestroy", &f.layoutDestroy},
		{"cublasLtMatmulPreferenceCreate", &f.prefCreate}, {"cublasLtMatmulPreferenceDestroy", &f.prefDestroy},
		{"cublasLtMatmulPreferenceSetAttribute", &f.prefSet},
		{"cublasLtMatmulAlgoGetHeuristic", &f.heuristic}, {"cublasLtMatmul", &f.matmul},
	} {
		if *s.dst = dlsym(h, s.name); *s.dst == nil {
			return nil, fmt.Errorf("cuda: %s has no symbol %s (is it cuBLASLt 11 or later?)", path, s.name)
		}
	}
	return l, nil
}

// ltPrepared is one ltCall's descriptor, layouts and algorithm; ok is
// false when the heuristic offered none (the call falls back).
type ltPrepared struct {
	desc, la, lb, lc unsafe.Pointer
	algo             C.gorun_lt_algo
	ok               bool
}

// ltHandle is one cuBLASLt handle of a device, sharing the cuBLAS
// handle's workspace (both run on the compute stream, in order), with the
// calls it has prepared.
type ltHandle struct {
	lib   *ltLib
	h     unsafe.Pointer
	ws    cu.DevicePtr
	calls map[ltCall]*ltPrepared
	notes ltNotes
}

// newLtHandle opens cuBLASLt and creates a handle; nil and the reason
// when it cannot (the device then runs cuBLAS and the separate kernels).
func newLtHandle(cublasOverride string, ws cu.DevicePtr) (*ltHandle, error) {
	lib, err := openCublasLt(cublasOverride)
	if err != nil {
		return nil, err
	}
	l := &ltHandle{lib: lib, ws: ws, calls: map[ltCall]*ltPrepared{}, notes: ltNotes{w: os.Stderr}}
	if err := cublasCheck("cublasLtCreate", C.gorun_lt_create(&lib.fns, &l.h)); err != nil {
		return nil, fmt.Errorf("%w (cuBLASLt from %s)", err, lib.path)
	}
	return l, nil
}

// prepare returns c's prepared call, preparing it the first time.
func (l *ltHandle) prepare(c ltCall) (*ltPrepared, error) {
	if p := l.calls[c]; p != nil {
		return p, nil
	}
	p := &ltPrepared{}
	var found C.int
	extra := c.extraAttrs()
	ids, vals, sizes := make([]C.int32_t, len(extra)+1), make([]C.int64_t, len(extra)+1), make([]C.int32_t, len(extra)+1)
	for i, a := range extra {
		ids[i], vals[i], sizes[i] = C.int32_t(a.Attr), C.int64_t(a.Value), C.int32_t(a.Size)
	}
	s := C.gorun_lt_prepare(&l.lib.fns, l.h, C.int(c.Compute), C.int(cublasOp(c.TransA)), C.int(cublasOp(c.TransB)), C.int(c.Epilogue),
		C.uint64_t(c.A.Rows), C.uint64_t(c.A.Cols), C.int64_t(c.A.LD), C.uint64_t(c.B.Rows), C.uint64_t(c.B.Cols), C.int64_t(c.B.LD),
		C.uint64_t(c.C.Rows), C.uint64_t(c.C.Cols), C.int64_t(c.C.LD), C.uint64_t(cublasWorkspaceBytes), C.uint32_t(c.Align),
		&ids[0], &vals[0], &sizes[0], C.int(len(extra)),
		&p.desc, &p.la, &p.lb, &p.lc, &p.algo, &found)
	if err := cublasCheck("cublasLt (preparing a matmul)", s); err != nil {
		C.gorun_lt_release(&l.lib.fns, p.desc, p.la, p.lb, p.lc)
		l.calls[c] = &ltPrepared{} // not again: the call falls back
		return nil, err
	}
	p.ok = found != 0
	l.calls[c] = p
	return p, nil
}

// matmul queues c on stream s over the row-major operands a and b into
// out, with bias for an epilogue that takes one (and aux, the auxiliary
// matrix, for one that writes it). ran is false, with no error, when
// cuBLASLt has no algorithm for c or refuses it (a status other than
// success, with nothing launched): the caller runs cuBLAS, and the device
// says why once. A refused call is not tried again.
func (l *ltHandle) matmul(device string, c ltCall, a, b, out, bias, aux uintptr, s cu.Stream) (ran bool) {
	p, err := l.prepare(c)
	if err != nil {
		l.notes.fallbackAs(device, err.Error(), c.instead())
		return false
	}
	if !p.ok {
		l.notes.fallbackAs(device, fmt.Sprintf("cuBLASLt offers no algorithm for the %d×%d product over %d (epilogue %d)", c.C.Rows, c.C.Cols, c.k(), c.Epilogue), c.instead())
		return false
	}
	x, y := a, b
	if c.SwapOperands {
		x, y = b, a
	}
	st := C.gorun_lt_matmul(&l.lib.fns, l.h, p.desc, p.la, p.lb, p.lc, &p.algo, 1, C.uintptr_t(x), C.uintptr_t(y), 0,
		C.uintptr_t(out), C.uintptr_t(bias), C.uintptr_t(aux), C.uintptr_t(l.ws), C.uint64_t(cublasWorkspaceBytes), unsafe.Pointer(cStream(s)))
	if err := cublasCheck("cublasLtMatmul", st); err != nil {
		p.ok = false
		l.notes.fallbackAs(device, err.Error(), c.instead())
		return false
	}
	return true
}

// openLt opens cuBLASLt for the device unless the cluster file's [cuda]
// cublaslt is false; without it (a note says why) linear layers run
// cuBLAS and the separate bias kernel.
func (d *Device) openLt() {
	if d.set.NoCublasLt {
		return
	}
	lt, err := newLtHandle(d.set.Cublas, d.blasWork)
	if err != nil {
		(&ltNotes{w: os.Stderr}).fallback(d.Name(), err.Error())
		return
	}
	d.lt = lt
}

// linearBias queues ops.Linear with a bias as one cuBLASLt matmul (the
// bias in its epilogue); ran is false when the device has no cuBLASLt, or
// it has no algorithm for the shape or refuses it (the caller then runs
// SGEMM and gorun_bias_add).
func (d *Device) linearBias(n, i, o int, x, w, b, y uintptr) (ran bool) {
	if d.lt == nil {
		return false
	}
	c, ok := linearBiasCall(n, i, o, ltAlignment(x, w, b, y), ltCompute(computeType(d.lowp), d.set.TF32))
	return ok && d.lt.matmul(d.Name(), c, x, w, y, b, 0, d.stream)
}

// linearGELU queues ops.LinearGELU (tanh form) as one cuBLASLt matmul
// whose epilogue adds the bias (b may be 0: none), applies GELU into y
// and stores the pre-activation into pre (linearGELUCall); ran is false
// when the device has no cuBLASLt, or it has no algorithm for the shape
// or refuses it (the caller then runs the unfused kernels).
func (d *Device) linearGELU(n, i, o int, x, w, b, y, pre uintptr) (ran bool) {
	if d.lt == nil {
		return false
	}
	c, ok := linearGELUCall(n, i, o, b != 0, ltAlignment(x, w, b, y, pre), ltCompute(computeType(d.lowp), d.set.TF32))
	return ok && d.lt.matmul(d.Name(), c, x, w, y, b, pre, d.stream)
}

// linearGradInputGELU queues ops.LinearGradInputGELU (tanh form) as one
// cuBLASLt matmul whose epilogue multiplies dy·w by GELU'(pre) into dx
// (linearGradInputGELUCall); ran is false when the device has no
// cuBLASLt, or it has no algorithm for the shape or refuses it (the
// caller then runs the unfused kernels).
func (d *Device) linearGradInputGELU(n, o, i int, dy, w, pre, dx uintptr) (ran bool) {
	if d.lt == nil {
		return false
	}
	c, ok := linearGradInputGELUCall(n, o, i, ltAlignment(dy, w, pre, dx), ltCompute(computeType(d.lowp), d.set.TF32))
	return ok && d.lt.matmul(d.Name(), c, dy, w, dx, 0, pre, d.stream)
}

// linearGradWeightBias queues ops.LinearGradWeightBias, overwriting dw
// and db, as one cuBLASLt matmul whose epilogue sums dy's rows into db
// (linearGradWeightBiasCall); ran is false when the device has no
// cuBLASLt, or it has no algorithm for the shape or refuses it (the
// caller then runs the unfused kernels).
func (d *Device) linearGradWeightBias(n, o, i int, dy, x, dw, db uintptr) (ran bool) {
	if d.lt == nil {
		return false
	}
	c, ok := linearGradWeightBiasCall(n, o, i, ltAlignment(dy, x, dw, db), ltCompute(computeType(d.lowp), d.set.TF32))
	return ok && d.lt.matmul(d.Name(), c, dy, x, dw, db, 0, d.stream)
}

func (l *ltHandle) close() {
	for _, p := range l.calls {
		C.gorun_lt_release(&l.lib.fns, p.desc, p.la, p.lb, p.lc)
	}
	l.calls = nil
	if l.h != nil {
		C.gorun_lt_destroy(&l.lib.fns, l.h)
		l.h = nil
	}
}
