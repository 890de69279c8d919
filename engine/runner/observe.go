package runner

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"gorun/engine"
)

// The observer: what rank 0 makes of the run as it goes — metrics.jsonl
// lines, log lines, the callbacks of RunOptions, and the Result.

// epochBegins tells OnEpoch about the epoch about to run.
func (rs *runState) epochBegins(d *worker, sc *engine.Schedule, pr *progress, epoch int) {
	s := rs.plan.Spec
	rs.res.Epochs++
	if rs.opts.OnEpoch == nil || d.rank != 0 {
		return
	}
	info := EpochInfo{Epoch: epoch + 1, Epochs: s.Epochs, Steps: (sc.Steps + s.Accumulate - 1) / s.Accumulate}
	for m := 0; m < sc.Steps; m++ {
		info.Samples += int64(sc.Count(m))
	}
	for m := 0; m < pr.Micro; m++ {
		info.Done += int64(sc.Count(m))
	}
	rs.opts.OnEpoch(info)
}

// stepDone records an optimizer step (on the process's first device): the
// Result so far and, on rank 0, its step line, the verbose log line and
// OnStep.
func (rs *runState) stepDone(d *worker, pr *progress, rec *stepRecord, loss float64) error {
	total, dt := rec.total, rec.dt
	rs.res.Steps = rec.step
	rs.res.Samples += int64(total) // this process's, for its speed
	rs.res.FinalLoss = loss
	rs.res.TrainSeconds += dt.Seconds()
	if d.rank != 0 {
		return nil
	}
	sm := StepMetrics{Step: rec.step, Epoch: rec.epoch + 1, Loss: loss, LR: rec.lr, Samples: total,
		SamplesPerS: float64(total) / dt.Seconds(), CommSeconds: rec.commTime.Seconds(),
		DataWaitSeconds: rec.dataWait.Seconds(), Time: time.Since(rs.start).Seconds(), SkippedSteps: pr.Skipped}
	if rec.amp {
		sm.LossScale = rec.ampUsed
	}
	if err := rs.metrics.step(&sm); err != nil {
		return fmt.Errorf("writing %s: %w", MetricsFile, err)
	}
	if rs.opts.Verbose {
		fmt.Fprintf(rs.log, "epoch %d step %d loss %.4f\n", rec.epoch+1, rec.step, loss)
	}
	if rs.opts.OnStep != nil {
		rs.opts.OnStep(sm)
	}
	return nil
}

// endEpoch logs the epoch, evaluates and records the results.
func (rs *runState) endEpoch(d *worker, pr *progress, epoch int, took time.Duration) error {
	s := rs.plan.Spec
	r := d.rank
	steps := (pr.Micro + s.Accumulate - 1) / s.Accumulate // the epoch's optimizer steps
	if pr.GlobalCount == 0 && steps > 0 {
		// Every step of the epoch was skipped (on_nonfinite = "skip"): it
		// has no train loss, and the run has stopped learning.
		return rs.noGoodStep(d, pr, epoch, steps, took)
	}
	// Each rank's epoch loss, as the tutorial prints it.
	if rs.plan.World > 1 {
		rankLoss := math.NaN()
		if pr.RankCount[r] > 0 {
			rankLoss = pr.RankLoss[r] / pr.RankCount[r]
		}
		fmt.Fprintf(rs.log, "rank %d epoch %d loss %.4f\n", r, epoch+1, rankLoss)
	}
	acc, evalLoss := math.NaN(), math.NaN()
	if rs.eval != nil {
		var err error
		if acc, evalLoss, err = rs.evaluate(d); err != nil {
			return err
		}
	}
	if rs.eval != nil && paramsSharded(rs.plan) {
		// Rank 0 may write best.safetensors below: every rank's shard,
		// gathered.
		if err := d.gatherParams(rs.plan); err != nil {
			return err
		}
	}
	if r != 0 {
		return nil
	}
	trainLoss := pr.GlobalLoss / pr.GlobalCount // over the steps not skipped
	secs := took.Seconds()
	if err := rs.epochRecord(d, pr, epoch, trainLoss, secs); err != nil {
		return err
	}
	line := fmt.Sprintf("epoch %d/%d: loss %.4f, %.0f samples/s", epoch+1, s.Epochs, trainLoss, pr.GlobalCount/pr.TrainSeconds)
	if pr.Skipped > 0 {
		line += fmt.Sprintf(", %d of %d steps skipped (non-finite)", pr.Skipped, steps)
	}
	if rs.eval != nil {
		if err := rs.metrics.record("eval", map[string]any{
			"epoch": epoch + 1, "step": d.step, "accuracy": acc, "loss": evalLoss, "samples": rs.eval.Len(),
		}); err != nil {
			return err
		}
		score := acc
		if math.IsNaN(acc) { // regression: the lowest loss is the best
			line += fmt.Sprintf(", test loss %.4f", evalLoss)
			score = -evalLoss
		} else {
			line += fmt.Sprintf(", test accuracy %.4f, test loss %.4f", acc, evalLoss)
		}
		rs.res.TestAccuracy, rs.res.TestLoss = acc, evalLoss
		if score > rs.best {
			rs.best = score
			if err := rs.saveParams(BestFile, map[string]string{"step": strconv.Itoa(d.step),
				"epoch": strconv.Itoa(epoch + 1), "accuracy": fmtF(acc)}); err != nil {
				return err
			}
		}
	}
	pr.BestAccuracy = rs.best
	fmt.Fprintf(rs.log, "%s (%.1fs)\n", line, secs)
	return nil
}

