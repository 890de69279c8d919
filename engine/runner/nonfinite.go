package runner

import (
	"fmt"
	"path/filepath"
	"strings"

	"gorun/engine"
)

// nonFinite ends the run at a step whose loss or gradients are not finite
// (train's on_nonfinite = "stop", the default), before its update: the
// parameters keep their last finite values and the last checkpoint stays
// the last good one. The rank that saw the non-finite value names the op
// that produced it first; its search runs only now, on the failing step.
func (rs *runState) nonFinite(d *worker, epoch, step int, here bool, loss float64, gradsOK bool) error {
	where := fmt.Sprintf("epoch %d step %d", epoch+1, step)
	// Every rank agreed to stop here: let them all finish the collective
	// that told them before any returns (and aborts the group).
	_ = d.barrier("non-finite values", step)
	if !here {
		return fmt.Errorf("%s: another rank's loss or gradients are not finite (its error names the op); parameters not updated", where)
	}
	what := fmt.Sprintf("loss %v", loss)
	if !gradsOK {
		what += ", gradients not finite"
	}
	culprit, err := rs.firstNonFinite(d)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("%s: non-finite values (%s), first %s; the parameters were not updated", where, what, culprit)
	if last := rs.lastCheckpoint(); last != "" {
		msg += "; the last good checkpoint is " + last
	}
	return fmt.Errorf("%s (train(on_nonfinite = \"skip\") skips such steps instead)", msg)
}

// firstNonFinite says where the step's first non-finite value came from:
// a parameter, the input batch, or the first step (in program order) whose
// output holds one.
func (rs *runState) firstNonFinite(d *worker) (string, error) {
	prog := d.prog
	if prog.ParamShard != nil {
		// The parameters are whole only around the steps that read them.
		if ok, err := d.finite(prog.ParamShard); err != nil {
			return "", err
		} else if !ok {
			return "in this rank's shard of the parameters (from --init, a checkpoint or an earlier update)", nil
		}
	}
	for i, b := range prog.Params {
		if prog.ParamShard != nil {
			break
		}
		ok, err := d.finite(b)
		if err != nil {
			return "", err
		}
		if !ok {
			return fmt.Sprintf("in parameter %s (from --init, a checkpoint or an earlier update)", rs.plan.Graph.Params[i].Name), nil
		}
	}
	if ok, err := d.finite(prog.Input); err != nil {
		return "", err
	} else if !ok {
		return "in the input batch (the data set holds non-finite values)", nil
	}
	// Parameter gradients that a collective combined hold every rank's
	// values: a non-finite one may come from another rank, so they are
	// looked at last.
	p := rs.plan
	shared := p.Sync.SharedGradients()
	for pass := 0; pass < 2; pass++ {
		for _, st := range prog.Steps {
			if st.Kind == engine.CollectiveStep {
				continue
			}
			for _, b := range st.Out {
				if isGrad := b.View == prog.GradArena; shared && isGrad != (pass == 1) {
					continue
				}
				ok, err := d.finite(b)
				if err != nil {
					return "", err
				}
				if ok {
					continue
				}
				if pass == 1 {
					return fmt.Sprintf("in the gradient %s after the %s: this rank's activations are finite, so another rank's %s or its own %s produced it",
						b.Name, p.Sync.Kind(), "backward pass (its error names the op)", layerAt(st)), nil
				}
				return fmt.Sprintf("produced by %s (%s step %s, output %s)", layerAt(st), st.Phase, st.Op, b.Name), nil
			}
		}
		if !shared {
			break
		}
	}
	return "produced by a collective (a rank sent non-finite values)", nil
}

func layerAt(st *engine.Step) string {
	if st.Pos == "" {
		return st.Layer
	}
	return st.Layer + " at " + string(st.Pos)
}

// lastCheckpoint is the newest complete checkpoint of the run folder ("" when
// none).
func (rs *runState) lastCheckpoint() string {
	if rs.opts.Out == "" {
		return ""
	}
	steps, err := listCheckpoints(rs.opts.Out)
	if err != nil || len(steps) == 0 {
		return ""
	}
	return strings.TrimPrefix(checkpointName(rs.opts.Out, steps[len(steps)-1]), filepath.Clean(".")+"/")
}
