//go:build cuda

package cuda

import (
	"fmt"
	"os"

	"gorun/engine"
	"gorun/engine/backend"
)

// A training micro-batch is captured (cuStreamBeginCapture …
// cuStreamEndCapture, cuGraphInstantiateWithFlags) the first time its
// graphKey comes up and replayed with one cuGraphLaunch per segment from
// then on. Collective steps split the micro-batch into segments: they run
// between the graph launches, on the communication stream (NCCL) or as
// device-to-device copies, so a collective placed in backward overlaps
// the backward segment launched after it.

// dynLaunch is a captured kernel launch with per-step arguments: the node
// that holds it and the arguments as last set.
type dynLaunch struct {
	node graphNode
	k    kernelID
	geo  geometry
	args []arg
	last []uint64
}

// capturing collects what a capture needs to remember.
type capturing struct {
	dyn []dynLaunch
}

// segment is a run of kernel and copy steps captured as one graph, or one
// collective step.
type segment struct {
	exec *graphExec
	dyn  []dynLaunch
	// join makes the compute stream wait for the communication stream
	// first (the segment starts the optimizer update).
	join bool
	coll *engine.Step
	// steps are the segment's steps, while it is being built.
	steps []*engine.Step
}

// trainGraph is one captured micro-batch.
type trainGraph struct {
	key   graphKey
	segs  []*segment
	draws uint64 // dropout draws per replay
	args  *argBlock
	bits  [maxArgs]uint64
}

func (g *trainGraph) destroy() {
	for _, s := range g.segs {
		if s.exec != nil {
			s.exec.destroy()
		}
	}
	g.segs = nil
	if g.args != nil {
		g.args.free()
		g.args = nil
	}
}

// active reports whether step st runs in the part of a micro-batch that
// rc and update describe: the update phase (update), or forward, backward
// and, in the last micro-batch, the sync phase.
func active(st *engine.Step, rc *backend.RunCtx, update bool) bool {
	if (st.Phase == engine.PhaseUpdate) != update {
		return false
	}
	if !rc.Last && st.Phase == engine.PhaseSync {
		return false
	}
	if st.Every > 0 && (rc.Step%st.Every != 0) {
		return false
	}
	return true
}

// planSegments splits the active steps of a micro-batch into segments.
func planSegments(steps []*engine.Step, rc *backend.RunCtx, update bool) []*segment {
	var segs []*segment
	var cur *segment
	updating := false
	for _, st := range steps {
		if !active(st, rc, update) {
			continue
		}
		if st.Kind == engine.CollectiveStep {
			segs = append(segs, &segment{coll: st})
			cur = nil
			continue
		}
		join := false
		if st.Phase == engine.PhaseUpdate && !updating {
			updating, join = true, true
		}
		if cur == nil || join {
			cur = &segment{join: join}
			segs = append(segs, cur)
		}
		cur.steps = append(cur.steps, st)
	}
	return segs
}

// RunTrain runs the forward and backward phases of prog.Steps for one
// micro-batch as rc describes, and the sync phase when rc.Last, replaying
// the graph captured for its (live batch, first, last) combination: run
// eagerly the first time it comes up, captured the second. With the
// [cuda] table's eager = true, for a program the device did not load, or
// when capturing fails (a warning says why, once), it runs the steps one
// by one.
func (d *Device) RunTrain(prog *engine.Program, rc *backend.RunCtx, coll backend.Collectives) error {
	return d.run(prog, rc, coll, false)
}

// RunUpdate runs the update phase of prog.Steps (the optimizer and the
// collectives after it), as a captured graph like RunTrain.
func (d *Device) RunUpdate(prog *engine.Program, rc *backend.RunCtx, coll backend.Collectives) error {
	return d.run(prog, rc, coll, true)
}

