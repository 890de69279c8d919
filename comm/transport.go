package comm

// transport is one rank's end of a group's point-to-point links: the
// primitives the algorithms are written against (as NCCL's are: send,
// recv, recv-reduce; recv-reduce-send is a recvReduce followed by a send of
// the result, recv-copy-send a recv followed by a send). It knows nothing
// of the algorithms.
//
// Between two ranks there is one link each way, and messages on a link are
// taken in the order they were sent; a link holds one message at a time.
// Local copies and reductions are the plain kernels of kernels.go.
//
// A rank's calls form collectives: begin, then primitives, then end. Every
// primitive waits at most until the deadline of the collective; when any
// primitive fails the group has failed, and every later primitive and begin
// of every rank fails too.
type transport interface {
	// begin starts this rank's next collective, described by h. It fails if
	// the group has failed. A non-nil invalid says the call's arguments are
	// wrong: begin fails the group with it (before peers can see h) and
	// returns it.
	begin(h header, invalid *Error) error

	// send posts src as the next message to peer and returns; it first
	// waits, if needed, until peer has taken the previous message on the
	// link. src must stay unchanged until the message is taken, which is
	// certain once a later send to the same peer or flush returns.
	send(peer int, src []float32) error

	// recv waits for the next message from peer and copies it into dst
	// (len(dst) must be the message's length).
	recv(peer int, dst []float32) error

	// recvReduce waits for the next message m from peer and sets
	// dst[i] = op(src[i], m[i]) (Mean reduces as Sum). dst may be src.
	recvReduce(peer int, dst, src []float32, op ReduceOp) error

	// flush waits until every message this rank sent has been taken.
	flush() error

	// end finishes the collective begun last. err is the collective's
	// error so far; when it is nil, end flushes. On error, end withdraws
	// the messages not yet taken and waits until no peer reads this rank's
	// buffers. It returns the collective's error.
	end(err error) error

	// fail fails the group with err, unless it failed already. It may be
	// called from any goroutine.
	fail(err error)
}
