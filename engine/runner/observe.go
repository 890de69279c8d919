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
func (rs *runState) stepDone(d *worker, epoch int, loss float64, total int, dt time.Duration) error {
	rs.res.Steps = d.step
	rs.res.Samples += int64(total) // this process's, for its speed
	rs.res.FinalLoss = loss
	rs.res.TrainSeconds += dt.Seconds()
	if d.rank != 0 {
		return nil
	}
	sm := StepMetrics{Step: d.step, Epoch: epoch + 1, Loss: loss, LR: d.lr, Samples: total,
		SamplesPerS: float64(total) / dt.Seconds(), CommSeconds: d.commTime.Seconds(),
		Time: time.Since(rs.start).Seconds()}
	if err := rs.metrics.step(&sm); err != nil {
		return fmt.Errorf("writing %s: %w", MetricsFile, err)
	}
	if rs.opts.Verbose {
		fmt.Fprintf(rs.log, "epoch %d step %d loss %.4f\n", epoch+1, d.step, loss)
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
	if r != 0 {
		return nil
	}
	trainLoss := pr.GlobalLoss / pr.GlobalCount
	secs := took.Seconds()
	if err := rs.metrics.record("epoch", map[string]any{
		"epoch": epoch + 1, "train_loss": trainLoss, "samples": int64(pr.GlobalCount),
		"seconds": secs, "train_seconds": pr.TrainSeconds, "step": d.step,
	}); err != nil {
		return err
	}
	line := fmt.Sprintf("epoch %d/%d: loss %.4f, %.0f samples/s", epoch+1, s.Epochs, trainLoss, pr.GlobalCount/pr.TrainSeconds)
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
	return rs.metrics.flush()
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
	if err := rs.metrics.record("summary", map[string]any{
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
	}); err != nil {
		return err
	}
	if err := rs.metrics.close(); err != nil {
		return fmt.Errorf("writing %s: %w", MetricsFile, err)
	}
	return nil
}
