package model

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorun/engine/runner"
)

// errClosed is what requests get once the Model is closed.
var errClosed = errors.New("model: closed")

// request is one caller's work: the samples of a Predict (x or ids, n
// samples; out receives their outputs), or a task that needs an arena to
// itself (Generate).
type request struct {
	ctx  context.Context
	n    int
	x    []float32
	ids  []int32
	out  []float32
	task func(*runner.Evaluator) error

	// Guarded by batcher.mu.
	next     int  // first sample not yet taken by an arena
	finished int  // samples whose outputs are written (or failed)
	gone     bool // the caller stopped waiting (its context is done)
	err      error
	done     chan struct{} // closed when every sample is finished
}

// segment is samples [lo, hi) of a request, in a batch.
type segment struct {
	r      *request
	lo, hi int
}

// batcher queues requests and runs them on a pool of arenas, one
// goroutine each: an arena takes what is queued, up to maxBatch samples
// (parts of a request when it is larger), and while callers arrive
// together it waits up to delay for more to fill a batch (take).
type batcher struct {
	m         *Model
	maxBatch  int
	delay     time.Duration
	alone     bool // requests never share a batch (Evaluator.BatchDependent)
	in, out   int  // elements of one sample's input and output
	mu        sync.Mutex
	queue     []*request
	arrived   chan struct{} // closed (and replaced) when a request is queued
	closed    bool
	closing   chan struct{}
	wg        sync.WaitGroup
	arenaErrs []error // errors closing the arenas
	stats     Stats
}

// Stats count what a Model has run since Load.
type Stats struct {
	// Requests counts Predict calls queued; Batches the batches the arenas
	// ran and Samples the samples in them; Joined the batches that held
	// samples of more than one request.
	Requests, Batches, Samples, Joined int64
}

func newBatcher(m *Model, first *runner.Evaluator, o *options) *batcher {
	b := &batcher{m: m, maxBatch: o.maxBatch, delay: o.delay, alone: first.BatchDependent(),
		in: first.InputElems(), out: first.OutputElems(),
		arrived: make(chan struct{}), closing: make(chan struct{})}
	for i := range o.arenas {
		a := &arena{b: b, index: i}
		if i == 0 {
			a.e = first
		}
		b.wg.Add(1)
		go a.loop()
	}
	return b
}

// submit queues r, or fails when the batcher is closed.
func (b *batcher) submit(r *request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	r.done = make(chan struct{})
	b.queue = append(b.queue, r)
	if r.task == nil {
		b.stats.Requests++
	}
	b.wake()
	return nil
}

// wake wakes the arenas waiting in take. b.mu is held.
func (b *batcher) wake() {
	close(b.arrived)
	b.arrived = make(chan struct{})
}

// wait waits for r: its error once every sample is done, or ctx's when
// the caller's context ends first (r is then dropped from the queue;
// samples already on an arena finish there, unread).
func (b *batcher) wait(r *request) error {
	select {
	case <-r.done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return r.err
	case <-r.ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		r.gone = true
		b.dropGone()
		return r.ctx.Err()
	}
}

// dropGone removes requests whose callers stopped waiting from the
// queue. b.mu is held.
func (b *batcher) dropGone() {
	q := b.queue[:0]
	for _, r := range b.queue {
		if !r.gone {
			q = append(q, r)
		}
	}
	clear(b.queue[len(q):])
	b.queue = q
}

// take blocks until there is work and returns it: a task alone, or a
// batch of segments of up to maxBatch samples. ok is false once the
// batcher is closed.
//
// A batch that is not full waits up to delay for more requests when
// joined is set (the arena's previous batch joined several requests:
// callers are arriving together, and those of the batch just done may
// come back); a lone caller never waits.
func (b *batcher) take(joined bool) (segs []segment, task *request, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queue) == 0 {
		if b.closed {
			return nil, nil, false
		}
		ch := b.arrived
		b.mu.Unlock()
		select {
		case <-ch:
		case <-b.closing:
		}
		b.mu.Lock()
	}
	if r := b.queue[0]; r.task != nil {
		b.queue = b.queue[1:]
		return nil, r, true
	}
	n := b.fill(&segs, 0)
	if n == b.maxBatch || b.alone || b.delay <= 0 {
		return segs, nil, true
	}
	var timer *time.Timer
	for n < b.maxBatch && joined && !b.closed {
		if timer == nil {
			timer = time.NewTimer(b.delay)
			defer timer.Stop()
		}
		ch := b.arrived
		b.mu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-timer.C:
			expired = true
		case <-b.closing:
		}
		b.mu.Lock()
		n = b.fill(&segs, n)
		if expired {
			break
		}
	}
	return segs, nil, true
}

