package engine

import (
	"fmt"
	"slices"

	"gorun/comm"
	"gorun/engine/spec"
	"gorun/ops"
)

// zero is sync.zero (and sync.fsdp, its stage 3): sharded data
// parallelism as DeepSpeed's ZeRO and PyTorch's FSDP shard it. Every rank
// computes the gradients of its share of the global batch, as with
// allreduce; the flattened parameters are split into one block per rank
// (Sharding) and each rank keeps the optimizer state of its blocks only
// and updates only those:
//
//   - stage 1: each gradient bucket is reduce-scattered as soon as
//     backward completes it (with overlap), leaving each rank the sum of
//     its block; each rank steps the optimizer over its blocks; the
//     parameters are all-gathered after the update;
//   - stage 2: the same, and a rank keeps only its blocks of the reduced
//     gradients: the bucket's whole gradients live only until its
//     reduce-scatter, and their memory is reused (with one micro-batch a
//     step; with accumulation the gradients must sum over micro-batches
//     whole, as in stage 1);
//   - stage 3: the parameters are sharded too: each layer's are gathered
//     just before its forward steps and again before the backward steps
//     that read them, into memory reused once they are done, the next
//     layer's gather issued Prefetch layers ahead; no all-gather follows
//     the update.
//
// The loss is the mean over the global batch, as allreduce's op="mean";
// clipping adds every rank's sum of squares of its blocks (an all-reduce
// of one number per bucket) before scaling. A checkpoint gathers every
// rank's optimizer state into whole tensors, saved as allreduce saves
// them: it resumes under any stage or under allreduce, on any number of
// devices.
type zero struct {
	sy    spec.Sync
	world int
	// capped is stage 2's bucket limit (elements) when it is below
	// bucket_mb's: a quarter of a rank's shard or the largest gradient; 0
	// otherwise.
	capped int
	// gathersAt holds, in stage 3, the buckets gathered before each node,
	// by pass (gathers' keys) and node index: the same on every rank.
	gathersAt map[gatherAt][]int
}

// gatherAt is a node of one pass: training's forward or backward pass
// (phase), or evaluation's forward pass (eval).
type gatherAt struct {
	phase Phase
	eval  bool
	node  int
}

func init() { registerSync(spec.SyncZero, newZero) }

func newZero(sy spec.Sync, world int) (SyncStrategy, error) {
	if sy.Stage < 1 || sy.Stage > 3 {
		return nil, fmt.Errorf("%s: sync.zero: stage must be 1, 2 or 3, got %d", sy.Pos, sy.Stage)
	}
	return &zero{sy: sy, world: world}, nil
}

func (s *zero) Kind() spec.SyncKind { return spec.SyncZero }

func (s *zero) Describe(p *Plan) string {
	out := fmt.Sprintf("zero(stage=%d, bucket_mb=%g, overlap=%v", s.sy.Stage, bucketMB(p), s.sy.Overlap)
	if s.capped > 0 {
		out += fmt.Sprintf(" [buckets of at most %d values: a quarter of a rank's shard or the largest gradient]", s.capped)
	}
	if s.sy.Stage == 3 {
		out += fmt.Sprintf(", prefetch=%d", s.sy.Prefetch)
	}
	return out + ")"
}

// Prepare regroups the buckets by layer for stage 3 (a layer's parameters
// are gathered together), pads every bucket to a multiple of the world
// and sets the Plan's Sharding.
func (s *zero) Prepare(p *Plan) error {
	grads := s.sy.Stage >= 2 && s.world > 1 && p.Spec.Accumulate == 1
	switch {
	case s.sy.Stage == 3:
		p.Buckets = layerBuckets(p.Graph, p.Buckets)
	case grads:
		// A bucket's gradients are whole until it is reduced, and two
		// are at a time: buckets of the script's size (25 MB by default)
		// would hold a small model's every gradient. Stage 2 keeps them
		// to a quarter of a rank's shard, or to the largest gradient when
		// that is larger (the memory must hold it anyway, and fewer
		// buckets are fewer collectives).
		limit := max(p.NumParam/s.world/4, 1)
		for _, prm := range p.Graph.Params {
			limit = max(limit, prm.Value.Elems())
		}
		if largest := slices.MaxFunc(p.Buckets, func(a, b Bucket) int { return a.Elems - b.Elems }); largest.Elems > limit {
			p.Buckets, s.capped = bucketsOf(p.Graph, limit), limit
		}
	}
	sh := p.padBuckets(s.sy.Stage, s.world)
	sh.Grads = grads
	sh.Params = s.sy.Stage == 3 && s.world > 1
	sh.Prefetch = s.sy.Prefetch
	if err := sh.check(); err != nil {
		return err
	}
	p.Sharding = sh
	return nil
}

