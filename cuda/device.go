//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
	"gorgonia.org/tensor"

	"gorun/comm"
	"gorun/cuda/cudatarget"
	"gorun/cuda/kernels"
	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/target"
	"gorun/ops"
)

func init() { backend.Register(Backend{}) }

// Backend opens CUDA devices: the index-th Program of the process runs on
// GPU index mod the number of GPUs (several Programs on one GPU are
// replicas).
type Backend struct{}

var _ backend.Backend = Backend{}

// Target describes the built cuda backend: the description every build
// has (package cudatarget: the [cuda] table's keys eager, cublas and
// nccl, the nccl transport), with the ops the CUDA device runs and those
// it declines.
func (Backend) Target() *target.Target {
	t := cudatarget.Target()
	t.Supports = supportsOp
	t.Declines = map[ops.Op]string{}
	for op, why := range declined {
		t.Declines[op] = why
	}
	return t
}

// gpu is one physical GPU: its primary context and the kernels loaded
// into it, shared by the devices (replicas) on it.
type gpu struct {
	ordinal      int
	dev          cu.Device
	ctx          cu.CUContext
	name         string
	major, minor int
	mod          cu.Module
	fn           [numKernels]cu.Function
	refs         int
}

var (
	gpusMu sync.Mutex
	gpus   = map[int]*gpu{}
)

// acquireGPU retains GPU ordinal's primary context and loads the kernels
// into it (once per GPU). The caller's thread is locked; the context is
// left current.
func acquireGPU(ordinal int) (*gpu, error) {
	gpusMu.Lock()
	defer gpusMu.Unlock()
	if g, ok := gpus[ordinal]; ok {
		g.refs++
		return g, setCurrent(g.ctx)
	}
	g := &gpu{ordinal: ordinal}
	var err error
	if g.dev, err = cu.GetDevice(ordinal); err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", ordinal, err)
	}
	g.name, _ = g.dev.Name()
	if g.major, g.minor, err = g.dev.ComputeCapability(); err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", ordinal, err)
	}
	ptx := kernels.PTX(g.major)
	if ptx == nil {
		return nil, fmt.Errorf("cuda:%d (%s): compute capability %d.%d is not supported (gorun's kernels need 8.0 or later)", ordinal, g.name, g.major, g.minor)
	}
	if g.ctx, err = g.dev.RetainPrimaryCtx(); err != nil {
		return nil, fmt.Errorf("cuda:%d: cuDevicePrimaryCtxRetain: %w", ordinal, err)
	}
	if err := setCurrent(g.ctx); err != nil {
		return nil, err
	}
	if g.mod, err = cu.LoadData(string(ptx)); err != nil {
		g.dev.ReleasePrimaryCtx()
		return nil, fmt.Errorf("cuda:%d (%s): loading the kernels' PTX (compute_%d0): %w", ordinal, g.name, min(g.major, 9), err)
	}
	for k := kernelID(0); k < numKernels; k++ {
		if g.fn[k], err = g.mod.Function(k.String()); err != nil {
			g.dev.ReleasePrimaryCtx()
			return nil, fmt.Errorf("cuda:%d: kernel %s: %w", ordinal, k, err)
		}
	}
	g.refs = 1
	gpus[ordinal] = g
	return g, nil
}

// release drops a device's hold on the GPU. The primary context and the
// loaded kernels stay for the life of the process (the next device opened
// on the GPU reuses them instead of JIT-compiling the PTX again); every
// allocation was freed by the device itself.
func (g *gpu) release() {
	gpusMu.Lock()
	defer gpusMu.Unlock()
	g.refs--
}

