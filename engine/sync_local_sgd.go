package engine

import (
	"fmt"

	"gorun/comm"
	"gorun/engine/spec"
)

// localSGD is sync.local_sgd: every rank steps alone on its own samples
// (its loss the mean over them), and every Every optimizer steps the
// ranks average their parameters. Between averagings each rank holds
// parameters and optimizer state of its own, and a checkpoint saves every
// rank's.
type localSGD struct {
	unsharded
	sy    spec.Sync
	world int
}

func init() { registerSync(spec.SyncLocalSGD, newLocalSGD) }

func newLocalSGD(sy spec.Sync, world int) (SyncStrategy, error) {
	return &localSGD{sy: sy, world: world}, nil
}

func (s *localSGD) Kind() spec.SyncKind { return spec.SyncLocalSGD }

func (s *localSGD) Describe(p *Plan) string { return fmt.Sprintf("local_sgd(every=%d)", s.sy.Every) }

func (s *localSGD) BeforeForward(p *Plan, prog *Program) []*Step { return nil }

func (s *localSGD) AfterBackward(p *Plan, prog *Program, i int) []*Step { return nil }

// Update: every rank steps, then the parameters are averaged every Every
// optimizer steps.
func (s *localSGD) Update(p *Plan, prog *Program) error {
	if err := p.optimizerSteps(prog, true); err != nil {
		return err
	}
	if s.world > 1 {
		prog.Steps = append(prog.Steps, paramStep(p, prog, &Collective{Kind: CollectiveAllReduce, Tag: "parameters", Op: comm.Mean}, s.sy.Every))
	}
	return nil
}

func (s *localSGD) LossScale() float64    { return 1 }
func (s *localSGD) LocalLoss() bool       { return s.world > 1 }
func (s *localSGD) Overlap() bool         { return false }
func (s *localSGD) SharedGradients() bool { return false }

func (s *localSGD) OwnParams() bool  { return s.world > 1 }
func (s *localSGD) ShareState() bool { return true }

func (s *localSGD) StateRanks() []int { return allRanks(s.world) }

// Resumes: its own checkpoints on the same number of devices. Between
// averagings every rank's parameters are its own; right after one they
// agree, but not the optimizer state (momentum, Adam's moments), which is
// never averaged: no other world can take the ranks' over.
func (s *localSGD) Resumes(saved spec.SyncKind, savedWorld int) error {
	if err := sameSync(s.Kind(), saved); err != nil {
		return err
	}
	return ownWorld(s.Kind(), s.world, savedWorld, "every device keeps parameters of its own between averagings and optimizer state of its own throughout")
}