// layerBuckets regroups buckets so that each holds the parameters of one
// layer that backward completes one after another, placed after the node
// that completes the last of them.
func layerBuckets(g *Graph, buckets []Bucket) []Bucket {
	done := map[*Param]int{} // the backward node that completes each gradient
	for i, n := range g.Backward {
		for _, prm := range g.Params {
			if slices.Contains(n.Out, prm.Grad) {
				done[prm] = i
			}
		}
	}
	var out []Bucket
	for _, b := range buckets {
		for _, prm := range b.Params {
			if len(out) == 0 || out[len(out)-1].Params[0].Layer != prm.Layer || prm.Layer == nil {
				out = append(out, Bucket{})
			}
			u := &out[len(out)-1]
			u.Params = append(u.Params, prm)
			u.Elems += prm.Value.Elems()
			u.AfterOps = max(u.AfterOps, done[prm])
		}
	}
	return out
}

// BeforeForward: rank 0's running statistics to every device, as
// allreduce's broadcast_buffers.
func (s *zero) BeforeForward(p *Plan, prog *Program) []*Step {
	if prog.StatArena == nil || s.world == 1 || !s.sy.BroadcastBuffers {
		return nil
	}
	n := prog.StatArena.Elems()
	c := &Collective{Kind: CollectiveBroadcast, Tag: "running statistics", Buffer: prog.StatArena, Elems: n, Bytes: int64(n) * 4}
	return []*Step{{Kind: CollectiveStep, Phase: PhaseForward, Collective: c, Layer: "broadcast_buffers", Pos: s.sy.Pos}}
}

// AfterBackward: a reduce-scatter of each bucket that node i completes
// (every bucket after the last node without overlap), into the rank's
// block in place or, when gradients are sharded, into its gradient shard
// after zeros go into the bucket's padding.
func (s *zero) AfterBackward(p *Plan, prog *Program, i int) []*Step {
	if s.world == 1 {
		return nil
	}
	last := len(p.Graph.Backward) - 1
	var steps []*Step
	for bi, b := range p.Buckets {
		at := b.AfterOps
		if !s.sy.Overlap {
			at = last
		}
		if at != i {
			continue
		}
		n := b.Elems + b.Pad
		c := &Collective{Kind: CollectiveReduceScatter, Tag: fmt.Sprintf("bucket %d", bi), Op: comm.Sum,
			Buffer: prog.GradArena, Offset: b.Offset, Elems: n, Part: prog.GradArena, PartOffset: b.Offset + prog.Rank*b.Block, Block: b.Block, Bytes: int64(n) * 4}
		if p.Sharding.Grads {
			c.Buffer, c.Offset, c.Part, c.PartOffset = prog.bucketGrads[bi], 0, prog.GradShard, b.ShardOffset
			if b.Pad > 0 {
				// The bucket's memory held another's gradients: its padding
				// must add zeros.
				zeros := prog.view("zeros", nil, prog.Zeros, 0, []int{b.Pad}, false)
				pad := prog.gradWin.view(prog, fmt.Sprintf("padding of bucket %d", bi), nil, bi, b.Elems, []int{b.Pad})
				steps = append(steps, &Step{Kind: CopyStep, Phase: PhaseBackward, In: []*Buffer{zeros}, Out: []*Buffer{pad},
					Layer: fmt.Sprintf("zeros into the padding of bucket %d", bi), Pos: s.sy.Pos})
			}
		}
		steps = append(steps, &Step{Kind: CollectiveStep, Phase: PhaseSync, Collective: c,
			Layer: fmt.Sprintf("%s of %d gradients (%s … %s)", c.Tag, len(b.Params), b.Params[0].Name, b.Params[len(b.Params)-1].Name),
			Pos:   s.sy.Pos})
	}
	return steps
}

// BeforeNode: with sharded parameters, the gathers of the buckets whose
// parameters node i reads (none yet below stage 3).
func (s *zero) BeforeNode(p *Plan, prog *Program, phase Phase, i int, eval bool) []*Step {
	if !p.Sharding.Params {
		return nil
	}
	return s.gathers(p, prog, phase, i, eval)
}

