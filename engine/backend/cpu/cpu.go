// Package cpu is gorun's default backend: a Program's buffers live in one
// host arena (a gorgonia.org/tensor tensor whose memory comes from the
// backend's tensor.Engine, Go heap memory), which the kernels of package
// ops see as float32 and int32 slices of it (ops.Buf), and its steps run
// those CPU kernels. Collectives run through the host communicators (in-process shared
// memory or MPI) directly on the arena.
//
// Importing the package registers the backend as "cpu" (cmd/gorun does;
// so do the tests that run Plans). Its table in the cluster file has one
// key:
//
//	[cpu]
//	help = true   # false: a device never runs another's gradient kernels
//
// Helping (engine/runner/help.go) lets a device that has finished its
// backward pass run a slower device's remaining gradient kernels
// (Device.ExecFor); with help = false every device refuses (CanHelp), to
// measure what helping gains.
package cpu

import (
	"fmt"
	"math/rand/v2"
	"unsafe"

	"gorgonia.org/tensor"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/target"
	"gorun/ops"
)

func init() { backend.Register(Backend{}) }

// Backend opens CPU devices; every Program of the process gets one.
type Backend struct{}

// Target describes the cpu backend: every op that has a CPU kernel in
// package ops (all of them) but the fusions it declines, devices in the
// host's memory, each computing on one core, and the key help of its
// [cpu] table.
func (Backend) Target() *target.Target {
	return &target.Target{
		Name:       "cpu",
		Supports:   func(op ops.Op) bool { return ops.Kernels32[op] != nil && declined[op] == "" },
		Declines:   declined,
		Keys:       []target.Key{target.Bool("help", true, "false: a device never runs a slower device's gradient kernels (helping)")},
		HostMemory: true,
		HostCores:  true,
	}
}

// declined are the target fusions the CPU backend has a kernel for but
// that the compiler should not make for it, each with the reason.
var declined = map[ops.Op]string{
	ops.CrossEntropyFused:    "cross_entropy_fused (the fused classifier) is a CUDA fusion: it saves a GPU a pass over the probabilities; CPU plans keep cross_entropy and cross_entropy_grad (its CPU kernel serves checks)",
	ops.LinearGELU:           "linear+gelu is a CUDA fusion: cuBLASLt applies the tanh GELU in its matmul's epilogue; CPU plans keep linear and gelu (its CPU kernel serves checks)",
	ops.LinearGradInputGELU:  "linear_grad_input+gelu_grad is a CUDA fusion: cuBLASLt applies the GELU's derivative in its matmul's epilogue; CPU plans keep linear_grad_input and gelu_grad (its CPU kernel serves checks)",
	ops.LinearGradWeightBias: "linear_grad_weight+linear_grad_bias is a CUDA fusion: cuBLASLt sums the bias gradient in the weight gradient's matmul; CPU plans keep linear_grad_weight and linear_grad_bias (its CPU kernel serves checks)",
}

// Open returns a CPU device; the index only names it. Its settings are
// the [cpu] table's (help).
func (Backend) Open(index int, opts backend.Options) (backend.Device, error) {
	d := &Device{index: index, eng: Engine{}}
	if help, ok := opts.Settings["help"].(bool); ok {
		d.noHelp = !help
	}
	d.pcg = &rand.PCG{}
	d.ctx.RNG = rand.New(d.pcg)
	return d, nil
}

// Connect runs each device's collectives through its host communicator,
// on the device's arena.
func (Backend) Connect(devs []backend.Device, host []comm.Communicator) ([]backend.Collectives, error) {
	if len(devs) != len(host) {
		return nil, fmt.Errorf("cpu: %d devices and %d communicators", len(devs), len(host))
	}
	out := make([]backend.Collectives, len(devs))
	for i, dv := range devs {
		d, ok := dv.(*Device)
		if !ok {
			return nil, fmt.Errorf("cpu: device %s is not a CPU device", dv.Name())
		}
		out[i] = &collectives{d: d, c: host[i]}
	}
	return out, nil
}

// Engine is the CPU backend's tensor.Engine: gorgonia's standard engine,
// whose memory is Go heap memory.
type Engine struct{ tensor.StdEng }

