// Package runner is the run half of gorun's engine: it takes a compiled
// Plan (package engine) and trains it. It opens a backend Device per
// Program of this process (package engine/backend), joins them into a
// group for collectives, feeds each rank its shard, and drives the epochs:
//
//   - the step executor (exec.go, a worker per rank of this process)
//     walks a Program's steps on its backend Device, with gradient
//     collectives overlapping backward;
//   - the epoch loop (run.go) decides each optimizer step's micro-batches,
//     loss scale and stop requests; on a device that keeps each step's
//     verdict itself (backend.Deferrer: deferred.go) it launches the
//     update without waiting for the device and reads the step's loss and
//     verdict during the next step, else it reads them before the update;
//   - the observer (observe.go) turns rank 0's steps and epochs into
//     metrics.jsonl lines, log lines and callbacks (restart.go: the line
//     of a run that gorun launch restarted after a lost host);
//   - the checkpoint policy (checkpoint.go) saves, prunes and restores
//     checkpoints, best and final parameters;
//   - the prefetch (stream.go) decodes a dataset streamed from disk ahead
//     of each rank's steps, in its schedule's order, and measures the
//     time a step waited for it (data_wait_seconds);
//   - the evaluator (eval.go) runs the evaluation pass of a trained model
//     outside training: package model's predictions, gorun sample's text
//     (sample.go).
//
// The runner never touches buffer memory: it moves data through the
// Device (upload, download, gather). It imports no backend: it opens the
// Plan's cluster's backend from those the program registered (cmd/gorun
// registers cpu, and cuda in a -tags cuda build; tests register cpu), with
// the settings of its cluster-file table (Cluster.BackendSettings), and
// loads the datasets the Spec names through package datasets.
package runner

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/spec"
	"gorun/ops"
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
	// Started, when set, is called once in the process that holds rank 0
	// after every check that can refuse the run (data, --init, --resume,
	// the ranks' plans, the first epoch's shards) has passed and before
	// step 1: what it writes into the run folder is not written for a run
	// that was refused.
	Started func() error
	// Resume is a run folder to continue from its newest checkpoint
	// (--resume); Out defaults to it.
	Resume string
	// Restart, with Resume, says that gorun launch restarted the run
	// after a job lost hosts (--max-restarts): metrics.jsonl gets a
	// restart line and the summary the restart count (restart.go).
	Restart *Restart
	// DataProgress, when set, is called as a dataset that takes a while
	// to decode (data.images) is decoded, before step 1.
	DataProgress func(datasets.Progress)
	// Notices, when set, receives one-off remarks on how the run goes
	// that are not errors: a dataset streamed from disk, and the memory
	// its prefetch takes (stream.go). The CLI sends them to stderr.
	Notices io.Writer
	// Interrupt, when set and true, stops the run after the step under
	// way (every rank after the same step) and saves a checkpoint; the
	// CLI sets it on SIGINT and SIGTERM.
	Interrupt *atomic.Bool
	// Cross connects this process to the run's other processes (MPI) when
	// the Plan's cluster has several: one rank per process, this process's
	// rank being Plan.Process. Collectives reduce inside the process
	// first, then once across processes through it.
	Cross comm.Communicator
	// HostRank is this process's rank among the processes of its host
	// (mpirun's OMPI_COMM_WORLD_LOCAL_RANK): process k of a host opens
	// that host's devices k·D … k·D+D-1.
	HostRank int
	// SyncVerdicts keeps the synchronous path even on a device that can
	// keep each step's verdict itself (backend.Deferrer, deferred.go):
	// every step's loss and verdict are read before its update. The two
	// paths give the same bits; tests and the GPU check compare them.
	SyncVerdicts bool
	// Flags are the run-shaping command-line flags of this process, one
	// entry each (Label the flag, "--init"; Text its value as given, ""
	// when absent). The processes of a multi-process run compare them
	// with rank 0's at start-up, after the Plan, and a rank given another
	// value stops the run naming itself and the flag.
	Flags []engine.PlanStep
	// writeTensors, when set (tests), writes each file of a checkpoint in
	// place of safetensors.WriteFile: a test fails it as a full disk would.
	writeTensors checkpointWriter
	// prefetchClosed, when set (tests), is told what each prefetcher of
	// a streamed dataset did when it is closed (what: "training data" or
	// "evaluation data").
	prefetchClosed func(rank int, what string, st datasets.PrefetchStats)
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
	// HelpedSteps counts the gradient kernels a device of this process
	// ran for a slower one (helping, help.go).
	HelpedSteps int64
	// Params holds each local rank's final parameters, laid out whole as
	// engine.Plan.ParamOffset places them (the parameter arena's order:
	// Program.Params give each parameter's place, unless the parameters
	// are sharded).
	Params [][]float32
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
	plan      *engine.Plan
	opts      RunOptions
	train     datasets.Dataset
	eval      datasets.Dataset
	workers   []*worker
	backend   backend.Backend
	group     *comm.World // this process's ranks, with several devices
	metrics   *metrics
	start     time.Time
	schedules []*engine.Schedule
	schedOnce []sync.Once
	schedErr  []error
	res       Result
	log       io.Writer
	resume    *progress // nil for a fresh run
	best      float64   // best eval accuracy so far (minus the loss for regression), -Inf before any
	// help joins the devices that run each other's gradient steps (nil
	// when they do not).
	help *helpGroup
	// lead is set in the process that holds global rank 0: it alone
	// writes metrics, checkpoints and the summary.
	lead bool
}