// Open opens the device for the index-th Program of this process.
func (Backend) Open(index int, opts backend.Options) (backend.Device, error) {
	if err := initError(); err != nil {
		return nil, err
	}
	n, err := numGPUs()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := acquireGPU(index % n)
	if err != nil {
		return nil, err
	}
	d := &Device{index: index, gpu: g, set: cudatarget.Read(opts.Settings), eng: &Engine{ctx: g.ctx, ordinal: g.ordinal}, args: newArgBlock()}
	if err := d.open(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// numGPUs is the number of GPUs the driver sees (at least one).
func numGPUs() (int, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return 0, fmt.Errorf("cuda: counting GPUs: %w", err)
	}
	if n == 0 {
		return 0, errors.New("cuda: the driver sees no GPU")
	}
	return n, nil
}

func (d *Device) open() error {
	var err error
	if d.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fmt.Errorf("%s: cuStreamCreate: %w", d.Name(), err)
	}
	d.streamOK = true
	if d.comm, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fmt.Errorf("%s: cuStreamCreate: %w", d.Name(), err)
	}
	d.commOK = true
	for _, e := range []*cu.Event{&d.evCompute, &d.evComm, &d.evColl} {
		if *e, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("%s: cuEventCreate: %w", d.Name(), err)
		}
	}
	d.eventsOK = true
	lib, err := openCublas(d.set.Cublas)
	if err != nil {
		return err
	}
	if d.blasWork, err = cu.MemAlloc(cublasWorkspaceBytes); err != nil {
		return fmt.Errorf("%s: cuMemAlloc (cuBLAS workspace): %w", d.Name(), err)
	}
	if d.blas, err = newBlasHandle(lib, d.stream, d.blasWork, d.set.TF32); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	d.openLt()
	if d.small, err = cu.MemAlloc(256); err != nil {
		return fmt.Errorf("%s: cuMemAlloc: %w", d.Name(), err)
	}
	d.SeedRNG(0, 0)
	return nil
}

// Finite reports whether b's live elements are all finite: their sum (the
// split sum, in double) is finite exactly when none is NaN or ±Inf,
// unless finite values sum past float32's range (then it says false).
func (d *Device) Finite(b *engine.Buffer) (bool, error) {
	if b.DType != engine.Float32 {
		return true, nil
	}
	if err := d.loaded(); err != nil {
		return false, err
	}
	if err := d.enter(); err != nil {
		return false, err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return false, err
	}
	n := d.live(b)
	if err := d.splitSum(d.ptr(b), uintptr(d.small), 1, 1, n, false); err != nil {
		return false, err
	}
	h := d.host.bytes(4)
	if err := memcpyDtoH(unsafe.Pointer(&h[0]), d.small, 4, d.stream); err != nil {
		return false, err
	}
	if err := syncStream(d.stream); err != nil {
		return false, fmt.Errorf("%s: %w", d.Name(), err)
	}
	s := *(*float32)(unsafe.Pointer(&h[0]))
	return s-s == 0, nil
}

// ReadStep reads the step's loss and whether grads are all finite with
// one copy to the host and one wait (backend.StepReader): the split sum
// of grads (Finite's) and a copy of the loss land side by side in a few
// bytes of device memory, which come back together.
func (d *Device) ReadStep(loss, grads *engine.Buffer) (float32, bool, error) {
	if err := d.loaded(); err != nil {
		return 0, false, err
	}
	if err := d.enter(); err != nil {
		return 0, false, err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return 0, false, err
	}
	if grads.DType == engine.Float32 {
		if err := d.splitSum(d.ptr(grads), uintptr(d.small), 1, 1, d.live(grads), false); err != nil {
			return 0, false, err
		}
	} else if err := memset32(d.small, 0, 1, d.stream); err != nil {
		return 0, false, err
	}
	if err := memcpyDtoD(d.small+4, cu.DevicePtr(d.ptr(loss)), 4, d.stream); err != nil {
		return 0, false, err
	}
	h := d.host.bytes(8)
	if err := memcpyDtoH(unsafe.Pointer(&h[0]), d.small, 8, d.stream); err != nil {
		return 0, false, err
	}
	if err := syncStream(d.stream); err != nil {
		return 0, false, fmt.Errorf("%s: %w", d.Name(), err)
	}
	s := *(*float32)(unsafe.Pointer(&h[0]))
	return *(*float32)(unsafe.Pointer(&h[4])), s-s == 0, nil
}

