package engine

import (
	"fmt"
	"math/rand/v2"

	"gorgonia.org/tensor"

	"gorun/comm"
	"gorun/engine/spec"
	"gorun/ops"
)

// Plan is a compiled training run: one Program per device, every shape
// checked and every buffer allocated before the first step.
type Plan struct {
	Spec    *spec.Spec
	Cluster Cluster
	Graph   *Graph
	// Sample is the shape of one sample; Classes the number of classes.
	Sample  []int
	Classes int
	// LocalBatch[r] is rank r's share of the global batch (by the
	// cluster's weights, when it has some); MaxBatch the largest, which
	// every device's buffers are planned for.
	LocalBatch []int
	MaxBatch   int
	// Buckets are the gradient buckets, in the order their all-reduce runs.
	Buckets  []Bucket
	Devices  []*Program
	NumParam int // scalar parameters

	group *comm.Group // the in-process group of a running plan
}

// Bucket is a group of parameter gradients synchronised by one collective.
// Its gradients are contiguous in every device's gradient arena.
type Bucket struct {
	Params   []*Param
	Offset   int // first element in the gradient arena
	Elems    int
	AfterOps int // index in Graph.Backward of the node that completes it
}

// Buffer is one planned tensor of a device: its storage, its live shape
// (the embedded ops.Buf) and its planned maximum shape.
type Buffer struct {
	ops.Buf[float32]
	Name  string
	Value *Value // nil for optimizer state and scratch
	// Max is the shape at the planned maximum batch.
	Max     []int
	Batched bool
	// Dense is the gorgonia tensor that owns the memory (nil for views).
	Dense *tensor.Dense
	// View is the buffer whose memory this one shares, if any; a view of a
	// parameter or gradient arena starts at element Offset of it.
	View   *Buffer
	Offset int
}

// Bytes is the memory the buffer owns (0 for a view).
func (b *Buffer) Bytes() int64 {
	if b.View != nil {
		return 0
	}
	if b.Idx != nil {
		return int64(len(b.Idx)) * 4
	}
	return int64(len(b.Data)) * 4
}

// Phase says when a step runs.
type Phase uint8

// The phases of a training step.
const (
	PhaseForward  Phase = iota // every micro-batch
	PhaseBackward              // every micro-batch
	PhaseSync                  // collectives, in the last micro-batch only
	PhaseUpdate                // once per optimizer step
)

func (p Phase) String() string {
	return [...]string{"forward", "backward", "sync", "update"}[p]
}

// StepKind tells a kernel step from a collective.
type StepKind uint8

// The kinds of steps.
const (
	KernelStep StepKind = iota
	CollectiveStep
	CopyStep
)

// Step is one entry of a Program.
type Step struct {
	Kind  StepKind
	Phase Phase
	Op    ops.Op
	Attrs ops.Attrs
	In    []*Buffer
	Out   []*Buffer
	Layer string
	Pos   spec.Pos
	// Collective describes a collective step.
	Collective *Collective
	// Every, when > 0, runs the step only on optimizer steps that are a
	// multiple of it (local SGD's averaging).
	Every int

	// acc is the Accumulate variant's attrs, used after the first
	// micro-batch of an accumulated step.
	acc    bool
	kin    []*ops.Buf[float32]
	kout   []*ops.Buf[float32]
	kernel ops.Kernel[float32]
}

// Collective is a comm step: which collective, on which part of which
// buffer, and how many bytes it moves per step.
type Collective struct {
	Name   string // "allreduce", "reduce", "broadcast"
	Tag    string // "bucket 0", "params"
	Op     string // "sum", "mean" (reductions)
	Root   int
	Buffer *Buffer
	Offset int
	Elems  int
	// Bytes is the payload of the collective (elements × 4).
	Bytes int64
}

// Program is everything one device runs: its buffers and its steps.
type Program struct {
	Rank    int
	Buffers []*Buffer
	// Steps of one training step, in order; Eval the forward pass for
	// evaluation (dropout off).
	Steps []*Step
	Eval  []*Step

	Input, Target, Output, Loss *Buffer
	Params, Grads               []*Buffer // in Graph.Params order
	// ParamArena and GradArena hold every parameter and every gradient,
	// contiguous, in the order backward completes the gradients, so that a
	// bucket or the whole model is one collective.
	ParamArena, GradArena *Buffer
	// State holds optimizer state buffers, by parameter.
	State [][]*Buffer

	WorkElems int
	ctx       ops.Ctx[float32]
	pcg       *rand.PCG // the state behind ctx.RNG, saved in checkpoints
	batched   []*Buffer
	byValue   map[*Value]*Buffer
}