// Run trains the plan: it loads the data, opens the devices, initialises
// the parameters (seed from the Spec), broadcasts them from rank 0, and
// runs every epoch, evaluating after each when there is an eval set.
func Run(p *engine.Plan, opts RunOptions) (*Result, error) {
	s := p.Spec
	rs := &runState{plan: p, opts: opts, train: opts.Train, eval: opts.Eval, log: opts.Log, start: time.Now(),
		lead: p.Devices[0].Rank == 0}
	if procs := p.Cluster.ProcessCount(); procs > 1 {
		if opts.Cross == nil {
			return nil, fmt.Errorf("the cluster has %d processes: start them with `gorun launch` or mpirun (transport %q)", procs, p.Cluster.Transport)
		}
		if opts.Cross.Size() != procs || opts.Cross.Rank() != p.Process {
			return nil, fmt.Errorf("the plan is process %d of %d, but the transport says %d of %d", p.Process, procs, opts.Cross.Rank(), opts.Cross.Size())
		}
	}
	rs.res.TestAccuracy, rs.res.TestLoss = math.NaN(), math.NaN()
	rs.best = math.Inf(-1)
	if rs.log == nil {
		rs.log = io.Discard
	}
	rs.log = &lockedWriter{w: rs.log} // ranks log from their own goroutines
	var err error
	if rs.train == nil {
		if rs.train, err = datasets.Load(&s.Data, rs.dataOptions()...); err != nil {
			return nil, err
		}
	}
	if rs.eval == nil && s.Eval != nil {
		// An eval text is encoded with the model's vocabulary: the
		// training data's.
		var model datasets.Vocab
		if tk, ok := rs.train.(datasets.Tokens); ok {
			model = tk.Vocab()
		}
		if rs.eval, err = datasets.Load(s.Eval, append(rs.dataOptions(), datasets.WithVocab(model))...); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct {
		ds   datasets.Dataset
		data *spec.Data
	}{{rs.train, &s.Data}, {rs.eval, s.Eval}} {
		if err := checkVocabulary(p, c.ds, c.data); err != nil {
			return nil, err
		}
		if err := checkTargets(c.ds, c.data, s.IgnoreIndex); err != nil {
			return nil, err
		}
	}
	if rs.eval != nil {
		if err := p.CheckEvalBatches(rs.eval.Name(), rs.eval.Len()); err != nil {
			return nil, err
		}
	}
	if rs.opts.Out == "" {
		rs.opts.Out = opts.Resume
	}
	if err := rs.openDevices(); err != nil {
		return nil, err
	}
	defer rs.closeDevices()
	rs.announceStreams()
	rs.help = setupHelping(rs.workers)
	if err := rs.initParams(); err != nil {
		return nil, err
	}
	var restartLine map[string]any // an elastic restart's metrics line
	if opts.Resume != "" {
		if rs.resume, err = rs.loadCheckpoint(opts.Resume); err != nil {
			return nil, err
		}
		rs.best = rs.resume.BestAccuracy
		rs.res.Steps = rs.resume.Step
		if rs.lead && opts.Restart != nil {
			reached, redo := lostWork(rs.opts.Out, rs.resume.Step)
			restartLine = rs.restartRecord(opts.Restart, rs.resume, reached, redo)
		}
		if rs.lead {
			if err := trimMetrics(rs.opts.Out, rs.resume); err != nil {
				return nil, err
			}
		}
	}
	metricsDir := rs.opts.Out
	if !rs.lead {
		metricsDir = "" // only rank 0's process writes the run folder
	}
	if rs.metrics, err = openMetrics(metricsDir, rs.resume != nil); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer rs.metrics.close()
	if rs.resume != nil {
		// Where the run goes on from, and the world and strategy that
		// wrote the checkpoint: another device count shows here.
		r := rs.resume
		if err := rs.metrics.record("resume", map[string]any{
			"step": r.Step, "epoch": r.Epoch + 1, "micro": r.Micro,
			"from_devices": r.FromDevices, "devices": p.World,
			"from_sync": r.FromSync, "sync": string(p.Sync.Kind()),
		}); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
	}
	if restartLine != nil {
		if err := rs.metrics.record("restart", restartLine); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
	}
	err = rs.connect()
	defer func() {
		for _, d := range rs.workers {
			d.stopAsync()
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := rs.checkFingerprints(); err != nil {
		return nil, err
	}
	rs.schedules = make([]*engine.Schedule, s.Epochs)
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
	if rs.lead && opts.Started != nil {
		if err := opts.Started(); err != nil {
			return nil, err
		}
	}
	if err := rs.runRanks(); err != nil {
		return nil, err
	}
	if err := rs.finalParams(); err != nil {
		return nil, err
	}
	return &rs.res, rs.summary()
}

// openDevices opens a backend device per Program, loads its Program and
// makes the datasets resident on it.
func (rs *runState) openDevices() error {
	p, s := rs.plan, rs.plan.Spec
	c := p.Cluster
	be, err := backend.Get(c.Backend)
	if err != nil {
		return clusterErr(p, err)
	}
	rs.backend = be
	bopts := backend.Options{Settings: c.BackendSettings()}
	for i, prog := range p.Devices {
		dev, err := be.Open(rs.opts.HostRank*len(p.Devices)+i, bopts)
		if err != nil {
			return clusterErr(p, fmt.Errorf("device %d: %w", prog.Rank, err))
		}
		d := &worker{rank: prog.Rank, plan: p, prog: prog, dev: dev, tail: tailStart(prog.Steps),
			shareState: p.Sync.ShareState()}
		rs.workers = append(rs.workers, d)
		if err := dev.Load(prog); err != nil {
			return fmt.Errorf("%s: %w", dev.Name(), err)
		}
		// Each device's dropout RNG: from the seed, a stream per rank.
		dev.SeedRNG(uint64(s.Seed), uint64(prog.Rank)+0x9e3779b97f4a7c15)
		if d.train, err = dev.LoadData(rs.train); err != nil {
			return fmt.Errorf("%s: training data: %w", dev.Name(), err)
		}
		if rs.eval != nil {
			if d.eval, err = dev.LoadData(rs.eval); err != nil {
				return fmt.Errorf("%s: evaluation data: %w", dev.Name(), err)
			}
			d.out = make([]float32, prog.Output.Elems())
			d.labels = make([]int32, prog.Target.Elems())
		}
	}
	return nil
}

func clusterErr(p *engine.Plan, err error) error {
	if p.Cluster.File != "" {
		return fmt.Errorf("%s: %w", p.Cluster.File, err)
	}
	return err
}

func (rs *runState) closeDevices() {
	for _, d := range rs.workers {
		d.dev.Close()
	}
}

// initParams sets rank 0's parameters as PyTorch initialises them (or
// from --init) and clears gradients and optimizer state everywhere.
func (rs *runState) initParams() error {
	p := rs.plan
	for _, d := range rs.workers {
		for _, b := range append([]*engine.Buffer{d.prog.GradArena, d.prog.GradShard, d.prog.Zeros}, d.prog.StateShards...) {
			if b != nil {
				if err := d.dev.Zero(b); err != nil {
					return err
				}
			}
		}
		for _, st := range d.prog.State {
			for _, b := range st {
				if err := d.dev.Zero(b); err != nil {
					return err
				}
			}
		}
	}
	if stats := p.InitialStats(); stats != nil {
		for _, d := range rs.workers {
			if err := d.dev.UploadF32(d.prog.StatArena, 0, stats); err != nil {
				return err
			}
		}
	}
	root := rs.workers[0]
	if paramsSharded(p) {
		root.whole = p.InitialParams(p.Spec.Seed) // the shards come with the first broadcast
	} else if err := root.dev.UploadF32(root.prog.ParamArena, 0, p.InitialParams(p.Spec.Seed)); err != nil {
		return err
	}
	if rs.opts.Init != "" {
		if err := rs.loadParams(rs.opts.Init); err != nil {
			return fmt.Errorf("--init: %w", err)
		}
	}
	return nil
}

// connect joins the devices into a group for collectives, starts the
// collective goroutines that overlap backward, and chooses how each step's
// verdict is read (chooseVerdicts).
func (rs *runState) connect() error {
	if err := rs.join(); err != nil {
		return err
	}
	rs.chooseVerdicts()
	return nil
}

// join joins the devices into a group and starts the collective
// goroutines.
func (rs *runState) join() error {
	p := rs.plan
	n := len(rs.workers)
	wc := rs.worldConnector()
	if p.World == 1 {
		return rs.connectOne(wc)
	}
	alg, err := comm.ParseAlgorithm(p.Cluster.Algorithm)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	group, err := comm.Open(n, comm.Options{Algorithm: alg, Timeout: p.Cluster.Timeout}, rs.opts.Cross, p.Process)
	if err != nil {
		return err
	}
	rs.group = group
	host := group.Ranks()
	devs := make([]backend.Device, n)
	for r, d := range rs.workers {
		devs[r] = d.dev
		if host[r].Rank() != d.rank || host[r].Size() != p.World {
			return fmt.Errorf("device %d: the communicator says rank %d of %d, the plan rank %d of %d", r, host[r].Rank(), host[r].Size(), d.rank, p.World)
		}
		d.host = host[r]
		d.world = p.World
	}
	var colls []backend.Collectives
	if wc != nil {
		colls, err = wc.ConnectWorld(devs, rs.world())
	} else {
		colls, err = rs.backend.Connect(devs, host)
	}
	if err != nil {
		return err
	}
	for r, d := range rs.workers {
		d.coll = colls[r]
		if p.Sync.Overlap() {
			d.startAsync()
		}
	}
	return nil
}

// abort releases every rank waiting in a collective after one failed.
func (rs *runState) abort(err error) {
	if rs.group != nil {
		rs.group.Abort(err)
	}
}

// runRanks runs every rank's loop, each in its own goroutine when there are
// several. The first error aborts the others' collectives so none hangs.
func (rs *runState) runRanks() error {
	n := len(rs.workers)
	if n == 1 {
		return rs.safeRankLoop(rs.workers[0])
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			d := rs.workers[r]
			if err := rs.safeRankLoop(d); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", d.rank, err)
				if errors.Is(err, errWithRank0) {
					return // rank 0 stops too, and says why
				}
				if rs.help != nil {
					rs.help.failed.Store(true)
				}
				rs.abort(errs[r])
			}
		}(r)
	}
	wg.Wait()
	// Report the failures that caused the others (ranks aborted because
	// another failed say nothing new).
	var causes []error
	for _, err := range errs {
		if err != nil && !errors.Is(err, comm.ErrAborted) && !errors.Is(err, errWithRank0) {
			causes = append(causes, err)
		}
	}
	if len(causes) == 0 {
		return errors.Join(errs...)
	}
	return errors.Join(causes...)
}

// errWithRank0 ends a rank that stops, with every other, where rank 0
// returns the error that says why (an epoch without a good step): when
// rank 0's error is among a process's, this one is not repeated.
var errWithRank0 = errors.New("stopped with rank 0")

// PanicError is a panic inside a rank's loop, turned into an error so that
// the other ranks are released and the caller decides what to print.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("internal error: %v", e.Value) }

// safeRankLoop is rankLoop with a panic turned into a *PanicError: a
// goroutine's panic cannot be recovered by the caller of Run.
func (rs *runState) safeRankLoop(d *worker) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return rs.rankLoop(d)
}

