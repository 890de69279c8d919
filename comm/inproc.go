package comm

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Group is a group of ranks that are goroutines of one process, connected
// by the in-process transport: shared memory, no copies beyond the one into
// the receiver's buffer. Make one with NewInProc and hand Rank(r) to the
// goroutine of rank r.
type Group struct {
	n     int
	opts  Options
	ranks []rankState // shared state of each rank
	links []link      // links[src*n+dst]: the link src→dst
	comms []*Comm

	failed atomic.Bool
	done   chan struct{} // closed when the group fails
	mu     sync.Mutex
	err    error // why the group failed; set once, before done is closed
	user   bool  // err came from Abort
}

// NewInProc makes a group of n ranks in this process.
func NewInProc(n int, opts Options) (*Group, error) {
	if n < 1 {
		return nil, fmt.Errorf("comm: group of %d ranks, want at least 1", n)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{
		n:     n,
		opts:  opts,
		ranks: make([]rankState, n),
		links: make([]link, n*n),
		comms: make([]*Comm, n),
		done:  make(chan struct{}),
	}
	for r := range n {
		g.ranks[r].wake = make(chan struct{}, 1)
		t := time.NewTimer(time.Hour)
		t.Stop()
		e := &endpoint{g: g, rank: r, st: &g.ranks[r], timer: t}
		g.comms[r] = newComm(e, r, n, opts.Algorithm)
	}
	return g, nil
}

// Size returns the number of ranks.
func (g *Group) Size() int { return g.n }

// Rank returns the handle rank r's goroutine uses; it panics unless
// 0 ≤ r < Size(). Each call returns the same *Comm.
func (g *Group) Rank(r int) *Comm {
	if r < 0 || r >= g.n {
		panic("comm: rank " + strconv.Itoa(r) + " out of range [0," + strconv.Itoa(g.n) + ")")
	}
	return g.comms[r]
}

// Abort fails the group: every pending and later collective on every rank
// returns a *Error with Reason ErrAborted that wraps err (nil is allowed).
// It does nothing if the group has failed already. It may be called from
// any goroutine.
func (g *Group) Abort(err error) { g.failWith(err, true) }

// Err returns why the group failed, or nil while it is usable.
func (g *Group) Err() error {
	if !g.failed.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *Group) failWith(err error, user bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed.Load() {
		return
	}
	g.err, g.user = err, user
	g.failed.Store(true)
	close(g.done)
}

func (g *Group) link(src, dst int) *link { return &g.links[src*g.n+dst] }

// notify wakes rank r if it is parked.
func (g *Group) notify(r int) {
	if st := &g.ranks[r]; st.parked.Load() {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// rankState is what the other ranks see of a rank.
type rankState struct {
	wake   chan struct{} // capacity 1: a token means "look again"
	parked atomic.Bool   // about to block on wake
	seq    atomic.Uint64 // collectives begun
	mu     sync.Mutex
	hdr    header // the collective begun last (guarded by mu)
	_      [64]byte
}

// snapshot returns the rank's current collective.
func (st *rankState) snapshot() (uint64, header) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.seq.Load(), st.hdr
}

// The states of a link.
const (
	linkFree    int32 = iota // no message
	linkPosted               // a message waits to be taken
	linkReading              // the receiver is reading the message
)

// link is a one-message mailbox from one rank to another. The sender
// writes msg and moves free→posted; the receiver moves posted→reading,
// reads, and moves reading→free. A failing sender withdraws its message
// (posted→free).
type link struct {
	state atomic.Int32
	msg   message
	_     [64]byte
}

type message struct {
	data []float32 // the sender's memory
	seq  uint64    // the sender's collective
	hdr  header
}

// endpoint is one rank's end of the in-process transport. Only that rank's
// goroutine uses it.
type endpoint struct {
	g        *Group
	rank     int
	st       *rankState
	seq      uint64 // the current collective (the number begun)
	hdr      header
	deadline time.Time
	timer    *time.Timer
	armed    bool // timer runs to deadline
}

// How long a wait spins before it parks: spinLoads plain checks, then
// checks each after runtime.Gosched until spinFor has passed. A parked rank
// costs the step the time the scheduler takes to wake it (tens of µs, more
// on a virtual machine whose idle vCPU halted), and the ranks of a
// data-parallel step meet within a few hundred µs of each other; spinning
// much longer holds a P, with which the Go runtime's sysmon takes the P of
// a rank busy in a C kernel and wakes threads for it. MNIST on two
// in-process devices on 2 vCPUs over one device in the same rounds
// (medians of 16–30 rounds, five sets): 80 yields or 5 µs (before)
// 1.63–1.78×, 100–250 µs 1.71–1.94× (above it in every set); a 2 ms spin
// 1.36×.
const (
	spinLoads = 64
	spinFor   = 200 * time.Microsecond
)

func (e *endpoint) begin(h header, invalid *Error) error {
	e.seq++
	e.hdr = h
	if invalid != nil {
		invalid.seq = e.seq
		e.g.failWith(invalid, false)
	}
	e.st.mu.Lock()
	e.st.hdr = h
	e.st.seq.Store(e.seq)
	e.st.mu.Unlock()
	if e.g.failed.Load() {
		return e.failure()
	}
	e.deadline = time.Now().Add(e.g.opts.Timeout)
	// Peers parked on this rank may now see a mismatch.
	for r := range e.g.n {
		if r != e.rank {
			e.g.notify(r)
		}
	}
	return nil
}

func (e *endpoint) send(peer int, src []float32) error {
	l := e.g.link(e.rank, peer)
	if l.state.Load() != linkFree {
		if err := e.await(l, linkFree, peer); err != nil {
			return err
		}
	}
	l.msg = message{data: src, seq: e.seq, hdr: e.hdr}
	l.state.Store(linkPosted)
	e.g.notify(peer)
	return nil
}

func (e *endpoint) recv(peer int, dst []float32) error {
	l, err := e.take(peer, len(dst))
	if err != nil {
		return err
	}
	copy(dst, l.msg.data)
	e.release(l, peer)
	return nil
}

func (e *endpoint) recvReduce(peer int, dst, src []float32, op ReduceOp) error {
	l, err := e.take(peer, len(dst))
	if err != nil {
		return err
	}
	reduceInto(dst, src, l.msg.data, op)
	e.release(l, peer)
	return nil
}

// take waits for peer's next message to this rank, checks that it belongs
// to this collective and has n floats, and moves the link to reading.
func (e *endpoint) take(peer, n int) (*link, error) {
	l := e.g.link(peer, e.rank)
	for !l.state.CompareAndSwap(linkPosted, linkReading) {
		if err := e.await(l, linkPosted, peer); err != nil {
			return nil, err
		}
	}
	m := &l.msg
	if m.seq != e.seq || m.hdr != e.hdr || len(m.data) != n {
		var err error
		if m.seq != e.seq || m.hdr != e.hdr {
			err = e.mismatch(peer, m.hdr, "")
		} else {
			err = e.mismatch(peer, m.hdr, fmt.Sprintf(" (a message of %d floats, want %d)", len(m.data), n))
		}
		e.release(l, peer)
		return nil, err
	}
	return l, nil
}

func (e *endpoint) release(l *link, peer int) {
	l.state.Store(linkFree)
	e.g.notify(peer)
}

func (e *endpoint) flush() error {
	for r := range e.g.n {
		if l := e.g.link(e.rank, r); r != e.rank && l.state.Load() != linkFree {
			if err := e.await(l, linkFree, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *endpoint) end(err error) error {
	if err == nil {
		err = e.flush()
	}
	if err == nil && e.g.failed.Load() {
		// A peer may have failed while this rank read its buffers.
		err = e.failure()
	}
	if err != nil {
		e.withdraw()
	}
	if e.armed {
		e.timer.Stop()
		e.armed = false
	}
	return err
}

// withdraw takes back the messages no peer has taken and waits for the
// peers still reading one.
func (e *endpoint) withdraw() {
	for r := range e.g.n {
		l := e.g.link(e.rank, r)
		if r == e.rank || l.state.CompareAndSwap(linkPosted, linkFree) {
			continue
		}
		for l.state.Load() == linkReading {
			runtime.Gosched()
		}
	}
}

func (e *endpoint) fail(err error) { e.g.failWith(err, false) }

// await waits until l is in state want, peer being the rank that moves it
// there. It fails when the group fails, when peer is seen in another
// collective, and at the deadline.
func (e *endpoint) await(l *link, want int32, peer int) error {
	var until time.Time
	for i := 0; ; i++ {
		if l.state.Load() == want {
			return nil
		}
		if e.g.failed.Load() {
			return e.failure()
		}
		if i < spinLoads {
			continue
		}
		if now := time.Now(); until.IsZero() {
			until = now.Add(spinFor)
		} else if now.After(until) {
			break
		}
		runtime.Gosched()
	}
	st, ps := e.st, &e.g.ranks[peer]
	for {
		st.parked.Store(true)
		pseq, phdr := ps.snapshot()
		switch {
		case l.state.Load() == want:
			st.parked.Store(false)
			return nil
		case e.g.failed.Load():
			st.parked.Store(false)
			return e.failure()
		case pseq == e.seq && phdr != e.hdr:
			st.parked.Store(false)
			return e.mismatch(peer, phdr, "")
		case pseq > e.seq:
			// peer finished this collective without the exchange this rank
			// waits for: it called something else.
			st.parked.Store(false)
			return e.mismatchPast(peer, phdr)
		}
		if !e.armed {
			d := time.Until(e.deadline)
			if d <= 0 {
				st.parked.Store(false)
				return e.timeout(peer)
			}
			e.timer.Reset(d)
			e.armed = true
		}
		select {
		case <-st.wake:
		case <-e.g.done:
		case <-e.timer.C:
			e.armed = false
			st.parked.Store(false)
			return e.timeout(peer)
		}
		st.parked.Store(false)
	}
}

// failure returns the error of this rank's current collective in a failed
// group: the group's own *Error when it is about this very call (the same
// call number: the k-th calls of all ranks form one collective), else an
// ErrAborted wrapping why the group failed.
func (e *endpoint) failure() error {
	e.g.mu.Lock()
	cause, user := e.g.err, e.g.user
	e.g.mu.Unlock()
	if ce, ok := cause.(*Error); ok && !user && ce.seq == e.seq {
		return ce
	}
	detail := "group failed earlier"
	if user {
		detail = "aborted"
	}
	return &Error{Op: e.hdr.kind.String(), Tag: e.hdr.tag, Rank: e.rank, Reason: ErrAborted, Cause: cause, Peer: -1, detail: detail}
}

// mismatch fails the group because peer is in the collective described by
// theirs while this rank is in e.hdr.
func (e *endpoint) mismatch(peer int, theirs header, note string) error {
	err := &Error{
		Op: e.hdr.kind.String(), Tag: e.hdr.tag, Rank: e.rank, Reason: ErrMismatch, Peer: peer, seq: e.seq,
		detail: "rank " + strconv.Itoa(e.rank) + " called " + e.hdr.String() +
			" but rank " + strconv.Itoa(peer) + " called " + theirs.String() + note,
	}
	e.g.failWith(err, false)
	return e.failure()
}

// mismatchPast fails the group because peer went past this collective
// without the exchange this rank waits for; it is now in theirs.
func (e *endpoint) mismatchPast(peer int, theirs header) error {
	err := &Error{
		Op: e.hdr.kind.String(), Tag: e.hdr.tag, Rank: e.rank, Reason: ErrMismatch, Peer: peer, seq: e.seq,
		detail: "rank " + strconv.Itoa(e.rank) + " called " + e.hdr.String() + " and waits for rank " +
			strconv.Itoa(peer) + ", which went past that call without taking part and is now in " + theirs.String(),
	}
	e.g.failWith(err, false)
	return e.failure()
}

// timeout fails the group because this rank waited for peer until the
// deadline. It names the ranks that have not begun this collective; when
// all have, but one is in another collective, it reports the mismatch.
func (e *endpoint) timeout(peer int) error {
	var arrived, missing []int
	for r := range e.g.n {
		seq, hdr := e.g.ranks[r].snapshot()
		switch {
		case seq < e.seq:
			missing = append(missing, r)
		case seq == e.seq && hdr != e.hdr:
			return e.mismatch(r, hdr, "")
		default:
			arrived = append(arrived, r)
		}
	}
	e.g.failWith(&Error{
		Op: e.hdr.kind.String(), Tag: e.hdr.tag, Rank: e.rank, Reason: ErrTimeout,
		Timeout: e.g.opts.Timeout, Missing: missing, Arrived: arrived, Peer: peer, seq: e.seq,
	}, false)
	return e.failure()
}

var _ transport = (*endpoint)(nil)
