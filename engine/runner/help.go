package runner

import (
	"runtime"
	"sync/atomic"
	"time"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// Helping. In a synchronous data-parallel step every rank waits at the
// gradient all-reduce for the slowest one; on a host whose cores' speed
// jitters from step to step, that wait is most of what two in-process
// devices lose against two independent runs. Devices whose memory is one
// address space (CPU devices of one process, backend.Helper) need not
// wait idle: a rank that has finished its own backward pass runs a slower
// rank's remaining parameter-gradient kernels (weight and bias gradients,
// leaves of the backward pass that only collectives read) while that rank
// goes on with the rest of its backward pass.
//
// The result is the same bits as without helping: the same kernel runs on
// the same inputs into the same output, only on another goroutine with
// another scratch space. Which steps may be lent, how far the owner must
// have come before (ready) and where it must wait for the helper (until)
// follow from the buffers' places in the arena (lendPlan), so a step runs
// beside exactly the owner's steps that touch none of its memory.
//
// No value crosses between ranks this way: a helper computes the owner's
// kernel from the owner's buffers into the owner's buffers, so what one
// rank learns of another still travels through collectives only, and a
// run across processes (which cannot help) computes the same values.
//
// The cpu backend's cluster-file key help = false ([cpu] help, or --set
// cpu.help=false) makes its devices refuse to help (CanHelp), which turns
// helping off (to measure what it gains).

// lendable says when step i of a Program may run on another device.
type lendable struct {
	ok bool
	// ready: the owner must have finished steps [0, ready) (the last step
	// before i that touches i's memory).
	ready int
	// until: the owner must not start step until before the helper has
	// finished i (the first step after i that touches i's memory).
	until int
}

// span is arena elements [lo, hi).
type span struct{ lo, hi int }

// touch is the arena memory a step reads and writes; all means any (a
// step whose memory is not known).
type touch struct {
	reads, writes []span
	all           bool
}

func bufSpan(b *engine.Buffer) span { return span{b.Offset, b.Offset + b.Elems()} }

func stepTouch(st *engine.Step) touch {
	var t touch
	switch st.Kind {
	case engine.KernelStep, engine.CopyStep:
		inPlace := st.Kind == engine.KernelStep && ops.Lookup(st.Op).InPlace
		for _, b := range st.In {
			if b == nil {
				continue
			}
			t.reads = append(t.reads, bufSpan(b))
			if inPlace {
				t.writes = append(t.writes, bufSpan(b))
			}
		}
		for _, b := range st.Out {
			t.writes = append(t.writes, bufSpan(b))
		}
	case engine.CollectiveStep:
		c := st.Collective
		if c == nil || c.Buffer == nil {
			t.all = true
			break
		}
		s := span{c.Buffer.Offset + c.Offset, c.Buffer.Offset + c.Offset + c.Elems}
		t.reads, t.writes = []span{s}, []span{s}
		if c.Part != nil { // a reduce-scatter's destination, an all-gather's source
			p := span{c.Part.Offset + c.PartOffset, c.Part.Offset + c.PartOffset + c.Block}
			t.reads, t.writes = append(t.reads, p), append(t.writes, p)
		}
	default:
		t.all = true
	}
	return t
}

func overlaps(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.lo < y.hi && y.lo < x.hi {
				return true
			}
		}
	}
	return false
}

// conflict reports whether two steps may not run at once: one writes
// memory the other reads or writes.
func conflict(a, b *touch) bool {
	return a.all || b.all || overlaps(a.writes, b.reads) || overlaps(a.writes, b.writes) || overlaps(a.reads, b.writes)
}

