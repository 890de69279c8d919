package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine/spec"
	"gorun/engine/target"
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
	// Target is one sample's float target shape for regression data
	// (nn.mse_loss), nil for class labels.
	Target []int
	// Tokens is set for token data (data.text): integer inputs, and a
	// class target at each of a sample's positions.
	Tokens bool
	// LocalBatch[r] is rank r's share of the global batch (by the
	// cluster's weights, when it has some); MaxBatch the largest, which
	// every device's buffers are planned for.
	LocalBatch []int
	MaxBatch   int
	// Buckets are the gradient buckets, in the order their all-reduce runs.
	Buckets []Bucket
	// Sync is the script's sync strategy (Spec.Sync) for this world: where
	// the collectives go, how the loss is scaled, what checkpoints hold.
	Sync SyncStrategy
	// Sharding, set by a sharded strategy (sync.zero), is how the ranks
	// split the parameters, gradients and optimizer state; nil when every
	// rank holds them whole.
	Sharding *Sharding
	// Devices are this process's Programs, one per local device, in rank
	// order; World is the number of devices (ranks) of the whole run, and
	// Process this process's index (its devices are ranks
	// Process·len(Devices) on).
	Devices  []*Program
	World    int
	Process  int
	NumParam int // scalar parameters

	// loss and graphOpts are what BuildGraph was given, for ResumeKey.
	loss      Loss
	graphOpts GraphOptions
}

// Bucket is a group of parameter gradients synchronised by one collective.
// Its gradients are contiguous in every device's gradient arena.
type Bucket struct {
	Params   []*Param
	Offset   int // first element in the gradient arena
	Elems    int
	AfterOps int // index in Graph.Backward of the node that completes it
	// Pad, Block and ShardOffset are set in a sharded plan (Sharding):
	// the zeros after the bucket's gradients so that Elems+Pad divides
	// by the world, each rank's block of it (Elems+Pad)/world, and where
	// that block lies in a rank's shard.
	Pad, Block, ShardOffset int
}

// DType is a buffer's element type.
type DType uint8

// The element types of buffers; both take 4 bytes.
const (
	Float32 DType = iota
	Int32         // targets, pooling indices
)

func (t DType) String() string {
	if t == Int32 {
		return "int32"
	}
	return "float32"
}

// Buffer is one planned tensor of a device: an id, an element type, a
// planned maximum shape and where its memory lies in its Program's arena.
// It holds no memory: a backend allocates the arena when it loads the
// Program and gives each buffer its part.
type Buffer struct {
	// ID is the buffer's index in Program.Buffers.
	ID    int
	Name  string
	Value *Value // nil for optimizer state, scratch and the arenas
	DType DType
	// Max is the shape at the planned maximum batch; Batched buffers have
	// the batch as their first dimension, which each step sets.
	Max     []int
	Batched bool
	// Offset is the buffer's first element in the Program's arena (every
	// element takes 4 bytes).
	Offset int
	// View is the buffer whose memory this one shares, if any.
	View *Buffer
}

// Elems is the number of elements at the planned maximum shape.
func (b *Buffer) Elems() int {
	n := 1
	for _, d := range b.Max {
		n *= d
	}
	return n
}

// Bytes is the memory the buffer owns (0 for a view).
func (b *Buffer) Bytes() int64 {
	if b.View != nil {
		return 0
	}
	return int64(b.Elems()) * 4
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
	// Acc is set on steps that sum over the micro-batches of an optimizer
	// step (parameter gradients, the loss): they run with
	// Attrs.Accumulate after the first micro-batch.
	Acc bool
	// Beside is set on a collective of the forward or backward phase
	// that may run beside the steps after it (stage 3's prefetched
	// gathers: on the device's collective goroutine, a communication
	// stream) until a step that touches its memory, which waits for it.
	Beside bool
	// ID is the step's index in its Program's Steps, or len(Steps) plus its
	// index in Eval: backends keep what they prepare per step by it.
	ID int
}