// schedule returns epoch e's batches, computing them once for all ranks.
func (rs *runState) schedule(e int) (*engine.Schedule, error) {
	rs.schedOnce[e].Do(func() {
		shards, policy, err := rs.plan.Shards(e, rs.train)
		if err != nil {
			rs.schedErr[e] = err
			return
		}
		sc := engine.NewSchedule(shards, rs.plan.LocalBatch, policy)
		if err := rs.plan.CheckBatches(e, sc); err != nil {
			rs.schedErr[e] = err
			return
		}
		rs.schedules[e] = sc
		// Ranks stay within a step of each other (every step ends with a
		// collective), so none still reads the schedule of two epochs ago.
		if e >= 2 {
			rs.schedules[e-2] = nil
		}
	})
	return rs.schedules[e], rs.schedErr[e]
}

// rankLoop is one rank's whole run: the initial broadcast, the epochs, and
// the final parameters.
func (rs *runState) rankLoop(d *worker) error {
	p, s := rs.plan, rs.plan.Spec
	// Every run starts from rank 0's parameters, except a resumed run
	// whose ranks kept parameters of their own.
	if rs.resume == nil || !p.Sync.OwnParams() {
		if err := d.broadcastParams(p); err != nil {
			return err
		}
	}
	pr := rs.startProgress()
	d.progress = pr
	defer rs.stopPrefetch(d, false)
	for epoch := pr.Epoch; epoch < s.Epochs && !rs.stopped(d); epoch++ {
		done, err := rs.runEpoch(d, pr, epoch)
		if err != nil {
			return err
		}
		if !done {
			break
		}
	}
	if pr.Micro > 0 && rs.stopped(d) {
		// Stopped inside an epoch: save where it stands so --resume goes on.
		if err := rs.checkpoint(d, pr); err != nil {
			return err
		}
	}
	if d == rs.workers[0] {
		rs.res.Interrupted = d.interrupted
	}
	if paramsSharded(p) {
		// The final parameters, for model.safetensors and the result.
		if err := d.gatherParams(p); err != nil {
			return err
		}
	}
	if d.rank == 0 {
		if err := rs.saveParams(ModelFile, map[string]string{"step": strconv.Itoa(d.step)}); err != nil {
			return err
		}
	}
	return nil
}