// lendPlan decides which of prog's training steps another device may run:
// backward kernel steps that write parameter gradients only (views of the
// gradient arena) and neither draw random numbers nor update their
// inputs, and whose earlier conflicting steps are all kernel or copy
// steps the owner runs itself (so "finished" is the owner's own
// progress, and no collective in flight on another goroutine touches
// them).
func lendPlan(prog *engine.Program) []lendable {
	steps := prog.Steps
	out := make([]lendable, len(steps))
	var touches []touch // built on first need
	for i, st := range steps {
		if !gradientLeaf(prog, st) {
			continue
		}
		if touches == nil {
			touches = make([]touch, len(steps))
			for j, s := range steps {
				touches[j] = stepTouch(s)
			}
		}
		l := lendable{ok: true, until: len(steps)}
		for j := 0; j < i; j++ {
			if !conflict(&touches[i], &touches[j]) {
				continue
			}
			if k := steps[j].Kind; (k != engine.KernelStep && k != engine.CopyStep) || out[j].ok {
				l.ok = false
				break
			}
			l.ready = j + 1
		}
		for j := i + 1; j < len(steps) && l.ok; j++ {
			if conflict(&touches[i], &touches[j]) {
				l.until = j
				break
			}
		}
		if l.ok {
			out[i] = l
		}
	}
	return out
}

// gradientLeaf reports whether st is a backward kernel step whose outputs
// are all parameter gradients and whose result does not depend on the
// device that runs it.
func gradientLeaf(prog *engine.Program, st *engine.Step) bool {
	if st.Kind != engine.KernelStep || st.Phase != engine.PhaseBackward || len(st.Out) == 0 || prog.GradArena == nil {
		return false
	}
	if d := ops.Lookup(st.Op); d.Random || d.InPlace || d.Alias {
		return false
	}
	for _, b := range st.Out {
		if b.View != prog.GradArena {
			return false
		}
	}
	return true
}

// progressBits is how many low bits of lender.progress count finished
// steps; the rest is the micro-step.
const progressBits = 20

// helpSpin is how long a helper waits for a peer's next lendable step to
// become ready once the peer has stopped making progress: after it, the
// helper goes on to its collectives (whose wait spins and then parks).
const helpSpin = 200 * time.Microsecond

// helpGroup is what the helping devices of a run share.
type helpGroup struct {
	devices []*worker
	failed  atomic.Bool // a rank failed: nobody waits for a helper any more
}

// lender is one device's side of helping: its lendable steps and the
// atomics by which its helpers and it agree who runs each.
type lender struct {
	group *helpGroup
	self  backend.Helper
	plan  []lendable // by step index
	idx   []int      // the indices of the lendable steps
	// progress is gen<<progressBits | the steps of micro-step gen the
	// owner has finished (run, or passed on to a helper).
	progress atomic.Uint64
	// claims holds, by step index, the micro-step that last claimed the
	// step (the owner's or a helper's compare-and-swap decides).
	claims []atomic.Uint64
	// ran holds, by step index, the micro-step in which a helper last
	// finished the step.
	ran     []atomic.Uint64
	pending []int  // this micro-step's lent steps not yet waited for (owner only)
	waitAt  int    // the owner waits for a helper before this step
	gen     uint64 // the owner's micro-step, from 1
	helped  int64  // steps of other devices this one ran (Result.HelpedSteps)
}

// setupHelping gives each of devs a lender when there are several devices
// that can run each other's steps.
func setupHelping(devs []*worker) *helpGroup {
	if len(devs) < 2 {
		return nil
	}
	for _, d := range devs {
		h, ok := d.dev.(backend.Helper)
		if !ok || len(d.prog.Steps) >= 1<<progressBits {
			return nil
		}
		if _, ok := d.dev.(backend.Replayer); ok {
			return nil // it runs a whole micro-step as one launch
		}
		for _, o := range devs {
			if !h.CanHelp(o.dev) {
				return nil
			}
		}
	}
	g := &helpGroup{devices: devs}
	for _, d := range devs {
		l := &lender{group: g, self: d.dev.(backend.Helper), plan: lendPlan(d.prog)}
		for i, s := range l.plan {
			if s.ok {
				l.idx = append(l.idx, i)
			}
		}
		l.claims = make([]atomic.Uint64, len(l.plan))
		l.ran = make([]atomic.Uint64, len(l.plan))
		l.pending = make([]int, 0, len(l.idx))
		l.waitAt = len(l.plan)
		d.lend = l
	}
	return g
}

