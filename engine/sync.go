package engine

import (
	"fmt"

	"gorun/comm"
	"gorun/engine/spec"
)

// communicator is what a device needs from comm: one rank's handle.
type communicator = *comm.Comm

// localLoss reports whether each rank averages its loss over its own
// samples (independent steps: local SGD, no sync) rather than over the
// global batch (gradients combined across ranks).
func (p *Plan) localLoss() bool {
	k := p.Spec.Sync.Kind
	return len(p.Devices) > 1 && (k == spec.SyncLocalSGD || k == spec.SyncNone)
}

// syncAfter returns the collectives to place right after backward node i:
// the all-reduce (or reduce, for a parameter server) of every gradient
// bucket that node i completes. Without overlap they all follow the last
// backward node.
func (p *Plan) syncAfter(prog *Program, i int) []*Step {
	s := p.Spec
	if len(p.LocalBatch) == 1 {
		return nil
	}
	var name string
	switch s.Sync.Kind {
	case spec.SyncAllReduce:
		name = "allreduce"
	case spec.SyncParameterServer:
		name = "reduce"
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
		c := &Collective{Name: name, Tag: fmt.Sprintf("bucket %d", bi), Op: "sum", Root: s.Sync.Root,
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
	if len(p.LocalBatch) == 1 {
		return nil
	}
	elems := len(prog.ParamArena.Data)
	var c *Collective
	every := 0
	switch s.Sync.Kind {
	case spec.SyncParameterServer:
		c = &Collective{Name: "broadcast", Tag: "parameters", Root: s.Sync.Root}
	case spec.SyncLocalSGD:
		c = &Collective{Name: "allreduce", Tag: "parameters", Op: "mean"}
		every = s.Sync.Every
	default:
		return nil
	}
	c.Buffer, c.Elems, c.Bytes = prog.ParamArena, elems, int64(elems)*4
	return []*Step{{Kind: CollectiveStep, Phase: PhaseUpdate, Collective: c, Every: every,
		Layer: c.Name + " " + c.Tag, Pos: s.Sync.Pos}}
}

// newComms makes the in-process group of the plan's devices, or nil for
// one device.
func (p *Plan) newComms() ([]communicator, error) {
	n := len(p.Devices)
	if n == 1 {
		return nil, nil
	}
	alg, err := comm.ParseAlgorithm(p.Cluster.Algorithm)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	g, err := comm.NewInProc(n, comm.Options{Algorithm: alg, Timeout: p.Cluster.Timeout})
	if err != nil {
		return nil, err
	}
	out := make([]communicator, n)
	for r := range out {
		out[r] = g.Rank(r)
	}
	p.group = g
	return out, nil
}

// abort releases every rank waiting in a collective after one failed.
func (p *Plan) abort(_ []*device, err error) {
	if p.group != nil {
		p.group.Abort(err)
	}
}

// collective runs a collective step.
func (d *device) collective(st *Step) error {
	c := st.Collective
	if st.Every > 0 && d.prog.ctx.Step%st.Every != 0 {
		return nil
	}
	if d.comm == nil {
		return nil
	}
	buf := c.Buffer.Data[c.Offset : c.Offset+c.Elems]
	tag := comm.Tag{Name: c.Tag, Step: d.prog.ctx.Step}
	var err error
	switch c.Name {
	case "allreduce":
		op := comm.Sum
		if c.Op == "mean" {
			op = comm.Mean
		}
		err = d.comm.AllReduce(buf, op, tag)
	case "reduce":
		err = d.comm.Reduce(buf, c.Root, comm.Sum, tag)
	case "broadcast":
		err = d.comm.Broadcast(buf, c.Root, tag)
	default:
		err = fmt.Errorf("unknown collective %q", c.Name)
	}
	return err
}

// broadcastParams sends rank 0's parameters (and optimizer state) to
// every rank: every run starts with it.
func (d *device) broadcastParams() error {
	if d.comm == nil {
		return nil
	}
	if err := d.comm.Broadcast(d.prog.ParamArena.Data, 0, comm.Tag{Name: "initial parameters"}); err != nil {
		return err
	}
	if !d.shareState {
		return nil
	}
	for i, st := range d.prog.State {
		for _, b := range st {
			if err := d.comm.Broadcast(b.Data, 0, comm.Tag{Name: fmt.Sprintf("optimizer state %d", i)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sum2 adds a and b over all ranks, in one collective.
func (d *device) sum2(a, b float64, what string, step int) (float64, float64, error) {
	if d.comm == nil {
		return a, b, nil
	}
	d.scalar = [2]float32{float32(a), float32(b)}
	if err := d.comm.AllReduce(d.scalar[:], comm.Sum, comm.Tag{Name: what, Step: step}); err != nil {
		return 0, 0, err
	}
	return float64(d.scalar[0]), float64(d.scalar[1]), nil
}

// barrier waits for every rank.
func (d *device) barrier(what string, step int) error {
	if d.comm == nil {
		return nil
	}
	return d.comm.Barrier(comm.Tag{Name: what, Step: step})
}