// Device is one CPU device: a Program's arena and the kernels' context.
type Device struct {
	index int
	eng   Engine
	prog  *engine.Program
	arena *tensor.Dense
	f32   []float32 // the arena's memory as floats
	i32   []int32   // the same memory as int32
	bufs  []ops.Buf[float32]
	// bound holds each step's kernel arguments, by Step.ID, so running a
	// step allocates nothing.
	bound   []bound
	batched []int // IDs of batched buffers
	ctx     ops.Ctx[float32]
	pcg     *rand.PCG // the state behind ctx.RNG
	// help is the kernels' context for another device's steps (ExecFor):
	// this device's scratch, no RNG.
	help ops.Ctx[float32]
	// noHelp: the [cpu] table's help = false; the device runs no other
	// device's steps (CanHelp).
	noHelp bool
	// halt is the halt flag of backend.Deferrer (1: update-phase steps do
	// nothing), marked the step's loss and whether its gradients were
	// finite: the "device memory" a deferred step's verdict lives in.
	halt       [1]float32
	markedLoss float32
	markedOK   bool
}

type bound struct {
	kernel   ops.Kernel[float32]
	attrs    ops.Attrs // Accumulate false
	accAttrs ops.Attrs // Accumulate true
	in, out  []*ops.Buf[float32]
	// lendable is set when another device may run the step (ExecFor): a
	// kernel step outside the update that draws no random numbers and
	// updates no input, so its result does not depend on who runs it.
	lendable bool
}

// attrsFor is the step's attributes for this micro-batch: accumulating
// into its outputs after the first micro-batch when the step sums over
// them.
func (bd *bound) attrsFor(st *engine.Step, rc *backend.RunCtx) *ops.Attrs {
	if st.Acc && !rc.First {
		return &bd.accAttrs
	}
	return &bd.attrs
}

var (
	_ backend.Device   = (*Device)(nil)
	_ backend.Helper   = (*Device)(nil)
	_ backend.Deferrer = (*Device)(nil)
)

// Name is "cpu:INDEX".
func (d *Device) Name() string { return fmt.Sprintf("cpu:%d", d.index) }

// Load allocates the program's arena and binds every step to its kernel.
func (d *Device) Load(prog *engine.Program) error {
	if d.prog != nil {
		return fmt.Errorf("%s: a device loads one program", d.Name())
	}
	d.prog = prog
	d.arena = tensor.New(tensor.WithShape(max(prog.ArenaElems, 1)), tensor.Of(tensor.Float32), tensor.WithEngine(d.eng))
	d.f32 = d.arena.Data().([]float32)[:prog.ArenaElems]
	d.i32 = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(d.f32))), len(d.f32))
	d.bufs = make([]ops.Buf[float32], len(prog.Buffers))
	for i, b := range prog.Buffers {
		kb := &d.bufs[i]
		kb.Shape = append([]int(nil), b.Max...)
		lo, hi := b.Offset, b.Offset+b.Elems()
		if b.DType == engine.Int32 {
			kb.Idx = d.i32[lo:hi:hi]
		} else {
			kb.Data = d.f32[lo:hi:hi]
		}
		if b.Batched {
			d.batched = append(d.batched, i)
		}
	}
	if prog.Work != nil {
		d.ctx.Work = d.bufs[prog.Work.ID].Data
	}
	d.bufs[prog.LossSeed.ID].Data[0] = 1
	n := 0
	for _, steps := range [][]*engine.Step{prog.Steps, prog.Eval} {
		for _, st := range steps {
			n = max(n, st.ID+1)
		}
	}
	d.bound = make([]bound, n)
	for _, steps := range [][]*engine.Step{prog.Steps, prog.Eval} {
		for _, st := range steps {
			if st.Kind != engine.KernelStep {
				continue
			}
			k := ops.Kernels32[st.Op]
			if k == nil {
				return fmt.Errorf("%s: no CPU kernel for op %s", d.Name(), st.Op)
			}
			def := ops.Lookup(st.Op)
			bd := bound{kernel: k, attrs: st.Attrs, accAttrs: st.Attrs,
				lendable: st.Phase != engine.PhaseUpdate && !def.Random && !def.InPlace}
			bd.attrs.Accumulate, bd.accAttrs.Accumulate = false, true
			bd.in = make([]*ops.Buf[float32], len(st.In))
			for i, b := range st.In {
				if b != nil {
					bd.in[i] = &d.bufs[b.ID]
				}
			}
			bd.out = make([]*ops.Buf[float32], len(st.Out))
			for i, b := range st.Out {
				bd.out[i] = &d.bufs[b.ID]
			}
			d.bound[st.ID] = bd
		}
	}
	return nil
}