func (d *Device) run(prog *engine.Program, rc *backend.RunCtx, coll backend.Collectives, update bool) error {
	if err := d.loaded(); err != nil {
		return err
	}
	if d.set.Eager || prog != d.prog {
		return d.runEager(prog, rc, coll, update)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.exit()
	key := newGraphKey(d.batch, rc.First, rc.Last, update, rc.Step, d.periods)
	g := d.graphs[key]
	if g == nil && !d.warm[key] {
		// The first run of a combination is eager: it warms up what is
		// loaded lazily (kernels, cuBLAS's), which must not happen
		// during a capture.
		d.warm[key] = true
		return d.runEager(prog, rc, coll, update)
	}
	if g == nil {
		if d.noGraph {
			return d.runEager(prog, rc, coll, update)
		}
		var err error
		if g, err = d.captureTrain(key, rc, update); err != nil {
			d.noGraph = true
			fmt.Fprintf(os.Stderr, "gorun: %s: cannot capture a CUDA graph (%s): %v; running the steps one by one\n", d.Name(), key, err)
			return d.runEager(prog, rc, coll, update)
		}
		d.graphs[key] = g
	}
	dyn := dynValues{lossScale: rc.LossScale, lrScale: rc.LRScale, step: rc.Step, seed: d.seed, offset: d.offset}
	if err := d.joinComm(); err != nil {
		return err
	}
	for _, s := range g.segs {
		if s.coll != nil {
			if err := d.collective(coll, s.coll, rc); err != nil {
				return err
			}
			// The collective may have run on this thread in another
			// device's context.
			if err := setCurrent(d.gpu.ctx); err != nil {
				return err
			}
			continue
		}
		if s.join {
			if err := d.joinComm(); err != nil {
				return err
			}
		}
		for j := range s.dyn {
			dl := &s.dyn[j]
			changed := false
			for a, ar := range dl.args {
				g.bits[a] = ar.resolve(&dyn)
				changed = changed || g.bits[a] != dl.last[a]
			}
			if !changed {
				continue
			}
			g.args.set(g.bits[:len(dl.args)])
			if err := s.exec.setKernelParams(dl.node, d.gpu.fn[dl.k], dl.geo, g.args); err != nil {
				return fmt.Errorf("%s: %s: %w", d.Name(), dl.k, err)
			}
			copy(dl.last, g.bits[:len(dl.args)])
		}
		if err := s.exec.launch(d.stream); err != nil {
			return fmt.Errorf("%s: replaying a training step (%s): %w", d.Name(), key, err)
		}
	}
	d.offset += g.draws
	return nil
}

// captureTrain captures the segments of a micro-batch. Nothing runs while
// capturing; RunTrain launches the graph right after.
func (d *Device) captureTrain(key graphKey, rc *backend.RunCtx, update bool) (*trainGraph, error) {
	g := &trainGraph{key: key, segs: planSegments(d.prog.Steps, rc, update), args: newArgBlock()}
	d.dyn = dynValues{lossScale: rc.LossScale, lrScale: rc.LRScale, step: rc.Step, seed: d.seed, offset: d.offset}
	d.rel = 0
	acc := !rc.First
	for _, s := range g.segs {
		if s.coll != nil {
			continue
		}
		if err := beginCapture(d.stream); err != nil {
			g.destroy()
			return nil, err
		}
		d.capture = &capturing{}
		var err error
		for _, st := range s.steps {
			if err = d.step(st, st.Acc && acc); err != nil {
				break
			}
		}
		cp := d.capture
		d.capture = nil
		if err != nil {
			abortCapture(d.stream)
			g.destroy()
			return nil, err
		}
		if s.exec, err = endCapture(d.stream); err != nil {
			g.destroy()
			return nil, err
		}
		s.dyn, s.steps = cp.dyn, nil
	}
	g.draws = d.rel
	return g, nil
}

// runEager runs a micro-batch's part step by step ([cuda] eager = true).
func (d *Device) runEager(prog *engine.Program, rc *backend.RunCtx, coll backend.Collectives, update bool) error {
	for _, st := range prog.Steps {
		if !active(st, rc, update) {
			continue
		}
		if st.Kind == engine.CollectiveStep {
			if err := d.collective(coll, st, rc); err != nil {
				return err
			}
			continue
		}
		if err := d.Exec(st, rc); err != nil {
			return err
		}
	}
	return nil
}

// collective runs a collective step through coll, as the runner does for
// the CPU backend.
func (d *Device) collective(coll backend.Collectives, st *engine.Step, rc *backend.RunCtx) error {
	c := st.Collective
	if coll == nil || c == nil {
		return nil
	}
	return c.Run(coll, rc.Step)
}