// MemoryBytes is the memory the program's buffers and scratch take.
func (p *Program) MemoryBytes() int64 {
	var n int64
	for _, b := range p.Buffers {
		n += b.Bytes()
	}
	return n + int64(p.WorkElems)*4
}

// SetBatch sets the live batch size of every batched buffer.
func (p *Program) SetBatch(n int) {
	for _, b := range p.batched {
		b.Shape[0] = n
	}
}

// Compile turns a Spec into a Plan for a cluster. It checks every shape,
// places every collective and allocates every buffer; no data is read.
func Compile(s *spec.Spec, c Cluster) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	info, err := datasetInfo(&s.Data)
	if err != nil {
		return nil, err
	}
	if s.Accumulate < 1 {
		s.Accumulate = 1
	}
	world := c.Devices
	if s.BatchSize < world {
		return nil, fmt.Errorf("%s: batch_size %d is smaller than the %d devices: every device needs at least one sample", s.Pos, s.BatchSize, world)
	}
	p := &Plan{Spec: s, Cluster: c, Sample: info.sample, Classes: info.classes}
	p.LocalBatch = SplitBatch(s.BatchSize, c.Weights, world)
	for r, b := range p.LocalBatch {
		if b == 0 {
			return nil, fmt.Errorf("%s: batch_size %d shared by the weights %v gives rank %d no samples", s.Pos, s.BatchSize, c.Weights, r)
		}
		p.MaxBatch = max(p.MaxBatch, b)
	}
	if err := checkSync(s, world); err != nil {
		return nil, err
	}
	g, err := BuildGraph(&s.Model, s.Loss, s.Pos, p.MaxBatch, info.sample, info.classes)
	if err != nil {
		return nil, err
	}
	p.Graph = g
	for _, prm := range g.Params {
		p.NumParam += prm.Value.Elems()
	}
	p.Buckets = planBuckets(g, s, c)
	for r := 0; r < world; r++ {
		prog, err := p.compileProgram(r)
		if err != nil {
			return nil, err
		}
		p.Devices = append(p.Devices, prog)
	}
	return p, nil
}

// SplitBatch shares total samples among ranks in proportion to weights
// (equal shares when weights is nil), by largest remainder: each rank gets
// the floor of its quota, and the samples left go one each to the ranks
// with the largest fractions, lower ranks first on ties. With equal
// weights, rank r takes total/n, plus one when r < total mod n.
func SplitBatch(total int, weights []float64, n int) []int {
	out := make([]int, n)
	if weights == nil {
		for r := range out {
			out[r] = total / n
			if r < total%n {
				out[r]++
			}
		}
		return out
	}
	var sum float64
	for _, w := range weights {
		sum += w
	}
	frac := make([]float64, n)
	left := total
	for r := range out {
		q := float64(total) * weights[r] / sum
		out[r] = int(q)
		frac[r] = q - float64(out[r])
		left -= out[r]
	}
	for ; left > 0; left-- {
		best := 0
		for r := range frac {
			if frac[r] > frac[best] {
				best = r
			}
		}
		out[best]++
		frac[best] = -1
	}
	return out
}

func checkSync(s *spec.Spec, world int) error {
	switch s.Sync.Kind {
	case spec.SyncAllReduce, spec.SyncNone, spec.SyncLocalSGD:
	case spec.SyncParameterServer:
		if s.Sync.Root >= world {
			return fmt.Errorf("%s: sync.parameter_server: root %d is not a rank (the world has %d devices)", s.Sync.Pos, s.Sync.Root, world)
		}
	default:
		return fmt.Errorf("%s: unknown sync strategy %q", s.Sync.Pos, s.Sync.Kind)
	}
	return nil
}

// planBuckets groups parameter gradients, in the order backward completes
// them, into buckets of at most the configured size; a bucket is placed
// right after the backward step that completes its last gradient.
func planBuckets(g *Graph, s *spec.Spec, c Cluster) []Bucket {
	limitMB := s.Sync.BucketMB
	if c.BucketMB > 0 {
		limitMB = c.BucketMB
	}
	if limitMB <= 0 {
		limitMB = 25
	}
	limit := int(limitMB * (1 << 20) / 4)
	var buckets []Bucket
	off := 0
	for i, n := range g.Backward {
		for _, prm := range g.Params {
			if prm.Grad != n.Out[0] {
				continue
			}
			e := prm.Value.Elems()
			if len(buckets) == 0 || buckets[len(buckets)-1].Elems+e > limit {
				buckets = append(buckets, Bucket{Offset: off})
			}
			b := &buckets[len(buckets)-1]
			b.Params = append(b.Params, prm)
			b.Elems += e
			b.AfterOps = i
			off += e
		}
	}
	return buckets
}