// Program is everything one device runs: its buffers and its steps.
type Program struct {
	Rank int
	// Buffers are every buffer of the device, by ID; ArenaElems is the
	// size of the arena that holds them (4-byte elements).
	Buffers    []*Buffer
	ArenaElems int
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
	// Stats are the layers' saved, untrained state (Graph.Stats order),
	// views of StatArena (nil when the model has none).
	Stats     []*Buffer
	StatArena *Buffer
	// Work is the scratch space kernels share (nil when none needs any);
	// LossSeed holds 1, the gradient of the loss with respect to itself.
	Work, LossSeed *Buffer
	// SyncedGrads holds this rank's gradients once the sync phase is
	// done, which the runner checks for non-finite values: GradArena, or
	// GradShard when gradients are sharded.
	SyncedGrads *Buffer

	// A sharded plan's (Plan.Sharding) own buffers, nil otherwise:
	// GradShard and ParamShard hold the rank's blocks of the reduced
	// gradients (when Sharding.Grads) and of the parameters (when
	// Sharding.Params); StateShards the optimizer state of the rank's
	// shard, one buffer per kind of state (named as PyTorch names it:
	// "momentum_buffer"; "exp_avg", "exp_avg_sq"), in shard layout, of
	// which State's buffers are views; Zeros holds zeros that stay zero
	// (the runner clears it), copied into the padding of gradient buckets
	// whose memory is reused.
	GradShard, ParamShard *Buffer
	StateShards           []*Buffer
	Zeros                 *Buffer

	byValue map[*Value]*Buffer // while compiling
	// gradWin and paramWin are a sharded plan's windows (while
	// compiling); bucketGrads and unitParams the views of each bucket's
	// gradients and of each bucket's parameters in them, padding included.
	gradWin, paramWin       *window
	bucketGrads, unitParams []*Buffer
}

// Positions is the number of class targets in one sample: a window's
// tokens for token data (the loss is their mean, as PyTorch's
// cross-entropy over [N·T, V]), else 1.
func (p *Plan) Positions() int {
	if !p.Tokens {
		return 1
	}
	n := 1
	for _, d := range p.Sample {
		n *= d
	}
	return n
}

// WorkElems is the size of the scratch space.
func (p *Program) WorkElems() int {
	if p.Work == nil {
		return 0
	}
	return p.Work.Elems()
}

// MemoryBytes is the memory the program's arena takes.
func (p *Program) MemoryBytes() int64 { return int64(p.ArenaElems) * 4 }

// Compile turns a Spec into a Plan for a cluster, for the cluster's first
// process (the only one of a single-process run). It checks every shape,
// places every collective and plans every buffer; no data is read.
func Compile(s *spec.Spec, c Cluster) (*Plan, error) { return CompileProcess(s, c, 0) }

// CompileProcess is Compile for process proc of the cluster's
// ProcessCount(): the Plan holds the Programs of that process's devices
// only (global ranks proc·Devices … proc·Devices+Devices-1), planned for the
// whole world.
func CompileProcess(s *spec.Spec, c Cluster, proc int) (*Plan, error) {
	p, err := compileProcess(s, c, proc)
	if err != nil {
		return nil, err
	}
	if err := p.checkMemory(); err != nil {
		return nil, err
	}
	return p, nil
}