// Buf is buffer b as the kernels see it: its memory and live shape. Tests
// and host-side tools read and write it directly on a CPU device.
func (d *Device) Buf(b *engine.Buffer) *ops.Buf[float32] { return &d.bufs[b.ID] }

// SetBatch sets the live batch of every batched buffer.
func (d *Device) SetBatch(n int) {
	for _, id := range d.batched {
		d.bufs[id].Shape[0] = n
	}
}

// Exec runs a kernel or copy step.
func (d *Device) Exec(st *engine.Step, rc *backend.RunCtx) error {
	if st.Phase == engine.PhaseUpdate && d.halt[0] != 0 {
		return nil // the step's verdict holds the update back (MarkStep)
	}
	switch st.Kind {
	case engine.KernelStep:
		bd := &d.bound[st.ID]
		d.ctx.LossScale = rc.LossScale
		d.ctx.Step = rc.Step
		a := bd.attrsFor(st, rc)
		if st.Phase == engine.PhaseUpdate {
			a.LR = st.Attrs.LR // times the schedule's scale
			if rc.LRScale != 0 {
				a.LR *= rc.LRScale
			}
		}
		bd.kernel(&d.ctx, a, bd.in, bd.out)
	case engine.CopyStep:
		in, out := &d.bufs[st.In[0].ID], &d.bufs[st.Out[0].ID]
		n := in.Len()
		if in.Idx != nil {
			copy(out.Idx[:n], in.Idx[:n])
		} else {
			copy(out.Data[:n], in.Data[:n])
		}
	default:
		return fmt.Errorf("%s: step %d (%s) is not a kernel or copy step", d.Name(), st.ID, st.Layer)
	}
	return nil
}

// CanHelp reports whether owner is a CPU device whose scratch space is no
// larger than d's, and d may help (the [cpu] table's help is not false).
func (d *Device) CanHelp(owner backend.Device) bool {
	o, ok := owner.(*Device)
	return ok && !d.noHelp && o.prog != nil && d.prog != nil && len(o.ctx.Work) <= len(d.ctx.Work)
}

// ExecFor runs kernel step st of owner, another CPU device of this
// process, on the calling goroutine: owner's buffers and bound arguments,
// rc's loss scale, step and accumulate flag, and d's scratch space. Steps
// that draw random numbers or update their inputs are refused (their
// result would depend on which device ran them).
func (d *Device) ExecFor(owner backend.Device, st *engine.Step, rc *backend.RunCtx) error {
	o, ok := owner.(*Device)
	if !ok || !d.CanHelp(owner) {
		return fmt.Errorf("%s: cannot run a step of %s", d.Name(), owner.Name())
	}
	if st.Kind != engine.KernelStep || st.ID >= len(o.bound) || !o.bound[st.ID].lendable {
		return fmt.Errorf("%s: step %d (%s) of %s must run on its own device", d.Name(), st.ID, st.Layer, o.Name())
	}
	bd := &o.bound[st.ID]
	c := &d.help
	c.LossScale, c.Step, c.Work = rc.LossScale, rc.Step, d.ctx.Work
	bd.kernel(c, bd.attrsFor(st, rc), bd.in, bd.out)
	return nil
}

func (d *Device) span(b *engine.Buffer, off, n int) (int, int, error) {
	if off < 0 || n < 0 || off+n > b.Elems() {
		return 0, 0, fmt.Errorf("%s: elements [%d:%d] of buffer %s (%d elements)", d.Name(), off, off+n, b.Name, b.Elems())
	}
	return b.Offset + off, b.Offset + off + n, nil
}