// Device is one Program on one GPU: its arena, its compute and
// communication streams, its cuBLAS handle and the captured graphs.
type Device struct {
	index int
	gpu   *gpu
	set   cudatarget.Settings // the cluster file's [cuda] table
	eng   *Engine

	stream, comm              cu.Stream // compute and communication streams
	evCompute, evComm, evColl cu.Event
	streamOK, commOK          bool
	eventsOK                  bool
	blas                      *blasHandle
	lt                        *ltHandle // cuBLASLt, nil without (op_linear.go's bias epilogue)
	blasWork                  cu.DevicePtr
	small                     cu.DevicePtr // a few scalars (Finite's sum, ReadStep's sum and loss, the step's verdict: verdict.go)
	// marked is page-locked host memory the step's verdict is copied to
	// (MarkStep), evMark the event of its arrival (Marked).
	marked      unsafe.Pointer
	evMark      cu.Event
	markOK      bool
	markPending bool
	// lowp is the running step's Attrs.Precision: its GEMMs' operands
	// hold values of that format (cublas.go's computeType).
	lowp ops.Precision
	// part holds partN doubles: the split sums' partials (splitSum),
	// sized at Load for the program's largest.
	part  cu.DevicePtr
	partN int
	args  *argBlock
	bits  [maxArgs]uint64

	prog *engine.Program
	// stepFn holds each kernel step's function from opSteps, by Step.ID,
	// looked up once at Load.
	stepFn  []opStep
	arena   *tensor.Dense
	base    uintptr // the arena's device address
	batch   int     // live batch
	batched []int   // IDs of batched buffers

	idx    cu.DevicePtr // sample indices for Gather
	idxCap int
	host   hostBuf // staging for every host<->device copy (see hostBuf)
	data   []*deviceData

	// The dropout RNG: a seed and the number of draws taken so far.
	seed, offset uint64
	// dyn holds the per-step values of the launch in progress; rel counts
	// the draws taken since it began.
	dyn dynValues
	rel uint64

	// commMu guards commPending: work on the communication stream that the
	// compute stream has not waited for yet (evComm marks its end).
	commMu      sync.Mutex
	commPending bool

	// scratch holds a peer GPU's data during a collective without NCCL.
	scratch  cu.DevicePtr
	scratchN int
	// closers release what Connect made (NCCL communicators).
	closers []func()

	capture *capturing // non-nil while a graph is being captured
	graphs  map[graphKey]*trainGraph
	warm    map[graphKey]bool // combinations run once (eagerly) already
	noGraph bool              // a capture failed: run eagerly from then on
	periods []int
}

var (
	_ backend.Device        = (*Device)(nil)
	_ backend.Replayer      = (*Device)(nil)
	_ backend.FiniteChecker = (*Device)(nil)
	_ backend.StepReader    = (*Device)(nil)
	_ backend.Deferrer      = (*Device)(nil)
)

// Name is "cuda:INDEX (GPU NAME)", with the GPU's ordinal when it differs
// from the index (replicas).
func (d *Device) Name() string {
	if d.gpu == nil {
		return fmt.Sprintf("cuda:%d", d.index)
	}
	if d.gpu.ordinal != d.index {
		return fmt.Sprintf("cuda:%d (GPU %d, %s)", d.index, d.gpu.ordinal, d.gpu.name)
	}
	return fmt.Sprintf("cuda:%d (%s)", d.index, d.gpu.name)
}

// GPU is the ordinal of the device's GPU.
func (d *Device) GPU() int { return d.gpu.ordinal }

// enter locks the calling goroutine to its thread and makes the device's
// context current there; exit undoes the lock.
func (d *Device) enter() error {
	if d.gpu == nil {
		return fmt.Errorf("%s: the device is closed", d.Name())
	}
	runtime.LockOSThread()
	if err := setCurrent(d.gpu.ctx); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}

func (d *Device) exit() { runtime.UnlockOSThread() }

// loaded reports a device that has no program yet: its buffers have no
// memory, and a kernel given their addresses would fault (a fault
// poisons the GPU's context for the rest of the process).
func (d *Device) loaded() error {
	if d.prog == nil || d.base == 0 {
		return fmt.Errorf("%s: no program loaded (Load comes first)", d.Name())
	}
	return nil
}

// newArena allocates n float32 elements through eng, as a tensor.
func newArena(eng *Engine, n int) (t *tensor.Dense, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("allocating the arena (%d bytes): %v", 4*n, r)
		}
	}()
	return tensor.New(tensor.WithShape(n), tensor.Of(tensor.Float32), tensor.WithEngine(eng)), nil
}