// compileProcess is CompileProcess without the memory check.
func compileProcess(s *spec.Spec, c Cluster, proc int) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if proc < 0 || proc >= c.ProcessCount() {
		return nil, fmt.Errorf("process %d is not one of the cluster's %d processes", proc, c.ProcessCount())
	}
	info, err := datasets.Describe(&s.Data, datasets.WithMemoryLimit(c.MemoryLimit))
	if err != nil {
		return nil, err
	}
	if err := datasets.CheckNegatives(dataName(&s.Data), info.Negatives, s.IgnoreIndex); err != nil {
		return nil, err
	}
	if s.Eval != nil {
		// The eval set must fit the model the training set shapes, or
		// evaluation fails a whole epoch later; token text is read with
		// the model's vocabulary, the training data's.
		ev, err := datasets.Describe(s.Eval, datasets.WithVocab(info.Vocab), datasets.WithMemoryLimit(c.MemoryLimit))
		if err != nil {
			return nil, err
		}
		if ev.ClassNames != nil && info.ClassNames != nil && !slices.Equal(ev.ClassNames, info.ClassNames) {
			return nil, fmt.Errorf("%s: eval set data.%s names its classes %s, but the model learns the training set's %s (in this order)",
				s.Eval.Pos, s.Eval.Kind, strings.Join(ev.ClassNames, ", "), strings.Join(info.ClassNames, ", "))
		}
		if !slices.Equal(ev.Sample, info.Sample) || ev.Classes != info.Classes || !slices.Equal(ev.Target, info.Target) || ev.Tokens != info.Tokens {
			return nil, fmt.Errorf("%s: eval set data.%s has samples of shape %v in %d classes, but the model is built for the training set's %v in %d classes",
				s.Eval.Pos, s.Eval.Kind, ev.Sample, ev.Classes, info.Sample, info.Classes)
		}
		if err := datasets.CheckNegatives(dataName(s.Eval), ev.Negatives, s.IgnoreIndex); err != nil {
			return nil, err
		}
	}
	if s.Accumulate < 1 {
		s.Accumulate = 1
	}
	world := c.World()
	if s.BatchSize < world {
		return nil, fmt.Errorf("%s: batch_size %d is smaller than the %d devices: every device needs at least one sample", s.Pos, s.BatchSize, world)
	}
	p := &Plan{Spec: s, Cluster: c, Sample: info.Sample, Classes: info.Classes, Target: info.Target, Tokens: info.Tokens, World: world, Process: proc}
	p.LocalBatch = SplitBatch(s.BatchSize, c.Weights, world)
	for r, b := range p.LocalBatch {
		if b == 0 {
			return nil, fmt.Errorf("%s: batch_size %d shared by the weights %v gives rank %d no samples", s.Pos, s.BatchSize, c.Weights, r)
		}
		p.MaxBatch = max(p.MaxBatch, b)
	}
	if p.Sync, err = NewSyncStrategy(s.Sync, world); err != nil {
		return nil, err
	}
	p.loss = Loss{Kind: s.Loss, LabelSmoothing: s.LabelSmoothing, Pos: s.Pos, Classes: info.Classes, Target: info.Target, Tokens: info.Tokens, IgnoreIndex: s.IgnoreIndex}
	t := c.Target()
	p.graphOpts = GraphOptions{Supports: t.Supports, NoFusion: c.NoFusion, Precision: s.Precision, AutocastFP32: t.AutocastFP32, FusedBF16: t.FusedBF16}
	g, err := BuildGraph(&s.Model, p.loss, p.MaxBatch, info.Sample, p.graphOpts)
	if err != nil {
		return nil, err
	}
	p.Graph = g
	if err := checkSizes(g); err != nil {
		return nil, err
	}
	if err := checkParams(g, s); err != nil {
		return nil, err
	}
	if err := p.checkBatchNorm(); err != nil {
		return nil, err
	}
	for _, prm := range g.Params {
		p.NumParam += prm.Value.Elems()
	}
	p.Buckets = planBuckets(g, s, c)
	if err := p.Sync.Prepare(p); err != nil {
		return nil, err
	}
	for r := proc * c.Devices; r < (proc+1)*c.Devices; r++ {
		prog, err := p.compileProgram(r)
		if err != nil {
			return nil, err
		}
		p.Devices = append(p.Devices, prog)
	}
	if err := checkOps(t, p.Devices[0]); err != nil {
		return nil, err
	}
	return p, nil
}

// dataName names a data.* call in messages: "train.star:9:8: data.tensors".
func dataName(d *spec.Data) string {
	return fmt.Sprintf("%s: data.%s", d.Pos, d.Kind)
}

// MaxElems bounds the elements of one tensor (2⁴⁰, 4 TiB of float32):
// beyond it shape products would overflow the arena's offsets long before
// any machine holds the memory.
const MaxElems = 1 << 40

// checkSizes refuses a value whose shape has a negative or huge dimension
// or whose element count overflows, naming the layer that makes it.
func checkSizes(g *Graph) error {
	for _, v := range g.Values {
		n := int64(1)
		bad := false
		for _, d := range v.Shape {
			if d < 0 || (d > 0 && n > MaxElems/int64(d)) {
				bad = true
				break
			}
			n *= int64(d)
		}
		if !bad {
			continue
		}
		err := fmt.Errorf("%s has shape %v: more than 2⁴⁰ elements (4 TiB of float32), which no device holds", v.Name, v.Shape)
		switch {
		case v.Param != nil && v.Param.Layer != nil:
			return &CompileError{Pos: v.Param.Layer.Pos, Layer: v.Param.Layer.Label(), Err: err}
		case v.Producer != nil:
			return &CompileError{Pos: v.Producer.Pos, Layer: v.Producer.Layer, Err: err}
		}
		return err
	}
	return nil
}