// UploadF32 copies src into b from element off.
func (d *Device) UploadF32(b *engine.Buffer, off int, src []float32) error {
	lo, hi, err := d.span(b, off, len(src))
	if err == nil {
		copy(d.f32[lo:hi], src)
	}
	return err
}

// UploadI32 copies src into b from element off.
func (d *Device) UploadI32(b *engine.Buffer, off int, src []int32) error {
	lo, hi, err := d.span(b, off, len(src))
	if err == nil {
		copy(d.i32[lo:hi], src)
	}
	return err
}

// DownloadF32 copies b's elements from off into dst.
func (d *Device) DownloadF32(b *engine.Buffer, off int, dst []float32) error {
	lo, hi, err := d.span(b, off, len(dst))
	if err == nil {
		copy(dst, d.f32[lo:hi])
	}
	return err
}

// DownloadI32 copies b's elements from off into dst.
func (d *Device) DownloadI32(b *engine.Buffer, off int, dst []int32) error {
	lo, hi, err := d.span(b, off, len(dst))
	if err == nil {
		copy(dst, d.i32[lo:hi])
	}
	return err
}

// Zero clears b.
func (d *Device) Zero(b *engine.Buffer) error {
	clear(d.f32[b.Offset : b.Offset+b.Elems()])
	return nil
}

type hostData struct{ datasets.Dataset }

// LoadData keeps the dataset where it is: CPU kernels read host memory.
func (d *Device) LoadData(ds datasets.Dataset) (backend.Data, error) { return hostData{ds}, nil }

// Gather fills the live batch of input and target with samples idx.
func (d *Device) Gather(data backend.Data, idx []int, input, target *engine.Buffer) error {
	h, ok := data.(hostData)
	if !ok {
		return fmt.Errorf("%s: data was not loaded by a CPU device", d.Name())
	}
	n := len(idx)
	if n > input.Max[0] {
		return fmt.Errorf("%s: %d samples for a batch of %d", d.Name(), n, input.Max[0])
	}
	per := input.Elems() / input.Max[0]
	if input.DType == engine.Int32 {
		tk, ok := h.Dataset.(datasets.Tokens)
		if !ok {
			return fmt.Errorf("%s: %s has no token ids, the model's input takes them", d.Name(), h.Name())
		}
		tk.FillTokens(idx, d.bufs[input.ID].Idx[:n*per], d.bufs[target.ID].Idx[:n*per])
		return nil
	}
	if target.DType == engine.Float32 {
		r, ok := h.Dataset.(datasets.Regression)
		if !ok {
			return fmt.Errorf("%s: %s has class labels, the model's target takes float values", d.Name(), h.Name())
		}
		t := target.Elems() / target.Max[0]
		r.FillTargets(idx, d.bufs[input.ID].Data[:n*per], d.bufs[target.ID].Data[:n*t])
		return nil
	}
	h.Fill(idx, d.bufs[input.ID].Data[:n*per], d.bufs[target.ID].Idx[:n])
	return nil
}

// SeedRNG seeds the dropout RNG (a PCG).
func (d *Device) SeedRNG(seed, stream uint64) { d.pcg.Seed(seed, stream) }

// RNGState is the dropout RNG's state.
func (d *Device) RNGState() ([]byte, error) { return d.pcg.MarshalBinary() }

// SetRNGState restores the dropout RNG's state.
func (d *Device) SetRNGState(b []byte) error { return d.pcg.UnmarshalBinary(b) }

// Finite reports whether b's live elements are all finite (integer
// buffers always are).
func (d *Device) Finite(b *engine.Buffer) (bool, error) {
	kb := &d.bufs[b.ID]
	if kb.Idx != nil {
		return true, nil
	}
	for _, v := range kb.Data[:kb.Len()] {
		if v-v != 0 { // NaN and ±Inf
			return false, nil
		}
	}
	return true, nil
}

// Defers reports whether MarkStep can guard prog's update phase (Exec
// skips every update-phase step while the flag is set) and agree the flag
// over coll: nil, or the collectives Connect made for CPU devices.
func (d *Device) Defers(prog *engine.Program, coll backend.Collectives) bool {
	if coll == nil {
		return true
	}
	_, ok := coll.(*collectives)
	return ok
}