// begin starts a micro-step: the owner's rc and buffers are ready for
// helpers.
func (l *lender) begin() {
	l.gen++
	l.waitAt = len(l.plan)
	l.progress.Store(l.gen << progressBits)
}

// finished publishes that the owner has finished steps [0, n).
func (l *lender) finished(n int) { l.progress.Store(l.gen<<progressBits | uint64(n)) }

// put passes lendable step i: the owner defers it to the step it must
// run before (settle), and a helper that is idle meanwhile may take it.
func (l *lender) put(i int) {
	l.pending = append(l.pending, i)
	l.waitAt = min(l.waitAt, l.plan[i].until)
	l.finished(i + 1)
}

// settle runs, before d's step i, the deferred lendable steps that step i
// touches the memory of (all of them when i is len(plan): the
// micro-step's end): each that no helper has taken yet on d, and for each
// that a helper took it waits until the helper is done. d takes its
// deferred steps last first (their inputs are the freshest in its cache)
// and helpers first first (help), as a work-stealing deque.
func (d *worker) settle(i int) error {
	l := d.lend
	if i < l.waitAt {
		return nil
	}
	var err error
	next := len(l.plan)
	for j := len(l.pending) - 1; j >= 0; j-- {
		k := l.pending[j]
		if l.plan[k].until > i && i < len(l.plan) {
			next = min(next, l.plan[k].until)
			continue
		}
		l.pending[j] = -1
		if c := l.claims[k].Load(); c < l.gen && l.claims[k].CompareAndSwap(c, l.gen) {
			if e := d.exec(d.prog.Steps[k]); e != nil && err == nil {
				err = e
			}
			continue
		}
		// A helper is inside the step's kernel: spin (a yield would
		// hand this P around and wake threads), yielding now and then
		// all the same.
		for n := 1; l.ran[k].Load() != l.gen && !l.group.failed.Load(); n++ {
			if n%(1<<14) == 0 {
				runtime.Gosched()
			}
		}
	}
	keep := l.pending[:0]
	for _, k := range l.pending {
		if k >= 0 {
			keep = append(keep, k)
		}
	}
	l.pending, l.waitAt = keep, next
	return err
}

// help runs other devices' lendable steps that are ready, while there are
// some, as d's own micro-step's last compute before its collectives. It
// waits for a peer's next lendable step while the peer makes progress
// (up to helpSpin without any).
func (d *worker) help() {
	me := d.lend
	if me == nil {
		return
	}
	var quietSince time.Time
	var last uint64 // the peers' progress words, summed, when last seen
	for !me.group.failed.Load() {
		ran, wait := false, false
		var seen uint64
		for _, p := range me.group.devices {
			l := p.lend
			if p == d || l == nil {
				continue
			}
			pr := l.progress.Load()
			seen += pr
			gen, fin := pr>>progressBits, int(pr&(1<<progressBits-1))
			if gen > me.gen {
				continue // ahead of d
			}
			if gen < me.gen {
				wait = true // about to start the micro-step d is in
			}
			for _, i := range l.idx {
				// Claims only move forward: a claim of gen or later
				// means the peer has passed step i in micro-step gen
				// (seen here late) or a helper has it.
				c := l.claims[i].Load()
				if c >= gen {
					continue
				}
				if fin < l.plan[i].ready {
					wait = true
					continue
				}
				if !l.claims[i].CompareAndSwap(c, gen) {
					continue
				}
				if err := me.self.ExecFor(p.dev, p.prog.Steps[i], &p.rc); err != nil {
					panic(err) // setupHelping checked CanHelp; the peer waits until the group fails
				}
				l.ran[i].Store(gen)
				me.helped++
				ran = true
				break
			}
			if ran {
				break
			}
		}
		switch {
		case ran:
			quietSince = time.Time{}
		case !wait:
			return
		case seen != last || quietSince.IsZero():
			last, quietSince = seen, time.Now()
		case time.Since(quietSince) > helpSpin:
			return
		}
	}
}
