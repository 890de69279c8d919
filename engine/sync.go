package engine

import (
	"fmt"
	"sort"
	"strings"

	"gorun/comm"
	"gorun/engine/spec"
)

// SyncStrategy is how the replicas of a run are kept in step: one value per
// sync.* kind of the script (spec.Sync), made for the run's world by
// NewSyncStrategy and held by the Plan (Plan.Sync). Each strategy lives in
// one file (sync_allreduce.go, sync_parameter_server.go, sync_local_sgd.go,
// sync_none.go, sync_zero.go) that registers it; the compiler asks it
// where collectives go, the runner how to scale the loss and what a
// checkpoint holds, and neither looks at the kind.
//
// The sharded strategy (sync.zero, ZeRO stages 1–3) plugs in through the
// same hooks: Prepare pads the gradient buckets so that each splits into
// one block per rank and sets Plan.Sharding, which the compiler reads to
// lay out the rank's shards; AfterBackward places a reduce-scatter of each
// bucket (CollectiveReduceScatter); Update plans each rank's optimizer
// over its blocks of the parameters, with optimizer state for those
// blocks only, followed by an all-gather of the parameters
// (CollectiveAllGather); StateRanks answers every rank, each holding a
// shard, and a checkpoint gathers whole tensors so that it stays
// independent of the world; Resumes accepts allreduce's checkpoints and
// the other stages', from any device count. Stage 3 gathers each layer's
// parameters before its forward and its backward node through BeforeNode,
// called from compileProgram's forward, backward and evaluation loops; the
// strategies that need none return nothing.
type SyncStrategy interface {
	// Kind is the script's sync.* kind: the checkpoint's "sync" metadata
	// and the name `gorun plan` gives the gradient buckets.
	Kind() spec.SyncKind
	// Describe is the strategy as `gorun plan` prints it, the sync.* call
	// with its settings: "allreduce(op=mean, bucket_mb=25, overlap=true)".
	Describe(p *Plan) string

	// Prepare is called once the graph and the gradient buckets
	// (Plan.Buckets) are planned, before any device's Program: a sharded
	// strategy pads and regroups the buckets and sets Plan.Sharding; the
	// others leave the Plan as it is.
	Prepare(p *Plan) error
	// BeforeForward returns the collectives that open every training
	// step, before the first forward kernel (allreduce's
	// broadcast_buffers: rank 0's running statistics to every device).
	BeforeForward(p *Plan, prog *Program) []*Step
	// AfterBackward returns the collectives placed right after backward
	// node i (Graph.Backward[i]) of prog: the gradient buckets it
	// completes, or, without overlap, every bucket after the last node.
	AfterBackward(p *Plan, prog *Program, i int) []*Step
	// BeforeNode returns the collectives placed right before node i of
	// the forward pass (phase PhaseForward: Graph.Forward[i], in training
	// or, with eval set, in evaluation) or of the backward pass
	// (PhaseBackward: Graph.Backward[i]): stage 3's gathers of the
	// parameters the node reads.
	BeforeNode(p *Plan, prog *Program, phase Phase, i int, eval bool) []*Step
	// Update appends prog's update phase: gradient clipping and the
	// optimizer on the ranks that step (Plan.optimizerSteps plans every
	// rank's optimizer state either way), then the collectives that
	// follow (a parameter server's broadcast, local SGD's averaging).
	Update(p *Plan, prog *Program) error

	// LossScale multiplies the loss (and so the gradients) on top of the
	// mean over the step's targets: the world size for allreduce's
	// op="sum" (each rank's gradient a local mean, summed), else 1.
	LossScale() float64
	// LocalLoss reports whether each rank averages its loss over its own
	// samples, stepping alone (local SGD, no sync), rather than over the
	// global batch.
	LocalLoss() bool
	// Overlap reports whether the gradient collectives run beside the
	// backward pass (a goroutine of their own on the CPU, a stream on a
	// GPU) instead of in order with the kernels.
	Overlap() bool
	// SharedGradients reports whether the gradients hold every rank's
	// values once the sync phase is done, so that a non-finite gradient
	// may come from another rank.
	SharedGradients() bool

	// OwnParams reports whether ranks keep parameters of their own: a
	// checkpoint then saves every rank's, and a resumed run restores each
	// instead of broadcasting rank 0's.
	OwnParams() bool
	// ShareState reports whether rank 0's optimizer state is every rank's:
	// it is broadcast with the initial parameters (and after a resume,
	// which restores rank 0's).
	ShareState() bool
	// StateRanks are the ranks whose optimizer state a checkpoint holds
	// (each under its rank); the runner brings it to rank 0 (a broadcast
	// from one rank, an all-gather from all) and restores each rank's.
	StateRanks() []int
	// Resumes returns nil when a checkpoint written under sync kind saved
	// on a world of savedWorld devices may resume under this strategy,
	// else an error saying why not. A checkpoint made on another device
	// count resumes where the strategy's state does not depend on the
	// world (allreduce, a parameter server, the sharded strategies, and
	// allreduce's into a sharded one and back), and is refused, naming
	// why, where every rank's is its own (sync none, local SGD).
	Resumes(saved spec.SyncKind, savedWorld int) error
}

