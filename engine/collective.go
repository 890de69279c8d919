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
)

// Reduces reports whether the collective combines the ranks' values (with
// Collective.Op) rather than copying one rank's.
func (k CollectiveKind) Reduces() bool { return k == CollectiveAllReduce || k == CollectiveReduce }

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
	}
	return fmt.Errorf("collective %s: unknown kind %q", c.Tag, c.Kind)
}
