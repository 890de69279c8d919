package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"gorun/datasets"
	"gorun/engine/spec"
)

// RunOptions are the run's settings that are not in the script.
type RunOptions struct {
	// Out is the run folder (metrics.jsonl, checkpoints); "" writes nothing.
	Out string
	// Log receives one line per epoch (and per rank when there are
	// several); nil discards them.
	Log io.Writer
	// Verbose adds a line per optimizer step to Log.
	Verbose bool
	// Train and Eval replace the datasets the Spec names (tests use this).
	// Eval is used only when the Spec has an eval set or Eval is set.
	Train, Eval datasets.Dataset
	// OnStep, when set, is called by rank 0 after every optimizer step.
	// It must not block for long.
	OnStep func(StepMetrics, int)
	// OnEpoch, when set, is called by rank 0 when an epoch begins, with
	// the optimizer steps it will take.
	OnEpoch func(epoch, steps int)
}

// Result sums a finished run.
type Result struct {
	Steps        int     // optimizer steps taken
	Epochs       int     // epochs begun
	Samples      int64   // training samples fed
	TrainSeconds float64 // time in training steps (evaluation excluded)
	WallSeconds  float64
	// TrainSamplesPerS is Samples / TrainSeconds.
	TrainSamplesPerS float64
	// TestAccuracy and TestLoss are from the last evaluation (NaN if none).
	TestAccuracy, TestLoss float64
	// FinalLoss is the last step's loss.
	FinalLoss    float64
	PeakRSSBytes int64
}

// runState is what the ranks of one run share.
type runState struct {
	plan      *Plan
	opts      RunOptions
	train     datasets.Dataset
	eval      datasets.Dataset
	devices   []*device
	metrics   *metrics
	start     time.Time
	schedules []*schedule
	schedOnce []sync.Once
	schedErr  []error
	res       Result
	log       io.Writer
}

// Run trains the plan: it loads the data, initialises the parameters (seed
// from the Spec), broadcasts them from rank 0, and runs every epoch,
// evaluating after each when there is an eval set.
func (p *Plan) Run(opts RunOptions) (*Result, error) {
	s := p.Spec
	rs := &runState{plan: p, opts: opts, train: opts.Train, eval: opts.Eval, log: opts.Log, start: time.Now()}
	if rs.log == nil {
		rs.log = io.Discard
	}
	var err error
	if rs.train == nil {
		if rs.train, err = LoadData(&s.Data); err != nil {
			return nil, err
		}
	}
	if rs.eval == nil && s.Eval != nil {
		if rs.eval, err = LoadData(s.Eval); err != nil {
			return nil, err
		}
	}
	if rs.metrics, err = openMetrics(opts.Out, false); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer rs.metrics.close()

	p.InitParams(s.Seed)
	p.zeroState()
	comms, err := p.newComms()
	if err != nil {
		return nil, err
	}
	for r, prog := range p.Devices {
		d := &device{prog: prog, shareState: s.Sync.Kind != spec.SyncParameterServer}
		if comms != nil {
			d.comm = comms[r]
		}
		rs.devices = append(rs.devices, d)
	}
	rs.schedules = make([]*schedule, s.Epochs)
	rs.schedOnce = make([]sync.Once, s.Epochs)
	rs.schedErr = make([]error, s.Epochs)

	if err := rs.runRanks(); err != nil {
		return nil, err
	}
	res := &rs.res
	res.WallSeconds = time.Since(rs.start).Seconds()
	if res.TrainSeconds > 0 {
		res.TrainSamplesPerS = float64(res.Samples) / res.TrainSeconds
	}
	res.PeakRSSBytes = PeakRSS()
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
		"devices":             len(p.Devices),
		"final_loss":          res.FinalLoss,
	}); err != nil {
		return nil, err
	}
	if err := rs.metrics.close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", MetricsFile, err)
	}
	return res, nil
}

