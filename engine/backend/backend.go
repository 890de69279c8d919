// Package backend is the seam between a compiled Plan and the devices that
// run it. The Plan (package engine) is immutable and device-neutral: its
// buffers are ids with a dtype, a planned maximum shape and an offset in
// their Program's arena; its steps name ops. A Backend opens Devices; a
// Device allocates one Program's arena, runs its kernel and copy steps,
// moves data in and out, owns the dropout RNG, and — through Connect —
// runs the collectives of a group of devices over their own memory.
//
// How a Device holds its arena is its own affair: gorun's backends
// allocate it as one gorgonia.org/tensor tensor over their own
// tensor.Engine's memory (Go heap memory on the CPU, device memory through
// gorgonia.org/cu on a GPU), but the seam passes no tensor and no engine:
// the runner names buffers (engine.Buffer) and moves their elements
// through the Device's Upload, Download and Gather.
//
// The runner (package engine/runner) drives Devices; it never touches
// buffer memory itself.
//
// Backends register themselves (Register), and with them their
// description for the compile half (a target.Target: name, ops,
// cluster-file keys, memory, transports), which package engine reads from
// package engine/target without importing any backend. The program that
// runs a Plan imports the backends it offers: cmd/gorun imports the cpu
// backend (package engine/backend/cpu) and, in a gorun built with -tags
// cuda, the cuda one (package gorun/cuda); tests import those they use.
package backend

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/target"
)

// Backend opens devices of one kind.
type Backend interface {
	// Target describes the backend to the compiler: its name (the cluster
	// file's "cpu", "cuda"), the ops it runs (forward, backward, optimizer
	// and fusions), the keys of its cluster-file table, whether its
	// memory is the host's and the transports it brings. Every backend
	// runs every op but Invalid and those it declines, which may only be
	// ops the compiler emits for a target that supports them
	// (engine.TargetFusions); a test enumerates the op set against each
	// backend.
	Target() *target.Target
	// Open opens the device for the index-th Program of this host
	// (0-based): process k of a host, with D devices each, opens k·D …
	// k·D+D-1. A backend with fewer physical devices than that may place
	// several Programs on one (replicas); the error says so when it cannot.
	Open(index int, opts Options) (Device, error)
	// Connect joins local devices (one per Program of this process, in
	// rank order) into a group for collectives over their buffers. host
	// holds each device's host communicator (in-process or MPI), which a
	// backend without collectives of its own runs them through.
	Connect(devs []Device, host []comm.Communicator) ([]Collectives, error)
}

// Options are the settings a device is opened with (from the cluster
// file).
type Options struct {
	// Settings are the values of the keys of the backend's own table in
	// the cluster file ([cuda] eager), by key ("eager"), the defaults
	// filled in (engine.Cluster.BackendSettings); each backend reads its
	// own keys (target.Target.Keys) and may take a missing one as its
	// default.
	Settings map[string]any
}

// RunCtx is what a step needs from the run besides its buffers.
type RunCtx struct {
	// LossScale multiplies the summed per-sample losses.
	LossScale float64
	// Step is the 1-based optimizer step.
	Step int
	// First is true on the first micro-batch of an optimizer step: steps
	// that accumulate across micro-batches (Step.Acc) overwrite their
	// output instead of adding into it.
	First bool
	// Last is true on the last micro-batch of an optimizer step: only then
	// do the sync and update phases run.
	Last bool
	// LRScale multiplies the learning rate (Attrs.LR) of the update
	// phase's optimizer steps on this optimizer step: the schedule's rate
	// over the optimizer's. 0 means 1.
	LRScale float64
}