// fill moves queued samples into segs until the batch holds maxBatch
// samples (n are there already), stopping at a task; a request of a
// batch-dependent model is never joined with another. It returns the
// batch's samples. b.mu is held.
func (b *batcher) fill(segs *[]segment, n int) int {
	for len(b.queue) > 0 && n < b.maxBatch {
		r := b.queue[0]
		if r.task != nil || (b.alone && len(*segs) > 0) {
			break
		}
		k := min(r.n-r.next, b.maxBatch-n)
		*segs = append(*segs, segment{r, r.next, r.next + k})
		r.next += k
		n += k
		if r.next == r.n {
			b.queue = b.queue[1:]
		}
		if b.alone {
			break
		}
	}
	return n
}

// requests counts the requests of a batch.
func requests(segs []segment) int {
	n := 0
	for i, s := range segs {
		if i == 0 || segs[i-1].r != s.r {
			n++
		}
	}
	return n
}

// count adds a batch to the stats.
func (b *batcher) count(segs []segment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Batches++
	for _, s := range segs {
		b.stats.Samples += int64(s.hi - s.lo)
	}
	if requests(segs) > 1 {
		b.stats.Joined++
	}
}

// finish records that k samples of r are done, with err.
func (b *batcher) finish(r *request, k int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil && r.err == nil {
		r.err = err
	}
	r.finished += k
	if r.finished == r.n {
		close(r.done)
	}
}

// close stops the arenas once their batches are done and fails what is
// still queued.
func (b *batcher) close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.closing)
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, r := range queued {
		b.finish(r, r.n-r.next, errClosed)
	}
	b.wg.Wait()
	return errors.Join(b.arenaErrs...)
}

// arena is one device running batches, on its own goroutine.
type arena struct {
	b     *batcher
	index int
	e     *runner.Evaluator // made on the first batch
	// joined is set when the arena's last batch held several requests.
	joined bool
	// x and out stage a batch joined from several requests.
	x   []float32
	ids []int32
	out []float32
}

func (a *arena) loop() {
	defer a.b.wg.Done()
	defer func() {
		if a.e != nil {
			if err := a.e.Close(); err != nil {
				a.b.mu.Lock()
				a.b.arenaErrs = append(a.b.arenaErrs, err)
				a.b.mu.Unlock()
			}
		}
	}()
	for {
		segs, task, ok := a.b.take(a.joined)
		if !ok {
			return
		}
		if task != nil {
			err := a.evaluator()
			if err == nil {
				err = task.task(a.e)
			}
			a.b.finish(task, task.n, err)
			continue
		}
		err := a.run(segs)
		a.joined = requests(segs) > 1
		a.b.count(segs)
		for _, s := range segs {
			a.b.finish(s.r, s.hi-s.lo, err)
		}
	}
}

// evaluator makes the arena's device when it has none yet.
func (a *arena) evaluator() error {
	if a.e != nil {
		return nil
	}
	m := a.b.m
	e, err := runner.NewEvaluator(m.plan, a.index, m.weights, m.file)
	if err != nil {
		return fmt.Errorf("model: arena %d: %w", a.index, err)
	}
	a.e = e
	return nil
}

// run runs one batch and hands each segment its outputs.
func (a *arena) run(segs []segment) error {
	if err := a.evaluator(); err != nil {
		return err
	}
	in, out := a.b.in, a.b.out
	tokens := segs[0].r.ids != nil
	if len(segs) == 1 { // one request's samples: no staging
		s := segs[0]
		o := s.r.out[s.lo*out : s.hi*out]
		if tokens {
			return a.e.ForwardTokens(s.hi-s.lo, s.r.ids[s.lo*in:s.hi*in], o)
		}
		return a.e.Forward(s.hi-s.lo, s.r.x[s.lo*in:s.hi*in], o)
	}
	n := 0
	for _, s := range segs {
		n += s.hi - s.lo
	}
	if a.out == nil {
		a.out = make([]float32, a.b.maxBatch*out)
		if tokens {
			a.ids = make([]int32, a.b.maxBatch*in)
		} else {
			a.x = make([]float32, a.b.maxBatch*in)
		}
	}
	k := 0
	for _, s := range segs {
		if tokens {
			copy(a.ids[k*in:], s.r.ids[s.lo*in:s.hi*in])
		} else {
			copy(a.x[k*in:], s.r.x[s.lo*in:s.hi*in])
		}
		k += s.hi - s.lo
	}
	var err error
	if tokens {
		err = a.e.ForwardTokens(n, a.ids[:n*in], a.out[:n*out])
	} else {
		err = a.e.Forward(n, a.x[:n*in], a.out[:n*out])
	}
	if err != nil {
		return err
	}
	k = 0
	for _, s := range segs {
		copy(s.r.out[s.lo*out:s.hi*out], a.out[k*out:])
		k += s.hi - s.lo
	}
	return nil
}
