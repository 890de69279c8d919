//go:build cuda

package cuda

/*
#include <stdlib.h>
#include <stdint.h>

typedef int (*gorun_ncclCommInitAll_t)(void **, int, const int *);
typedef int (*gorun_ncclCommDestroy_t)(void *);
typedef int (*gorun_ncclAllReduce_t)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*gorun_ncclReduce_t)(const void *, void *, size_t, int, int, int, void *, void *);
typedef int (*gorun_ncclBroadcast_t)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*gorun_ncclReduceScatter_t)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*gorun_ncclAllGather_t)(const void *, void *, size_t, int, void *, void *);
typedef int (*gorun_ncclGroup_t)(void);
typedef const char *(*gorun_ncclGetErrorString_t)(int);
typedef int (*gorun_ncclGetVersion_t)(int *);

static int gorun_nccl_init_all(void *f, void **comms, int n, const int *devs) {
	return ((gorun_ncclCommInitAll_t)f)(comms, n, devs);
}
static int gorun_nccl_destroy(void *f, void *c) { return ((gorun_ncclCommDestroy_t)f)(c); }
static int gorun_nccl_allreduce(void *f, uintptr_t buf, size_t n, int op, void *c, void *s) {
	return ((gorun_ncclAllReduce_t)f)((const void *)buf, (void *)buf, n, 7, op, c, s);
}
static int gorun_nccl_reduce(void *f, uintptr_t buf, size_t n, int op, int root, void *c, void *s) {
	return ((gorun_ncclReduce_t)f)((const void *)buf, (void *)buf, n, 7, op, root, c, s);
}
static int gorun_nccl_broadcast(void *f, uintptr_t buf, size_t n, int root, void *c, void *s) {
	return ((gorun_ncclBroadcast_t)f)((const void *)buf, (void *)buf, n, 7, root, c, s);
}
static int gorun_nccl_reduce_scatter(void *f, uintptr_t send, uintptr_t recv, size_t n, int op, void *c, void *s) {
	return ((gorun_ncclReduceScatter_t)f)((const void *)send, (void *)recv, n, 7, op, c, s);
}
static int gorun_nccl_all_gather(void *f, uintptr_t send, uintptr_t recv, size_t n, void *c, void *s) {
	return ((gorun_ncclAllGather_t)f)((const void *)send, (void *)recv, n, 7, c, s);
}
static int gorun_nccl_group(void *f) { return ((gorun_ncclGroup_t)f)(); }
static const char *gorun_nccl_error(void *f, int r) {
	if (f == NULL) return "unknown NCCL error";
	return ((gorun_ncclGetErrorString_t)f)(r);
}
static int gorun_nccl_version(void *f) {
	int v = 0;
	if (f != NULL) ((gorun_ncclGetVersion_t)f)(&v);
	return v;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"gorun/comm"
	"gorun/engine"
)

// ncclLib is NCCL opened with dlopen.
type ncclLib struct {
	path                                                    string
	getUniqueID, initAll, destroy, allReduce, reduce, bcast unsafe.Pointer
	reduceScatter, allGather                                unsafe.Pointer
	groupStart, groupEnd, errorString, version              unsafe.Pointer
	initRank, abort                                         unsafe.Pointer // across processes (nccl_world.go)
}

var ncclOpen sync.Map // override → *ncclResult

type ncclResult struct {
	once sync.Once
	lib  *ncclLib
	err  error
}

// openNCCL opens NCCL once per override path: override (the cluster
// file's [cuda] nccl) first, then libnccl.so.2 and libnccl.so.
func openNCCL(override string) (*ncclLib, error) {
	v, _ := ncclOpen.LoadOrStore(override, &ncclResult{})
	r := v.(*ncclResult)
	r.once.Do(func() { r.lib, r.err = loadNCCL(override) })
	return r.lib, r.err
}

func loadNCCL(override string) (*ncclLib, error) {
	h, path, err := openFirst("nccl", librarySearch("nccl", override), dlopen)
	if err != nil {
		return nil, err
	}
	l := &ncclLib{path: path}
	for _, s := range []struct {
		name string
		dst  *unsafe.Pointer
	}{
		{"ncclGetUniqueId", &l.getUniqueID},
		{"ncclCommInitAll", &l.initAll},
		{"ncclCommDestroy", &l.destroy},
		{"ncclAllReduce", &l.allReduce},
		{"ncclReduce", &l.reduce},
		{"ncclBroadcast", &l.bcast},
		{"ncclReduceScatter", &l.reduceScatter},
		{"ncclAllGather", &l.allGather},
		{"ncclGroupStart", &l.groupStart},
		{"ncclGroupEnd", &l.groupEnd},
		{"ncclGetErrorString", &l.errorString},
		{"ncclGetVersion", &l.version},
	} {
		if *s.dst = dlsym(h, s.name); *s.dst == nil {
			return nil, fmt.Errorf("cuda: %s has no symbol %s (is it NCCL 2?)", path, s.name)
		}
	}
	// Across processes (transport = "nccl"): NCCL 2.4 or later.
	l.initRank, l.abort = dlsym(h, "ncclCommInitRank"), dlsym(h, "ncclCommAbort")
	return l, nil
}

// versionCode is ncclGetVersion's code (22703 for NCCL 2.27.3).
func (l *ncclLib) versionCode() int { return int(C.gorun_nccl_version(l.version)) }

func (l *ncclLib) check(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (NCCL %d from %s)", call, C.GoString(C.gorun_nccl_error(l.errorString, r)), int(C.gorun_nccl_version(l.version)), l.path)
}

// NCCL's reduction ops (ncclRedOp_t).
const (
	ncclSum = 0
	ncclMax = 2
)

// ncclGroup is one NCCL communicator per local device: from
// ncclCommInitAll (the devices of one process), or from ncclCommInitRank
// (a world spanning processes, nccl_world.go).
type ncclGroup struct {
	lib   *ncclLib
	devs  []*Device
	comms []unsafe.Pointer
	// size is the number of ranks of the communicators: len(devs) in one
	// process, every process's devices in a world. first is the global
	// rank of comms[0] (0 in one process): comms[i] is rank first+i.
	size, first int
}

// newNCCLGroup creates the communicators of devices on distinct GPUs.
func newNCCLGroup(lib *ncclLib, devs []*Device) (*ncclGroup, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := currentCtx()
	defer setCurrent(prev)
	ords := make([]C.int, len(devs))
	for i, d := range devs {
		ords[i] = C.int(d.gpu.ordinal)
	}
	comms := (*unsafe.Pointer)(C.calloc(C.size_t(len(devs)), C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(comms))
	if err := lib.check("ncclCommInitAll", C.gorun_nccl_init_all(lib.initAll, comms, C.int(len(devs)), &ords[0])); err != nil {
		return nil, err
	}
	g := &ncclGroup{lib: lib, devs: devs, comms: append([]unsafe.Pointer(nil), unsafe.Slice(comms, len(devs))...), size: len(devs)}
	for _, d := range devs {
		d.closers = append(d.closers, g.close)
	}
	return g, nil
}

func (g *ncclGroup) close() {
	for i, c := range g.comms {
		if c != nil {
			C.gorun_nccl_destroy(g.lib.destroy, c)
			g.comms[i] = nil
		}
	}
}

// ncclColl is one device's NCCL collectives, on its communication stream.
type ncclColl struct {
	g    *ncclGroup
	rank int
	d    *Device
	args *argBlock
	bits [maxArgs]uint64
}

// begin orders the communication stream after the work queued on the
// compute stream so far.
func (c *ncclColl) begin() error {
	if err := c.d.enter(); err != nil {
		return err
	}
	if err := record(c.d.evCompute, c.d.stream); err != nil {
		c.d.exit()
		return err
	}
	if err := waitEvent(c.d.comm, c.d.evCompute); err != nil {
		c.d.exit()
		return err
	}
	return nil
}

// end marks the communication stream's work as pending: the compute
// stream waits for it before the optimizer update or any copy.
func (c *ncclColl) end(err error) error { return c.finish(err, false) }

// endOrdered is end for a collective whose memory the steps after it
// touch (a sharded plan's reduce-scatters into reused memory, its
// gathers of the parameters a layer reads next): the compute stream
// waits for the communication stream's work so far before anything
// queued after it.
func (c *ncclColl) endOrdered(err error) error { return c.finish(err, true) }

// finish records the communication stream's work so far and either
// leaves it pending (end) or makes the compute stream wait for it now
// (endOrdered).
func (c *ncclColl) finish(err error, ordered bool) error {
	defer c.d.exit()
	if err != nil {
		return fmt.Errorf("%s: %w", c.d.Name(), err)
	}
	c.d.commMu.Lock()
	defer c.d.commMu.Unlock()
	if err := record(c.d.evComm, c.d.comm); err != nil {
		return err
	}
	c.d.commPending = !ordered
	if ordered {
		return waitEvent(c.d.stream, c.d.evComm)
	}
	return nil
}

func (c *ncclColl) span(b *engine.Buffer, off, n int) (uintptr, error) { return c.d.span(b, off, n) }

func ncclOp(op comm.ReduceOp) (C.int, error) {
	switch op {
	case comm.Sum, comm.Mean:
		return ncclSum, nil
	case comm.Max:
		return ncclMax, nil
	}
	return 0, fmt.Errorf("cuda: reduction %s is not supported", op)
}

// AllReduce reduces elements [off, off+n) of b across the group, with NCCL on the communication stream.
func (c *ncclColl) AllReduce(b *engine.Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error {
	p, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	nop, err := ncclOp(op)
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	s := unsafe.Pointer(cStream(c.d.comm))
	err = c.g.lib.check("ncclAllReduce", C.gorun_nccl_allreduce(c.g.lib.allReduce, C.uintptr_t(p), C.size_t(n), nop, c.g.comms[c.rank], s))
	if err == nil && op == comm.Mean {
		err = scaleOn(c.d, c.d.comm, c.args, &c.bits, p, n, 1/float64(c.g.size))
	}
	return c.end(err)
}

// Reduce reduces elements [off, off+n) of b into root's, with NCCL on the communication stream.
func (c *ncclColl) Reduce(b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error {
	p, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	nop, err := ncclOp(op)
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	s := unsafe.Pointer(cStream(c.d.comm))
	err = c.g.lib.check("ncclReduce", C.gorun_nccl_reduce(c.g.lib.reduce, C.uintptr_t(p), C.size_t(n), nop, C.int(root), c.g.comms[c.rank], s))
	if err == nil && op == comm.Mean && c.g.first+c.rank == root {
		err = scaleOn(c.d, c.d.comm, c.args, &c.bits, p, n, 1/float64(c.g.size))
	}
	return c.end(err)
}

// Broadcast copies root's elements [off, off+n) of b to every member, with NCCL on the communication stream.
func (c *ncclColl) Broadcast(b *engine.Buffer, off, n, root int, t comm.Tag) error {
	p, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	s := unsafe.Pointer(cStream(c.d.comm))
	err = c.g.lib.check("ncclBroadcast", C.gorun_nccl_broadcast(c.g.lib.bcast, C.uintptr_t(p), C.size_t(n), C.int(root), c.g.comms[c.rank], s))
	return c.end(err)
}

// ReduceScatter reduces elements [off, off+n) of b across the group and
// leaves this rank's block in part from partOff, with NCCL on the
// communication stream, ordered before the compute stream's next work.
func (c *ncclColl) ReduceScatter(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error {
	size := c.g.size
	if n%size != 0 {
		return fmt.Errorf("%s: reduce_scatter %q: %d elements do not split into %d blocks", c.d.Name(), t.Name, n, size)
	}
	send, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	recv, err := c.span(part, partOff, n/size)
	if err != nil {
		return err
	}
	nop, err := ncclOp(op)
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	s := unsafe.Pointer(cStream(c.d.comm))
	err = c.g.lib.check("ncclReduceScatter", C.gorun_nccl_reduce_scatter(c.g.lib.reduceScatter, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(n/size), nop, c.g.comms[c.rank], s))
	if err == nil && op == comm.Mean {
		err = scaleOn(c.d, c.d.comm, c.args, &c.bits, recv, n/size, 1/float64(size))
	}
	return c.endOrdered(err)
}

// AllGather copies every rank's block of part into elements [off, off+n)
// of b, with NCCL on the communication stream, ordered before the compute
// stream's next work.
func (c *ncclColl) AllGather(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, t comm.Tag) error {
	size := c.g.size
	if n%size != 0 {
		return fmt.Errorf("%s: all_gather %q: %d elements do not split into %d blocks", c.d.Name(), t.Name, n, size)
	}
	recv, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	send, err := c.span(part, partOff, n/size)
	if err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	s := unsafe.Pointer(cStream(c.d.comm))
	err = c.g.lib.check("ncclAllGather", C.gorun_nccl_all_gather(c.g.lib.allGather, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(n/size), c.g.comms[c.rank], s))
	return c.endOrdered(err)
}
