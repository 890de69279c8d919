package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gorun/comm"
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
	// OnEpoch, OnStep and OnEpochEnd, when set, are called by rank 0 when
	// an epoch begins, after every optimizer step, and when the epoch's
	// steps are done (before evaluation). They must not block for long.
	OnEpoch    func(EpochInfo)
	OnStep     func(StepMetrics)
	OnEpochEnd func(epoch int)
	// Init is a safetensors file of initial parameters (--init).
	Init string
	// Resume is a run folder to continue from its newest checkpoint
	// (--resume); Out defaults to it.
	Resume string
	// Interrupt, when set and true, stops the run after the step under
	// way (every rank after the same step) and saves a checkpoint; the
	// CLI sets it on SIGINT and SIGTERM.
	Interrupt *atomic.Bool
}

// Result sums a finished run.
type Result struct {
	Steps        int     // optimizer steps taken
	Epochs       int     // epochs begun
	Samples      int64   // training samples fed by this process (a resumed run: since resuming)
	TrainSeconds float64 // time in training steps (evaluation excluded)
	WallSeconds  float64
	// TrainSamplesPerS is Samples / TrainSeconds.
	TrainSamplesPerS float64
	// TestAccuracy and TestLoss are from the last evaluation (NaN if none).
	TestAccuracy, TestLoss float64
	// FinalLoss is the last step's loss.
	FinalLoss    float64
	PeakRSSBytes int64
	// Interrupted is set when RunOptions.Interrupt stopped the run.
	Interrupted bool
}

// EpochInfo describes an epoch as it begins.
type EpochInfo struct {
	Epoch, Epochs int   // 1-based epoch, of Epochs
	Steps         int   // optimizer steps in the epoch
	Samples       int64 // training samples in the epoch, across ranks
	Done          int64 // samples already done (a resumed epoch)
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
	resume    *progress // nil for a fresh run
	best      float64   // best eval accuracy so far
}

// Run trains the plan: it loads the data, initialises the parameters (seed
// from the Spec), broadcasts them from rank 0, and runs every epoch,
// evaluating after each when there is an eval set.
func (p *Plan) Run(opts RunOptions) (*Result, error) {
	s := p.Spec
	rs := &runState{plan: p, opts: opts, train: opts.Train, eval: opts.Eval, log: opts.Log, start: time.Now()}
	rs.res.TestAccuracy, rs.res.TestLoss = math.NaN(), math.NaN()
	if rs.log == nil {
		rs.log = io.Discard
	}
	rs.log = &lockedWriter{w: rs.log} // ranks log from their own goroutines
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
	if rs.opts.Out == "" {
		rs.opts.Out = opts.Resume
	}
	p.InitParams(s.Seed)
	p.zeroState()
	if opts.Init != "" {
		if err := p.LoadParams(opts.Init); err != nil {
			return nil, fmt.Errorf("--init: %w", err)
		}
	}
	for _, prog := range p.Devices {
		// Each device's dropout RNG: from the seed, a stream per rank.
		prog.pcg.Seed(uint64(s.Seed), uint64(prog.Rank)+0x9e3779b97f4a7c15)
		rs.devices = append(rs.devices, &device{prog: prog, shareState: s.Sync.Kind != spec.SyncParameterServer})
	}
	if opts.Resume != "" {
		if rs.resume, err = rs.loadCheckpoint(opts.Resume); err != nil {
			return nil, err
		}
		rs.best = rs.resume.BestAccuracy
		rs.res.Steps = rs.resume.Step
		if err := trimMetrics(rs.opts.Out, rs.resume); err != nil {
			return nil, err
		}
	}
	if rs.metrics, err = openMetrics(rs.opts.Out, rs.resume != nil); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer rs.metrics.close()

	comms, err := p.newComms()
	if err != nil {
		return nil, err
	}
	for r, d := range rs.devices {
		if comms != nil {
			d.comm = comms[r]
			if s.Sync.Kind == spec.SyncAllReduce && s.Sync.Overlap {
				d.startAsync()
				defer d.stopAsync()
			}
		}
	}
	rs.schedules = make([]*schedule, s.Epochs)
	rs.schedOnce = make([]sync.Once, s.Epochs)
	rs.schedErr = make([]error, s.Epochs)

	// The first epoch's shards are computed (and a strategy's mistakes
	// reported) before any rank starts.
	first := 0
	if rs.resume != nil {
		first = rs.resume.Epoch
	}
	if first < s.Epochs {
		if _, err := rs.schedule(first); err != nil {
			return nil, err
		}
	}
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
	// Report the failures that caused the others (ranks aborted because
	// another failed say nothing new).
	var causes []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, comm.ErrAborted) {
			causes = append(causes, err)
		}
	}
	if len(causes) == 0 {
		return errors.Join(errs...)
	}
	return errors.Join(causes...)
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
		// Ranks stay within a step of each other (every step ends with a
		// collective), so none still reads the schedule of two epochs ago.
		if e >= 2 {
			rs.schedules[e-2] = nil
		}
	})
	return rs.schedules[e], rs.schedErr[e]
}

