//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"gorgonia.org/cu"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
)

// launchOn queues kernel k on stream s of device d with its own argument
// block (collectives run beside the compute path, which has its own).
func launchOn(d *Device, s cu.Stream, ab *argBlock, bits *[maxArgs]uint64, k kernelID, g geometry, args ...arg) error {
	if g.empty() {
		return nil
	}
	if err := checkArgs(k, args); err != nil {
		return err
	}
	for j, a := range args {
		bits[j] = a.bits
	}
	ab.set(bits[:len(args)])
	if err := launch(d.gpu.fn[k], g, s, ab); err != nil {
		return fmt.Errorf("%s: %s: %w", d.Name(), k, err)
	}
	return nil
}

// scaleOn multiplies n floats at p by s, on stream st.
func scaleOn(d *Device, st cu.Stream, ab *argBlock, bits *[maxArgs]uint64, p uintptr, n int, s float64) error {
	return launchOn(d, st, ab, bits, kScale, elementwise(n), ptrArg(p), intArg(n), floatArg(s))
}

// connect builds the collectives of a group of local devices.
func connect(devs []backend.Device, host []comm.Communicator) ([]backend.Collectives, error) {
	ds := make([]*Device, len(devs))
	for i, dv := range devs {
		d, ok := dv.(*Device)
		if !ok {
			return nil, fmt.Errorf("cuda: device %s is not a CUDA device", dv.Name())
		}
		ds[i] = d
	}
	if len(ds) == 0 {
		return nil, nil
	}
	out := make([]backend.Collectives, len(ds))
	if len(host) == len(ds) && host[0] != nil && host[0].Size() > len(ds) {
		// The group spans processes: collectives travel through host
		// memory and the host communicators (in-process or MPI).
		for i, d := range ds {
			out[i] = &hostColl{d: d, c: host[i]}
		}
		return out, nil
	}
	distinct := len(ds) > 1
	seen := map[int]bool{}
	for _, d := range ds {
		if seen[d.gpu.ordinal] {
			distinct = false
		}
		seen[d.gpu.ordinal] = true
	}
	if distinct {
		lib, err := openNCCL(ds[0].set.NCCL)
		if err == nil {
			var g *ncclGroup
			if g, err = newNCCLGroup(lib, ds); err == nil {
				for i, d := range ds {
					c := &ncclColl{g: g, rank: i, d: d, args: newArgBlock()}
					d.closers = append(d.closers, c.args.free)
					out[i] = c
				}
				return out, nil
			}
		}
		fmt.Fprintf(os.Stderr, "gorun: cuda: no NCCL, collectives between GPUs go through device-to-device copies: %v\n", err)
	}
	g := &localGroup{devs: ds, args: newArgBlock()}
	var freeArgs sync.Once
	for i, d := range ds {
		out[i] = &localColl{g: g, rank: i}
		// The group's argument block goes with the first member closed:
		// the group cannot run a collective without every member.
		d.closers = append(d.closers, func() { freeArgs.Do(g.args.free) })
	}
	return out, nil
}

// localGroup runs the collectives of devices of one process without NCCL:
// replicas sharing a GPU (and GPUs without NCCL) meet at a rendezvous,
// and the last to arrive queues the whole collective on the leader's
// communication stream (the root's, or rank 0's): device-to-device (or
// peer) copies and the gorun_accumulate and gorun_scale kernels. Every
// member's compute stream then waits for it.
type localGroup struct {
	devs []*Device
	args *argBlock
	bits [maxArgs]uint64

	mu    sync.Mutex
	round *localRound
}

// localTimeout is how long a replica waits for the others at a
// collective: they run the same steps in step, so only a failed replica
// makes one wait that long.
const localTimeout = 2 * time.Minute

type localRound struct {
	kind    string
	n, root int
	op      comm.ReduceOp
	tag     comm.Tag
	ptrs    []uintptr
	arrived int
	err     error
	done    chan struct{}
}

// localColl is one member of a localGroup.
type localColl struct {
	g    *localGroup
	rank int
}

