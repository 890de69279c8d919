package engine

import "gorun/engine/spec"

// none is sync.none: replicas that never meet after the initial broadcast
// of rank 0's parameters — every rank steps alone on its own samples, with
// parameters and optimizer state of its own, all saved by a checkpoint. A
// baseline for the other strategies.
type none struct {
	unsharded
	world int
}

func init() { registerSync(spec.SyncNone, newNone) }

func newNone(sy spec.Sync, world int) (SyncStrategy, error) { return &none{world: world}, nil }

func (s *none) Kind() spec.SyncKind { return spec.SyncNone }

func (s *none) Describe(p *Plan) string { return string(s.Kind()) }

func (s *none) BeforeForward(p *Plan, prog *Program) []*Step        { return nil }
func (s *none) AfterBackward(p *Plan, prog *Program, i int) []*Step { return nil }
func (s *none) Update(p *Plan, prog *Program) error                 { return p.optimizerSteps(prog, true) }

func (s *none) LossScale() float64    { return 1 }
func (s *none) LocalLoss() bool       { return s.world > 1 }
func (s *none) Overlap() bool         { return false }
func (s *none) SharedGradients() bool { return false }

func (s *none) OwnParams() bool   { return s.world > 1 }
func (s *none) ShareState() bool  { return true }
func (s *none) StateRanks() []int { return allRanks(s.world) }

// Resumes: its own checkpoints on the same number of devices: every rank
// trains a model of its own.
func (s *none) Resumes(saved spec.SyncKind, savedWorld int) error {
	if err := sameSync(s.Kind(), saved); err != nil {
		return err
	}
	return ownWorld(s.Kind(), s.world, savedWorld, "every device trains a model of its own (its parameters and optimizer state saved by rank)")
}