// epochRecord writes the epoch's metrics.jsonl line (rank 0).
func (rs *runState) epochRecord(d *worker, pr *progress, epoch int, trainLoss, secs float64) error {
	return rs.metrics.record("epoch", map[string]any{
		"epoch": epoch + 1, "train_loss": trainLoss, "samples": int64(pr.GlobalCount),
		"seconds": secs, "train_seconds": pr.TrainSeconds, "step": d.step,
		"skipped_steps": pr.Skipped, "data_wait_seconds": d.epochWait.Seconds(),
	})
}

// noGoodStep ends the run after an epoch whose every step was skipped for
// non-finite values (every rank knows: the skips were agreed): rank 0
// records the epoch with no train loss (null, not an earlier epoch's) and
// its skipped steps, then, once every rank has stopped at a barrier, it
// returns the error that says so and the other ranks stop with it
// (errWithRank0). Nothing is evaluated or saved: the parameters are those
// of the last good step, which the last checkpoint holds.
func (rs *runState) noGoodStep(d *worker, pr *progress, epoch, steps int, took time.Duration) error {
	s := rs.plan.Spec
	if d.rank == 0 {
		if err := rs.epochRecord(d, pr, epoch, math.NaN(), took.Seconds()); err != nil {
			return err
		}
		fmt.Fprintf(rs.log, "epoch %d/%d: no train loss: all %d steps skipped (non-finite) (%.1fs)\n", epoch+1, s.Epochs, steps, took.Seconds())
	}
	if err := d.barrier("epoch without a good step", d.step); err != nil {
		return err
	}
	if d.rank != 0 {
		return fmt.Errorf("epoch %d had no step with finite values (rank 0's error says more): %w", epoch+1, errWithRank0)
	}
	msg := fmt.Sprintf("epoch %d: all %d of its steps had a non-finite loss or gradients and were skipped (on_nonfinite = \"skip\"): the epoch trained nothing, so the run stops", epoch+1, steps)
	if last := rs.lastCheckpoint(); last != "" {
		msg += "; the last good checkpoint is " + last
	}
	return fmt.Errorf("%s (lower the learning rate, or look for non-finite data: on_nonfinite = \"stop\" names the op that first produces one)", msg)
}

// summary finishes the Result and writes the summary line.
func (rs *runState) summary() error {
	res := &rs.res
	res.WallSeconds = time.Since(rs.start).Seconds()
	if res.TrainSeconds > 0 {
		res.TrainSamplesPerS = float64(res.Samples) / res.TrainSeconds
	}
	res.PeakRSSBytes = PeakRSS()
	if !rs.lead {
		return nil // rank 0's process writes the summary
	}
	fields := map[string]any{
		"train_samples_per_s": res.TrainSamplesPerS,
		"test_accuracy":       res.TestAccuracy,
		"test_loss":           res.TestLoss,
		"wall_seconds":        res.WallSeconds,
		"train_seconds":       res.TrainSeconds,
		"peak_rss_bytes":      res.PeakRSSBytes,
		"steps":               res.Steps,
		"epochs":              res.Epochs,
		"samples":             res.Samples,
		"devices":             rs.plan.World,
		"backend":             rs.backend.Target().Name,
		"final_loss":          res.FinalLoss,
	}
	if r := rs.opts.Restart; r != nil {
		fields["restarts"] = r.Number // gorun launch's elastic restarts
	}
	if err := rs.metrics.record("summary", fields); err != nil {
		return err
	}
	if err := rs.metrics.close(); err != nil {
		return fmt.Errorf("writing %s: %w", MetricsFile, err)
	}
	return nil
}
