package engine

import (
	"fmt"

	"gorun/comm"
)

// CollectiveKind is which collective a collective step runs. The compiler
// decides it when it places the step (a sync strategy, SyncBatchNorm's
// statistics); backends and the runner run the step through
// Collective.Run and never look at the name.
type CollectiveKind string

// The collectives a Plan places.
const (
	// CollectiveAllReduce combines a buffer over every rank with Op and
	// leaves the result on every rank.
	CollectiveAllReduce CollectiveKind = "allreduce"
	// CollectiveReduce combines a buffer over every rank with Op into
	// Root's copy (reduce_add, for a parameter server).
	CollectiveReduce CollectiveKind = "reduce"
	// CollectiveBroadcast copies Root's buffer to every rank.
	CollectiveBroadcast CollectiveKind = "broadcast"
	// CollectiveReduceScatter combines a buffer over every rank with Op
	// and leaves block r of the result (Elems/world elements) in rank
	// r's Part (a sharded strategy's gradient buckets).
	CollectiveReduceScatter CollectiveKind = "reducescatter"
	// CollectiveAllGather concatenates every rank's Part, in rank order,
	// into every rank's buffer (a sharded strategy's parameters).
	CollectiveAllGather CollectiveKind = "allgather"
)

// Reduces reports whether the collective combines the ranks' values (with
// Collective.Op) rather than copying one rank's.
func (k CollectiveKind) Reduces() bool {
	return k == CollectiveAllReduce || k == CollectiveReduce || k == CollectiveReduceScatter
}

// Blocks reports whether the collective splits its buffer into one block
// per rank, each rank's block being its Part.
func (k CollectiveKind) Blocks() bool {
	return k == CollectiveReduceScatter || k == CollectiveAllGather
}

// HasRoot reports whether one rank (Collective.Root) is the collective's
// source or destination.
func (k CollectiveKind) HasRoot() bool { return k == CollectiveReduce || k == CollectiveBroadcast }

// Collective is a comm step: which collective, on which part of which
// buffer, and how many bytes it moves per step.
type Collective struct {
	Kind CollectiveKind
	Tag  string        // "bucket 0", "parameters"
	Op   comm.ReduceOp // how a reduction combines the ranks (Kind.Reduces)
	Root int           // the source or destination rank (Kind.HasRoot)
	// Buffer, Offset and Elems are the part of a buffer the collective
	// covers (elements).
	Buffer *Buffer
	Offset int
	Elems  int
	// Part and PartOffset are, for a collective that splits its buffer
	// into blocks (Kind.Blocks: Elems divides by the world), where this
	// rank's block lies: a reduce-scatter's destination, an all-gather's
	// source, Elems/world elements of Part from PartOffset. Part may be
	// Buffer itself with the rank's own block (in place).
	Part       *Buffer
	PartOffset int
	Block      int // Elems / world: the elements of Part the rank's block takes
	// Bytes is the payload of the collective (elements × 4).
	Bytes int64
}

// OpName is the reduction's name ("sum", "mean"), or "" for a collective
// that does not reduce.
func (c *Collective) OpName() string {
	if !c.Kind.Reduces() {
		return ""
	}
	return c.Op.String()
}

// String describes the collective as `gorun plan` prints it:
// "allreduce(sum)", "reduce(sum) root 1", "broadcast root 0".
func (c *Collective) String() string {
	s := string(c.Kind)
	if c.Kind.Reduces() {
		s += "(" + c.Op.String() + ")"
	}
	if c.Kind.HasRoot() {
		s += fmt.Sprintf(" root %d", c.Root)
	}
	return s
}

// CollectiveRunner runs collectives over one device's buffers (a backend's
// Collectives): the k-th calls of every device of a group form one
// collective; off and n are elements of b.
type CollectiveRunner interface {
	AllReduce(b *Buffer, off, n int, op comm.ReduceOp, t comm.Tag) error
	Reduce(b *Buffer, off, n, root int, op comm.ReduceOp, t comm.Tag) error
	Broadcast(b *Buffer, off, n, root int, t comm.Tag) error
	// ReduceScatter reduces elements [off, off+n) of b over the ranks and
	// leaves block r of the result (n/world elements) in rank r's part
	// from partOff; AllGather copies every rank's block, part from
	// partOff, into elements [off, off+n) of b, in rank order. part may be
	// b with the rank's own block (in place); no other overlap.
	ReduceScatter(b *Buffer, off, n int, part *Buffer, partOff int, op comm.ReduceOp, t comm.Tag) error
	AllGather(b *Buffer, off, n int, part *Buffer, partOff int, t comm.Tag) error
}

// Run runs the collective through x, tagged with the optimizer step (for
// errors that name it).
func (c *Collective) Run(x CollectiveRunner, step int) error {
	tag := comm.Tag{Name: c.Tag, Step: step}
	switch c.Kind {
	case CollectiveAllReduce:
		return x.AllReduce(c.Buffer, c.Offset, c.Elems, c.Op, tag)
	case CollectiveReduce:
		return x.Reduce(c.Buffer, c.Offset, c.Elems, c.Root, c.Op, tag)
	case CollectiveBroadcast:
		return x.Broadcast(c.Buffer, c.Offset, c.Elems, c.Root, tag)
	case CollectiveReduceScatter:
		return x.ReduceScatter(c.Buffer, c.Offset, c.Elems, c.Part, c.PartOffset, c.Op, tag)
	case CollectiveAllGather:
		return x.AllGather(c.Buffer, c.Offset, c.Elems, c.Part, c.PartOffset, tag)
	}
	return fmt.Errorf("collective %s: unknown kind %q", c.Tag, c.Kind)
}

// SentBytes is about what one rank of a world of n sends per run of the
// collective by the ring algorithms: 2(n−1)/n of the payload for an
// all-reduce, (n−1)/n for a reduce-scatter or an all-gather, the payload
// for a broadcast or a reduce (each rank passes it on down the ring), 0 on
// one device.
func (c *Collective) SentBytes(n int) int64 {
	if n <= 1 {
		return 0
	}
	switch c.Kind {
	case CollectiveAllReduce:
		return 2 * c.Bytes * int64(n-1) / int64(n)
	case CollectiveReduceScatter, CollectiveAllGather:
		return c.Bytes * int64(n-1) / int64(n)
	}
	return c.Bytes
}