// Load allocates the program's arena (one cuMemAlloc through the Engine),
// clears it, sets the loss seed to 1 and checks that every step has a
// kernel.
func (d *Device) Load(prog *engine.Program) error {
	if d.prog != nil {
		return fmt.Errorf("%s: a device loads one program", d.Name())
	}
	for _, steps := range [][]*engine.Step{prog.Steps, prog.Eval} {
		for _, st := range steps {
			if err := supported(st); err != nil {
				return fmt.Errorf("%s: %w", d.Name(), err)
			}
			if err := checkWork(prog, st); err != nil {
				return fmt.Errorf("%s: %w", d.Name(), err)
			}
		}
	}
	run := make([]opStep, len(prog.Steps)+len(prog.Eval))
	for _, steps := range [][]*engine.Step{prog.Steps, prog.Eval} {
		for _, st := range steps {
			if st.Kind == engine.KernelStep && st.ID < len(run) {
				run[st.ID] = opSteps[st.Op]
			}
		}
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	// A little slack past the last buffer: a buffer of no elements at the
	// end still has an address inside the allocation.
	elems := prog.ArenaElems + 16
	arena, err := newArena(d.eng, elems)
	if err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	d.prog, d.stepFn, d.arena, d.base = prog, run, arena, arena.Uintptr()
	if need := partialsNeeded(prog); need > 0 {
		if d.part, err = cu.MemAlloc(int64(8 * need)); err != nil {
			return fmt.Errorf("%s: cuMemAlloc (%d split-sum partials): %w", d.Name(), need, err)
		}
		d.partN = need
	}
	if err := memset32(cu.DevicePtr(d.base), 0, elems, d.stream); err != nil {
		return err
	}
	maxBatch := 1
	for i, b := range prog.Buffers {
		if b.Batched {
			d.batched = append(d.batched, i)
			maxBatch = max(maxBatch, b.Max[0])
		}
	}
	d.batch = maxBatch
	if err := memset32(cu.DevicePtr(d.ptr(prog.LossSeed)), math.Float32bits(1), 1, d.stream); err != nil {
		return err
	}
	var every []int
	for _, st := range prog.Steps {
		every = append(every, st.Every)
	}
	d.periods = stepPeriods(every)
	d.graphs = map[graphKey]*trainGraph{}
	d.warm = map[graphKey]bool{}
	return syncStream(d.stream)
}

// ptr is buffer b's device address.
func (d *Device) ptr(b *engine.Buffer) uintptr { return d.base + 4*uintptr(b.Offset) }

// SetBatch sets the live batch of every batched buffer.
func (d *Device) SetBatch(n int) { d.batch = n }

// dim is the live size of dimension i of b.
func (d *Device) dim(b *engine.Buffer, i int) int {
	if i == 0 && b.Batched {
		return d.batch
	}
	return b.Max[i]
}

// live is the number of live elements of b.
func (d *Device) live(b *engine.Buffer) int {
	n := 1
	for i := range b.Max {
		n *= d.dim(b, i)
	}
	return n
}

func (d *Device) span(b *engine.Buffer, off, n int) (uintptr, error) {
	if err := d.loaded(); err != nil {
		return 0, err
	}
	if off < 0 || n < 0 || off+n > b.Elems() {
		return 0, fmt.Errorf("%s: elements [%d:%d] of buffer %s (%d elements)", d.Name(), off, off+n, b.Name, b.Elems())
	}
	return d.ptr(b) + 4*uintptr(off), nil
}

// joinComm makes the compute stream wait for the communication stream's
// work queued so far.
func (d *Device) joinComm() error {
	d.commMu.Lock()
	defer d.commMu.Unlock()
	if !d.commPending {
		return nil
	}
	d.commPending = false
	return waitEvent(d.stream, d.evComm)
}

// stageBytes bounds the staging buffer: longer copies go in pieces.
const stageBytes = 4 << 20

func (d *Device) upload(b *engine.Buffer, off int, src []byte) error {
	p, err := d.span(b, off, len(src)/4)
	if err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return err
	}
	if err := d.copyIn(cu.DevicePtr(p), src); err != nil {
		return err
	}
	return syncStream(d.stream)
}

// copyIn copies src to dst on the compute stream through the staging
// buffer.
func (d *Device) copyIn(dst cu.DevicePtr, src []byte) error {
	for len(src) > 0 {
		k := min(len(src), stageBytes)
		h := d.host.bytes(k)
		copy(h, src[:k])
		if err := memcpyHtoD(dst, unsafe.Pointer(&h[0]), k, d.stream); err != nil {
			return err
		}
		dst += cu.DevicePtr(k)
		src = src[k:]
	}
	return nil
}