// startProgress is where a rank starts: the beginning, or the checkpoint
// it resumes.
func (rs *runState) startProgress() *progress {
	world := rs.plan.World
	pr := &progress{RankLoss: make([]float64, world), RankCount: make([]float64, world)}
	if rs.resume != nil {
		*pr = *rs.resume
		pr.RankLoss = append(make([]float64, 0, world), rs.resume.RankLoss...)
		pr.RankCount = append(make([]float64, 0, world), rs.resume.RankCount...)
		for len(pr.RankLoss) < world {
			pr.RankLoss, pr.RankCount = append(pr.RankLoss, 0), append(pr.RankCount, 0)
		}
	}
	return pr
}

// stopped reports whether the rank is to stop: interrupted, or max_steps
// reached.
func (rs *runState) stopped(d *worker) bool {
	s := rs.plan.Spec
	return d.interrupted || (s.MaxSteps > 0 && d.step >= s.MaxSteps)
}

// runEpoch runs one epoch's optimizer steps, then (unless interrupted) its
// evaluation and checkpoint. It reports whether the epoch ran to its end.
func (rs *runState) runEpoch(d *worker, pr *progress, epoch int) (bool, error) {
	s := rs.plan.Spec
	sc, err := rs.schedule(epoch)
	if err != nil {
		return false, err
	}
	if sc.Steps == 0 {
		return false, fmt.Errorf("epoch %d has no full step: a shard is smaller than its micro-batch (uneven = %q)", epoch+1, s.Uneven)
	}
	// The learning-rate schedule runs over epochs × this epoch's optimizer
	// steps; max_steps cuts the run short, not the schedule (as a PyTorch
	// scheduler built for the epochs).
	d.perEpoch = (sc.Steps + s.Accumulate - 1) / s.Accumulate
	d.totalSteps = s.Epochs * d.perEpoch
	if err := engine.CheckSchedule(s.Schedule, d.totalSteps); err != nil {
		return false, err
	}
	if epoch != pr.Epoch || pr.Micro == 0 {
		// A new epoch: its line counts its own steps. (A checkpoint made
		// inside this epoch carries them: resuming there goes on.)
		pr.Epoch, pr.Micro = epoch, 0
		pr.GlobalLoss, pr.GlobalCount, pr.TrainSeconds = 0, 0, 0
		pr.Skipped = 0
		clear(pr.RankLoss)
		clear(pr.RankCount)
	}
	// Random transforms: the epoch's samples depend on (seed, epoch,
	// sample) only; streamed data: decoded ahead in the schedule's order.
	if err := rs.loadEpochData(d, sc, epoch, pr.Micro); err != nil {
		return false, err
	}
	if d == rs.workers[0] {
		rs.epochBegins(d, sc, pr, epoch)
	}
	epochStart := time.Now()
	d.epochWait = 0
	for g0 := pr.Micro; g0 < sc.Steps && !rs.stopped(d); g0 += s.Accumulate {
		if err := rs.optimizerStep(d, pr, sc, epoch, g0, min(g0+s.Accumulate, sc.Steps)); err != nil {
			return false, err
		}
	}
	// The last step's loss and verdict, when the device kept them.
	if err := rs.settleStep(d, pr); err != nil {
		return false, err
	}
	rs.stopPrefetch(d, true)
	if !rs.stopped(d) {
		rs.prefetchNext(d, epoch+1)
	}
	if d.rank == 0 && rs.opts.OnEpochEnd != nil {
		rs.opts.OnEpochEnd(epoch + 1)
	}
	// The epoch's results, also for an epoch cut short by max_steps (but
	// not by an interrupt, which wants out quickly).
	if d.interrupted {
		return false, nil
	}
	if err := rs.endEpoch(d, pr, epoch, time.Since(epochStart)); err != nil {
		return false, err
	}
	if pr.Micro < sc.Steps {
		return false, nil // stopped by max_steps inside the epoch
	}
	pr.Epoch, pr.Micro = epoch+1, 0
	return true, rs.checkpoint(d, pr)
}

