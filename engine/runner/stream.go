package runner

import (
	"fmt"
	"runtime"
	"time"

	"gorun/datasets"
	"gorun/datasets/userfile"
	"gorun/engine"
	"gorun/engine/backend"
)

// Streamed data: a dataset too large to hold decoded (data.images over
// its memory budget, datasets.Streamed) is read from disk as the steps
// need it. Every rank knows which samples it feeds at each step of an
// epoch (the epoch's schedule), so each rank hands that order to a
// datasets.Prefetcher, whose goroutines decode the samples a few steps
// ahead of the Gather that takes them: when decoding is faster than the
// step, no step waits for its data. The time a step's Gathers did wait is
// the step's data_wait_seconds (rank 0's) in metrics.jsonl. A rank's
// prefetchers live as long as what they feed: the epoch's steps (the next
// epoch's is started as the last one's steps end, so that its first
// batches are decoded during the evaluation), or one evaluation; every
// exit from the rank's loop — the end, an error, an interrupt, a panic —
// closes them.

// prefetchSteps is how many of its micro-batches a device's prefetch of a
// streamed dataset decodes ahead of the one it is filling.
const prefetchSteps = 3

// prefetchWindow is the samples one device's prefetch holds decoded.
func (rs *runState) prefetchWindow() int { return prefetchSteps * rs.plan.MaxBatch }

// prefetchWorkers is the number of decoding goroutines of one device's
// prefetch: the process's cores shared among its devices.
func (rs *runState) prefetchWorkers() int {
	return max(1, runtime.GOMAXPROCS(0)/max(len(rs.plan.Devices), 1))
}

// prefetch starts decoding ds's samples in order (those a rank fills, in
// the order it fills them); nil when ds is not streamed.
func (rs *runState) prefetch(ds datasets.Dataset, order []int) (*datasets.Prefetcher, error) {
	return datasets.Prefetch(ds, order, datasets.PrefetchOptions{Window: rs.prefetchWindow(), Workers: rs.prefetchWorkers()})
}

// rankOrder is the samples rank r feeds in micro-steps [from, sc.Steps) of
// an epoch, in the order it feeds them.
func rankOrder(sc *engine.Schedule, r, from int) []int {
	n := 0
	for m := from; m < sc.Steps; m++ {
		n += len(sc.Slice(r, m))
	}
	order := make([]int, 0, n)
	for m := from; m < sc.Steps; m++ {
		order = append(order, sc.Slice(r, m)...)
	}
	return order
}

// epochData is the training set as epoch epoch sees it: with random
// transforms, bound to the run's seed and the epoch.
func (rs *runState) epochData(epoch int) datasets.Dataset {
	if a, ok := rs.train.(datasets.EpochDataset); ok {
		return a.Epoch(rs.plan.Spec.Seed, epoch)
	}
	return rs.train
}

// loadEpochData makes epoch epoch's training samples the device's, from
// micro-step from on: when they change from epoch to epoch (transforms),
// or when they are streamed, through a prefetcher (the one started ahead
// for this epoch, or a new one).
func (rs *runState) loadEpochData(d *worker, sc *engine.Schedule, epoch, from int) error {
	_, transformed := rs.train.(datasets.EpochDataset)
	_, streamed := datasets.Streamed(rs.train)
	if !transformed && !streamed {
		return nil // loaded once, in openDevices
	}
	data := rs.epochData(epoch)
	if streamed {
		pf := d.nextPF
		d.nextPF = nil
		if pf == nil || d.nextEpoch != epoch || from != 0 {
			rs.closePrefetch(d, pf, "training data")
			var err error
			if pf, err = rs.prefetch(data, rankOrder(sc, d.rank, from)); err != nil {
				return err
			}
		}
		d.trainPF = pf
		data = pf.Dataset()
	}
	if f, ok := d.train.(backend.Freer); ok {
		f.Free() // the last epoch's copy
	}
	var err error
	if d.train, err = d.dev.LoadData(data); err != nil {
		return fmt.Errorf("%s: training data, epoch %d: %w", d.dev.Name(), epoch+1, err)
	}
	return nil
}

// prefetchNext starts decoding epoch epoch's first samples while the
// epoch before it ends (its evaluation, its checkpoint), when the
// training set is streamed and the epoch's schedule can be had; a
// schedule that fails is left for the epoch to report.
func (rs *runState) prefetchNext(d *worker, epoch int) {
	if _, ok := datasets.Streamed(rs.train); !ok || epoch >= rs.plan.Spec.Epochs {
		return
	}
	sc, err := rs.schedule(epoch)
	if err != nil || sc.Steps == 0 {
		return
	}
	pf, err := rs.prefetch(rs.epochData(epoch), rankOrder(sc, d.rank, 0))
	if err != nil || pf == nil {
		return
	}
	d.nextPF, d.nextEpoch = pf, epoch
}

// stopPrefetch closes the rank's training prefetchers, this epoch's
// and, unless keepNext, the one started for the next epoch.
func (rs *runState) stopPrefetch(d *worker, keepNext bool) {
	rs.closePrefetch(d, d.trainPF, "training data")
	d.trainPF = nil
	if !keepNext {
		rs.closePrefetch(d, d.nextPF, "training data")
		d.nextPF = nil
	}
}

// closePrefetch closes pf (nil: nothing to close), telling
// RunOptions.prefetchClosed (tests) what it did.
func (rs *runState) closePrefetch(d *worker, pf *datasets.Prefetcher, what string) {
	if pf == nil {
		return
	}
	pf.Close()
	if rs.opts.prefetchClosed != nil {
		rs.opts.prefetchClosed(d.rank, what, pf.Stats())
	}
}

// dataWaited is the time the rank's Gathers have waited for streamed
// training samples in this epoch so far (0 for data held in memory).
func (d *worker) dataWaited() time.Duration {
	if d.trainPF == nil {
		return 0
	}
	return d.trainPF.Waited()
}

// dataErr is the error of a streamed sample the rank's last Gather could
// not decode.
func dataErr(pf *datasets.Prefetcher, what string) error {
	if pf == nil {
		return nil
	}
	if err := pf.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// announceStreams says once, on RunOptions.Notices, which datasets are
// streamed from disk and how much memory their prefetch takes.
func (rs *runState) announceStreams() {
	if rs.opts.Notices == nil || !rs.lead {
		return
	}
	devices := len(rs.plan.Devices)
	for _, ds := range []datasets.Dataset{rs.train, rs.eval} {
		info, ok := datasets.Streamed(ds)
		if !ok {
			continue
		}
		window := rs.prefetchWindow()
		workers := rs.prefetchWorkers()
		per := int64(window) * info.SampleBytes
		line := fmt.Sprintf("data.images: %s: streamed from disk: each device's samples decoded %d steps (%d images) ahead by %d goroutine%s; the prefetch holds %s a device",
			info, prefetchSteps, window, workers, plural(workers), userfile.Bytes(per))
		if devices > 1 {
			line += fmt.Sprintf(" (%s for the %d devices)", userfile.Bytes(per*int64(devices)), devices)
		}
		if info.Cached > 0 {
			line += fmt.Sprintf(", and the first %d images (%s) are kept once decoded", info.Cached, userfile.Bytes(int64(info.Cached)*info.SampleBytes))
		}
		fmt.Fprintln(rs.opts.Notices, line)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