// Update: clipping by the global norm (each rank's sums of squares of its
// blocks, added over the ranks), each rank's optimizer over its blocks,
// then (unless parameters are sharded) an all-gather of every bucket's
// parameters.
func (s *zero) Update(p *Plan, prog *Program) error {
	sh, r := p.Sharding, prog.Rank
	// The rank's reduced gradients: its shard, or its block of each
	// bucket of the whole gradients.
	var blocks []*Buffer
	if sh.Grads {
		blocks = []*Buffer{prog.GradShard}
	} else {
		for bi, b := range p.Buckets {
			blocks = append(blocks, prog.view(fmt.Sprintf("gradients of bucket %d, block %d", bi, r), nil, prog.GradArena, b.Offset+r*b.Block, []int{b.Block}, false))
		}
	}
	if max := p.Spec.ClipGradNorm; max > 0 {
		sq := prog.newBuffer("gradient norm² parts", nil, []int{len(blocks)}, false, false)
		for j, g := range blocks {
			part := prog.view(fmt.Sprintf("gradient norm² part %d", j), nil, sq, j, []int{1}, false)
			prog.Steps = append(prog.Steps, &Step{Kind: KernelStep, Phase: PhaseUpdate, Op: ops.GradNormSq, In: []*Buffer{g, part},
				Layer: "clip_grad_norm (this rank's sum of squares)", Pos: p.Spec.Pos})
		}
		if s.world > 1 {
			n := len(blocks)
			c := &Collective{Kind: CollectiveAllReduce, Tag: "gradient norm", Op: comm.Sum, Buffer: sq, Elems: n, Bytes: int64(n) * 4}
			prog.Steps = append(prog.Steps, &Step{Kind: CollectiveStep, Phase: PhaseUpdate, Collective: c, Layer: "clip_grad_norm (every rank's sums)", Pos: p.Spec.Pos})
		}
		for _, g := range blocks {
			prog.Steps = append(prog.Steps, &Step{Kind: KernelStep, Phase: PhaseUpdate, Op: ops.ClipGradScale, Attrs: ops.Attrs{MaxNorm: max},
				In: []*Buffer{g, sq}, Layer: "clip_grad_norm", Pos: p.Spec.Pos})
		}
	}

	kinds, err := stateKinds(p.Spec.Optimizer)
	if err != nil {
		return err
	}
	for _, k := range kinds {
		prog.StateShards = append(prog.StateShards, prog.newBuffer(k, nil, []int{sh.ShardElems}, false, false))
	}
	prog.State = make([][]*Buffer, len(p.Graph.Params))
	for i, prm := range p.Graph.Params {
		lo, hi, at := p.Piece(i, r)
		if lo == hi {
			continue
		}
		shape := []int{hi - lo}
		name := prm.Name
		if lo > 0 || hi < prm.Value.Elems() {
			name = fmt.Sprintf("%s[%d:%d]", prm.Name, lo, hi)
		}
		var param, grad *Buffer
		if sh.Params {
			param = prog.view(name, nil, prog.ParamShard, at, shape, false)
		} else {
			param = prog.view(name, nil, prog.ParamArena, sh.ParamAt[i]+lo, shape, false)
		}
		if sh.Grads {
			grad = prog.view(name+".grad", nil, prog.GradShard, at, shape, false)
		} else {
			grad = prog.view(name+".grad", nil, prog.GradArena, sh.ParamAt[i]+lo, shape, false)
		}
		for k, kind := range kinds {
			prog.State[i] = append(prog.State[i], prog.view(prm.Name+"."+kind, nil, prog.StateShards[k], at, shape, false))
		}
		st, err := p.optimizerStep(prm, param, grad, prog.State[i])
		if err != nil {
			return err
		}
		st.Layer = "optimizer " + name
		prog.Steps = append(prog.Steps, st)
	}
	if s.world == 1 || sh.Params {
		return nil
	}
	for bi, b := range p.Buckets {
		n := b.Elems + b.Pad
		c := &Collective{Kind: CollectiveAllGather, Tag: fmt.Sprintf("parameters of bucket %d", bi), Buffer: prog.ParamArena, Offset: b.Offset, Elems: n,
			Part: prog.ParamArena, PartOffset: b.Offset + r*b.Block, Block: b.Block, Bytes: int64(n) * 4}
		prog.Steps = append(prog.Steps, &Step{Kind: CollectiveStep, Phase: PhaseUpdate, Collective: c,
			Layer: fmt.Sprintf("allgather of bucket %d's %d parameters (%s … %s)", bi, len(b.Params), b.Params[0].Name, b.Params[len(b.Params)-1].Name),
			Pos:   s.sy.Pos})
	}
	return nil
}