func (d *Device) download(b *engine.Buffer, off int, dst []byte) error {
	p, err := d.span(b, off, len(dst)/4)
	if err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return err
	}
	src := cu.DevicePtr(p)
	for len(dst) > 0 {
		k := min(len(dst), stageBytes)
		h := d.host.bytes(k)
		if err := memcpyDtoH(unsafe.Pointer(&h[0]), src, k, d.stream); err != nil {
			return err
		}
		if err := syncStream(d.stream); err != nil {
			return err
		}
		copy(dst[:k], h)
		src += cu.DevicePtr(k)
		dst = dst[k:]
	}
	return nil
}

// asBytes is the memory of a float32 or int32 slice as bytes.
func asBytes[T float32 | int32](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// UploadF32 copies src into b from element off (cuMemcpyHtoD on the
// compute stream, after the work queued before it).
func (d *Device) UploadF32(b *engine.Buffer, off int, src []float32) error {
	return d.upload(b, off, asBytes(src))
}

// UploadI32 copies src into b from element off.
func (d *Device) UploadI32(b *engine.Buffer, off int, src []int32) error {
	return d.upload(b, off, asBytes(src))
}

// DownloadF32 copies b's elements from off into dst, once the work queued
// before it is done.
func (d *Device) DownloadF32(b *engine.Buffer, off int, dst []float32) error {
	return d.download(b, off, asBytes(dst))
}

// DownloadI32 copies b's elements from off into dst.
func (d *Device) DownloadI32(b *engine.Buffer, off int, dst []int32) error {
	return d.download(b, off, asBytes(dst))
}

// Zero clears b (on the compute stream).
func (d *Device) Zero(b *engine.Buffer) error {
	if err := d.loaded(); err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return err
	}
	return memset32(cu.DevicePtr(d.ptr(b)), 0, b.Elems(), d.stream)
}

// deviceData is a dataset resident on the GPU: every sample and every
// target, as the layout says (float32 samples and int32 labels, int32
// token windows and their targets, or float32 samples and targets).
type deviceData struct {
	dev     *Device
	x, y    cu.DevicePtr
	layout  dataLayout
	n       int
	classes int
	freed   bool
	name    string
}

// Len is the number of samples.
func (dd *deviceData) Len() int { return dd.n }

// Free gives the dataset's device memory back once the work queued on it
// is done (backend.Freer).
func (dd *deviceData) Free() {
	d := dd.dev
	if dd.freed || d.enter() != nil {
		return
	}
	defer d.exit()
	_ = syncStream(d.stream) // an error here shows at the next step
	dd.free()
	d.data = slices.DeleteFunc(d.data, func(x *deviceData) bool { return x == dd })
}

// loadChunk is how many samples LoadData converts and uploads at a time.
const loadChunk = 4096