// optimizerStep runs micro-steps [g0, g1) of the epoch's schedule as one
// optimizer step: the micro-batches' forward and backward passes, the
// collectives and the update; then the ranks agree on the step's loss and
// on whether to stop. On a device that keeps the step's verdict itself
// (deferred.go), the update is launched without waiting for the device,
// and the step's loss is read and recorded during the next step (or when
// the epoch's steps end).
func (rs *runState) optimizerStep(d *worker, pr *progress, sc *engine.Schedule, epoch, g0, g1 int) error {
	p, s := rs.plan, rs.plan.Spec
	t0 := time.Now()
	rec := &d.recs[d.recNext]
	d.recNext ^= 1
	total := 0
	for m := g0; m < g1; m++ {
		total += sc.Count(m)
	}
	denom := total
	if p.Sync.LocalLoss() {
		denom = 0
		for m := g0; m < g1; m++ {
			denom += len(sc.Slice(d.rank, m))
		}
	}
	if d.amp.scale == 0 {
		d.amp = newLossScaler(s.Precision)
	}
	// fp16: the loss, so every gradient, times the dynamic loss scale.
	d.ampUsed = d.amp.scale
	scale := p.Sync.LossScale() * d.amp.scale
	positions := denom * p.Positions()
	noTargets := false // every target of the step is the ignore_index
	if ig, ok := ignore32(s.IgnoreIndex); ok && p.Classes > 0 {
		// ignore_index: the mean is over the targets kept in the whole
		// step (every rank's, unless ranks step alone), as PyTorch's.
		positions = 0
		all := 0
		for m := g0; m < g1; m++ {
			for r := 0; r < p.World; r++ {
				k := datasets.Kept(rs.train, sc.Slice(r, m), ig)
				all += k
				if r == d.rank || !p.Sync.LocalLoss() {
					positions += k
				}
			}
		}
		noTargets = all == 0
	}
	d.rc.LossScale = scale / float64(max(positions, 1))
	d.rc.Step = d.step + 1
	d.lr = p.LearningRate(d.rc.Step, d.totalSteps, d.perEpoch)
	d.rc.LRScale = d.lr / s.Optimizer.LR
	d.commTime = 0
	*rec = stepRecord{epoch: epoch, step: d.step + 1, g0: g0, g1: g1, sc: sc, total: total, denom: denom, scale: scale,
		noTargets: noTargets, lr: d.lr, amp: d.amp.on, ampUsed: d.ampUsed, rc: d.rc, rng: rec.rng}
	if d.deferred && rs.stopOnNonFinite() {
		// What the step's micro-batches draw from, should they have to
		// run again (rerunStep).
		var err error
		if rec.rng, err = d.dev.(backend.Deferrer).AppendRNGState(rec.rng[:0]); err != nil {
			return err
		}
	}
	waited := d.dataWaited()
	mine := 0 // samples this rank fed
	for m := g0; m < g1; m++ {
		idx := sc.Slice(d.rank, m)
		d.dev.SetBatch(len(idx))
		if err := d.dev.Gather(d.train, idx, d.prog.Input, d.prog.Target); err != nil {
			return rs.stepFailed(d, pr, err)
		}
		if err := dataErr(d.trainPF, "training data"); err != nil {
			return rs.stepFailed(d, pr, fmt.Errorf("epoch %d step %d: %w", epoch+1, d.step+1, err))
		}
		if err := d.runStep(m == g0, m == g1-1); err != nil {
			return rs.stepFailed(d, pr, fmt.Errorf("epoch %d step %d: %w", epoch+1, d.step+1, err))
		}
		mine += len(idx)
	}
	d.dataWait = d.dataWaited() - waited
	d.epochWait += d.dataWait
	rec.mine, rec.dataWait = mine, d.dataWait
	if d.deferred {
		return rs.deferredStep(d, pr, rec, t0)
	}
	// The loss sums the micro-batches on the device: read once a step,
	// with whether the gradients are finite (one wait for the device).
	// A non-finite loss or gradient must not reach the parameters.
	bad := 0.0
	local, gradsOK, err := d.readStep()
	if err != nil {
		return err
	}
	if math.IsNaN(local) || math.IsInf(local, 0) || !gradsOK {
		bad = 1
	}
	// This rank's summed loss; the step's loss is the mean over every
	// sample of the step, across ranks.
	localSum := local * float64(max(denom, 1)) / scale
	// The loss sum, any stop request and any non-finite value, agreed by
	// every rank in one collective.
	d.sumOut3 = [3]float64{localSum, rs.interruptAsked(), bad}
	if d.host != nil {
		if err := d.sums(d.sumOut3[:], "loss", d.step+1); err != nil {
			return err
		}
	}
	sum, stops, bads := d.sumOut3[0], d.sumOut3[1], d.sumOut3[2]
	if bads > 0 && !d.amp.on && !rs.skipNonFinite() {
		return rs.nonFinite(d, epoch, rec.step, bad > 0, local, gradsOK)
	}
	if bads == 0 {
		if d.amp.on {
			// The update phase unscales the gradients first
			// (ops.GradUnscale reads the loss scale as 1/S).
			d.rc.LossScale = 1 / d.amp.scale
		}
		if err := d.runUpdate(); err != nil {
			return fmt.Errorf("epoch %d step %d: %w", epoch+1, d.step+1, err)
		}
	}
	d.amp.update(bads > 0)
	d.step++
	pr.Step, pr.Micro = d.step, g1
	d.interrupted = stops > 0
	rec.dt, rec.commTime = time.Since(t0), d.commTime
	return rs.finishStep(d, pr, rec, localSum, sum, bads > 0)
}

