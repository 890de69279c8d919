package engine

import (
	"fmt"

	"gorun/engine/spec"
)

// parameterServer is sync.parameter_server, torch.cuda.comm's recipe:
// every rank computes the gradients of its share of the global batch, the
// gradients are summed into the root's copy (reduce_add) after the whole
// backward pass, the root alone steps the optimizer and broadcasts the new
// parameters back. Only the root's optimizer state is live: the other
// ranks plan theirs and leave it untouched, and a checkpoint saves the
// root's.
type parameterServer struct {
	unsharded
	sy    spec.Sync
	world int
}

func init() { registerSync(spec.SyncParameterServer, newParameterServer) }

func newParameterServer(sy spec.Sync, world int) (SyncStrategy, error) {
	if sy.Root < 0 || sy.Root >= world {
		return nil, fmt.Errorf("%s: sync.parameter_server: root %d is not a rank (the world has %d devices)", sy.Pos, sy.Root, world)
	}
	return &parameterServer{sy: sy, world: world}, nil
}

func (s *parameterServer) Kind() spec.SyncKind { return spec.SyncParameterServer }

func (s *parameterServer) Describe(p *Plan) string {
	return fmt.Sprintf("parameter_server(root=%d)", s.sy.Root)
}

func (s *parameterServer) BeforeForward(p *Plan, prog *Program) []*Step { return nil }

func (s *parameterServer) AfterBackward(p *Plan, prog *Program, i int) []*Step {
	if s.world == 1 {
		return nil
	}
	return bucketSteps(p, prog, i, CollectiveReduce, s.sy.Root, false)
}

// Update: the root steps, then broadcasts the parameters. Every rank plans
// optimizer state; the other ranks' buffers only carry the root's to rank
// 0 when a checkpoint is written.
func (s *parameterServer) Update(p *Plan, prog *Program) error {
	if err := p.optimizerSteps(prog, prog.Rank == s.sy.Root); err != nil {
		return err
	}
	if s.world > 1 {
		prog.Steps = append(prog.Steps, paramStep(p, prog, &Collective{Kind: CollectiveBroadcast, Tag: "parameters", Root: s.sy.Root}, 0))
	}
	return nil
}

func (s *parameterServer) LossScale() float64    { return 1 }
func (s *parameterServer) LocalLoss() bool       { return false }
func (s *parameterServer) Overlap() bool         { return false }
func (s *parameterServer) SharedGradients() bool { return s.world > 1 }

func (s *parameterServer) OwnParams() bool   { return false }
func (s *parameterServer) ShareState() bool  { return false }
func (s *parameterServer) StateRanks() []int { return []int{s.sy.Root} }

// Resumes: its own checkpoints from any device count: the parameters are
// the root's, broadcast to every rank, and the optimizer state the root's
// alone (the root is checked against the world at compile time).
func (s *parameterServer) Resumes(saved spec.SyncKind, savedWorld int) error {
	return sameSync(s.Kind(), saved)
}
