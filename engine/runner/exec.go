package runner

import (
	"fmt"
	"math"
	"time"

	"gorun/comm"
	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
)

// worker is the step executor of one rank: it walks its Program's steps on
// a backend Device (dev), hands collectives to its group and keeps the run
// state the Plan must not hold (optimizer step, accumulate flags, RNG on
// the device). The runner has a worker per local device, each on its own
// goroutine. Everything it touches per step is allocated before the first.
type worker struct {
	rank int
	plan *engine.Plan
	prog *engine.Program
	dev  backend.Device
	// perEpoch and totalSteps are the optimizer steps of an epoch and of
	// the run, over which the learning-rate schedule runs.
	perEpoch, totalSteps int
	lr                   float64 // this optimizer step's scheduled learning rate
	// coll runs collectives over the device's buffers and host over host
	// values (losses, counts); both nil with one device.
	coll backend.Collectives
	host comm.Communicator
	rc   backend.RunCtx
	step int // optimizer steps taken
	// amp is fp16's dynamic loss scale (lossscale.go), set by the first
	// optimizer step; ampUsed the scale of the last step.
	amp     lossScaler
	ampUsed float64
	// shareState is set when rank 0's optimizer state is every rank's
	// (the sync strategy's ShareState), so the initial broadcast sends it
	// too.
	shareState bool
	commTime   time.Duration // time in collectives during the current step
	world      int           // ranks of the whole run
	// sendBits and recvBits carry float64 values through AllGather (sums).
	sendBits, recvBits []float32
	sumOut             [2]float64
	sumOut3            [3]float64
	loss               [1]float32 // the loss read back once per optimizer step

	// deferred is set when the device keeps each step's verdict
	// (deferred.go); unread is then the step whose loss and verdict are
	// still to be read. recs hold the records of the step under way and
	// of the one before (recNext: the next one's).
	deferred bool
	unread   *stepRecord
	recs     [2]stepRecord
	recNext  int

	// With overlap, gradient collectives go to a goroutine of their own
	// (async) so backward goes on while they run; pending counts those not
	// yet waited for, and the optimizer waits for them all.
	async   chan *engine.Step
	results chan asyncResult
	pending int
	tail    int // tailStart of prog.Steps
	// waitFor[i] is the latest collective before step i that may run on
	// the collective goroutine and touches memory step i touches (a
	// sharded plan reuses a reduced bucket's memory), or -1: step i waits
	// until it is done. issued[j] numbers collective j when it was handed
	// to the goroutine (sent counts them), done counts those finished.
	waitFor    []int
	issued     []int64
	sent, done int64

	// lend is the device's side of helping (help.go): nil when its
	// steps always run on it alone.
	lend *lender
	// whole holds the parameters laid out whole (engine.Plan.ParamElems)
	// in a plan whose parameters are sharded, where no device holds them
	// so: what rank 0 starts from (initial values, --init, a checkpoint)
	// until the first broadcast, then every rank's shards gathered
	// (gatherParams) for a checkpoint, best.safetensors or the result.
	whole []float32

	progress    *progress // where this rank's run stands
	interrupted bool      // the ranks agreed to stop (RunOptions.Interrupt)
	train, eval backend.Data
	out         []float32 // evaluation outputs read back
	labels      []int32   // evaluation targets read back

	// trainPF decodes this epoch's samples of a streamed training set
	// ahead of the steps; nextPF, started as epoch nextEpoch−1 ended, the
	// next epoch's (stream.go). dataWait is the time the step's Gathers
	// waited for them, epochWait the epoch's so far.
	trainPF, nextPF     *datasets.Prefetcher
	nextEpoch           int
	dataWait, epochWait time.Duration
}

type asyncResult struct {
	err error
	dt  time.Duration
}

