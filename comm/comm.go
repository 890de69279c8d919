package comm

import (
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Communicator is the collectives of one rank of a group, as the engine
// uses them. *Comm implements it over any transport; a backend that brings
// its own collectives (NCCL) implements it directly.
type Communicator interface {
	Rank() int
	Size() int
	Broadcast(buf []float32, root int, t Tag) error
	Reduce(buf []float32, root int, op ReduceOp, t Tag) error
	AllReduce(buf []float32, op ReduceOp, t Tag) error
	AllGather(send, recv []float32, t Tag) error
	ReduceScatter(send, recv []float32, op ReduceOp, t Tag) error
	Barrier(t Tag) error
}

var _ Communicator = (*Comm)(nil)

// Comm is one rank's handle on a group: the goroutine (or process) of that
// rank calls the group's collectives through it, in program order, one at
// a time; a second call on the same rank while one runs fails with
// ErrInvalid (and fails the group). Each rank needs its own goroutine: a
// collective blocks until its peers take part. Every rank of the group must
// make the same sequence of calls, with the same lengths, roots, ops and
// tags; the k-th calls of all ranks form one collective.
//
// A collective returns only when this rank's part is done and no other rank
// reads its buffers any more, so they may be reused at once — also after an
// error. Buffers of different ranks must not overlap. When ranks mismatch,
// a rank whose own exchanges all matched may still return nil; its next
// call fails.
//
// Besides the caller's buffers a Comm uses one scratch buffer, kept between
// calls, as large as the largest call needed: none for Broadcast,
// AllGather and Ring and Tree AllReduce; len(buf) for Direct AllReduce,
// Ring Reduce and Tree Reduce (ranks with children, but the root);
// 2·len(recv) for Ring ReduceScatter on more than 2 ranks
// and len(send) for Tree ReduceScatter (ranks with children).
type Comm struct {
	t          transport
	rank, size int
	alg        Algorithm
	busy       atomic.Bool
	scratch    []float32 // grows to the largest size an algorithm needed
}

func newComm(t transport, rank, size int, alg Algorithm) *Comm {
	return &Comm{t: t, rank: rank, size: size, alg: alg}
}

// Rank returns this rank, in [0, Size()).
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks of the group (the world size).
func (c *Comm) Size() int { return c.size }

// Broadcast copies root's buf into every other rank's buf (len(buf) must be
// the same on every rank).
func (c *Comm) Broadcast(buf []float32, root int, t Tag) error {
	h := header{kind: kindBroadcast, root: root, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	var err error
	if c.size > 1 {
		switch h.alg {
		case Ring:
			err = c.ringBroadcast(buf, root)
		case Tree:
			err = c.treeBroadcast(buf, root)
		default:
			err = c.directBroadcast(buf, root)
		}
	}
	return c.leave(err)
}

// Reduce reduces every rank's buf with op into root's buf (reduce_add when
// op is Sum). The other ranks' bufs are left unchanged.
func (c *Comm) Reduce(buf []float32, root int, op ReduceOp, t Tag) error {
	h := header{kind: kindReduce, op: op, root: root, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	var err error
	if c.size > 1 {
		switch h.alg {
		case Ring:
			err = c.ringReduce(buf, root, op)
		case Tree:
			err = c.treeReduceTo(buf, root, op)
		default:
			err = c.directReduce(buf, root, op)
		}
	}
	return c.leave(err)
}

// AllReduce reduces every rank's buf with op and leaves the result, the
// same bits, in every rank's buf.
func (c *Comm) AllReduce(buf []float32, op ReduceOp, t Tag) error {
	h := header{kind: kindAllReduce, op: op, root: -1, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	return c.leave(c.allReduce(h.alg, buf, op))
}

func (c *Comm) allReduce(alg Algorithm, buf []float32, op ReduceOp) error {
	if c.size == 1 {
		return nil
	}
	switch alg {
	case Ring:
		return c.ringAllReduce(buf, op)
	case Tree:
		return c.treeAllReduce(buf, op)
	default:
		return c.directAllReduce(buf, op)
	}
}

// AllGather concatenates every rank's send, in rank order, into every
// rank's recv: len(recv) must be Size()·len(send). send may be recv's own
// block, recv[Rank()·len(send):][:len(send)] (in place); no other overlap is
// allowed.
func (c *Comm) AllGather(send, recv []float32, t Tag) error {
	h := header{kind: kindAllGather, root: -1, count: len(send), tag: t}
	if err := c.enter(&h, send, recv); err != nil {
		return err
	}
	var err error
	if c.size == 1 {
		copy(recv, send)
	} else {
		switch h.alg {
		case Ring:
			err = c.ringAllGather(send, recv)
		case Tree:
			err = c.treeAllGather(send, recv)
		default:
			err = c.directAllGather(send, recv)
		}
	}
	return c.leave(err)
}

// ReduceScatter reduces every rank's send with op and leaves block r of the
// result, result[r·len(recv):][:len(recv)], in rank r's recv: len(send) must
// be Size()·len(recv). send is left unchanged, except when recv is send's own
// block, send[Rank()·len(recv):][:len(recv)] (in place); no other overlap is
// allowed.
func (c *Comm) ReduceScatter(send, recv []float32, op ReduceOp, t Tag) error {
	h := header{kind: kindReduceScatter, op: op, root: -1, count: len(recv), tag: t}
	if err := c.enter(&h, send, recv); err != nil {
		return err
	}
	var err error
	if c.size == 1 {
		copy(recv, send)
	} else {
		switch h.alg {
		case Ring:
			err = c.ringReduceScatter(send, recv, op)
		case Tree:
			err = c.treeReduceScatter(send, recv, op)
		default:
			err = c.directReduceScatter(send, recv, op)
		}
	}
	return c.leave(err)
}

// Barrier returns once every rank has called it. It is an AllReduce of
// nothing, with the algorithm Resolve picks for length 0.
func (c *Comm) Barrier(t Tag) error {
	h := header{kind: kindBarrier, root: -1, tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	return c.leave(c.allReduce(h.alg, nil, Sum))
}

// enter checks the call, resolves its algorithm and begins it on the
// transport. send and recv are AllGather's and ReduceScatter's buffers.
func (c *Comm) enter(h *header, send, recv []float32) error {
	count := h.count
	if h.kind == kindAllGather || h.kind == kindReduceScatter {
		count *= c.size // the whole of recv, or send
	}
	h.alg = c.alg.Resolve(c.size, count)
	if !c.busy.CompareAndSwap(false, true) {
		err := c.invalid(h, "another collective is running on this rank (each rank calls collectives one at a time)")
		c.t.fail(err)
		return err
	}
	var bad *Error
	if msg := c.check(h, send, recv); msg != "" {
		bad = c.invalid(h, msg)
	}
	if err := c.t.begin(*h, bad); err != nil {
		c.busy.Store(false)
		return err
	}
	return nil
}

// leave ends the call on the transport.
func (c *Comm) leave(err error) error {
	err = c.t.end(err)
	c.busy.Store(false)
	return err
}

// check returns what is wrong with a call, or "".
func (c *Comm) check(h *header, send, recv []float32) string {
	n := c.size
	if h.kind.hasOp() && !h.op.valid() {
		return "invalid " + h.op.String()
	}
	if h.kind.hasRoot() && (h.root < 0 || h.root >= n) {
		return "root " + strconv.Itoa(h.root) + " out of range [0," + strconv.Itoa(n) + ")"
	}
	switch h.kind {
	case kindAllGather:
		if len(recv) != n*len(send) {
			return "recv has " + strconv.Itoa(len(recv)) + " floats, want " + strconv.Itoa(n) + "·" + strconv.Itoa(len(send))
		}
		if overlap(send, recv) && !same(send, recv[c.rank*len(send):][:len(send)]) {
			return "send overlaps recv other than as this rank's block"
		}
	case kindReduceScatter:
		if len(send) != n*len(recv) {
			return "send has " + strconv.Itoa(len(send)) + " floats, want " + strconv.Itoa(n) + "·" + strconv.Itoa(len(recv))
		}
		if overlap(send, recv) && !same(recv, send[c.rank*len(recv):][:len(recv)]) {
			return "recv overlaps send other than as this rank's block"
		}
	}
	return ""
}

func (c *Comm) invalid(h *header, msg string) *Error {
	return &Error{Op: h.kind.String(), Tag: h.tag, Rank: c.rank, Reason: ErrInvalid, Peer: -1, detail: msg}
}

// scratchFor returns this rank's scratch buffer, at least n floats long.
func (c *Comm) scratchFor(n int) []float32 {
	if cap(c.scratch) < n {
		c.scratch = make([]float32, n)
	}
	return c.scratch[:n]
}

// block returns block k (taken mod n) of buf cut into n near-equal blocks:
// buf[k·L/n : (k+1)·L/n]. Blocks may be empty when L < n.
func block(buf []float32, k, n int) []float32 {
	k %= n
	if k < 0 {
		k += n
	}
	l := len(buf)
	return buf[k*l/n : (k+1)*l/n]
}

// overlap reports whether a and b share memory.
func overlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b))*4 && pb < pa+uintptr(len(a))*4
}

// same reports whether a and b are the same memory.
func same(a, b []float32) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// kind is which collective a call is.
type kind uint8

const (
	kindBroadcast kind = iota
	kindReduce
	kindAllReduce
	kindAllGather
	kindReduceScatter
	kindBarrier
)

func (k kind) String() string {
	switch k {
	case kindBroadcast:
		return "broadcast"
	case kindReduce:
		return "reduce"
	case kindAllReduce:
		return "allreduce"
	case kindAllGather:
		return "allgather"
	case kindReduceScatter:
		return "reducescatter"
	}
	return "barrier"
}

func (k kind) hasOp() bool {
	return k == kindReduce || k == kindAllReduce || k == kindReduceScatter
}

func (k kind) hasRoot() bool { return k == kindBroadcast || k == kindReduce }

// header describes one collective call; every rank's header for a call
// must be equal. Transports attach it to what they send to check that.
type header struct {
	kind  kind
	alg   Algorithm // resolved
	op    ReduceOp  // reductions only
	root  int       // broadcast and reduce only, else -1
	count int       // len(buf), or len(send) for AllGather, len(recv) for ReduceScatter
	tag   Tag
}

// String describes the call: `allreduce "bucket 2" at step 17 (1000 floats, sum, ring)`.
func (h header) String() string {
	var b strings.Builder
	writeCall(&b, h.kind.String(), h.tag)
	b.WriteString(" (")
	if h.kind != kindBarrier {
		b.WriteString(strconv.Itoa(h.count))
		b.WriteString(" floats")
		if h.kind == kindAllGather || h.kind == kindReduceScatter {
			b.WriteString(" a rank")
		}
		b.WriteString(", ")
	}
	if h.kind.hasOp() {
		b.WriteString(h.op.String())
		b.WriteString(", ")
	}
	if h.kind.hasRoot() {
		b.WriteString("root ")
		b.WriteString(strconv.Itoa(h.root))
		b.WriteString(", ")
	}
	b.WriteString(h.alg.String())
	b.WriteByte(')')
	return b.String()
}
