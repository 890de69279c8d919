package engine

import (
	"fmt"

	"gorun/comm"
	"gorun/engine/spec"
)

// LocalLoss reports whether each rank averages its loss over its own
// samples (independent steps: local SGD, no sync) rather than over the
// global batch (gradients combined across ranks).
func (p *Plan) LocalLoss() bool {
	k := p.Spec.Sync.Kind
	return p.World > 1 && (k == spec.SyncLocalSGD || k == spec.SyncNone)
}

// syncAfter returns the collectives to place right after backward node i:
// the all-reduce (or reduce, for a parameter server) of every gradient
// bucket that node i completes. Without overlap they all follow the last
// backward node.
func (p *Plan) syncAfter(prog *Program, i int) []*Step {
	s := p.Spec
	if p.World == 1 {
		return nil
	}
	var kind CollectiveKind
	switch s.Sync.Kind {
	case spec.SyncAllReduce:
		kind = CollectiveAllReduce
	case spec.SyncParameterServer:
		kind = CollectiveReduce
	default:
		return nil
	}
	last := len(p.Graph.Backward) - 1
	var steps []*Step
	for bi, b := range p.Buckets {
		at := b.AfterOps
		if !s.Sync.Overlap || s.Sync.Kind == spec.SyncParameterServer {
			at = last
		}
		if at != i {
			continue
		}
		c := &Collective{Kind: kind, Tag: fmt.Sprintf("bucket %d", bi), Op: comm.Sum, Root: s.Sync.Root,
			Buffer: prog.GradArena, Offset: b.Offset, Elems: b.Elems, Bytes: int64(b.Elems) * 4}
		steps = append(steps, &Step{Kind: CollectiveStep, Phase: PhaseSync, Collective: c,
			Layer: fmt.Sprintf("%s of %d gradients (%s … %s)", c.Tag, len(b.Params), b.Params[0].Name, b.Params[len(b.Params)-1].Name),
			Pos:   s.Sync.Pos})
	}
	return steps
}

// postUpdate returns the collectives that follow the optimizer: a
// parameter server broadcasts the new parameters from its root; local SGD
// averages parameters every K steps.
func (p *Plan) postUpdate(prog *Program) []*Step {
	s := p.Spec
	if p.World == 1 {
		return nil
	}
	elems := prog.ParamArena.Elems()
	var c *Collective
	every := 0
	switch s.Sync.Kind {
	case spec.SyncParameterServer:
		c = &Collective{Kind: CollectiveBroadcast, Tag: "parameters", Root: s.Sync.Root}
	case spec.SyncLocalSGD:
		c = &Collective{Kind: CollectiveAllReduce, Tag: "parameters", Op: comm.Mean}
		every = s.Sync.Every
	default:
		return nil
	}
	c.Buffer, c.Elems, c.Bytes = prog.ParamArena, elems, int64(elems)*4
	return []*Step{{Kind: CollectiveStep, Phase: PhaseUpdate, Collective: c, Every: every,
		Layer: string(c.Kind) + " " + c.Tag, Pos: s.Sync.Pos}}
}