// AllReduce reduces elements [off, off+n) of b across the group, through the group's rendezvous.
func (c *localColl) AllReduce(b *engine.Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error {
	return c.run("allreduce", b, off, n, 0, op, t)
}

// Reduce reduces elements [off, off+n) of b into root's, through the group's rendezvous.
func (c *localColl) Reduce(b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error {
	return c.run("reduce", b, off, n, root, op, t)
}

// Broadcast copies root's elements [off, off+n) of b to every member, through the group's rendezvous.
func (c *localColl) Broadcast(b *engine.Buffer, off, n, root int, t comm.Tag) error {
	return c.run("broadcast", b, off, n, root, comm.Sum, t)
}

func (c *localColl) run(kind string, b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error {
	g, d := c.g, c.g.devs[c.rank]
	p, err := d.span(b, off, n)
	if err != nil {
		return err
	}
	if root < 0 || root >= len(g.devs) {
		return fmt.Errorf("%s: %s %q: root %d is not a rank (%d devices)", d.Name(), kind, t.Name, root, len(g.devs))
	}
	if kind != "broadcast" && op == comm.Max {
		return fmt.Errorf("%s: %s %q: reduction max needs NCCL (replicas on one GPU sum and average only)", d.Name(), kind, t.Name)
	}
	// Mark where this member's data is ready.
	if err := d.enter(); err != nil {
		return err
	}
	err = record(d.evCompute, d.stream)
	d.exit()
	if err != nil {
		return err
	}
	g.mu.Lock()
	r := g.round
	if r == nil {
		r = &localRound{kind: kind, n: n, root: root, op: op, tag: t, ptrs: make([]uintptr, len(g.devs)), done: make(chan struct{})}
		g.round = r
	} else if r.kind != kind || r.n != n || r.root != root || r.op != op || r.tag != t {
		r.err = fmt.Errorf("%s: collective mismatch: %s %q (step %d) of %d elements, root %d, %s meets %s %q (step %d) of %d elements, root %d, %s",
			d.Name(), kind, t.Name, t.Step, n, root, op, r.kind, r.tag.Name, r.tag.Step, r.n, r.root, r.op)
	}
	r.ptrs[c.rank] = p
	r.arrived++
	if r.arrived < len(g.devs) {
		g.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-time.After(localTimeout):
			return fmt.Errorf("%s: %s %q (step %d): the other replicas did not arrive within %v (did one of them fail?)", d.Name(), kind, t.Name, t.Step, localTimeout)
		}
	}
	g.round = nil
	g.mu.Unlock()
	if r.err == nil {
		r.err = g.enqueue(r)
	}
	close(r.done)
	return r.err
}

// enqueue queues a complete round on its leader's communication stream.
func (g *localGroup) enqueue(r *localRound) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := currentCtx()
	defer setCurrent(prev)
	lead := g.devs[r.root]
	if err := setCurrent(lead.gpu.ctx); err != nil {
		return err
	}
	s := lead.comm
	for _, d := range g.devs {
		if err := waitEvent(s, d.evCompute); err != nil {
			return err
		}
	}
	bytes := 4 * r.n
	dst := r.ptrs[r.root]
	if r.kind != "broadcast" {
		for i, d := range g.devs {
			if i == r.root {
				continue
			}
			src := r.ptrs[i]
			if d.gpu != lead.gpu {
				tmp, err := lead.collScratch(r.n)
				if err != nil {
					return err
				}
				if err := memcpyPeer(tmp, lead.gpu.ctx, cu.DevicePtr(src), d.gpu.ctx, bytes, s); err != nil {
					return err
				}
				src = uintptr(tmp)
			}
			if err := launchOn(lead, s, g.args, &g.bits, kAccumulate, elementwise(r.n), ptrArg(dst), ptrArg(src), intArg(r.n)); err != nil {
				return err
			}
		}
		if r.op == comm.Mean && (r.kind == "allreduce" || r.kind == "reduce") {
			if err := scaleOn(lead, s, g.args, &g.bits, dst, r.n, 1/float64(len(g.devs))); err != nil {
				return err
			}
		}
	}
	if r.kind != "reduce" {
		for i, d := range g.devs {
			if i == r.root {
				continue
			}
			var err error
			if d.gpu == lead.gpu {
				err = memcpyDtoD(cu.DevicePtr(r.ptrs[i]), cu.DevicePtr(dst), bytes, s)
			} else {
				err = memcpyPeer(cu.DevicePtr(r.ptrs[i]), d.gpu.ctx, cu.DevicePtr(dst), lead.gpu.ctx, bytes, s)
			}
			if err != nil {
				return err
			}
		}
	}
	if err := record(lead.evColl, s); err != nil {
		return err
	}
	for _, d := range g.devs {
		if err := waitEvent(d.stream, lead.evColl); err != nil {
			return err
		}
	}
	return nil
}

// collScratch is n floats of the device's memory for collectives between
// GPUs (allocated in the current context, which must be the device's).
func (d *Device) collScratch(n int) (cu.DevicePtr, error) {
	if d.scratchN >= n {
		return d.scratch, nil
	}
	if d.scratch != 0 {
		cu.MemFree(d.scratch)
		d.scratch, d.scratchN = 0, 0
	}
	p, err := cu.MemAlloc(int64(4 * n))
	if err != nil {
		return 0, fmt.Errorf("%s: collective scratch: %w", d.Name(), err)
	}
	d.scratch, d.scratchN = p, n
	return p, nil
}

// hostColl runs a device's collectives through host memory and its host
// communicator: download, collective, upload.
type hostColl struct {
	d   *Device
	c   comm.Communicator
	buf []float32
}

func (h *hostColl) stage(b *engine.Buffer, off, n int, f func([]float32) error) error {
	if cap(h.buf) < n {
		h.buf = make([]float32, n)
	}
	buf := h.buf[:n]
	if err := h.d.DownloadF32(b, off, buf); err != nil {
		return err
	}
	if err := f(buf); err != nil {
		return err
	}
	return h.d.UploadF32(b, off, buf)
}

// AllReduce reduces elements [off, off+n) of b across the group, through host memory.
func (h *hostColl) AllReduce(b *engine.Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error {
	return h.stage(b, off, n, func(buf []float32) error { return h.c.AllReduce(buf, op, t) })
}

// Reduce reduces elements [off, off+n) of b into root's, through host memory.
func (h *hostColl) Reduce(b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error {
	return h.stage(b, off, n, func(buf []float32) error { return h.c.Reduce(buf, root, op, t) })
}

// Broadcast copies root's elements [off, off+n) of b to every member, through host memory.
func (h *hostColl) Broadcast(b *engine.Buffer, off, n, root int, t comm.Tag) error {
	return h.stage(b, off, n, func(buf []float32) error { return h.c.Broadcast(buf, root, t) })
}

// ReduceScatter reduces elements [off, off+n) of b across the group and
// copies this member's block into part: an all-reduce of the range
// through the group's rendezvous (the rest of the range then holds the
// sum too), then a copy on the compute stream.
func (c *localColl) ReduceScatter(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error {
	size := len(c.g.devs)
	if n%size != 0 {
		return fmt.Errorf("reduce_scatter %q: %d elements do not split into %d blocks", t.Name, n, size)
	}
	if err := c.run("allreduce", b, off, n, 0, op, t); err != nil {
		return err
	}
	blk := n / size
	return c.g.devs[c.rank].copyWithin(part, partOff, b, off+c.rank*blk, blk)
}

// AllGather copies every member's block of part into elements [off,
// off+n) of b: each member's block goes into its own place, then one
// broadcast per member through the group's rendezvous.
func (c *localColl) AllGather(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, t comm.Tag) error {
	size := len(c.g.devs)
	if n%size != 0 {
		return fmt.Errorf("all_gather %q: %d elements do not split into %d blocks", t.Name, n, size)
	}
	blk := n / size
	if err := c.g.devs[c.rank].copyWithin(b, off+c.rank*blk, part, partOff, blk); err != nil {
		return err
	}
	for r := 0; r < size; r++ {
		if err := c.run("broadcast", b, off+r*blk, blk, r, comm.Sum, t); err != nil {
			return err
		}
	}
	return nil
}

// copyWithin copies n elements of src from srcOff to dst from dstOff on
// the compute stream (nothing when they are the same memory).
func (d *Device) copyWithin(dst *engine.Buffer, dstOff int, src *engine.Buffer, srcOff, n int) error {
	to, err := d.span(dst, dstOff, n)
	if err != nil {
		return err
	}
	from, err := d.span(src, srcOff, n)
	if err != nil {
		return err
	}
	if to == from || n == 0 {
		return nil
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	if err := d.joinComm(); err != nil {
		return err
	}
	return memcpyDtoD(cu.DevicePtr(to), cu.DevicePtr(from), 4*n, d.stream)
}

// ReduceScatter reduces elements [off, off+n) of b across the group into
// this rank's block of part, through host memory.
func (h *hostColl) ReduceScatter(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error {
	size := h.c.Size()
	if n%size != 0 {
		return fmt.Errorf("%s: reduce_scatter %q: %d elements do not split into %d blocks", h.d.Name(), t.Name, n, size)
	}
	blk := n / size
	if cap(h.buf) < n+blk {
		h.buf = make([]float32, n+blk)
	}
	send, recv := h.buf[:n], h.buf[n:n+blk]
	if err := h.d.DownloadF32(b, off, send); err != nil {
		return err
	}
	if err := h.c.ReduceScatter(send, recv, op, t); err != nil {
		return err
	}
	return h.d.UploadF32(part, partOff, recv)
}

// AllGather copies every rank's block of part into elements [off, off+n)
// of b, through host memory.
func (h *hostColl) AllGather(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, t comm.Tag) error {
	size := h.c.Size()
	if n%size != 0 {
		return fmt.Errorf("%s: all_gather %q: %d elements do not split into %d blocks", h.d.Name(), t.Name, n, size)
	}
	blk := n / size
	if cap(h.buf) < n {
		h.buf = make([]float32, n)
	}
	recv := h.buf[:n]
	send := recv[h.c.Rank()*blk:][:blk] // in place: this rank's own block
	if err := h.d.DownloadF32(part, partOff, send); err != nil {
		return err
	}
	if err := h.c.AllGather(send, recv, t); err != nil {
		return err
	}
	return h.d.UploadF32(b, off, recv)
}