// runRanks runs every rank's loop, each in its own goroutine when there are
// several. The first error aborts the others' collectives so none hangs.
func (rs *runState) runRanks() error {
	n := len(rs.devices)
	if n == 1 {
		return rs.rankLoop(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			if err := rs.rankLoop(r); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				rs.plan.abort(rs.devices, errs[r])
			}
		}(r)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// schedule returns epoch e's batches, computing them once for all ranks.
func (rs *runState) schedule(e int) (*schedule, error) {
	rs.schedOnce[e].Do(func() {
		shards, policy, err := rs.plan.Shards(e, rs.train)
		if err != nil {
			rs.schedErr[e] = err
			return
		}
		rs.schedules[e] = newSchedule(shards, rs.plan.LocalBatch, policy)
	})
	return rs.schedules[e], rs.schedErr[e]
}

// rankLoop is one rank's whole run.
func (rs *runState) rankLoop(r int) error {
	p, s := rs.plan, rs.plan.Spec
	d := rs.devices[r]
	prog := d.prog
	if err := d.broadcastParams(); err != nil {
		return err
	}
	sampleElems := 1
	for _, x := range p.Sample {
		sampleElems *= x
	}
	scale := 1.0
	if s.Sync.Kind == spec.SyncAllReduce && s.Sync.Op == "sum" {
		scale = float64(len(p.Devices)) // each rank's gradient is a local mean
	}
	var sm StepMetrics
	for epoch := 0; epoch < s.Epochs; epoch++ {
		sc, err := rs.schedule(epoch)
		if err != nil {
			return err
		}
		if sc.steps == 0 {
			return fmt.Errorf("epoch %d has no full step: a shard is smaller than its micro-batch (uneven = %q)", epoch+1, s.Uneven)
		}
		optSteps := (sc.steps + s.Accumulate - 1) / s.Accumulate
		if r == 0 {
			rs.res.Epochs++
			if rs.opts.OnEpoch != nil {
				rs.opts.OnEpoch(epoch+1, optSteps)
			}
		}
		var epochLoss, epochCount float64 // this rank's
		var globalLoss, globalCount float64
		epochStart := time.Now()
		var trainTime time.Duration
		for g0 := 0; g0 < sc.steps; g0 += s.Accumulate {
			if s.MaxSteps > 0 && d.step >= s.MaxSteps {
				break
			}
			t0 := time.Now()
			g1 := min(g0+s.Accumulate, sc.steps)
			total := 0
			for m := g0; m < g1; m++ {
				total += sc.count(m)
			}
			prog.ctx.LossScale = scale / float64(total)
			prog.ctx.Step = d.step + 1
			d.commTime = 0
			var local float64
			for m := g0; m < g1; m++ {
				idx := sc.slice(r, m)
				n := len(idx)
				prog.SetBatch(n)
				rs.train.Fill(idx, prog.Input.Data[:n*sampleElems], prog.Target.Idx[:n])
				if err := d.runStep(m == g0, m == g1-1); err != nil {
					return fmt.Errorf("epoch %d step %d: %w", epoch+1, d.step+1, err)
				}
				local += float64(prog.Loss.Data[0])
				epochCount += float64(n)
			}
			d.step++
			// The global loss: the sum of every rank's share.
			loss := local / scale
			if len(rs.devices) > 1 {
				if loss, err = d.sumScalar(local/scale, "loss", d.step); err != nil {
					return err
				}
			}
			epochLoss += local / scale * float64(total)
			globalLoss += loss * float64(total)
			globalCount += float64(total)
			dt := time.Since(t0)
			trainTime += dt
			if r == 0 {
				sm = StepMetrics{Step: d.step, Epoch: epoch + 1, Loss: loss, LR: s.Optimizer.LR,
					SamplesPerS: float64(total) / dt.Seconds(), CommSeconds: d.commTime.Seconds(),
					Time: time.Since(rs.start).Seconds()}
				if err := rs.metrics.step(&sm); err != nil {
					return fmt.Errorf("writing %s: %w", MetricsFile, err)
				}
				if rs.opts.Verbose {
					fmt.Fprintf(rs.log, "epoch %d step %d loss %.4f\n", epoch+1, d.step, loss)
				}
				if rs.opts.OnStep != nil {
					rs.opts.OnStep(sm, optSteps)
				}
				rs.res.Steps = d.step
				rs.res.Samples += int64(total)
				rs.res.FinalLoss = loss
			}
		}
		if r == 0 {
			rs.res.TrainSeconds += trainTime.Seconds()
		}
		// Each rank's epoch loss, as the tutorial prints it.
		rankLoss := math.NaN()
		if epochCount > 0 {
			rankLoss = epochLoss / epochCount
		}
		if len(rs.devices) > 1 {
			fmt.Fprintf(rs.log, "rank %d epoch %d loss %.4f\n", r, epoch+1, rankLoss)
		}
		acc, evalLoss := math.NaN(), math.NaN()
		if rs.eval != nil {
			if acc, evalLoss, err = rs.evaluate(d); err != nil {
				return err
			}
		}
		if r == 0 {
			trainLoss := globalLoss / globalCount
			secs := time.Since(epochStart).Seconds()
			if err := rs.metrics.record("epoch", map[string]any{
				"epoch": epoch + 1, "train_loss": trainLoss, "samples": int64(globalCount),
				"seconds": secs, "train_seconds": trainTime.Seconds(), "step": d.step,
			}); err != nil {
				return err
			}
			line := fmt.Sprintf("epoch %d/%d: loss %.4f, %.0f samples/s", epoch+1, s.Epochs, trainLoss, globalCount/trainTime.Seconds())
			if rs.eval != nil {
				if err := rs.metrics.record("eval", map[string]any{
					"epoch": epoch + 1, "step": d.step, "accuracy": acc, "loss": evalLoss, "samples": rs.eval.Len(),
				}); err != nil {
					return err
				}
				line += fmt.Sprintf(", test accuracy %.4f, test loss %.4f", acc, evalLoss)
				rs.res.TestAccuracy, rs.res.TestLoss = acc, evalLoss
			}
			fmt.Fprintf(rs.log, "%s (%.1fs)\n", line, secs)
			if err := rs.metrics.flush(); err != nil {
				return err
			}
		}
		if s.MaxSteps > 0 && d.step >= s.MaxSteps {
			break
		}
	}
	if r == 0 && rs.eval == nil {
		rs.res.TestAccuracy, rs.res.TestLoss = math.NaN(), math.NaN()
	}
	return nil
}

// evaluate runs the forward pass over this rank's part of the eval set and
// returns the accuracy and mean loss over the whole set (every sample
// counted once across ranks).
func (rs *runState) evaluate(d *device) (acc, loss float64, err error) {
	p := rs.plan
	prog := d.prog
	world := len(rs.devices)
	lo, hi := evalRange(rs.eval.Len(), world, prog.Rank)
	batch := p.LocalBatch[0]
	sampleElems := len(prog.Input.Data) / batch
	classes := p.Classes
	idx := make([]int, batch)
	prog.ctx.LossScale = 1
	var correct, lossSum float64
	for i := lo; i < hi; i += batch {
		n := min(batch, hi-i)
		for j := 0; j < n; j++ {
			idx[j] = i + j
		}
		prog.SetBatch(n)
		rs.eval.Fill(idx[:n], prog.Input.Data[:n*sampleElems], prog.Target.Idx[:n])
		d.evalStep()
		lossSum += float64(prog.Loss.Data[0])
		out := prog.Output.Data
		for j := 0; j < n; j++ {
			row := out[j*classes : (j+1)*classes]
			best := 0
			for c := 1; c < classes; c++ {
				if row[c] > row[best] {
					best = c
				}
			}
			if int32(best) == prog.Target.Idx[j] {
				correct++
			}
		}
	}
	if world > 1 {
		if correct, err = d.sumScalar(correct, "eval correct", d.step); err != nil {
			return 0, 0, err
		}
		if lossSum, err = d.sumScalar(lossSum, "eval loss", d.step); err != nil {
			return 0, 0, err
		}
	}
	n := float64(rs.eval.Len())
	return correct / n, lossSum / n, nil
}