// finishStep records optimizer step rec once its verdict (skipped) and
// its loss (localSum this rank's, sum every rank's) are known: the
// skipped count and its log line, the epoch's loss sums, and rank 0's
// step line (stepDone).
func (rs *runState) finishStep(d *worker, pr *progress, rec *stepRecord, localSum, sum float64, skipped bool) error {
	s := rs.plan.Spec
	if skipped {
		// Skip the update, as AMP's scaler does; the step still counts,
		// and the epoch's line says how many were skipped.
		pr.Skipped++
		if d.rank == 0 && rec.amp {
			// fp16: GradScaler skips the step and halves the scale.
			fmt.Fprintf(rs.log, "epoch %d step %d: inf or NaN under loss scale %g; update skipped, loss scale now %g (fp16 loss scaling)\n",
				rec.epoch+1, rec.step, rec.ampUsed, rec.ampUsed*lossScaleBackoff)
		} else if d.rank == 0 {
			fmt.Fprintf(rs.log, "epoch %d step %d: non-finite loss or gradient; update skipped (on_nonfinite = \"skip\")\n", rec.epoch+1, rec.step)
		}
	}
	loss := math.NaN() // a skipped step's loss is recorded as null
	if rec.noTargets && d.rank == 0 {
		// PyTorch's mean over no targets is NaN, with zero gradients: the
		// update ran on those, and the loss is recorded as null.
		fmt.Fprintf(rs.log, "epoch %d step %d: every target of the step is the ignore_index (%d): no loss (recorded as null); the update ran with zero gradients, as PyTorch's\n",
			rec.epoch+1, rec.step, *s.IgnoreIndex)
	}
	if !skipped && !rec.noTargets {
		pr.RankLoss[d.rank] += localSum
		pr.RankCount[d.rank] += float64(rec.mine)
		pr.GlobalLoss += sum
		pr.GlobalCount += float64(rec.total)
		loss = sum / float64(rec.total)
	}
	pr.TrainSeconds += rec.dt.Seconds()
	pr.Samples += int64(rec.total)
	if d == rs.workers[0] {
		return rs.stepDone(d, pr, rec, loss)
	}
	return nil
}

