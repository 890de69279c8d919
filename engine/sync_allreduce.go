package engine

import (
	"fmt"

	"gorun/comm"
	"gorun/engine/spec"
)

// allReduce is sync.allreduce, DistributedDataParallel's recipe: every
// rank computes the gradients of its share of the global batch, the
// gradient buckets are summed over every rank (each bucket as soon as
// backward completes it, with overlap), and every rank takes the same
// optimizer step. op="mean" averages over the global batch (the loss is
// scaled by one over the step's targets across ranks); op="sum" scales
// each rank's loss by the world size on top, so the sum of the ranks'
// local means is the update (the tutorial's average_gradients without
// its division). With broadcast_buffers, rank 0's running statistics go
// to every device before each forward pass.
type allReduce struct {
	unsharded
	sy    spec.Sync
	op    comm.ReduceOp // comm.Sum or comm.Mean, from sy.Op
	world int
}

func init() { registerSync(spec.SyncAllReduce, newAllReduce) }

func newAllReduce(sy spec.Sync, world int) (SyncStrategy, error) {
	op, err := comm.ParseReduceOp(sy.Op)
	if err != nil || (op != comm.Sum && op != comm.Mean) {
		return nil, fmt.Errorf("%s: sync.allreduce: op must be \"mean\" or \"sum\", got %q", sy.Pos, sy.Op)
	}
	return &allReduce{sy: sy, op: op, world: world}, nil
}

func (s *allReduce) Kind() spec.SyncKind { return spec.SyncAllReduce }

func (s *allReduce) Describe(p *Plan) string {
	return fmt.Sprintf("allreduce(op=%s, bucket_mb=%g, overlap=%v)", s.op, bucketMB(p), s.sy.Overlap)
}

func (s *allReduce) BeforeForward(p *Plan, prog *Program) []*Step {
	if prog.StatArena == nil || s.world == 1 || !s.sy.BroadcastBuffers {
		return nil
	}
	n := prog.StatArena.Elems()
	c := &Collective{Kind: CollectiveBroadcast, Tag: "running statistics", Buffer: prog.StatArena, Elems: n, Bytes: int64(n) * 4}
	return []*Step{{Kind: CollectiveStep, Phase: PhaseForward, Collective: c, Layer: "broadcast_buffers", Pos: s.sy.Pos}}
}

func (s *allReduce) AfterBackward(p *Plan, prog *Program, i int) []*Step {
	if s.world == 1 {
		return nil
	}
	return bucketSteps(p, prog, i, CollectiveAllReduce, 0, s.sy.Overlap)
}

func (s *allReduce) Update(p *Plan, prog *Program) error { return p.optimizerSteps(prog, true) }

func (s *allReduce) LossScale() float64 {
	if s.op == comm.Sum {
		return float64(s.world) // each rank's gradient is a local mean
	}
	return 1
}

func (s *allReduce) LocalLoss() bool       { return false }
func (s *allReduce) Overlap() bool         { return s.sy.Overlap }
func (s *allReduce) SharedGradients() bool { return s.world > 1 }

func (s *allReduce) OwnParams() bool   { return false }
func (s *allReduce) ShareState() bool  { return true }
func (s *allReduce) StateRanks() []int { return []int{0} } // every rank's is rank 0's
// Resumes: allreduce's own checkpoints and a sharded run's (sync.zero),
// which hold whole tensors, from any device count: the parameters and
// optimizer state are rank 0's, every rank's the same.
func (s *allReduce) Resumes(saved spec.SyncKind, savedWorld int) error {
	if saved == spec.SyncZero {
		return nil
	}
	return sameSync(s.Kind(), saved)
}