// Device holds one Program's buffers and runs its kernel and copy steps.
// A Device is used by one goroutine at a time, except that Collectives of
// a group may run on a goroutine of their own while the device computes
// (overlap); a backend makes that safe (streams and events on a GPU).
type Device interface {
	// Name says which device this is ("cpu:0", "cuda:1 (NVIDIA H200)").
	Name() string
	// Load allocates prog's arena (every buffer at its planned offset)
	// and prepares every step of prog.Steps and prog.Eval. A Device loads
	// one Program.
	Load(prog *engine.Program) error
	// SetBatch sets the live batch (first dimension) of every batched
	// buffer for the steps that follow.
	SetBatch(n int)
	// Exec runs one kernel or copy step.
	Exec(st *engine.Step, rc *RunCtx) error
	// UploadF32 and UploadI32 copy src into buffer b from element off on;
	// DownloadF32 and DownloadI32 copy out of it. They wait for the work
	// queued before them that touches b.
	UploadF32(b *engine.Buffer, off int, src []float32) error
	UploadI32(b *engine.Buffer, off int, src []int32) error
	DownloadF32(b *engine.Buffer, off int, dst []float32) error
	DownloadI32(b *engine.Buffer, off int, dst []int32) error
	// Zero clears a buffer.
	Zero(b *engine.Buffer) error
	// LoadData makes a dataset resident on the device (once per run);
	// Gather fills the live batch of input and target with the samples
	// idx of it (len(idx) ≤ the planned batch; on a GPU only the indices
	// travel).
	LoadData(ds datasets.Dataset) (Data, error)
	Gather(d Data, idx []int, input, target *engine.Buffer) error
	// SeedRNG seeds the dropout RNG; RNGState and SetRNGState save and
	// restore it (checkpoints).
	SeedRNG(seed, stream uint64)
	RNGState() ([]byte, error)
	SetRNGState(state []byte) error
	// Sync waits until the device has finished all work queued so far.
	Sync() error
	// Close frees the device's memory.
	Close() error
}

// Replayer is a Device that can run a whole training micro-batch as one
// launch (a captured CUDA graph), collectives included. The runner lets it
// run every micro-batch; a Replayer that its settings tell to run step by
// step (cuda's eager) does so inside RunTrain and RunUpdate.
type Replayer interface {
	Device
	// RunTrain runs the forward and backward phases of prog.Steps for one
	// micro-batch as rc describes, and the sync phase when rc.Last, with
	// coll for the collective steps.
	RunTrain(prog *engine.Program, rc *RunCtx, coll Collectives) error
	// RunUpdate runs the update phase of prog.Steps (the optimizer and the
	// collectives after it). The runner calls it after the last
	// micro-batch once it has checked that the loss and gradients are
	// finite.
	RunUpdate(prog *engine.Program, rc *RunCtx, coll Collectives) error
}

// FiniteChecker is a Device that can tell cheaply whether a float buffer
// holds only finite values (the runner checks the gradients every step);
// without it the runner reads the buffer back.
type FiniteChecker interface {
	// Finite reports whether the live elements of b are all finite.
	Finite(b *engine.Buffer) (bool, error)
}

// StepReader is a Device that reads what the runner needs of an optimizer
// step — the loss buffer's value and whether the synced gradients are all
// finite — in one transfer and one wait, where the runner would otherwise
// download the loss and then check the gradients (two waits for the
// device: cuda's).
type StepReader interface {
	// ReadStep returns loss's first element and whether the live elements
	// of float buffer grads are all finite (FiniteChecker's Finite).
	ReadStep(loss, grads *engine.Buffer) (float32, bool, error)
}

// Deferrer is a Device that keeps an optimizer step's verdict — may its
// update run? — on the device, so the runner launches the update without
// waiting for the device and reads the step's loss later (llm.c's and
// PyTorch's capturable optimizers keep it there too). The device holds a
// halt flag: MarkStep sets it when the step's loss or synced gradients are
// not finite, and while it is set every update-phase step of the Program
// (the optimizer, gradient clipping) does nothing, reading the flag where
// it runs (device memory on a GPU). The runner uses a Deferrer only for
// Programs whose update phase holds no collective (which the flag could
// not hold back) and, in a group, only where Defers says the device can
// agree the flag over the group's collectives; otherwise it reads the
// verdict first (StepReader) and decides on the host.
type Deferrer interface {
	// Defers reports whether MarkStep can guard prog's update phase —
	// every kernel step of it honours the halt flag — and, with coll (a
	// group's collectives; nil for a lone device), agree the flag over
	// the group.
	Defers(prog *engine.Program, coll Collectives) bool
	// MarkStep queues, without waiting for the device: the halt flag set
	// when loss's first element or a live element of float buffer grads
	// is not finite, or (sticky) when it was set already, else cleared;
	// with coll, the flag is then the largest over the group (every
	// device of the group calls MarkStep, in one order with its other
	// collectives), so every device holds the group's verdict; and a copy
	// of the loss, whether the device's own grads are finite and the flag
	// to host memory, which Marked reads. step names the collective.
	MarkStep(loss, grads *engine.Buffer, sticky bool, coll Collectives, step int) error
	// Marked waits for the copy the last MarkStep queued and returns the
	// loss, whether this device's grads were finite and the flag.
	Marked() (loss float32, gradsFinite, halted bool, err error)
	// AppendRNGState appends the dropout RNG's state (RNGState's bytes)
	// to b, without allocating when b has room: the runner keeps it from
	// before each deferred step, to run that step's micro-batches again
	// when its verdict stops the run and the next step has run since.
	AppendRNGState(b []byte) ([]byte, error)
}