// rankLoop is one rank's whole run.
func (rs *runState) rankLoop(r int) error {
	p, s := rs.plan, rs.plan.Spec
	d := rs.devices[r]
	prog := d.prog
	world := len(rs.devices)
	// Every run starts from rank 0's parameters, except a resumed run
	// whose ranks kept parameters of their own.
	if rs.resume == nil || !p.perRank() {
		if err := d.broadcastParams(); err != nil {
			return err
		}
	}
	sampleElems := 1
	for _, x := range p.Sample {
		sampleElems *= x
	}
	scale := 1.0
	if s.Sync.Kind == spec.SyncAllReduce && s.Sync.Op == "sum" {
		scale = float64(world) // each rank's gradient is a local mean
	}
	// pr is where this rank stands; rank 0's copy goes into checkpoints.
	pr := progress{RankLoss: make([]float64, world), RankCount: make([]float64, world)}
	if rs.resume != nil {
		pr = *rs.resume
		pr.RankLoss = append(make([]float64, 0, world), rs.resume.RankLoss...)
		pr.RankCount = append(make([]float64, 0, world), rs.resume.RankCount...)
		for len(pr.RankLoss) < world {
			pr.RankLoss, pr.RankCount = append(pr.RankLoss, 0), append(pr.RankCount, 0)
		}
	}
	d.progress = &pr
	stopped := func() bool { return d.interrupted || (s.MaxSteps > 0 && d.step >= s.MaxSteps) }
	var sm StepMetrics
	for epoch := pr.Epoch; epoch < s.Epochs && !stopped(); epoch++ {
		sc, err := rs.schedule(epoch)
		if err != nil {
			return err
		}
		if sc.steps == 0 {
			return fmt.Errorf("epoch %d has no full step: a shard is smaller than its micro-batch (uneven = %q)", epoch+1, s.Uneven)
		}
		if epoch != pr.Epoch {
			pr.Epoch, pr.Micro = epoch, 0
			pr.GlobalLoss, pr.GlobalCount, pr.TrainSeconds = 0, 0, 0
			clear(pr.RankLoss)
			clear(pr.RankCount)
		}
		if r == 0 {
			rs.res.Epochs++
			if rs.opts.OnEpoch != nil {
				info := EpochInfo{Epoch: epoch + 1, Epochs: s.Epochs, Steps: (sc.steps + s.Accumulate - 1) / s.Accumulate}
				for m := 0; m < sc.steps; m++ {
					info.Samples += int64(sc.count(m))
				}
				for m := 0; m < pr.Micro; m++ {
					info.Done += int64(sc.count(m))
				}
				rs.opts.OnEpoch(info)
			}
		}
		epochStart := time.Now()
		for g0 := pr.Micro; g0 < sc.steps && !stopped(); g0 += s.Accumulate {
			t0 := time.Now()
			g1 := min(g0+s.Accumulate, sc.steps)
			total := 0
			for m := g0; m < g1; m++ {
				total += sc.count(m)
			}
			denom := total
			if p.localLoss() {
				denom = 0
				for m := g0; m < g1; m++ {
					denom += len(sc.slice(r, m))
				}
			}
			prog.ctx.LossScale = scale / float64(max(denom, 1))
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
				pr.RankCount[r] += float64(n)
			}
			d.step++
			pr.Step, pr.Micro = d.step, g1
			// This rank's summed loss; the step's loss is the mean over
			// every sample of the step, across ranks.
			localSum := local * float64(max(denom, 1)) / scale
			pr.RankLoss[r] += localSum
			// The loss sum and any stop request, agreed by every rank.
			stop := 0.0
			if rs.opts.Interrupt != nil && rs.opts.Interrupt.Load() {
				stop = 1
			}
			sum, stops, err := d.sum2(localSum, stop, "loss", d.step)
			if err != nil {
				return err
			}
			d.interrupted = stops > 0
			loss := sum / float64(total)
			pr.GlobalLoss += sum
			pr.GlobalCount += float64(total)
			dt := time.Since(t0)
			pr.TrainSeconds += dt.Seconds()
			pr.Samples += int64(total)
			if r == 0 {
				sm = StepMetrics{Step: d.step, Epoch: epoch + 1, Loss: loss, LR: s.Optimizer.LR, Samples: total,
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
				rs.res.Steps = d.step
				rs.res.Samples += int64(total) // this process's, for its speed
				rs.res.FinalLoss = loss
				rs.res.TrainSeconds += dt.Seconds()
			}
		}
		if r == 0 && rs.opts.OnEpochEnd != nil {
			rs.opts.OnEpochEnd(epoch + 1)
		}
		// The epoch's results, also for an epoch cut short by max_steps
		// (but not by an interrupt, which wants out quickly).
		if d.interrupted {
			break
		}
		if err := rs.endEpoch(d, &pr, epoch, time.Since(epochStart)); err != nil {
			return err
		}
		if pr.Micro < sc.steps {
			break // stopped by max_steps inside the epoch
		}
		pr.Epoch, pr.Micro = epoch+1, 0
		if err := rs.checkpoint(d, &pr); err != nil {
			return err
		}
	}
	if pr.Micro > 0 && stopped() {
		// Stopped inside an epoch: save where it stands so --resume goes on.
		if err := rs.checkpoint(d, &pr); err != nil {
			return err
		}
	}
	if r == 0 {
		rs.res.Interrupted = d.interrupted
		if err := rs.saveParams(ModelFile, map[string]string{"step": strconv.Itoa(d.step)}); err != nil {
			return err
		}
	}
	return nil
}

