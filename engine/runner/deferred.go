package runner

import (
	"fmt"
	"math"
	"time"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// Deferred verdicts: no wait for the device inside an optimizer step.
//
// An optimizer step's update must not run when the step's loss or synced
// gradients are not finite. Read on the host, that verdict costs a round
// trip every step: the device finishes backward and the gradient sync,
// the host reads the loss and the finiteness sum, and only then launches
// the update, while the device idles. On a device that is a
// backend.Deferrer the device decides itself, as llm.c and PyTorch's
// capturable optimizers do: after the last micro-batch the runner queues
// MarkStep (the halt flag set from the loss and the gradients' finiteness
// sum, and a copy of the loss and flag to host memory) and the update
// right behind it — the update's kernels read the flag and do nothing
// when it is set — and goes on to the next step. The step's loss and
// verdict are read (Marked) during the next step, after its micro-batches
// have been launched, or when the epoch's steps end (settleStep): before
// a checkpoint, an evaluation, the epoch's line or the end of the run.
// Step lines are then written a step late; their content is the same.
//
// What the host decided at once it now decides a step late, with the
// same outcome:
//
//   - on_nonfinite = "stop": the flag is sticky (once set, no later
//     update runs), and the step's record is read before the next step's
//     update is queued, so the parameters and optimizer state are those
//     from before the bad step. The next step's micro-batches have run
//     since, so the bad step's are run again first (rerunStep: its batch,
//     its loss scale, its dropout draws from the RNG state kept before
//     it) and firstNonFinite looks at the same buffers as on the
//     synchronous path.
//   - "skip": the flag is the step's own; the skipped count and log line
//     come with the step's record.
//   - an interrupt is looked at after the previous step's record (so
//     after OnStep saw it) and stops the run after the step under way, as
//     on the synchronous path; several ranks agree on it in a collective
//     of host values before the next step begins.
//   - several devices of this process agree the flag on the device
//     (MarkStep's collective: the largest of every rank's flag), so every
//     rank skips or updates alike, as the summed verdict of the
//     synchronous path makes them.
//
// The runner keeps the synchronous path (readStep, the host's verdict)
// where the device cannot decide or the verdict cannot wait: a device
// that is no Deferrer, or whose Defers refuses the Program or the group;
// fp16 (GradScaler's scale for the next step depends on this step's
// verdict); several processes (the loss sums collective agrees the
// verdict across them); an update phase holding collectives (parameter
// server, local SGD, ZeRO: a flag on the device cannot hold back a
// collective the host runs); streamed training data (a bad step's batch
// could not be gathered again out of order); and RunOptions.SyncVerdicts.

// stepRecord is what an optimizer step leaves for its bookkeeping
// (finishStep): on the deferred path, what it takes to read and record it
// a step later, and to run it again.
type stepRecord struct {
	epoch, step int // 0-based epoch, 1-based optimizer step
	g0, g1      int // its micro-steps
	sc          *engine.Schedule
	total, mine int // samples of every rank, of this rank
	denom       int
	scale       float64 // the loss's scale (sync strategy times fp16's)
	noTargets   bool
	lr          float64
	amp         bool    // fp16's loss scaling is on
	ampUsed     float64 // its scale this step
	rc          backend.RunCtx
	rng         []byte // the dropout RNG before the step (deferred, on_nonfinite = "stop")
	dataWait    time.Duration
	dt          time.Duration // the step's time, to its update
	commTime    time.Duration
	// Read from the device (Marked): the loss, whether this rank's
	// gradients were finite, and the agreed verdict.
	local    float64
	gradsOK  bool
	halted   bool
	localSum float64
}

// chooseVerdicts sets every worker on the deferred path when all can take
// it (see above); else every one reads each step's verdict.
func (rs *runState) chooseVerdicts() {
	p, s := rs.plan, rs.plan.Spec
	ok := !rs.opts.SyncVerdicts && s.Precision != ops.FP16 && p.Cluster.ProcessCount() == 1
	if _, streamed := datasets.Streamed(rs.train); streamed {
		ok = false
	}
	for _, d := range rs.workers {
		if !ok {
			break
		}
		dv, isDeferrer := d.dev.(backend.Deferrer)
		if !isDeferrer || d.prog.SyncedGrads == nil || d.prog.SyncedGrads.DType != engine.Float32 {
			ok = false
			break
		}
		for _, st := range d.prog.Steps {
			if st.Phase == engine.PhaseUpdate && st.Kind == engine.CollectiveStep {
				ok = false
			}
		}
		if p.World > 1 && d.coll == nil {
			ok = false
		}
		ok = ok && dv.Defers(d.prog, d.groupColl())
	}
	for _, d := range rs.workers {
		d.deferred = ok
	}
}

// groupColl is the collectives MarkStep agrees the verdict over: the
// worker's, when the run has several ranks.
func (d *worker) groupColl() backend.Collectives {
	if d.world > 1 {
		return d.coll
	}
	return nil
}

// deferredStep ends optimizer step rec on the deferred path, its
// micro-batches launched: it records the previous step (its verdict read
// now, which on the device preceded this step), queues this step's
// verdict and update, and agrees on stopping.
func (rs *runState) deferredStep(d *worker, pr *progress, rec *stepRecord, t0 time.Time) error {
	if prev := d.unread; prev != nil {
		d.unread = nil
		if err := rs.recordDeferred(d, pr, prev, true); err != nil {
			return err
		}
	}
	dv := d.dev.(backend.Deferrer)
	if err := dv.MarkStep(d.prog.Loss, d.prog.SyncedGrads, rs.stopOnNonFinite(), d.groupColl(), rec.step); err != nil {
		return fmt.Errorf("epoch %d step %d: %w", rec.epoch+1, rec.step, err)
	}
	if err := d.runUpdate(); err != nil {
		return fmt.Errorf("epoch %d step %d: %w", rec.epoch+1, rec.step, err)
	}
	stops := rs.interruptAsked()
	if d.host != nil {
		var err error
		if stops, _, err = d.sum2(stops, 0, "stop", rec.step); err != nil {
			return err
		}
	}
	d.step++
	pr.Step, pr.Micro = d.step, rec.g1
	d.interrupted = stops > 0
	rec.dt, rec.commTime = time.Since(t0), d.commTime
	d.unread = rec
	return nil
}

// settleStep records the step whose verdict the device still holds, if
// any: where the epoch's steps end, before anything that reads what they
// left.
func (rs *runState) settleStep(d *worker, pr *progress) error {
	rec := d.unread
	if rec == nil {
		return nil
	}
	d.unread = nil
	return rs.recordDeferred(d, pr, rec, false)
}

// stepFailed returns err, the failure of a step's micro-batches; with one
// rank it first records the step before (its verdict came first), so
// metrics.jsonl holds the steps that the synchronous path records.
func (rs *runState) stepFailed(d *worker, pr *progress, err error) error {
	if rec := d.unread; rec != nil && d.host == nil {
		d.unread = nil
		if e := rs.recordDeferred(d, pr, rec, true); e != nil {
			return e
		}
	}
	return err
}

// recordDeferred reads deferred step rec's loss and verdict and records
// it (finishStep); under on_nonfinite = "stop", a halted step ends the
// run naming the op (nonFinite), after running the step again when later
// micro-batches have run since (rerun).
func (rs *runState) recordDeferred(d *worker, pr *progress, rec *stepRecord, rerun bool) error {
	l, gradsOK, halted, err := d.dev.(backend.Deferrer).Marked()
	if err != nil {
		return err
	}
	local := float64(l)
	rec.local, rec.gradsOK, rec.halted = local, gradsOK, halted
	rec.localSum = local * float64(max(rec.denom, 1)) / rec.scale
	if halted && rs.stopOnNonFinite() {
		if rerun {
			if err := rs.rerunStep(d, rec); err != nil {
				return err
			}
		}
		here := math.IsNaN(local) || math.IsInf(local, 0) || !gradsOK
		return rs.nonFinite(d, rec.epoch, rec.step, here, local, gradsOK)
	}
	sum := rec.localSum
	if d.host != nil {
		if sum, _, err = d.sum2(sum, 0, "loss", rec.step); err != nil {
			return err
		}
	}
	return rs.finishStep(d, pr, rec, rec.localSum, sum, halted)
}

// rerunStep runs deferred step rec's micro-batches again (forward,
// backward and the gradient sync; never the update, which its verdict
// holds back), as they first ran: its batches, its run constants, its
// dropout draws. Every rank runs it (the sync phase's collectives).
func (rs *runState) rerunStep(d *worker, rec *stepRecord) error {
	if err := d.dev.SetRNGState(rec.rng); err != nil {
		return err
	}
	d.rc = rec.rc
	for m := rec.g0; m < rec.g1; m++ {
		idx := rec.sc.Slice(d.rank, m)
		d.dev.SetBatch(len(idx))
		if err := d.dev.Gather(d.train, idx, d.prog.Input, d.prog.Target); err != nil {
			return err
		}
		if err := d.runStep(m == rec.g0, m == rec.g1-1); err != nil {
			return fmt.Errorf("epoch %d step %d (run again to find its first non-finite value): %w", rec.epoch+1, rec.step, err)
		}
	}
	return nil
}