// LoadData uploads the whole dataset to the GPU once (samples and
// targets, in the layout its kind needs: residentLayout); Gather then
// moves only sample indices.
func (d *Device) LoadData(ds datasets.Dataset) (backend.Data, error) {
	if info, ok := datasets.Streamed(ds); ok {
		return nil, fmt.Errorf("%s: %s: data.images would stream it from disk, which the cuda backend does not do: it holds a whole dataset in GPU memory, as float32 (%.1f GiB here); raise the cluster's memory_limit so that the images are decoded into memory before step 1 (or give data.images a smaller size, channels = 1 or a limit), or train with backend = \"cpu\", which streams",
			d.Name(), info, float64(4*info.Decoded)/(1<<30))
	}
	l := residentLayout(ds)
	n := ds.Len()
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.exit()
	dd := &deviceData{dev: d, n: n, layout: l, classes: ds.NumClasses(), name: ds.Name()}
	var err error
	if dd.x, err = cu.MemAlloc(int64(max(n*l.per, 1)) * 4); err != nil {
		return nil, fmt.Errorf("%s: uploading %s (%d samples of %d %s, %d bytes): %w", d.Name(), ds.Name(), n, l.per, l.what(), 4*n*l.per, err)
	}
	if dd.y, err = cu.MemAlloc(int64(max(n*l.tper, 1)) * 4); err != nil {
		cu.MemFree(dd.x)
		return nil, fmt.Errorf("%s: uploading %s's targets (%d bytes): %w", d.Name(), ds.Name(), 4*n*l.tper, err)
	}
	chunk := min(n, loadChunk)
	var xs, yf []float32
	var xi, ys []int32
	switch l.kind {
	case tokenData:
		xi, ys = make([]int32, chunk*l.per), make([]int32, chunk*l.tper)
	case regressionData:
		xs, yf = make([]float32, chunk*l.per), make([]float32, chunk*l.tper)
	default:
		xs, ys = make([]float32, chunk*l.per), make([]int32, chunk*l.tper)
	}
	idx := make([]int, chunk)
	for lo := 0; lo < n; lo += chunk {
		m := min(chunk, n-lo)
		for i := range m {
			idx[i] = lo + i
		}
		var xb, yb []byte
		switch l.kind {
		case tokenData:
			ds.(datasets.Tokens).FillTokens(idx[:m], xi[:m*l.per], ys[:m*l.tper])
			xb, yb = asBytes(xi[:m*l.per]), asBytes(ys[:m*l.tper])
		case regressionData:
			ds.(datasets.Regression).FillTargets(idx[:m], xs[:m*l.per], yf[:m*l.tper])
			xb, yb = asBytes(xs[:m*l.per]), asBytes(yf[:m*l.tper])
		default:
			ds.Fill(idx[:m], xs[:m*l.per], ys[:m])
			xb, yb = asBytes(xs[:m*l.per]), asBytes(ys[:m])
		}
		err := d.copyIn(dd.x+cu.DevicePtr(4*lo*l.per), xb)
		if err == nil {
			err = d.copyIn(dd.y+cu.DevicePtr(4*lo*l.tper), yb)
		}
		if err == nil {
			err = syncStream(d.stream)
		}
		if err != nil {
			dd.free()
			return nil, fmt.Errorf("%s: uploading %s: %w", d.Name(), ds.Name(), err)
		}
	}
	d.data = append(d.data, dd)
	return dd, nil
}

func (dd *deviceData) free() {
	if dd.freed {
		return
	}
	dd.freed = true
	cu.MemFree(dd.x)
	cu.MemFree(dd.y)
}

// Gather fills the live batch of input and target with samples idx of
// the resident dataset: only the indices travel to the GPU, and two
// gathers copy the samples' rows and their targets' (checkGather says
// which datasets fit which input and target).
func (d *Device) Gather(data backend.Data, idx []int, input, target *engine.Buffer) error {
	dd, ok := data.(*deviceData)
	if !ok || dd.dev != d || dd.freed {
		return fmt.Errorf("%s: data was not loaded by this device", d.Name())
	}
	if err := d.loaded(); err != nil {
		return err
	}
	n := len(idx)
	if n > input.Max[0] || n > target.Max[0] {
		return fmt.Errorf("%s: %d samples for a batch of %d", d.Name(), n, input.Max[0])
	}
	if err := dd.layout.checkGather(dd.name, input, target); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	h := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(d.host.bytes(4*max(n, 1))))), n)
	for i, v := range idx {
		if v < 0 || v >= dd.n {
			return fmt.Errorf("%s: sample %d is not in %s (%d samples)", d.Name(), v, dd.name, dd.n)
		}
		h[i] = int32(v)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if d.idxCap < n {
		if d.idx != 0 {
			cu.MemFree(d.idx)
			d.idx, d.idxCap = 0, 0
		}
		c := max(n, input.Max[0])
		p, err := cu.MemAlloc(int64(4 * c))
		if err != nil {
			return fmt.Errorf("%s: %w", d.Name(), err)
		}
		d.idx, d.idxCap = p, c
	}
	if n == 0 {
		return nil
	}
	if err := memcpyHtoD(d.idx, unsafe.Pointer(&h[0]), 4*n, d.stream); err != nil { // staged on return
		return err
	}
	l := dd.layout
	kx, ky := kGatherRows, kGatherRowsInt
	switch l.kind {
	case tokenData:
		kx = kGatherRowsInt
	case regressionData:
		ky = kGatherRows
	}
	if err := d.launch(kx, elementwise(n*l.per), ptrArg(uintptr(dd.x)), ptrArg(uintptr(d.idx)), ptrArg(d.ptr(input)), intArg(n), intArg(l.per)); err != nil {
		return err
	}
	return d.launch(ky, elementwise(n*l.tper), ptrArg(uintptr(dd.y)), ptrArg(uintptr(d.idx)), ptrArg(d.ptr(target)), intArg(n), intArg(l.tper))
}

