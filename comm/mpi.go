//go:build mpi

package comm

/*
#cgo pkg-config: ompi-c
#include <stdlib.h>
#include <math.h>
#include <mpi.h>

// OpenMPI's handles are macros over globals, which cgo cannot take as
// values; these wrappers hide them. Every wrapper returns an MPI error code
// (the world communicator returns errors instead of aborting).

static MPI_Op gorun_max_op, gorun_min_op;

// Max and min with Go's built-in max and min semantics: NaN wins,
// max(-0, +0) = +0, min(-0, +0) = -0.
static void gorun_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
	const float *a = in;
	float *b = inout;
	for (int i = 0; i < *len; i++) {
		float x = a[i], y = b[i];
		if (x != x || y != y) { b[i] = x != x ? x : y; continue; }
		if (x > y || (x == y && signbit(y))) b[i] = x;
	}
}

static void gorun_min(void *in, void *inout, int *len, MPI_Datatype *dt) {
	const float *a = in;
	float *b = inout;
	for (int i = 0; i < *len; i++) {
		float x = a[i], y = b[i];
		if (x != x || y != y) { b[i] = x != x ? x : y; continue; }
		if (x < y || (x == y && signbit(x))) b[i] = x;
	}
}

static int gorun_mpi_init(int *provided) {
	int done = 0;
	MPI_Initialized(&done);
	if (done) {
		return MPI_Query_thread(provided);
	}
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
	if (rc != MPI_SUCCESS) return rc;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	rc = MPI_Op_create(gorun_max, 1, &gorun_max_op);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Op_create(gorun_min, 1, &gorun_min_op);
}

static int gorun_mpi_finalize(void) {
	int done = 0;
	MPI_Finalized(&done);
	if (done) return MPI_SUCCESS;
	MPI_Op_free(&gorun_max_op);
	MPI_Op_free(&gorun_min_op);
	return MPI_Finalize();
}

static int gorun_mpi_rank_size(int *rank, int *size) {
	int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_size(MPI_COMM_WORLD, size);
}

static int gorun_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }

static MPI_Op gorun_op(int op) {
	switch (op) {
	case 2: return gorun_max_op;
	case 3: return gorun_min_op;
	}
	return MPI_SUM; // sum, and mean before its division
}

static int gorun_allreduce(float *buf, int n, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, gorun_op(op), MPI_COMM_WORLD);
}

static int gorun_reduce(float *buf, int n, int op, int root, int rank) {
	if (rank == root)
		return MPI_Reduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, gorun_op(op), root, MPI_COMM_WORLD);
	return MPI_Reduce(buf, NULL, n, MPI_FLOAT, gorun_op(op), root, MPI_COMM_WORLD);
}

static int gorun_bcast(float *buf, int n, int root) {
	return MPI_Bcast(buf, n, MPI_FLOAT, root, MPI_COMM_WORLD);
}

// inplace: send is this rank's block of recv.
static int gorun_allgather(float *send, float *recv, int n, int inplace) {
	return MPI_Allgather(inplace ? MPI_IN_PLACE : send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD);
}

static int gorun_reduce_scatter(float *send, float *recv, int n, int op) {
	return MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, gorun_op(op), MPI_COMM_WORLD);
}

static int gorun_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }

static void gorun_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void gorun_error_string(int code, char *out, int cap) {
	int n = 0;
	if (cap < MPI_MAX_ERROR_STRING || MPI_Error_string(code, out, &n) != MPI_SUCCESS) {
		out[0] = 0;
		return;
	}
	out[n < cap ? n : cap - 1] = 0;
}

static int gorun_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MPIAvailable reports whether this build has the MPI transport (it was
// built with -tags mpi).
func MPIAvailable() bool { return true }

// MPIComm is this process's rank of MPI_COMM_WORLD: a Communicator whose
// collectives are MPI's (OpenMPI's), on float32 buffers. Get it with
// InitMPI, once per process, and call Finalize at the end.
//
// Like a Comm, it takes one collective at a time: a second call while one
// runs (from another goroutine) fails with ErrInvalid. Every rank must make
// the same calls in the same order; MPI does not check that, so the tags
// only name the calls in errors and in the timeout's message.
//
// An MPI collective cannot be interrupted. A watchdog bounds each one
// instead: when a collective runs longer than the timeout (SetTimeout;
// DefaultTimeout at first) it prints which collective, tag and step to
// stderr and calls MPI_Abort, which ends every rank of the job, so a lost
// or stuck rank never hangs the others forever.
//
// Mean is an MPI sum followed by the same division as the in-process
// collectives; Max and Min are MPI user ops that follow Go's max and min
// (NaN wins). Results are the same bits on every rank, but may round
// differently from the in-process algorithms: MPI picks its own reduction
// order.
type MPIComm struct {
	rank, size int
	host       string // this machine's name, for messages
	busy       atomic.Bool
	timeout    atomic.Int64 // time.Duration

	mu       sync.Mutex // guards call, active, started, deadline
	call     header     // the collective under way (for the watchdog)
	active   bool
	started  time.Time
	deadline time.Time
	timer    *time.Timer
	scratch  []float32
}

var _ Communicator = (*MPIComm)(nil)

var (
	mpiOnce  sync.Once
	mpiComm  *MPIComm
	mpiErr   error
	mpiEnded atomic.Bool
)

// InitMPI initialises MPI (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE, which gorun needs: collectives may come from any
// goroutine and the watchdog aborts from its own) and returns this
// process's rank of MPI_COMM_WORLD. Later calls return the same MPIComm;
// after Finalize, an error. Run the program under mpirun (a single process
// without it is a world of 1).
func InitMPI() (*MPIComm, error) {
	if mpiEnded.Load() {
		return nil, errors.New("comm: InitMPI after Finalize: MPI cannot be initialised twice in a process")
	}
	mpiOnce.Do(func() {
		// Go needs SIGSEGV and SIGBUS for itself (nil-pointer panics);
		// OpenMPI would catch them to print its own backtrace.
		if _, set := os.LookupEnv("OMPI_MCA_opal_signal"); !set {
			os.Setenv("OMPI_MCA_opal_signal", "")
		}
		var provided C.int
		if rc := C.gorun_mpi_init(&provided); rc != C.MPI_SUCCESS {
			mpiErr = fmt.Errorf("comm: MPI_Init_thread: %s", mpiErrorString(rc))
			return
		}
		if provided < C.gorun_thread_multiple() {
			C.gorun_mpi_finalize()
			mpiEnded.Store(true)
			mpiErr = fmt.Errorf("comm: MPI_Init_thread: this MPI gives thread level %d, gorun needs MPI_THREAD_MULTIPLE (%d); use an OpenMPI built with thread support (Debian's libopenmpi-dev is)", int(provided), int(C.gorun_thread_multiple()))
			return
		}
		var rank, size C.int
		if rc := C.gorun_mpi_rank_size(&rank, &size); rc != C.MPI_SUCCESS {
			mpiErr = fmt.Errorf("comm: MPI_Comm_rank: %s", mpiErrorString(rc))
			return
		}
		host, _ := os.Hostname()
		c := &MPIComm{rank: int(rank), size: int(size), host: host}
		c.timeout.Store(int64(DefaultTimeout))
		c.timer = time.AfterFunc(time.Hour, c.expired)
		c.timer.Stop()
		mpiComm = c
	})
	return mpiComm, mpiErr
}

// Finalize ends MPI (MPI_Finalize). Every rank must call it, once no
// collective runs; the MPIComm is unusable afterwards.
func (c *MPIComm) Finalize() error {
	c.mu.Lock()
	c.timer.Stop()
	c.mu.Unlock()
	if mpiEnded.Swap(true) {
		return nil
	}
	if rc := C.gorun_mpi_finalize(); rc != C.MPI_SUCCESS {
		return fmt.Errorf("comm: MPI_Finalize: %s", mpiErrorString(rc))
	}
	return nil
}

// Rank returns this process's rank in MPI_COMM_WORLD.
func (c *MPIComm) Rank() int { return c.rank }

// Size returns the number of processes of MPI_COMM_WORLD.
func (c *MPIComm) Size() int { return c.size }

// SetTimeout sets how long a collective may run before the watchdog aborts
// the job (d ≤ 0: DefaultTimeout).
func (c *MPIComm) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultTimeout
	}
	c.timeout.Store(int64(d))
}

// Abort prints msg to stderr, naming this rank and its host ("gorun:
// rank 2 of 3 (host node3): …"), and ends every process of the job
// (MPI_Abort with exit status 1). It does not return.
func (c *MPIComm) Abort(msg string) {
	fmt.Fprintf(os.Stderr, "gorun: %s: %s; aborting every rank (MPI_Abort)\n", c.Who(), msg)
	C.gorun_abort(1)
	os.Exit(1) // MPI_Abort does not return; in case it does
}

// Who names this rank and its host as messages do: "rank 2 of 3 (host
// node3)".
func (c *MPIComm) Who() string {
	return "rank " + strconv.Itoa(c.rank) + " of " + strconv.Itoa(c.size) + " (host " + c.host + ")"
}

// Pending describes the collective this rank is in, as errors name it
// (`allreduce "bucket 0" at step 45`), and how long it has waited in it;
// ok is false when none runs. A signal handler calls it to say where a
// rank was when its job was stopped: a rank waiting in a collective is
// waiting for the ranks that have not joined it.
func (c *MPIComm) Pending() (call string, waited time.Duration, ok bool) {
	c.mu.Lock()
	h, active, started := c.call, c.active, c.started
	c.mu.Unlock()
	if !active {
		return "", 0, false
	}
	var b strings.Builder
	writeCall(&b, h.kind.String(), h.tag)
	return b.String(), time.Since(started), true
}

// Broadcast copies root's buf into every other rank's buf (MPI_Bcast).
func (c *MPIComm) Broadcast(buf []float32, root int, t Tag) error {
	h := header{kind: kindBroadcast, root: root, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	rc := C.gorun_bcast(ptr(buf), C.int(len(buf)), C.int(root))
	return c.leave(&h, rc, "MPI_Bcast")
}

// Reduce reduces every rank's buf with op into root's buf (MPI_Reduce, in
// place at the root); the other ranks' bufs are left unchanged.
func (c *MPIComm) Reduce(buf []float32, root int, op ReduceOp, t Tag) error {
	h := header{kind: kindReduce, op: op, root: root, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	rc := C.gorun_reduce(ptr(buf), C.int(len(buf)), C.int(op), C.int(root), C.int(c.rank))
	if rc == C.MPI_SUCCESS && op == Mean && c.rank == root {
		divide(buf, c.size)
	}
	return c.leave(&h, rc, "MPI_Reduce")
}

// AllReduce reduces every rank's buf with op and leaves the result in
// every rank's buf (MPI_Allreduce in place).
func (c *MPIComm) AllReduce(buf []float32, op ReduceOp, t Tag) error {
	h := header{kind: kindAllReduce, op: op, root: -1, count: len(buf), tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	rc := C.gorun_allreduce(ptr(buf), C.int(len(buf)), C.int(op))
	if rc == C.MPI_SUCCESS && op == Mean {
		divide(buf, c.size)
	}
	return c.leave(&h, rc, "MPI_Allreduce")
}

// AllGather concatenates every rank's send, in rank order, into every
// rank's recv (MPI_Allgather): len(recv) must be Size()·len(send). send may
// be recv's own block (in place).
func (c *MPIComm) AllGather(send, recv []float32, t Tag) error {
	h := header{kind: kindAllGather, root: -1, count: len(send), tag: t}
	if err := c.enter(&h, send, recv); err != nil {
		return err
	}
	inplace := C.int(0)
	if len(send) > 0 && same(send, recv[c.rank*len(send):][:len(send)]) {
		inplace = 1
	}
	rc := C.gorun_allgather(ptr(send), ptr(recv), C.int(len(send)), inplace)
	return c.leave(&h, rc, "MPI_Allgather")
}

// ReduceScatter reduces every rank's send with op and leaves block r of the
// result in rank r's recv (MPI_Reduce_scatter_block): len(send) must be
// Size()·len(recv). recv may be send's own block (in place); send is
// otherwise left unchanged.
func (c *MPIComm) ReduceScatter(send, recv []float32, op ReduceOp, t Tag) error {
	h := header{kind: kindReduceScatter, op: op, root: -1, count: len(recv), tag: t}
	if err := c.enter(&h, send, recv); err != nil {
		return err
	}
	dst := recv
	if overlap(send, recv) { // recv is send's own block: MPI wants them apart
		if cap(c.scratch) < len(recv) {
			c.scratch = make([]float32, len(recv))
		}
		dst = c.scratch[:len(recv)]
	}
	rc := C.gorun_reduce_scatter(ptr(send), ptr(dst), C.int(len(recv)), C.int(op))
	if rc == C.MPI_SUCCESS {
		copyUnlessSame(recv, dst)
		if op == Mean {
			divide(recv, c.size)
		}
	}
	return c.leave(&h, rc, "MPI_Reduce_scatter_block")
}

// Barrier returns once every rank has called it (MPI_Barrier).
func (c *MPIComm) Barrier(t Tag) error {
	h := header{kind: kindBarrier, root: -1, tag: t}
	if err := c.enter(&h, nil, nil); err != nil {
		return err
	}
	return c.leave(&h, C.gorun_barrier(), "MPI_Barrier")
}

// enter checks a call and starts the watchdog on it.
func (c *MPIComm) enter(h *header, send, recv []float32) error {
	h.alg = Auto // MPI chooses
	if mpiEnded.Load() {
		return c.invalid(h, "MPI was finalized")
	}
	if !c.busy.CompareAndSwap(false, true) {
		return c.invalid(h, "another collective is running on this rank (each rank calls collectives one at a time)")
	}
	msg := c.check(h, send, recv)
	if msg == "" && max(len(send), len(recv), h.count) > math.MaxInt32 {
		msg = "more than 2³¹−1 floats in one MPI call"
	}
	if msg != "" {
		c.busy.Store(false)
		return c.invalid(h, msg)
	}
	d := time.Duration(c.timeout.Load())
	c.mu.Lock()
	now := time.Now()
	c.call, c.active, c.started, c.deadline = *h, true, now, now.Add(d)
	c.timer.Reset(d)
	c.mu.Unlock()
	return nil
}

// leave stops the watchdog and turns an MPI error code into an error.
func (c *MPIComm) leave(h *header, rc C.int, fn string) error {
	c.mu.Lock()
	c.active = false
	c.timer.Stop()
	c.mu.Unlock()
	c.busy.Store(false)
	if rc == C.MPI_SUCCESS {
		return nil
	}
	return &Error{Op: h.kind.String(), Tag: h.tag, Rank: c.rank, Reason: ErrAborted, Peer: -1,
		detail: fn + " failed: " + mpiErrorString(rc)}
}

// expired is the watchdog: a collective ran past the timeout.
func (c *MPIComm) expired() {
	c.mu.Lock()
	h, active := c.call, c.active
	if left := time.Until(c.deadline); active && left > 0 {
		// This timer was for an earlier call; the one under way has time left.
		c.timer.Reset(left)
		active = false
	}
	c.mu.Unlock()
	if !active {
		return
	}
	var b strings.Builder
	b.WriteString("comm: ")
	writeCall(&b, h.kind.String(), h.tag)
	b.WriteString(" (MPI) timed out after ")
	b.WriteString(time.Duration(c.timeout.Load()).String())
	b.WriteString(": some rank of ")
	b.WriteString(strconv.Itoa(c.size))
	b.WriteString(" never joined it (lost, stuck, or calling another collective), or it takes longer than the timeout")
	c.Abort(b.String())
}

// check returns what is wrong with a call, or "" (as Comm.check).
func (c *MPIComm) check(h *header, send, recv []float32) string {
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

func (c *MPIComm) invalid(h *header, msg string) *Error {
	return &Error{Op: h.kind.String(), Tag: h.tag, Rank: c.rank, Reason: ErrInvalid, Peer: -1, detail: msg}
}

// ptr is buf's first element for C, or nil when buf is empty.
func ptr(buf []float32) *C.float {
	if len(buf) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(buf)))
}

// mpiErrorString is MPI's text for an error code.
func mpiErrorString(rc C.int) string {
	n := C.gorun_max_error_string()
	buf := (*C.char)(C.malloc(C.size_t(n)))
	defer C.free(unsafe.Pointer(buf))
	C.gorun_error_string(rc, buf, n)
	if s := C.GoString(buf); s != "" {
		return s
	}
	return "MPI error " + strconv.Itoa(int(rc))
}
