package comm

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// The reasons a collective fails; a *Error's Reason is one of them, and
// errors.Is(err, ErrTimeout) and so on see through a *Error.
var (
	// ErrTimeout: some rank waited longer than Options.Timeout.
	ErrTimeout = errors.New("comm: timed out")
	// ErrMismatch: ranks called different collectives (or the same one with
	// a different length, root, op, algorithm or tag) at the same point.
	ErrMismatch = errors.New("comm: mismatched collectives")
	// ErrAborted: the group was aborted with Group.Abort, or had failed
	// earlier (the Cause says why).
	ErrAborted = errors.New("comm: group aborted")
	// ErrInvalid: a call's arguments were wrong (lengths, root, op,
	// overlapping buffers, concurrent calls on one rank).
	ErrInvalid = errors.New("comm: invalid call")
)

// Error is the error of a failed collective.
//
// Its message names the collective, e.g.
//
//	comm: allreduce "bucket 2" at step 17: timed out after 2s waiting for rank 3 (ranks 0,1,2 arrived)
//	comm: allreduce "bucket 2" at step 17: timed out after 2s waiting for data from rank 1; every rank had joined the collective, so it was still under way: the timeout is shorter than it takes, or rank 1 stalled inside it
//	comm: mismatched collectives: rank 0 called allreduce "bucket 2" at step 17 (1000 floats, sum, ring) but rank 1 called broadcast "params" at step 17 (500 floats, root 0, ring)
//	comm: broadcast "params" at step 18 on rank 1: group failed earlier: comm: allreduce "bucket 2" …
//
// Unwrap returns Reason and Cause, so errors.Is matches ErrTimeout (and the
// others) and the error given to Group.Abort.
type Error struct {
	Op     string // the collective: "broadcast", "reduce", "allreduce", "allgather", "reducescatter" or "barrier"
	Tag    Tag    // the call's tag
	Rank   int    // the rank that detected the failure
	Reason error  // ErrTimeout, ErrMismatch, ErrAborted or ErrInvalid
	Cause  error  // for ErrAborted: what Abort was given, or the earlier failure; else nil

	// Timeouts only.
	Timeout time.Duration // Options.Timeout
	Missing []int         // ranks that had not called the collective yet
	Arrived []int         // ranks that had called it (or gone past it)

	// Peer is the other rank of a mismatch, or the rank a timed-out wait
	// was waiting for; -1 when none.
	Peer int

	detail string // mismatch and invalid calls: what was wrong
	seq    uint64 // which call of each rank (1, 2, …) the failure is about; 0: none
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Reason == ErrMismatch {
		b.WriteString("comm: mismatched collectives: ")
		b.WriteString(e.detail)
		return b.String()
	}
	b.WriteString("comm: ")
	writeCall(&b, e.Op, e.Tag)
	switch e.Reason {
	case ErrTimeout:
		b.WriteString(": timed out after ")
		b.WriteString(e.Timeout.String())
		b.WriteString(" waiting for ")
		if len(e.Missing) > 0 {
			writeRanks(&b, e.Missing)
			b.WriteString(" (")
			writeRanks(&b, e.Arrived)
			b.WriteString(" arrived)")
		} else {
			// Every rank had joined this collective: it was under way, and
			// the wait was for a peer's data within it. Saying "all ranks
			// arrived" read as though nothing were missing; what is wrong
			// is the timeout or that peer.
			b.WriteString("data from rank ")
			b.WriteString(strconv.Itoa(e.Peer))
			b.WriteString("; every rank had joined the collective, so it was still under way: the timeout is shorter than it takes, or rank ")
			b.WriteString(strconv.Itoa(e.Peer))
			b.WriteString(" stalled inside it")
		}
	default:
		b.WriteString(" on rank ")
		b.WriteString(strconv.Itoa(e.Rank))
		b.WriteString(": ")
		b.WriteString(e.detail)
		if e.Cause != nil {
			b.WriteString(": ")
			b.WriteString(e.Cause.Error())
		}
	}
	return b.String()
}

// Unwrap returns the Reason and, when there is one, the Cause.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Cause}
}

// writeCall writes `allreduce "bucket 2" at step 17`.
func writeCall(b *strings.Builder, op string, t Tag) {
	b.WriteString(op)
	if t.Name != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(t.Name))
	}
	b.WriteString(" at step ")
	b.WriteString(strconv.Itoa(t.Step))
}

// writeRanks writes "rank 3" or "ranks 0,1,2".
func writeRanks(b *strings.Builder, ranks []int) {
	if len(ranks) == 1 {
		b.WriteString("rank ")
	} else {
		b.WriteString("ranks ")
	}
	for i, r := range ranks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
}