// startAsync starts the device's collective goroutine.
func (d *worker) startAsync() {
	d.async = make(chan *engine.Step, len(d.prog.Steps))
	d.results = make(chan asyncResult, len(d.prog.Steps))
	d.waitFor = hazards(d.prog.Steps, d.tail)
	d.issued = make([]int64, len(d.prog.Steps))
	go func() {
		for st := range d.async {
			t0 := time.Now()
			err := d.collective(st)
			d.results <- asyncResult{err, time.Since(t0)}
		}
	}()
}

// stopAsync ends the collective goroutine.
func (d *worker) stopAsync() {
	if d.async != nil {
		close(d.async)
	}
}

// wait waits for every collective in flight and returns the first error.
func (d *worker) wait() error {
	var first error
	for d.pending > 0 {
		if err := d.collect(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// collect waits for the next collective in flight to finish.
func (d *worker) collect() error {
	r := <-d.results
	d.pending--
	d.done++
	d.commTime += r.dt
	return r.err
}

// waitUntil waits until collective step j, if it was handed to the
// collective goroutine, has finished (those before it too: it runs them
// in order). An error fails the micro-step.
func (d *worker) waitUntil(j int) error {
	for d.pending > 0 && d.done < d.issued[j] {
		if err := d.collect(); err != nil {
			return err
		}
	}
	return nil
}

// hazards is waitFor for steps whose collectives in the sync phase before
// tail, and those marked Beside, run on the collective goroutine: for each
// step, the latest such collective that touches memory the step touches,
// or -1.
func hazards(steps []*engine.Step, tail int) []int {
	out := make([]int, len(steps))
	touches := make([]touch, len(steps))
	for i, st := range steps {
		touches[i] = stepTouch(st)
	}
	async := func(j int) bool {
		return steps[j].Kind == engine.CollectiveStep && (steps[j].Phase == engine.PhaseSync && j < tail || steps[j].Beside)
	}
	for i := range steps {
		out[i] = -1
		if async(i) {
			continue // after the earlier ones: the goroutine runs them in order
		}
		for j := i - 1; j >= 0; j-- {
			if async(j) && conflict(&touches[i], &touches[j]) {
				out[i] = j
				break
			}
		}
	}
	return out
}

// runStep runs one micro-batch of the training Program: forward and
// backward, and with last set the gradient collectives too (the update is
// runUpdate's). first tells whether gradients and the loss are written
// (true) or accumulated.
func (d *worker) runStep(first, last bool) error {
	d.rc.First, d.rc.Last = first, last
	if r, ok := d.dev.(backend.Replayer); ok {
		return r.RunTrain(d.prog, &d.rc, d.coll)
	}
	l := d.lend
	if l != nil {
		l.begin()
	}
	for i, st := range d.prog.Steps {
		if stepHook != nil {
			stepHook(d, i)
		}
		if l != nil {
			if err := d.settle(i); err != nil {
				return d.fail(err)
			}
			if i == d.tail {
				d.help() // this micro-step's compute is done
			}
		}
		if st.Phase == engine.PhaseUpdate || (!last && st.Phase == engine.PhaseSync) {
			continue
		}
		if d.waitFor != nil && d.waitFor[i] >= 0 {
			// A collective in flight reads memory this step writes (or
			// writes memory it reads).
			if err := d.waitUntil(d.waitFor[i]); err != nil {
				return d.fail(err)
			}
		}
		if l != nil && l.plan[i].ok {
			l.put(i) // runs later, here or on a helper
			continue
		}
		if (st.Phase == engine.PhaseSync && i < d.tail || st.Beside) && d.async != nil {
			d.sent++
			d.issued[i] = d.sent
			d.async <- st
			d.pending++
			continue
		}
		if st.Kind == engine.CollectiveStep && d.pending > 0 {
			// A collective this goroutine runs itself: those in flight go
			// first (every rank calls collectives in one order).
			if err := d.wait(); err != nil {
				return d.fail(err)
			}
		}
		if err := d.exec(st); err != nil {
			return d.fail(err)
		}
		if l != nil {
			l.finished(i + 1)
		}
	}
	if l != nil {
		if err := d.settle(len(d.prog.Steps)); err != nil {
			return d.fail(err)
		}
		if d.tail >= len(d.prog.Steps) {
			d.help()
		}
	}
	return d.wait()
}

// fail ends a micro-step that failed with err: it waits for the steps
// helpers run on d and for the collectives in flight, and returns err.
func (d *worker) fail(err error) error {
	if d.lend != nil {
		d.settle(len(d.prog.Steps))
	}
	d.wait()
	return err
}

// tailStart is the index in steps of the first of the collectives that end
// the training steps (the sync phase after the last backward kernel):
// overlapping them with nothing gains nothing, so the device runs them
// itself rather than through its collective goroutine.
func tailStart(steps []*engine.Step) int {
	end := len(steps)
	for end > 0 && steps[end-1].Phase == engine.PhaseUpdate {
		end--
	}
	i := end
	for i > 0 && steps[i-1].Phase == engine.PhaseSync {
		i--
	}
	return i
}

// runUpdate runs the update phase: the optimizer and the collectives
// after it (a parameter server's broadcast, local SGD's averaging).
func (d *worker) runUpdate() error {
	if r, ok := d.dev.(backend.Replayer); ok {
		return r.RunUpdate(d.prog, &d.rc, d.coll)
	}
	for _, st := range d.prog.Steps {
		if st.Phase != engine.PhaseUpdate {
			continue
		}
		if err := d.exec(st); err != nil {
			return err
		}
	}
	return nil
}

// finite reports whether the live elements of float buffer b are finite.
func (d *worker) finite(b *engine.Buffer) (bool, error) {
	if b.DType != engine.Float32 {
		return true, nil
	}
	if fc, ok := d.dev.(backend.FiniteChecker); ok {
		return fc.Finite(b)
	}
	v, err := download(d, b)
	if err != nil {
		return false, err
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false, nil
		}
	}
	return true, nil
}

// exec runs one step.
func (d *worker) exec(st *engine.Step) error {
	if st.Kind == engine.CollectiveStep {
		t0 := time.Now()
		err := d.collective(st)
		d.commTime += time.Since(t0)
		return err
	}
	if err := d.dev.Exec(st, &d.rc); err != nil {
		return fmt.Errorf("%s: %w", st.Layer, err)
	}
	return nil
}

// evalBatch runs the forward pass without dropout on the live batch; first
// starts the evaluation's loss sum.
func (d *worker) evalBatch(first bool) error {
	d.rc.First = first
	for _, st := range d.prog.Eval {
		if err := d.exec(st); err != nil {
			return err
		}
	}
	return nil
}

// collective runs a collective step.
func (d *worker) collective(st *engine.Step) error {
	if st.Every > 0 && d.rc.Step%st.Every != 0 {
		return nil
	}
	if d.coll == nil {
		return nil
	}
	return st.Collective.Run(d.coll, d.rc.Step)
}

// broadcastParams sends rank 0's parameters (and optimizer state) to
// every rank: every run starts with it. Where parameters are sharded,
// rank 0's whole parameters go to every rank through the host
// communicator, and each keeps its shard.
func (d *worker) broadcastParams(p *engine.Plan) error {
	if paramsSharded(p) {
		if d.whole == nil {
			d.whole = make([]float32, p.ParamElems())
		}
		if err := d.host.Broadcast(d.whole, 0, comm.Tag{Name: "initial parameters"}); err != nil {
			return err
		}
		err := d.dev.UploadF32(d.prog.ParamShard, 0, p.ShardOf(d.whole, d.rank))
		d.whole = nil
		return err
	}
	if d.coll == nil {
		return nil
	}
	arena := d.prog.ParamArena
	if err := d.coll.Broadcast(arena, 0, arena.Elems(), 0, comm.Tag{Name: "initial parameters"}); err != nil {
		return err
	}
	if !d.shareState {
		return nil
	}
	for i, st := range d.prog.State {
		for _, b := range st {
			if err := d.coll.Broadcast(b, 0, b.Elems(), 0, comm.Tag{Name: fmt.Sprintf("optimizer state %d", i)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sum2 adds a and b over all ranks, in one collective of host values.
func (d *worker) sum2(a, b float64, what string, step int) (float64, float64, error) {
	if d.host == nil {
		return a, b, nil
	}
	d.sumOut = [2]float64{a, b}
	if err := d.sums(d.sumOut[:], what, step); err != nil {
		return 0, 0, err
	}
	return d.sumOut[0], d.sumOut[1], nil
}

// sums replaces vals by their sums over all ranks, in float64: every rank
// gathers every rank's values (their bits, two float32 words each: a
// gather only copies) and adds them in rank order, so every rank gets the
// same bits, and counts are exact up to 2⁵³ whatever the world size.
func (d *worker) sums(vals []float64, what string, step int) error {
	n := 2 * len(vals)
	if cap(d.sendBits) < n {
		d.sendBits = make([]float32, n)
		d.recvBits = make([]float32, n*d.world)
	}
	send, recv := d.sendBits[:n], d.recvBits[:n*d.world]
	for i, v := range vals {
		send[2*i], send[2*i+1] = splitF64(v)
	}
	if err := d.host.AllGather(send, recv, comm.Tag{Name: what, Step: step}); err != nil {
		return err
	}
	for i := range vals {
		var sum float64
		for r := 0; r < d.world; r++ {
			sum += joinF64(recv[r*n+2*i], recv[r*n+2*i+1])
		}
		vals[i] = sum
	}
	return nil
}

// splitF64 and joinF64 carry a float64's bits in two float32 words.
func splitF64(v float64) (float32, float32) {
	b := math.Float64bits(v)
	return math.Float32frombits(uint32(b >> 32)), math.Float32frombits(uint32(b))
}

func joinF64(hi, lo float32) float64 {
	return math.Float64frombits(uint64(math.Float32bits(hi))<<32 | uint64(math.Float32bits(lo)))
}

// barrier waits for every rank.
func (d *worker) barrier(what string, step int) error {
	if d.host == nil {
		return nil
	}
	return d.host.Barrier(comm.Tag{Name: what, Step: step})
}

// readLoss reads the loss buffer: the sum of the micro-batches' scaled
// losses since the last First.
func (d *worker) readLoss() (float64, error) {
	if err := d.dev.DownloadF32(d.prog.Loss, 0, d.loss[:]); err != nil {
		return 0, err
	}
	return float64(d.loss[0]), nil
}

// readStep reads the step's loss (readLoss) and whether the synced
// gradients are finite (finite): in one transfer from a device that is a
// backend.StepReader, else one after the other.
func (d *worker) readStep() (float64, bool, error) {
	grads := d.prog.SyncedGrads
	if sr, ok := d.dev.(backend.StepReader); ok && grads.DType == engine.Float32 {
		loss, finite, err := sr.ReadStep(d.prog.Loss, grads)
		d.loss[0] = loss
		return float64(loss), finite, err
	}
	local, err := d.readLoss()
	if err != nil {
		return 0, false, err
	}
	finite, err := d.finite(grads)
	return local, finite, err
}

// stepHook, when set (tests), runs before each step of a micro-step that
// runStep walks.
var stepHook func(d *worker, i int)

// paramsSharded reports whether no device holds p's parameters whole
// between steps (a sharded plan's stage 3).
func paramsSharded(p *engine.Plan) bool { return p.Sharding != nil && p.Sharding.Params }

// gatherParams brings d's parameters together, laid out whole, into
// d.whole: in a plan whose parameters are sharded every rank's shard (every
// rank calls it), else d's parameter arena.
func (d *worker) gatherParams(p *engine.Plan) error {
	if !paramsSharded(p) {
		v, err := download(d, d.prog.ParamArena)
		d.whole = v
		return err
	}
	shard, err := download(d, d.prog.ParamShard)
	if err != nil {
		return err
	}
	all, err := d.gather(shard, "parameters")
	if err != nil {
		return err
	}
	d.whole = p.Unshard(all)
	return nil
}