// interruptAsked is 1 when RunOptions.Interrupt asks the run to stop,
// else 0: a value the ranks sum.
func (rs *runState) interruptAsked() float64 {
	if rs.opts.Interrupt != nil && rs.opts.Interrupt.Load() {
		return 1
	}
	return 0
}

// skipNonFinite reports train(on_nonfinite = "skip"); stopOnNonFinite
// the default, "stop" (fp16's loss scaling skips such steps either way).
func (rs *runState) skipNonFinite() bool { return rs.plan.Spec.OnNonFinite == "skip" }

func (rs *runState) stopOnNonFinite() bool {
	return !rs.skipNonFinite() && rs.plan.Spec.Precision != ops.FP16
}

// checkTargets refuses class targets below 0 that are not the run's
// ignore_index (the class losses would look them up outside the scores),
// and a dataset whose every target is the ignore_index (a loss with
// nothing to average: PyTorch's mean is NaN).
func checkTargets(ds datasets.Dataset, d *spec.Data, ignore *int) error {
	if ds == nil {
		return nil
	}
	if err := datasets.CheckNegatives(dataPos(d)+ds.Name(), datasets.Negatives(ds), ignore); err != nil {
		return err
	}
	if ig, ok := ignore32(ignore); ok && datasets.Kept(ds, nil, ig) == 0 {
		return fmt.Errorf("%s%s: every target is the ignore_index, %d: the loss has nothing to average (PyTorch's mean would be NaN)",
			dataPos(d), ds.Name(), ig)
	}
	return nil
}

// ignore32 is the ignore_index as a target value, when there is one that
// a target can hold.
func ignore32(ignore *int) (int32, bool) {
	if ignore == nil || *ignore != int(int32(*ignore)) {
		return 0, false
	}
	return int32(*ignore), true
}

// dataOptions are how the run's datasets are read: within the cluster's
// memory_limit (room kept for the prefetch of a streamed set),
// reporting decoding progress to RunOptions.DataProgress.
func (rs *runState) dataOptions() []datasets.Option {
	return []datasets.Option{datasets.WithMemoryLimit(rs.plan.Cluster.MemoryLimit), datasets.WithProgress(rs.opts.DataProgress),
		datasets.WithPrefetch(len(rs.plan.Devices) * rs.prefetchWindow())}
}

// checkVocabulary refuses token data whose vocabulary is larger than the
// one the plan was compiled for: the compiler checked every embedding's
// table against that one (Plan.Classes), and an id past a table would
// look up a row of zeros.
func checkVocabulary(p *engine.Plan, ds datasets.Dataset, d *spec.Data) error {
	if ds == nil || !p.Tokens || ds.NumClasses() <= p.Classes {
		return nil
	}
	return fmt.Errorf("%s%s has a vocabulary of %d token ids, but the plan was compiled for %d (did the data change since?): its embeddings' tables and its output are sized for those",
		dataPos(d), ds.Name(), ds.NumClasses(), p.Classes)
}