// gathers are stage 3's all-gathers of the buckets (layers) whose
// parameters node i of the pass reads, from every rank's shard into the
// memory the bucket takes in the window until its last reader of the
// pass. In training the gathers go Prefetch buckets ahead: the gather of
// the k-th bucket a pass reads sits before the first reader of the
// (k−Prefetch)-th, running beside its steps (Step.Beside) with overlap.
func (s *zero) gathers(p *Plan, prog *Program, phase Phase, i int, eval bool) []*Step {
	if s.gathersAt == nil {
		s.planGathers(p)
	}
	var steps []*Step
	for _, bi := range s.gathersAt[gatherAt{phase, eval, i}] {
		b := p.Buckets[bi]
		n := b.Elems + b.Pad
		when := "forward"
		switch {
		case eval:
			when = "evaluation"
		case phase == PhaseBackward:
			when = "backward"
		}
		c := &Collective{Kind: CollectiveAllGather, Tag: fmt.Sprintf("parameters of bucket %d (%s)", bi, when), Buffer: prog.unitParams[bi], Elems: n,
			Part: prog.ParamShard, PartOffset: b.ShardOffset, Block: b.Block, Bytes: int64(n) * 4}
		steps = append(steps, &Step{Kind: CollectiveStep, Phase: phase, Collective: c, Beside: !eval && s.sy.Prefetch > 0 && s.sy.Overlap,
			Layer: fmt.Sprintf("allgather of %d parameters (%s … %s) for %s", len(b.Params), b.Params[0].Name, b.Params[len(b.Params)-1].Name, when),
			Pos:   s.sy.Pos})
	}
	return steps
}

// planGathers decides where each pass gathers each bucket: before the
// first node of the pass that reads one of its parameters (Prefetch
// buckets earlier in training).
func (s *zero) planGathers(p *Plan) {
	s.gathersAt = map[gatherAt][]int{}
	g := p.Graph
	bucketOf := map[*Value]int{}
	for i, prm := range g.Params {
		bucketOf[prm.Value] = p.Sharding.ParamBucket[i]
	}
	pass := func(phase Phase, eval bool, nodes []*Node) {
		first := map[int]int{} // bucket → the first node reading it
		var order []int        // buckets by first reader
		for i, n := range nodes {
			if n == nil {
				continue
			}
			for _, v := range n.In {
				if bi, ok := bucketOf[v]; ok {
					if _, seen := first[bi]; !seen {
						first[bi] = i
						order = append(order, bi)
					}
				}
			}
		}
		ahead := s.sy.Prefetch
		if eval {
			ahead = 0
		}
		for k, bi := range order {
			at := gatherAt{phase, eval, first[order[max(k-ahead, 0)]]}
			s.gathersAt[at] = append(s.gathersAt[at], bi)
		}
	}
	pass(PhaseForward, false, g.Forward)
	pass(PhaseBackward, false, g.Backward)
	evalNodes := make([]*Node, len(g.Forward))
	for i, n := range g.Forward {
		switch {
		case n.TrainOnly:
		case n.Eval != nil:
			evalNodes[i] = n.Eval
		default:
			evalNodes[i] = n
		}
	}
	pass(PhaseForward, true, evalNodes)
}

func (s *zero) LossScale() float64    { return 1 }
func (s *zero) LocalLoss() bool       { return false }
func (s *zero) Overlap() bool         { return s.sy.Overlap }
func (s *zero) SharedGradients() bool { return s.world > 1 }

func (s *zero) OwnParams() bool  { return false }
func (s *zero) ShareState() bool { return false } // each rank's shard is its own
func (s *zero) StateRanks() []int {
	return allRanks(s.world) // each holds a shard; a checkpoint saves them whole
}

// Resumes: a sharded run's own checkpoints (any stage) and allreduce's,
// whose tensors are whole, from any number of devices.
func (s *zero) Resumes(saved spec.SyncKind, savedWorld int) error {
	if saved == spec.SyncZero || saved == spec.SyncAllReduce {
		return nil
	}
	return fmt.Errorf("the checkpoint was made with sync %s, the script now says %s: a sharded run resumes allreduce's checkpoints and its own", saved, s.Kind())
}