// newBuffer allocates a float32 (or int32) buffer of the given maximum shape.
func (prog *Program) newBuffer(name string, v *Value, shape []int, batched, isInt bool) *Buffer {
	b := &Buffer{Name: name, Value: v, Max: append([]int(nil), shape...), Batched: batched}
	b.Shape = append([]int(nil), shape...)
	n := 1
	for _, d := range shape {
		n *= d
	}
	if isInt {
		b.Dense = tensor.New(tensor.WithShape(n), tensor.Of(tensor.Int32))
		b.Idx = b.Dense.Data().([]int32)
	} else {
		b.Dense = tensor.New(tensor.WithShape(max(n, 1)), tensor.Of(tensor.Float32))
		b.Data = b.Dense.Data().([]float32)[:n]
	}
	prog.Buffers = append(prog.Buffers, b)
	if batched {
		prog.batched = append(prog.batched, b)
	}
	return b
}

// view makes a buffer sharing src's memory with another shape.
func (prog *Program) view(name string, v *Value, src *Buffer) *Buffer {
	b := &Buffer{Name: name, Value: v, Max: append([]int(nil), v.Shape...), Batched: v.Batched, View: src}
	b.Shape = append([]int(nil), v.Shape...)
	b.Data, b.Idx = src.Data, src.Idx
	prog.Buffers = append(prog.Buffers, b)
	if v.Batched {
		prog.batched = append(prog.batched, b)
	}
	return b
}

// compileProgram allocates rank r's buffers and lays out its steps.
func (p *Plan) compileProgram(r int) (*Program, error) {
	g := p.Graph
	prog := &Program{Rank: r, byValue: map[*Value]*Buffer{}}

	// Parameter gradients live in one arena, in bucket order.
	arenaElems := 0
	for _, prm := range g.Params {
		arenaElems += prm.Value.Elems()
	}
	prog.ParamArena = prog.newBuffer("parameters", nil, []int{arenaElems}, false, false)
	prog.GradArena = prog.newBuffer("gradients", nil, []int{arenaElems}, false, false)
	arenaAt := map[*Value]int{}
	gradAt := map[*Value]int{}
	for _, b := range p.Buckets {
		off := b.Offset
		for _, prm := range b.Params {
			gradAt[prm.Grad] = off
			arenaAt[prm.Value] = off
			arenaAt[prm.Grad] = off
			off += prm.Value.Elems()
		}
	}

	bufferOf := func(v *Value) *Buffer {
		if b, ok := prog.byValue[v]; ok {
			return b
		}
		var b *Buffer
		switch {
		case v.Producer != nil && v.Producer.Op == ops.Flatten:
			b = prog.view(v.Name, v, prog.byValue[v.Producer.In[0]])
		default:
			if off, ok := arenaAt[v]; ok {
				arena := prog.GradArena
				if v.Param != nil {
					arena = prog.ParamArena
				}
				b = &Buffer{Name: v.Name, Value: v, Max: v.Shape, View: arena, Offset: off}
				b.Shape = append([]int(nil), v.Shape...)
				b.Data = arena.Data[off : off+v.Elems()]
				prog.Buffers = append(prog.Buffers, b)
			} else {
				b = prog.newBuffer(v.Name, v, v.Shape, v.Batched, v.Int)
			}
		}
		prog.byValue[v] = b
		return b
	}
	for _, v := range g.Values {
		bufferOf(v)
	}
	prog.Input = prog.byValue[g.Input]
	prog.Target = prog.byValue[g.Target]
	prog.Output = prog.byValue[g.Output]
	prog.Loss = prog.byValue[g.Loss]
	prog.byValue[g.LossSeed].Data[0] = 1
	for _, prm := range g.Params {
		prog.Params = append(prog.Params, prog.byValue[prm.Value])
		prog.Grads = append(prog.Grads, prog.byValue[prm.Grad])
	}

	// Workspace: the largest any kernel needs.
	shapes := func(vs []*Value) [][]int {
		out := make([][]int, len(vs))
		for i, v := range vs {
			if v != nil {
				out[i] = v.Shape
			}
		}
		return out
	}
	for _, n := range append(append([]*Node(nil), g.Forward...), g.Backward...) {
		if w := ops.Workspace(n.Op, &n.Attrs, shapes(n.In), shapes(n.Out)); w > prog.WorkElems {
			prog.WorkElems = w
		}
	}
	prog.ctx.Work = make([]float32, prog.WorkElems)
	prog.pcg = &rand.PCG{} // seeded by Run
	prog.ctx.RNG = rand.New(prog.pcg)

	// Forward, loss, backward.
	for _, n := range g.Forward {
		prog.Steps = append(prog.Steps, prog.kernelStep(n, PhaseForward))
	}
	for i, n := range g.Backward {
		st := prog.kernelStep(n, PhaseBackward)
		if _, isGrad := gradAt[n.Out[0]]; isGrad {
			st.acc = true
		}
		prog.Steps = append(prog.Steps, st)
		prog.Steps = append(prog.Steps, p.syncAfter(prog, i)...)
	}
	if p.Spec.Sync.Kind != spec.SyncParameterServer || r == p.Spec.Sync.Root || len(p.LocalBatch) == 1 {
		if err := p.optimizerSteps(prog); err != nil {
			return nil, err
		}
	}
	prog.Steps = append(prog.Steps, p.postUpdate(prog)...)

	// Evaluation: the forward pass and the loss, dropout off.
	for _, n := range g.Forward {
		if n.Op == ops.Dropout || n.Op == ops.Dropout2D {
			st := &Step{Kind: CopyStep, Phase: PhaseForward, Op: n.Op, Layer: n.Layer, Pos: n.Pos,
				In: []*Buffer{prog.byValue[n.In[0]]}, Out: []*Buffer{prog.byValue[n.Out[0]]}}
			prog.Eval = append(prog.Eval, st)
			continue
		}
		prog.Eval = append(prog.Eval, prog.kernelStep(n, PhaseForward))
	}
	return prog, nil
}

