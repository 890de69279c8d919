//go:build cuda

package cuda

// This file holds the driver API calls that gorgonia.org/cu does not wrap
// (stream capture, graph instantiation and launch, graph node parameters)
// or wraps with a per-call allocation on the hot path (kernel launches,
// asynchronous copies). They take cu's handle types, which are single C
// pointers, converted with the helpers below.

/*
#cgo CFLAGS: -I/usr/local/cuda/include
#cgo LDFLAGS: -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs -lcuda -ldl
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

CUresult gorun_cuinit_result(void);

static CUresult gorun_launch(CUfunction f, unsigned int grid, unsigned int block, unsigned int shmem, CUstream s, void **args) {
	return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shmem, s, args, NULL);
}

static CUresult gorun_htod(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	return cuMemcpyHtoDAsync(dst, src, n, s);
}

static CUresult gorun_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s) {
	return cuMemcpyDtoHAsync(dst, src, n, s);
}

static CUresult gorun_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	return cuMemcpyDtoDAsync(dst, src, n, s);
}

static CUresult gorun_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s) {
	return cuMemcpyPeerAsync(dst, dctx, src, sctx, n, s);
}

static CUresult gorun_memset32(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
	return cuMemsetD32Async(dst, v, n, s);
}

static CUresult gorun_record(CUevent e, CUstream s) { return cuEventRecord(e, s); }
static CUresult gorun_event_sync(CUevent e) { return cuEventSynchronize(e); }
static CUresult gorun_host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }
static CUresult gorun_host_free(void *p) { return cuMemFreeHost(p); }
static CUresult gorun_wait(CUstream s, CUevent e) { return cuStreamWaitEvent(s, e, 0); }
static CUresult gorun_sync(CUstream s) { return cuStreamSynchronize(s); }
static CUresult gorun_set_ctx(CUcontext c) { return cuCtxSetCurrent(c); }
static CUcontext gorun_get_ctx(void) {
	CUcontext c = NULL;
	cuCtxGetCurrent(&c);
	return c;
}

static CUresult gorun_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}

static CUresult gorun_end_capture(CUstream s, CUgraph *g) { return cuStreamEndCapture(s, g); }

static CUresult gorun_instantiate(CUgraphExec *e, CUgraph g) {
	return cuGraphInstantiateWithFlags(e, g, 0);
}

static CUresult gorun_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
static CUresult gorun_graph_destroy(CUgraph g) { return cuGraphDestroy(g); }
static CUresult gorun_exec_destroy(CUgraphExec e) { return cuGraphExecDestroy(e); }

// gorun_last_node returns the node that the last operation captured on s
// added to the graph (the stream's single dependency after it).
static CUresult gorun_last_node(CUstream s, CUgraphNode *node) {
	CUstreamCaptureStatus st;
	cuuint64_t id;
	CUgraph g;
	const CUgraphNode *deps = NULL;
	size_t n = 0;
	CUresult r = cuStreamGetCaptureInfo_v2(s, &st, &id, &g, &deps, &n);
	if (r != CUDA_SUCCESS) return r;
	if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || n != 1) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	*node = deps[0];
	return CUDA_SUCCESS;
}

static CUresult gorun_set_kernel_params(CUgraphExec e, CUgraphNode node, CUfunction f, unsigned int grid, unsigned int block, unsigned int shmem, void **args) {
	CUDA_KERNEL_NODE_PARAMS p;
	memset(&p, 0, sizeof p);
	p.func = f;
	p.gridDimX = grid; p.gridDimY = 1; p.gridDimZ = 1;
	p.blockDimX = block; p.blockDimY = 1; p.blockDimZ = 1;
	p.sharedMemBytes = shmem;
	p.kernelParams = args;
	p.extra = NULL;
	return cuGraphExecKernelNodeSetParams(e, node, &p);
}

static const char *gorun_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}

static const char *gorun_error_string(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorString(r, &s) != CUDA_SUCCESS || s == NULL) return "unknown error";
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// cuError is a failed driver API call.
type cuError struct {
	call string
	code C.CUresult
}

func (e *cuError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.call, C.GoString(C.gorun_error_name(e.code)), C.GoString(C.gorun_error_string(e.code)))
}

// check turns a driver result into an error naming the call.
func check(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &cuError{call, r}
}

// initError is nil when cuInit found a usable driver and GPU, and
// otherwise says, in one line, why this machine cannot run the cuda
// backend.
func initError() error {
	r := C.gorun_cuinit_result()
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return fmt.Errorf("cuda: no usable NVIDIA GPU on this machine: cuInit: %s (%s); run with backend = \"cpu\" instead",
		C.GoString(C.gorun_error_name(r)), C.GoString(C.gorun_error_string(r)))
}

// The conversions below read cu's handle types, each a struct holding one
// C pointer, as the C handle.

func cStream(s cu.Stream) C.CUstream         { return *(*C.CUstream)(unsafe.Pointer(&s)) }
func cEvent(e cu.Event) C.CUevent            { return *(*C.CUevent)(unsafe.Pointer(&e)) }
func cFunc(f cu.Function) C.CUfunction       { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func cCtx(c cu.CUContext) C.CUcontext        { return *(*C.CUcontext)(unsafe.Pointer(&c)) }
func cPtr(p cu.DevicePtr) C.CUdeviceptr      { return C.CUdeviceptr(p) }
func cuCtxOf(c C.CUcontext) (x cu.CUContext) { *(*C.CUcontext)(unsafe.Pointer(&x)) = c; return x }

// setCurrent makes ctx the calling thread's current context.
func setCurrent(ctx cu.CUContext) error { return check("cuCtxSetCurrent", C.gorun_set_ctx(cCtx(ctx))) }

// currentCtx is the calling thread's current context.
func currentCtx() cu.CUContext { return cuCtxOf(C.gorun_get_ctx()) }

// argBlock is a kernel's argument list in C memory: len(slots) 8-byte
// values and an array of pointers to them, as cuLaunchKernel takes.
type argBlock struct {
	vals unsafe.Pointer // [maxArgs]uint64
	ptrs unsafe.Pointer // [maxArgs]*uint64
	n    int
}

func newArgBlock() *argBlock {
	a := &argBlock{
		vals: C.calloc(maxArgs, 8),
		ptrs: C.calloc(maxArgs, C.size_t(unsafe.Sizeof(uintptr(0)))),
	}
	vals := unsafe.Slice((*uint64)(a.vals), maxArgs)
	ptrs := unsafe.Slice((*unsafe.Pointer)(a.ptrs), maxArgs)
	for i := range ptrs {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	return a
}

// set writes the argument values (see kernelArg.bits).
func (a *argBlock) set(bits []uint64) {
	vals := unsafe.Slice((*uint64)(a.vals), maxArgs)
	copy(vals, bits)
	a.n = len(bits)
}

func (a *argBlock) free() {
	C.free(a.vals)
	C.free(a.ptrs)
	a.vals, a.ptrs = nil, nil
}

func launch(f cu.Function, g geometry, s cu.Stream, a *argBlock) error {
	return check("cuLaunchKernel", C.gorun_launch(cFunc(f), C.uint(g.Grid), C.uint(g.Block), C.uint(g.Shared), cStream(s), (*unsafe.Pointer)(a.ptrs)))
}

// hostBuf is host memory from C's allocator, the only host memory handed
// to the driver's copies: cgo's pointer check then never looks at Go
// memory, where a caller's slice may share an allocation with pointers
// (a loss array inside a struct). It is pageable, so a host-to-device
// copy from it has been staged by the driver when memcpyHtoD returns and
// the buffer may be reused at once.
type hostBuf struct {
	p unsafe.Pointer
	n int
}

// bytes is the buffer's first n bytes, grown to hold them.
func (h *hostBuf) bytes(n int) []byte {
	if n > h.n {
		C.free(h.p)
		h.p = C.malloc(C.size_t(max(n, 64)))
		h.n = max(n, 64)
	}
	return unsafe.Slice((*byte)(h.p), n)
}

func (h *hostBuf) free() {
	C.free(h.p)
	h.p, h.n = nil, 0
}

func memcpyHtoD(dst cu.DevicePtr, src unsafe.Pointer, bytes int, s cu.Stream) error {
	if bytes == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.gorun_htod(cPtr(dst), src, C.size_t(bytes), cStream(s)))
}

func memcpyDtoH(dst unsafe.Pointer, src cu.DevicePtr, bytes int, s cu.Stream) error {
	if bytes == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.gorun_dtoh(dst, cPtr(src), C.size_t(bytes), cStream(s)))
}

func memcpyDtoD(dst, src cu.DevicePtr, bytes int, s cu.Stream) error {
	if bytes == 0 || dst == src {
		return nil
	}
	return check("cuMemcpyDtoDAsync", C.gorun_dtod(cPtr(dst), cPtr(src), C.size_t(bytes), cStream(s)))
}

func memcpyPeer(dst cu.DevicePtr, dctx cu.CUContext, src cu.DevicePtr, sctx cu.CUContext, bytes int, s cu.Stream) error {
	if bytes == 0 {
		return nil
	}
	return check("cuMemcpyPeerAsync", C.gorun_peer(cPtr(dst), cCtx(dctx), cPtr(src), cCtx(sctx), C.size_t(bytes), cStream(s)))
}

func memset32(dst cu.DevicePtr, v uint32, n int, s cu.Stream) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD32Async", C.gorun_memset32(cPtr(dst), C.uint(v), C.size_t(n), cStream(s)))
}

func record(e cu.Event, s cu.Stream) error {
	return check("cuEventRecord", C.gorun_record(cEvent(e), cStream(s)))
}
func waitEvent(s cu.Stream, e cu.Event) error {
	return check("cuStreamWaitEvent", C.gorun_wait(cStream(s), cEvent(e)))
}
func syncStream(s cu.Stream) error { return check("cuStreamSynchronize", C.gorun_sync(cStream(s))) }

// syncEvent waits until the work recorded before e is done.
func syncEvent(e cu.Event) error { return check("cuEventSynchronize", C.gorun_event_sync(cEvent(e))) }

// pinnedAlloc allocates n bytes of page-locked host memory (cuMemHostAlloc):
// a device-to-host copy into it is asynchronous.
func pinnedAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.gorun_host_alloc(&p, C.size_t(n))); err != nil {
		return nil, err
	}
	return p, nil
}

// pinnedFree frees what pinnedAlloc allocated.
func pinnedFree(p unsafe.Pointer) error { return check("cuMemFreeHost", C.gorun_host_free(p)) }

// graphExec is an instantiated CUDA graph and the graph it came from,
// kept while the instance lives: its nodes name the kernels whose
// arguments setKernelParams replaces.
type graphExec struct {
	graph C.CUgraph
	exec  C.CUgraphExec
}

// graphNode is a node of a captured graph.
type graphNode struct{ n C.CUgraphNode }

func beginCapture(s cu.Stream) error {
	return check("cuStreamBeginCapture", C.gorun_begin_capture(cStream(s)))
}

// endCapture ends a capture on s and instantiates the graph.
func endCapture(s cu.Stream) (*graphExec, error) {
	var g C.CUgraph
	if err := check("cuStreamEndCapture", C.gorun_end_capture(cStream(s), &g)); err != nil {
		return nil, err
	}
	ge := &graphExec{graph: g}
	if err := check("cuGraphInstantiateWithFlags", C.gorun_instantiate(&ge.exec, g)); err != nil {
		C.gorun_graph_destroy(g)
		return nil, err
	}
	return ge, nil
}

// abortCapture ends a failed capture, dropping what was captured.
func abortCapture(s cu.Stream) {
	var g C.CUgraph
	if C.gorun_end_capture(cStream(s), &g) == C.CUDA_SUCCESS && g != nil {
		C.gorun_graph_destroy(g)
	}
}

// lastNode is the node the last launch captured on s added.
func lastNode(s cu.Stream) (graphNode, error) {
	var n graphNode
	err := check("cuStreamGetCaptureInfo_v2", C.gorun_last_node(cStream(s), &n.n))
	return n, err
}

func (g *graphExec) launch(s cu.Stream) error {
	return check("cuGraphLaunch", C.gorun_graph_launch(g.exec, cStream(s)))
}

// setKernelParams replaces the arguments of a kernel node of g.
func (g *graphExec) setKernelParams(n graphNode, f cu.Function, geo geometry, a *argBlock) error {
	return check("cuGraphExecKernelNodeSetParams", C.gorun_set_kernel_params(g.exec, n.n, cFunc(f), C.uint(geo.Grid), C.uint(geo.Block), C.uint(geo.Shared), (*unsafe.Pointer)(a.ptrs)))
}

func (g *graphExec) destroy() {
	if g.exec != nil {
		C.gorun_exec_destroy(g.exec)
		g.exec = nil
	}
	if g.graph != nil {
		C.gorun_graph_destroy(g.graph)
		g.graph = nil
	}
}