// SeedRNG seeds the dropout RNG: the kernels' counter-based generator
// takes a 64-bit seed (mixed from seed and stream) and an offset, the
// number of draws taken so far.
func (d *Device) SeedRNG(seed, stream uint64) {
	d.seed = splitmix64(seed ^ splitmix64(stream+0x6a09e667f3bcc909))
	d.offset = 0
}

// rngMagic starts a serialised CUDA RNG state.
const rngMagic = "gorun-cuda-rng/1"

// RNGState is the dropout RNG's seed and offset.
func (d *Device) RNGState() ([]byte, error) {
	b := append([]byte(rngMagic), make([]byte, 16)...)
	binary.LittleEndian.PutUint64(b[len(rngMagic):], d.seed)
	binary.LittleEndian.PutUint64(b[len(rngMagic)+8:], d.offset)
	return b, nil
}

// SetRNGState restores what RNGState saved.
func (d *Device) SetRNGState(b []byte) error {
	if len(b) != len(rngMagic)+16 || string(b[:len(rngMagic)]) != rngMagic {
		return fmt.Errorf("%s: not a CUDA RNG state (%d bytes): was the checkpoint written by another backend?", d.Name(), len(b))
	}
	d.seed = binary.LittleEndian.Uint64(b[len(rngMagic):])
	d.offset = binary.LittleEndian.Uint64(b[len(rngMagic)+8:])
	return nil
}

// Sync waits for all work queued on the device's streams.
func (d *Device) Sync() error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := syncStream(d.comm); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	d.commMu.Lock()
	d.commPending = false
	d.commMu.Unlock()
	if err := syncStream(d.stream); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}

// Close frees the device's memory, graphs, streams and handles.
func (d *Device) Close() error {
	if d.gpu == nil {
		return nil
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if d.streamOK {
		keep(syncStream(d.stream))
	}
	if d.commOK {
		keep(syncStream(d.comm))
	}
	for _, c := range d.closers {
		c()
	}
	d.closers = nil
	if d.scratch != 0 {
		keep(cu.MemFree(d.scratch))
		d.scratch, d.scratchN = 0, 0
	}
	for k, g := range d.graphs {
		g.destroy()
		delete(d.graphs, k)
	}
	if d.lt != nil {
		d.lt.close()
		d.lt = nil
	}
	if d.blas != nil {
		d.blas.close()
		d.blas = nil
	}
	keep(d.freeMarked())
	if d.small != 0 {
		keep(cu.MemFree(d.small))
		d.small = 0
	}
	if d.part != 0 {
		keep(cu.MemFree(d.part))
		d.part, d.partN = 0, 0
	}
	if d.blasWork != 0 {
		keep(cu.MemFree(d.blasWork))
		d.blasWork = 0
	}
	for _, dd := range d.data {
		dd.free()
	}
	d.data = nil
	if d.idx != 0 {
		keep(cu.MemFree(d.idx))
		d.idx, d.idxCap = 0, 0
	}
	d.host.free()
	if d.arena != nil {
		keep(d.eng.Free(devMem{cu.DevicePtr(d.base), 0}, 0))
		d.arena, d.base = nil, 0
	}
	if d.eventsOK {
		cu.DestroyEvent(&d.evCompute)
		cu.DestroyEvent(&d.evComm)
		cu.DestroyEvent(&d.evColl)
		d.eventsOK = false
	}
	if d.commOK {
		d.comm.Destroy()
		d.commOK = false
	}
	if d.streamOK {
		d.stream.Destroy()
		d.streamOK = false
	}
	if d.args != nil {
		d.args.free()
		d.args = nil
	}
	d.gpu.release()
	d.gpu = nil
	return first
}

// splitmix64 is SplitMix64's output function.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Connect joins local devices into a group for collectives: NCCL when
// they are on distinct GPUs and NCCL loads, device-to-device copies and
// the gorun reduction kernels otherwise (replicas sharing a GPU, or no
// NCCL). host is used only when the group spans processes (host[i].Size()
// larger than len(devs)): then collectives travel through host memory.
func (Backend) Connect(devs []backend.Device, host []comm.Communicator) ([]backend.Collectives, error) {
	return connect(devs, host)
}