// MarkStep sets the halt flag when loss or grads hold a non-finite value
// (or, sticky, when it is set), agrees it over coll (the largest, through
// the host communicator) and keeps the values Marked returns: a CPU
// device's work is done when its calls return, so nothing is queued.
func (d *Device) MarkStep(loss, grads *engine.Buffer, sticky bool, coll backend.Collectives, step int) error {
	l := d.bufs[loss.ID].Data[0]
	ok, err := d.Finite(grads)
	if err != nil {
		return err
	}
	bad := l-l != 0 || !ok
	if !(sticky && d.halt[0] != 0) {
		d.halt[0] = 0
	}
	if bad {
		d.halt[0] = 1
	}
	if coll != nil {
		c, isCPU := coll.(*collectives)
		if !isCPU {
			return fmt.Errorf("%s: the step's verdict cannot be agreed over another backend's collectives", d.Name())
		}
		if err := c.c.AllReduce(d.halt[:], comm.Max, comm.Tag{Name: "step verdict", Step: step}); err != nil {
			return err
		}
	}
	d.markedLoss, d.markedOK = l, ok
	return nil
}

// Marked returns what the last MarkStep saw: the loss, whether this
// device's gradients were finite, and the (agreed) halt flag.
func (d *Device) Marked() (float32, bool, bool, error) {
	return d.markedLoss, d.markedOK, d.halt[0] != 0, nil
}

// AppendRNGState appends the dropout RNG's state to b.
func (d *Device) AppendRNGState(b []byte) ([]byte, error) { return d.pcg.AppendBinary(b) }

// ArenaBytes is the memory the device's arena tensor holds (0 before Load
// and after Close): what the device allocated for its Program, which
// tests compare with the Plan's figures.
func (d *Device) ArenaBytes() int64 {
	if d.arena == nil {
		return 0
	}
	return int64(d.arena.MemSize())
}

// Sync returns at once: CPU kernels are done when Exec returns.
func (d *Device) Sync() error { return nil }

// Close drops the arena.
func (d *Device) Close() error {
	d.arena, d.f32, d.i32, d.bufs = nil, nil, nil, nil
	return nil
}

// collectives run a CPU device's collectives through its host communicator.
type collectives struct {
	d *Device
	c comm.Communicator
}

func (c *collectives) span(b *engine.Buffer, off, n int) ([]float32, error) {
	lo, hi, err := c.d.span(b, off, n)
	if err != nil {
		return nil, err
	}
	return c.d.f32[lo:hi], nil
}

func (c *collectives) AllReduce(b *engine.Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error {
	buf, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	return c.c.AllReduce(buf, op, t)
}

func (c *collectives) Reduce(b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error {
	buf, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	return c.c.Reduce(buf, root, op, t)
}

func (c *collectives) Broadcast(b *engine.Buffer, off, n, root int, t comm.Tag) error {
	buf, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	return c.c.Broadcast(buf, root, t)
}

// ReduceScatter reduces b's elements [off, off+n) over the group into
// each rank's block of part (in place when part is b's own block).
func (c *collectives) ReduceScatter(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error {
	send, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	size := c.c.Size()
	if n%size != 0 {
		return fmt.Errorf("%s: reduce_scatter %q: %d elements do not split into %d blocks", c.d.Name(), t.Name, n, size)
	}
	recv, err := c.span(part, partOff, n/size)
	if err != nil {
		return err
	}
	return c.c.ReduceScatter(send, recv, op, t)
}

// AllGather gathers every rank's block of part into b's elements [off,
// off+n) (in place when part is b's own block).
func (c *collectives) AllGather(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, t comm.Tag) error {
	recv, err := c.span(b, off, n)
	if err != nil {
		return err
	}
	size := c.c.Size()
	if n%size != 0 {
		return fmt.Errorf("%s: all_gather %q: %d elements do not split into %d blocks", c.d.Name(), t.Name, n, size)
	}
	send, err := c.span(part, partOff, n/size)
	if err != nil {
		return err
	}
	return c.c.AllGather(send, recv, t)
}