// checkOps refuses a Program with a step whose op the target does not
// run, naming the op, the reason the backend gives and the layer. A
// target this build lacks (no Supports) is not checked: the run refuses
// it anyway (Cluster.CheckBuild).
func checkOps(t *target.Target, prog *Program) error {
	if !t.Built() {
		return nil
	}
	for _, st := range slices.Concat(prog.Steps, prog.Eval) {
		if st.Kind != KernelStep || t.Supports(st.Op) {
			continue
		}
		err := fmt.Errorf("backend %q has no kernel for op %s", t.Name, st.Op)
		if why := t.Declines[st.Op]; why != "" {
			err = fmt.Errorf("backend %q has no kernel for op %s: %s", t.Name, st.Op, why)
		}
		return &CompileError{Pos: st.Pos, Layer: st.Layer, Err: err}
	}
	return nil
}

// checkMemory refuses a Plan whose devices need more memory than the
// limit: Cluster.MemoryLimit when set, else, for a backend whose memory is
// the host's (target.Target.HostMemory), the memory the host has
// available. The error names the largest buffer's layer and the figures.
// Other devices' memory (a GPU's) is checked when a device allocates its
// arena.
func (p *Plan) checkMemory() error {
	limit := p.Cluster.MemoryLimit
	what := "the cluster's memory_limit"
	if limit <= 0 {
		if t := p.Cluster.Target(); t == nil || !t.HostMemory {
			return nil
		}
		limit = availableMemory()
		what = "the memory this machine has available"
	}
	if limit <= 0 {
		return nil
	}
	var need int64
	for _, prog := range p.Devices {
		need += prog.MemoryBytes()
	}
	if need <= limit {
		return nil
	}
	// Name the largest tensor of the model (a parameter, an activation or
	// a gradient), which says which layer to shrink.
	var big *Buffer
	for _, b := range p.Devices[0].Buffers {
		if b.Value != nil && (big == nil || b.Elems() > big.Elems()) {
			big = b
		}
	}
	err := fmt.Errorf("the plan needs %s for its %d device(s), more than %s (%s); its largest tensor is %s %v (%s)",
		humanBytes(need), len(p.Devices), what, humanBytes(limit), big.Name, big.Max, humanBytes(int64(big.Elems())*4))
	if v := big.Value; v != nil {
		switch {
		case v.Param != nil && v.Param.Layer != nil:
			return &CompileError{Pos: v.Param.Layer.Pos, Layer: v.Param.Layer.Label(), Err: err}
		case v.Producer != nil:
			return &CompileError{Pos: v.Producer.Pos, Layer: v.Producer.Layer, Err: err}
		}
	}
	return err
}

// availableMemory is MemAvailable from /proc/meminfo (0 when unknown).
func availableMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
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
	return bucketsOf(g, int(limitMB*(1<<20)/4))
}