func (prog *Program) kernelStep(n *Node, phase Phase) *Step {
	st := &Step{Kind: KernelStep, Phase: phase, Op: n.Op, Attrs: n.Attrs, Layer: n.Layer, Pos: n.Pos}
	for _, v := range n.In {
		var b *Buffer
		if v != nil {
			b = prog.byValue[v]
		}
		st.In = append(st.In, b)
	}
	for _, v := range n.Out {
		st.Out = append(st.Out, prog.byValue[v])
	}
	st.bind()
	return st
}

// bind prepares the kernel's argument slices once, so running the step
// allocates nothing.
func (st *Step) bind() {
	st.kernel = ops.Kernels32[st.Op]
	st.kin = make([]*ops.Buf[float32], len(st.In))
	for i, b := range st.In {
		if b != nil {
			st.kin[i] = &b.Buf
		}
	}
	st.kout = make([]*ops.Buf[float32], len(st.Out))
	for i, b := range st.Out {
		st.kout[i] = &b.Buf
	}
}

// optimizerSteps appends one optimizer step per parameter.
func (p *Plan) optimizerSteps(prog *Program) error {
	o := p.Spec.Optimizer
	prog.State = make([][]*Buffer, len(prog.Params))
	for i, prm := range p.Graph.Params {
		param, grad := prog.Params[i], prog.Grads[i]
		st := &Step{Kind: KernelStep, Phase: PhaseUpdate, Layer: "optimizer " + prm.Name, Pos: o.Pos}
		switch o.Kind {
		case "sgd":
			st.Op = ops.SGDStep
			st.Attrs = ops.Attrs{LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov}
			var mom *Buffer
			if o.Momentum != 0 {
				mom = prog.newBuffer(prm.Name+".momentum_buffer", nil, prm.Value.Shape, false, false)
				prog.State[i] = []*Buffer{mom}
			}
			st.In = []*Buffer{param, grad, mom}
		case "adam":
			st.Op = ops.AdamStep
			st.Attrs = ops.Attrs{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}
			m := prog.newBuffer(prm.Name+".exp_avg", nil, prm.Value.Shape, false, false)
			v := prog.newBuffer(prm.Name+".exp_avg_sq", nil, prm.Value.Shape, false, false)
			prog.State[i] = []*Buffer{m, v}
			st.In = []*Buffer{param, grad, m, v}
		default:
			return fmt.Errorf("%s: unknown optimizer %q", o.Pos, o.Kind)
		}
		st.bind()
		prog.Steps = append(prog.Steps, st)
	}
	return nil
}