// endEpoch logs the epoch, evaluates and records the results.
func (rs *runState) endEpoch(d *device, pr *progress, epoch int, took time.Duration) error {
	s := rs.plan.Spec
	r := d.prog.Rank
	// Each rank's epoch loss, as the tutorial prints it.
	if len(rs.devices) > 1 {
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
		line += fmt.Sprintf(", test accuracy %.4f, test loss %.4f", acc, evalLoss)
		rs.res.TestAccuracy, rs.res.TestLoss = acc, evalLoss
		if acc > rs.best {
			rs.best = acc
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

// checkpoint saves a checkpoint with every rank stopped at a barrier.
func (rs *runState) checkpoint(d *device, pr *progress) error {
	if rs.opts.Out == "" {
		return nil
	}
	if err := d.barrier("checkpoint", d.step); err != nil {
		return err
	}
	if d.prog.Rank == 0 {
		// Every rank's counts: rank 0 holds only its own; the others' are
		// read from their progress after the barrier.
		all := *pr
		all.RankLoss = append([]float64(nil), pr.RankLoss...)
		all.RankCount = append([]float64(nil), pr.RankCount...)
		for r, od := range rs.devices {
			if r > 0 && od.progress != nil {
				all.RankLoss[r], all.RankCount[r] = od.progress.RankLoss[r], od.progress.RankCount[r]
			}
		}
		if err := rs.saveCheckpoint(&all); err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", pr.Step, err)
		}
	}
	return d.barrier("checkpoint saved", d.step)
}

// evaluate runs the forward pass over this rank's part of the eval set and
// returns the accuracy and mean loss over the whole set (every sample
// counted once across ranks).
func (rs *runState) evaluate(d *device) (acc, loss float64, err error) {
	p := rs.plan
	prog := d.prog
	world := len(rs.devices)
	lo, hi := evalRange(rs.eval.Len(), p.Cluster.Weights, world, prog.Rank)
	batch := p.MaxBatch
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
	if correct, lossSum, err = d.sum2(correct, lossSum, "eval", d.step); err != nil {
		return 0, 0, err
	}
	n := float64(rs.eval.Len())
	return correct / n, lossSum / n, nil
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