// dataPos is "pos: " for the data.* call of d, or "" when there is none
// (data given through RunOptions).
func dataPos(d *spec.Data) string {
	if d == nil || d.Pos == "" {
		return ""
	}
	return string(d.Pos) + ": "
}

// evaluate runs the forward pass over this rank's part of the eval set and
// returns the accuracy and mean loss over the whole set (every sample
// counted once across ranks).
func (rs *runState) evaluate(d *worker) (acc, loss float64, err error) {
	p := rs.plan
	prog := d.prog
	lo, hi := p.EvalRange(rs.eval.Len(), prog.Rank)
	batch := p.MaxBatch
	classes := p.Classes
	positions := p.Positions() // class targets per sample (1; a window's length for tokens)
	idx := make([]int, batch)
	d.rc.LossScale = 1
	var correct, kept float64
	var ignore *int32
	if s := p.Spec.IgnoreIndex; s != nil {
		v := int32(*s)
		ignore = &v
	}
	data := d.eval
	order := make([]int, hi-lo)
	for i := range order {
		order[i] = lo + i
	}
	pf, err := rs.prefetch(rs.eval, order)
	if err != nil {
		return 0, 0, err
	}
	if pf != nil {
		// Streamed: decoded ahead, in order, for this evaluation.
		defer rs.closePrefetch(d, pf, "evaluation data")
		if data, err = d.dev.LoadData(pf.Dataset()); err != nil {
			return 0, 0, fmt.Errorf("%s: evaluation data: %w", d.dev.Name(), err)
		}
		if f, ok := data.(backend.Freer); ok {
			defer f.Free()
		}
	}
	for i := lo; i < hi; i += batch {
		n := min(batch, hi-i)
		for j := 0; j < n; j++ {
			idx[j] = i + j
		}
		d.dev.SetBatch(n)
		if err := d.dev.Gather(data, idx[:n], prog.Input, prog.Target); err != nil {
			return 0, 0, err
		}
		if err := dataErr(pf, "evaluation data"); err != nil {
			return 0, 0, err
		}
		if err := d.evalBatch(i == lo); err != nil {
			return 0, 0, err
		}
		if classes == 0 {
			continue // regression: the loss is the measure
		}
		rows := n * positions
		out, labels := d.out[:rows*classes], d.labels[:rows]
		if err := d.dev.DownloadF32(prog.Output, 0, out); err != nil {
			return 0, 0, err
		}
		if err := d.dev.DownloadI32(prog.Target, 0, labels); err != nil {
			return 0, 0, err
		}
		for j, label := range labels {
			if ignore != nil && label == *ignore {
				continue
			}
			kept++
			row := out[j*classes : (j+1)*classes]
			best := 0
			for c := 1; c < classes; c++ {
				if row[c] > row[best] {
					best = c
				}
			}
			if int32(best) == label {
				correct++
			}
		}
	}
	// Every rank runs the evaluation's collectives (stage 3's gathers of
	// the parameters) as often as the rank with the most batches: a rank
	// with fewer runs them alone for the batches it lacks.
	mine := (hi - lo + batch - 1) / batch
	most := mine
	for r := 0; r < p.World; r++ {
		l, h := p.EvalRange(rs.eval.Len(), r)
		most = max(most, (h-l+batch-1)/batch)
	}
	for ; mine < most; mine++ {
		for _, st := range prog.Eval {
			if st.Kind == engine.CollectiveStep {
				if err := d.exec(st); err != nil {
					return 0, 0, err
				}
			}
		}
	}
	var lossSum float64
	if hi > lo {
		if lossSum, err = d.readLoss(); err != nil {
			return 0, 0, err
		}
	}
	if correct, lossSum, err = d.sum2(correct, lossSum, "eval", d.step); err != nil {
		return 0, 0, err
	}
	n := float64(rs.eval.Len() * positions)
	if ignore != nil && classes > 0 {
		if kept, _, err = d.sum2(kept, 0, "eval kept", d.step); err != nil {
			return 0, 0, err
		}
		n = max(kept, 1) // the mean over the targets kept
	}
	if classes == 0 {
		return math.NaN(), lossSum / n, nil
	}
	return correct / n, lossSum / n, nil
}

// finalParams reads every local rank's final parameters into the Result:
// its parameter arena, or, where parameters are sharded, the parameters
// its rank gathered whole at the end.
func (rs *runState) finalParams() error {
	for _, d := range rs.workers {
		v := d.whole
		if !paramsSharded(rs.plan) {
			v = make([]float32, d.prog.ParamArena.Elems())
			if err := d.dev.DownloadF32(d.prog.ParamArena, 0, v); err != nil {
				return err
			}
		}
		rs.res.Params = append(rs.res.Params, v)
		if d.lend != nil {
			rs.res.HelpedSteps += d.lend.helped
		}
	}
	return nil
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