// bucketsOf is planBuckets with buckets of at most limit elements (a
// gradient larger than that alone in its bucket).
func bucketsOf(g *Graph, limit int) []Bucket {
	var buckets []Bucket
	off := 0
	for i, n := range g.Backward {
		for _, prm := range g.Params {
			if !slices.Contains(n.Out, prm.Grad) { // a step may complete two (Conv2DPoolGrad)
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

// arenaAlign keeps every buffer's start on a 64-byte boundary.
const arenaAlign = 16

// newBuffer plans a buffer of its own memory of the given maximum shape.
func (prog *Program) newBuffer(name string, v *Value, shape []int, batched, isInt bool) *Buffer {
	b := &Buffer{ID: len(prog.Buffers), Name: name, Value: v, Max: append([]int(nil), shape...), Batched: batched}
	if isInt {
		b.DType = Int32
	}
	b.Offset = prog.ArenaElems
	prog.ArenaElems += (max(b.Elems(), 1) + arenaAlign - 1) / arenaAlign * arenaAlign
	prog.Buffers = append(prog.Buffers, b)
	return b
}

// view plans a buffer sharing src's memory from element off of it, with
// another shape.
func (prog *Program) view(name string, v *Value, src *Buffer, off int, shape []int, batched bool) *Buffer {
	b := &Buffer{ID: len(prog.Buffers), Name: name, Value: v, DType: src.DType, Max: append([]int(nil), shape...),
		Batched: batched, View: src, Offset: src.Offset + off}
	prog.Buffers = append(prog.Buffers, b)
	return b
}

// compileProgram allocates rank r's buffers and lays out its steps.
func (p *Plan) compileProgram(r int) (*Program, error) {
	g := p.Graph
	prog := &Program{Rank: r, byValue: map[*Value]*Buffer{}}

	// Parameter gradients live in one arena, in bucket order.
	sh := p.Sharding
	arenaElems := 0
	for _, prm := range g.Params {
		arenaElems += prm.Value.Elems()
	}
	if sh != nil {
		arenaElems = sh.FlatElems
		if sh.Params {
			prog.paramWin = prog.newWindow("gathered parameters")
			prog.paramWin.refill = CollectiveAllGather
			prog.ParamArena = prog.paramWin.buf
			prog.ParamShard = prog.newBuffer("parameter shard", nil, []int{sh.ShardElems}, false, false)
		}
		if sh.Grads {
			prog.gradWin = prog.newWindow("bucket gradients")
			if p.Sync.Overlap() {
				prog.gradWin.keep = 1
			}
			prog.GradArena = prog.gradWin.buf
			prog.GradShard = prog.newBuffer("gradient shard", nil, []int{sh.ShardElems}, false, false)
			prog.Zeros = prog.newBuffer("zeros", nil, []int{max(sh.World-1, 1)}, false, false)
		}
	}
	if prog.ParamArena == nil {
		prog.ParamArena = prog.newBuffer("parameters", nil, []int{arenaElems}, false, false)
	}
	if prog.GradArena == nil {
		prog.GradArena = prog.newBuffer("gradients", nil, []int{arenaElems}, false, false)
	}
	prog.SyncedGrads = prog.GradArena
	if prog.GradShard != nil {
		prog.SyncedGrads = prog.GradShard
	}
	arenaAt := map[*Value]int{}
	gradAt := map[*Value]int{}
	bucketOf := map[*Value]int{} // a windowed value's bucket
	for bi, b := range p.Buckets {
		off := b.Offset
		for _, prm := range b.Params {
			gradAt[prm.Grad] = off
			arenaAt[prm.Value] = off
			arenaAt[prm.Grad] = off
			bucketOf[prm.Value], bucketOf[prm.Grad] = bi, bi
			off += prm.Value.Elems()
		}
	}
	// A window's items are the buckets: a view of each whole (padding
	// included) for the collectives over it.
	for _, w := range []*window{prog.gradWin, prog.paramWin} {
		if w == nil {
			continue
		}
		views := make([]*Buffer, len(p.Buckets))
		for bi, b := range p.Buckets {
			it := w.item(b.Elems + b.Pad)
			views[bi] = w.view(prog, fmt.Sprintf("%s of bucket %d", w.buf.Name, bi), nil, it, 0, []int{b.Elems + b.Pad})
		}
		if w == prog.gradWin {
			prog.bucketGrads = views
		} else {
			prog.unitParams = views
		}
	}

	// Running statistics live in one arena too: one broadcast shares rank
	// 0's (broadcast_buffers).
	statElems := 0
	for _, st := range g.Stats {
		arenaAt[st.Value] = statElems
		statElems += st.Value.Elems()
	}
	if statElems > 0 {
		prog.StatArena = prog.newBuffer("running statistics", nil, []int{statElems}, false, false)
	}
	isStat := map[*Value]bool{}
	for _, st := range g.Stats {
		isStat[st.Value] = true
	}

	var bufferOf func(v *Value) *Buffer
	bufferOf = func(v *Value) *Buffer {
		if b, ok := prog.byValue[v]; ok {
			return b
		}
		var b *Buffer
		switch {
		case v.Producer != nil && v == v.Producer.Out[0] && (ops.Lookup(v.Producer.Op).Alias || v.castInPlace):
			// A view (flatten), or a cast that rounds its input where it
			// lies (engine/precision.go); its input first: a cast is a value
			// made after the graph's others.
			b = prog.view(v.Name, v, bufferOf(v.Producer.In[0]), 0, v.Shape, v.Batched)
		default:
			if off, ok := arenaAt[v]; ok {
				arena := prog.GradArena
				switch {
				case v.Param != nil:
					arena = prog.ParamArena
				case isStat[v]:
					arena = prog.StatArena
				}
				if w := prog.windowOf(arena); w != nil {
					bi := bucketOf[v]
					b = w.view(prog, v.Name, v, bi, off-p.Buckets[bi].Offset, v.Shape)
				} else {
					b = prog.view(v.Name, v, arena, off, v.Shape, false)
				}
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
	prog.LossSeed = prog.byValue[g.LossSeed]
	for _, prm := range g.Params {
		prog.Params = append(prog.Params, prog.byValue[prm.Value])
		prog.Grads = append(prog.Grads, prog.byValue[prm.Grad])
	}
	for _, st := range g.Stats {
		prog.Stats = append(prog.Stats, prog.byValue[st.Value])
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
	work := 0
	for _, n := range append(append([]*Node(nil), g.Forward...), g.Backward...) {
		work = max(work, ops.Workspace(n.Op, &n.Attrs, shapes(n.In), shapes(n.Out)))
	}
	if work > 0 {
		prog.Work = prog.newBuffer("scratch", nil, []int{work}, false, false)
	}

	// Forward (after what the sync strategy places before it: allreduce's
	// broadcast_buffers), loss, backward with the strategy's gradient
	// collectives, and the update as the strategy places it.
	prog.Steps = append(prog.Steps, p.Sync.BeforeForward(p, prog)...)
	for i, n := range g.Forward {
		prog.Steps = append(prog.Steps, p.Sync.BeforeNode(p, prog, PhaseForward, i, false)...)
		st := prog.kernelStep(n, PhaseForward)
		if len(n.Out) > 0 {
			st.Acc = n.Out[0] == g.Loss // the step's loss sums its micro-batches
		}
		prog.Steps = append(prog.Steps, st)
		prog.Steps = append(prog.Steps, p.allReduceAfter(prog, n, PhaseForward)...)
	}
	for i, n := range g.Backward {
		prog.Steps = append(prog.Steps, p.Sync.BeforeNode(p, prog, PhaseBackward, i, false)...)
		st := prog.kernelStep(n, PhaseBackward)
		if _, isGrad := gradAt[n.Out[0]]; isGrad {
			st.Acc = true
		}
		prog.Steps = append(prog.Steps, st)
		prog.Steps = append(prog.Steps, p.allReduceAfter(prog, n, PhaseBackward)...)
		prog.Steps = append(prog.Steps, p.Sync.AfterBackward(p, prog, i)...)
	}
	prog.Steps = append(prog.Steps, p.unscaleSteps(prog)...)
	if err := p.Sync.Update(p, prog); err != nil {
		return nil, err
	}

	// Evaluation: the forward pass and the loss, dropout off, batch norm
	// with its running statistics.
	for i, n := range g.Forward {
		if n.TrainOnly {
			continue
		}
		prog.Eval = append(prog.Eval, p.Sync.BeforeNode(p, prog, PhaseForward, i, true)...)
		if n.Eval != nil {
			prog.Eval = append(prog.Eval, prog.kernelStep(n.Eval, PhaseForward))
			continue
		}
		if ops.Lookup(n.Op).EvalCopy { // dropout: the identity
			st := &Step{Kind: CopyStep, Phase: PhaseForward, Op: n.Op, Layer: n.Layer, Pos: n.Pos,
				In: []*Buffer{prog.byValue[n.In[0]]}, Out: []*Buffer{prog.byValue[n.Out[0]]}}
			prog.Eval = append(prog.Eval, st)
			continue
		}
		st := prog.kernelStep(n, PhaseForward)
		st.Acc = n.Out[0] == g.Loss // the loss sums every evaluation batch
		prog.Eval = append(prog.Eval, st)
	}
	for _, w := range []*window{prog.gradWin, prog.paramWin} {
		if w != nil {
			w.place(prog)
		}
	}
	for i, st := range prog.Steps {
		st.ID = i
	}
	for i, st := range prog.Eval {
		st.ID = len(prog.Steps) + i
	}
	prog.byValue, prog.gradWin, prog.paramWin, prog.bucketGrads, prog.unitParams = nil, nil, nil, nil, nil
	return prog, nil
}

// windowOf is the window whose buffer arena is, or nil.
func (prog *Program) windowOf(arena *Buffer) *window {
	for _, w := range []*window{prog.gradWin, prog.paramWin} {
		if w != nil && w.buf == arena {
			return w
		}
	}
	return nil
}

// allReduceAfter returns the all-reduce (sum) of node n's output that n
// asks for (SyncBatchNorm), or nothing on one device.
func (p *Plan) allReduceAfter(prog *Program, n *Node, phase Phase) []*Step {
	if !n.AllReduce || p.World == 1 {
		return nil
	}
	b := prog.byValue[n.Out[0]]
	c := &Collective{Kind: CollectiveAllReduce, Tag: "sync " + b.Name, Op: comm.Sum, Buffer: b, Elems: b.Elems(), Bytes: int64(b.Elems()) * 4}
	return []*Step{{Kind: CollectiveStep, Phase: phase, Collective: c, Layer: n.Layer + " (all devices)", Pos: n.Pos}}
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
	return st
}

// optimizerSteps plans the optimizer state of every parameter and, with
// update set, appends one optimizer step per parameter.
func (p *Plan) optimizerSteps(prog *Program, update bool) error {
	o := p.Spec.Optimizer
	prog.State = make([][]*Buffer, len(prog.Params))
	if max := p.Spec.ClipGradNorm; max > 0 && update {
		// After every collective of the gradients (the update phase waits
		// for them), so every rank clips by the same norm.
		prog.Steps = append(prog.Steps, &Step{Kind: KernelStep, Phase: PhaseUpdate, Op: ops.ClipGradNorm,
			Attrs: ops.Attrs{MaxNorm: max}, In: []*Buffer{prog.GradArena}, Layer: "clip_grad_norm", Pos: p.Spec.Pos})
	}
	kinds, err := stateKinds(o)
	if err != nil {
		return err
	}
	for i, prm := range p.Graph.Params {
		for _, k := range kinds {
			prog.State[i] = append(prog.State[i], prog.newBuffer(prm.Name+"."+k, nil, prm.Value.Shape, false, false))
		}
		st, err := p.optimizerStep(prm, prog.Params[i], prog.Grads[i], prog.State[i])
		if err != nil {
			return err
		}
		if update {
			prog.Steps = append(prog.Steps, st)
		}
	}
	return nil
}

// stateKinds names the optimizer state a parameter needs, one buffer
// each, as PyTorch's optimizer state_dict names them: SGD's
// momentum_buffer (none without momentum), Adam's exp_avg and exp_avg_sq.
func stateKinds(o spec.Optimizer) ([]string, error) {
	switch o.Kind {
	case "sgd":
		if o.Momentum != 0 {
			return []string{"momentum_buffer"}, nil
		}
		return nil, nil
	case "adam", "adamw":
		return []string{"exp_avg", "exp_avg_sq"}, nil
	}
	return nil, fmt.Errorf("%s: unknown optimizer %q", o.Pos, o.Kind)
}

// optimizerStep is the update-phase step of parameter prm (or of a part
// of it) over param, its gradient grad and its state (stateKinds' buffers
// in order), with the learning rate and weight decay of prm's group.
func (p *Plan) optimizerStep(prm *Param, param, grad *Buffer, state []*Buffer) (*Step, error) {
	o := p.Spec.Optimizer
	st := &Step{Kind: KernelStep, Phase: PhaseUpdate, Layer: "optimizer " + prm.Name, Pos: o.Pos}
	lr, wd := o.LR, o.WeightDecay
	if g := paramGroup(o.Groups, prm.Name); g != nil {
		if g.LR != nil {
			lr = *g.LR
		}
		if g.WeightDecay != nil {
			wd = *g.WeightDecay
		}
	}
	switch o.Kind {
	case "sgd":
		st.Op = ops.SGDStep
		st.Attrs = ops.Attrs{LR: lr, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: wd, Nesterov: o.Nesterov}
		var mom *Buffer
		if len(state) > 0 {
			mom = state[0]
		}
		st.In = []*Buffer{param, grad, mom}
	case "adam", "adamw":
		st.Op = ops.AdamStep
		if o.Kind == "adamw" {
			st.Op = ops.AdamWStep
		}
		st.Attrs = ops.Attrs{LR: lr, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: wd}
		st.In = []*Buffer{param, grad, state[0], state[1]}
	default:
		return nil, fmt.Errorf("%s: unknown optimizer %q", o.Pos, o.Kind)
	}
	return st, nil
}

// paramGroup is the first of groups with a pattern matching name, or nil.
func paramGroup(groups []spec.ParamGroup, name string) *spec.ParamGroup {
	for i := range groups {
		for _, m := range groups[i].Match {
			if ok, _ := path.Match(m, name); ok {
				return &groups[i]
			}
		}
	}
	return nil
}

// InitialParams returns the parameters' first values, laid out whole
// (ParamElems, ParamOffset: the parameter arena's layout unless the
// parameters are sharded), as PyTorch's
// default initialisation draws them: weights from U(-1/√fan_in, 1/√fan_in)
// (kaiming_uniform_ with a=√5) and biases from the same range, batch
// norm's weights 1 and biases 0, or as the layer's init= asks for its
// weight; parameter after parameter in the model's order, from an RNG
// seeded with seed. The runner uploads them to rank 0, which broadcasts
// them.
func (p *Plan) InitialParams(seed int64) []float32 {
	out := make([]float32, p.ParamElems())
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	for i, prm := range p.Graph.Params {
		data := out[p.ParamOffset(i):][:prm.Value.Elems()]
		initParam(data, prm, rng)
	}
	return out
}

// ParamElems is the length of the parameters laid out whole: the
// parameter arena's, or, in a sharded plan, the flattened list's (padding
// included), which every rank's parameter arena is unless the parameters
// themselves are sharded (Sharding.Params).
func (p *Plan) ParamElems() int {
	if p.Sharding != nil {
		return p.Sharding.FlatElems
	}
	return p.Devices[0].ParamArena.Elems()
}

// ParamOffset is parameter i's (Graph.Params) first element in the
// parameters laid out whole (ParamElems).
func (p *Plan) ParamOffset(i int) int {
	if p.Sharding != nil {
		return p.Sharding.ParamAt[i]
	}
	prog := p.Devices[0]
	return prog.Params[i].Offset - prog.ParamArena.Offset
}

// initParam fills data with parameter prm's first values (see InitialParams).
func initParam(data []float32, prm *Param, rng *rand.Rand) {
	init := prm.Init
	if init.Kind == "" && prm.Layer != nil && !prm.Bias && prm.Layer.Init != "" {
		init = spec.ParseInit(prm.Layer.Init)
	}
	fanIn, fanOut := float64(prm.FanIn), float64(prm.FanOut)
	uniform := func(bound float64) {
		for j := range data {
			data[j] = float32((rng.Float64()*2 - 1) * bound)
		}
	}
	normal := func(std float64) {
		for j := range data {
			data[j] = float32(rng.NormFloat64() * std)
		}
	}
	switch init.Kind {
	case "constant":
		for j := range data {
			data[j] = float32(init.Value)
		}
	case "kaiming_normal": // fan_out, relu: torchvision's ResNet convolutions
		normal(math.Sqrt(2 / fanOut))
	case "kaiming_uniform": // fan_in, relu
		uniform(math.Sqrt(6 / fanIn))
	case "xavier_uniform":
		uniform(math.Sqrt(6 / (fanIn + fanOut)))
	case "xavier_normal":
		normal(math.Sqrt(2 / (fanIn + fanOut)))
	case "normal":
		normal(init.Value)
	default:
		uniform(1 / math.Sqrt(fanIn))
	}
}

// InitialStats returns the running-statistics arena's first values (means
// 0, variances 1, counts 0, as PyTorch's), or nil when the model has none.
// Every device starts from them.
func (p *Plan) InitialStats() []float32 {
	prog := p.Devices[0]
	if prog.StatArena == nil {
		return nil
	}
	out := make([]float32, prog.StatArena.Elems())
	for i, st := range p.Graph.Stats {
		b := prog.Stats[i]
		data := out[b.Offset-prog.StatArena.Offset:][:b.Elems()]
		for j := range data {
			data[j] = st.Fill
		}
	}
	return out
}