// Helper is a Device that can run a kernel step of another device of the
// same backend and process on the calling goroutine: CPU devices, whose
// arenas share one address space. The runner uses it to let a rank that
// finished its backward pass early take a slower rank's remaining
// gradient kernels (see package runner), so the step waits less for the
// slower rank; the result is the same bits whoever runs the step.
type Helper interface {
	// ExecFor runs kernel step st of owner with owner's buffers and rc
	// (owner's run context), and this device's scratch space. The caller
	// guarantees that nothing else touches the step's buffers meanwhile
	// and that this device runs no step of its own.
	ExecFor(owner Device, st *engine.Step, rc *RunCtx) error
	// CanHelp reports whether ExecFor can run owner's steps: owner is a
	// device of the same kind whose scratch space is no larger.
	CanHelp(owner Device) bool
}

// Data is a dataset resident on a device.
type Data interface {
	Len() int
}

// Freer is a Data that holds device memory and can give it back before the
// device closes: the runner frees a training set it uploads again each
// epoch (random transforms).
type Freer interface {
	Free()
}

// Collectives are one device's collectives over its own buffers: the
// k-th calls of every device of a group form one collective. off and n
// are elements of b.
type Collectives interface {
	AllReduce(b *engine.Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error
	Reduce(b *engine.Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error
	Broadcast(b *engine.Buffer, off, n, root int, t comm.Tag) error
	// ReduceScatter reduces elements [off, off+n) of b over the group and
	// leaves block r of the result (n/size elements) in rank r's part
	// from element partOff; AllGather concatenates every rank's block of
	// part (n/size elements from partOff) into elements [off, off+n) of
	// b, in rank order. part may be b with the rank's own block (in
	// place), no other overlap (engine.CollectiveRunner).
	ReduceScatter(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error
	AllGather(b *engine.Buffer, off, n int, part *engine.Buffer, partOff int, t comm.Tag) error
}

var (
	mu       sync.Mutex
	backends = map[string]Backend{}
)

// Register makes a backend available under its Target's name and
// registers that Target (target.Register). A second backend of the same
// name replaces the first. It panics on a Target without Supports.
func Register(b Backend) {
	t := b.Target()
	if !t.Built() {
		panic(fmt.Sprintf("backend %s: its Target has no Supports", t.Name))
	}
	target.Register(t)
	mu.Lock()
	defer mu.Unlock()
	backends[t.Name] = b
}

// Get returns the backend of a name; for a backend this gorun lacks, the
// error says how to get one that has it (its Target's hint).
func Get(name string) (Backend, error) {
	mu.Lock()
	b, ok := backends[name]
	have := namesLocked()
	mu.Unlock()
	if ok {
		return b, nil
	}
	if t := target.Lookup(name); t != nil && t.Hint != "" {
		return nil, fmt.Errorf("backend %q is not in this gorun (it has %s): %s", name, strings.Join(have, ", "), t.Hint)
	}
	return nil, fmt.Errorf("unknown backend %q (this gorun has %s)", name, strings.Join(have, ", "))
}

// Names lists the registered backends, sorted: those this gorun has.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	return namesLocked()
}

func namesLocked() []string {
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