// syncMakers are the registered strategies, by kind: each strategy's file
// adds itself at package init.
var syncMakers = map[spec.SyncKind]func(sy spec.Sync, world int) (SyncStrategy, error){}

// registerSync makes a strategy available under its kind.
func registerSync(kind spec.SyncKind, maker func(sy spec.Sync, world int) (SyncStrategy, error)) {
	if _, dup := syncMakers[kind]; dup {
		panic(fmt.Sprintf("sync strategy %q registered twice", kind))
	}
	syncMakers[kind] = maker
}

// NewSyncStrategy returns the strategy sy declares for a world of ranks,
// checking its settings against the world.
func NewSyncStrategy(sy spec.Sync, world int) (SyncStrategy, error) {
	maker, ok := syncMakers[sy.Kind]
	if !ok {
		return nil, fmt.Errorf("%s: unknown sync strategy %q (gorun has %s)", sy.Pos, sy.Kind, strings.Join(SyncKinds(), ", "))
	}
	return maker(sy, world)
}

// SyncKinds lists the registered strategies' kinds, sorted.
func SyncKinds() []string {
	var out []string
	for k := range syncMakers {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

// sameSync is the Resumes of a strategy whose checkpoints resume only
// under the same kind: on any number of devices (the parameters and
// optimizer state are rank 0's, the same on every rank, and each step's
// global batch is the same on any world), unless ownWorld says why a
// world of its own is needed.
func sameSync(kind, saved spec.SyncKind) error {
	if saved != kind {
		return fmt.Errorf("the checkpoint was made with sync %s, the script now says %s", saved, kind)
	}
	return nil
}

// ownWorld refuses a checkpoint of a strategy whose ranks keep
// parameters and optimizer state of their own (why) made on another
// number of devices.
func ownWorld(kind spec.SyncKind, world, savedWorld int, why string) error {
	if savedWorld != world {
		return fmt.Errorf("the checkpoint was made with %s, this run has %d: under sync %s %s, which %s cannot take over; resume on %s",
			nDevices(savedWorld), world, kind, why, nDevices(world), nDevices(savedWorld))
	}
	return nil
}

// nDevices is "1 device", "2 devices", ….
func nDevices(n int) string {
	if n == 1 {
		return "1 device"
	}
	return fmt.Sprintf("%d devices", n)
}

// unsharded is the part of SyncStrategy that strategies holding every
// parameter on every rank share: nothing to prepare, nothing before a
// node.
type unsharded struct{}

func (unsharded) Prepare(p *Plan) error { return nil }
func (unsharded) BeforeNode(p *Plan, prog *Program, phase Phase, i int, eval bool) []*Step {
	return nil
}

// allRanks is 0 … world-1.
func allRanks(world int) []int {
	out := make([]int, world)
	for r := range out {
		out[r] = r
	}
	return out
}

// bucketSteps returns a collective of kind (a reduction by sum, to root
// where it has one) for every gradient bucket placed after backward node
// i: a bucket sits after the node that completes it when overlap is set,
// else every bucket follows the last backward node.
func bucketSteps(p *Plan, prog *Program, i int, kind CollectiveKind, root int, overlap bool) []*Step {
	last := len(p.Graph.Backward) - 1
	var steps []*Step
	for bi, b := range p.Buckets {
		at := b.AfterOps
		if !overlap {
			at = last
		}
		if at != i {
			continue
		}
		c := &Collective{Kind: kind, Tag: fmt.Sprintf("bucket %d", bi), Op: comm.Sum, Root: root,
			Buffer: prog.GradArena, Offset: b.Offset, Elems: b.Elems, Bytes: int64(b.Elems) * 4}
		steps = append(steps, &Step{Kind: CollectiveStep, Phase: PhaseSync, Collective: c,
			Layer: fmt.Sprintf("%s of %d gradients (%s … %s)", c.Tag, len(b.Params), b.Params[0].Name, b.Params[len(b.Params)-1].Name),
			Pos:   p.Spec.Sync.Pos})
	}
	return steps
}

// paramStep returns the update-phase collective c over prog's whole
// parameter arena, run every every optimizer steps (0: each).
func paramStep(p *Plan, prog *Program, c *Collective, every int) *Step {
	elems := prog.ParamArena.Elems()
	c.Buffer, c.Elems, c.Bytes = prog.ParamArena, elems, int64(elems)*4
	return &Step{Kind: CollectiveStep, Phase: PhaseUpdate, Collective: c, Every: every,
		Layer: string(c.Kind) + " " + c.Tag, Pos: p.Spec.Sync.Pos}
}

// allReduceTwin compiles p's script again for the same cluster and
// process with plain sync.allreduce (p's bucket size, overlap and
// broadcast_buffers): what `gorun plan` sets a sharded plan beside. The
// memory limit is not checked.
func (p *Plan) allReduceTwin() (*Plan, error) {
	sc := *p.Spec
	sy := p.Spec.Sync
	sc.Sync = spec.Sync{Kind: spec.SyncAllReduce, Op: "mean", BucketMB: sy.BucketMB, Overlap: sy.Overlap, BroadcastBuffers: sy.BroadcastBuffers, Pos: sy.Pos}
	return compileProcess(&sc, p.Cluster, p.Process)
}
