// Package comm is gorun's collectives: broadcast, reduce (reduce_add),
// all-reduce, all-gather, reduce-scatter and barrier on float32 buffers,
// between the ranks of a group. It is what torch.cuda.comm and
// torch.distributed's collectives are to PyTorch.
//
// comm belongs to the run phase. The engine decides at compile time where
// each collective sits in every device's Program and which algorithm it uses
// (Options.Algorithm, or Auto, whose rule Algorithm.Resolve states so that the
// Plan can print it); at step time each rank's goroutine calls the collectives
// of its Program in program order through its Comm.
//
// # Algorithms and transports
//
// Collectives are algorithms — Ring, Tree and Direct — written against a few
// point-to-point primitives (send, recv, recv-reduce, flush; local copy and
// reduce are plain kernels). A transport implements the primitives for one
// rank and knows nothing of the algorithms; the algorithms know nothing of the
// transport. The in-process transport (NewInProc) connects ranks that are
// goroutines of one process through shared memory: a sender publishes a
// pointer to its buffer and the receiver copies or reduces straight out of
// it, so no data is staged. NCCL brings its own collectives and implements
// Communicator directly.
//
// # Across processes: MPI
//
// Behind the build tag mpi (make build-mpi; it links OpenMPI, Debian's
// libopenmpi-dev, and runs under mpirun from openmpi-bin), InitMPI returns an
// MPIComm: this process's rank of MPI_COMM_WORLD, a Communicator whose
// collectives are MPI's own (MPI_Allreduce, MPI_Bcast, MPI_Reduce,
// MPI_Allgather, MPI_Reduce_scatter_block, MPI_Barrier). An MPI collective
// cannot be interrupted, so a watchdog enforces the timeout: past it, the
// rank prints the collective, tag and step and calls MPI_Abort, which ends
// the whole job. Without the tag, MPIAvailable reports false and InitMPI
// says how to get a build with MPI; the default build has no MPI
// dependency. EnvWorld reads a process's rank and world size from what
// mpirun (or a torchrun-style launcher) puts in the environment, and
// EnvLocalRank its rank among its host's processes.
//
// A transport that brings its own collectives (NCCL, in package cuda)
// is bootstrapped through a Communicator: ShareBytes gives every rank
// the bytes one rank makes (NCCL's 128-byte unique id), GatherBytes every
// rank's fixed-size card (EncodeCard, DecodeCard), as float32 words that
// carry their bits.
//
// # Determinism
//
// For a given algorithm, world size and buffer length, every element is
// reduced in one fixed order, whatever the goroutine scheduling, so results
// are bit-identical from run to run; after AllReduce every rank holds the
// same bits, so replicas never drift apart. Different algorithms may round
// differently. Mean is Sum followed by a division of each element by
// float32(n), the world size — the same rounding as PyTorch's
// all_reduce(SUM) followed by tensor /= world_size. (When n is a power of
// two it is computed as a multiplication by the exact reciprocal 1/n, which
// rounds identically.) Max and Min propagate NaN, as torch.max does.
//
// # Errors
//
// Every collective returns nil or a *Error naming the collective (its op
// and Tag: name and step), the rank(s) involved and the reason, one of
// ErrTimeout, ErrMismatch, ErrAborted or ErrInvalid, which errors.Is
// recognises, as well as the cause passed to Group.Abort. A collective waits
// at most Options.Timeout. When ranks call different collectives at the
// same point, or the same one with different lengths, roots, ops or tags,
// the ranks that meet the other call get ErrMismatch, naming both calls,
// before any data moves between them. Any error fails the whole group:
// every pending collective on every rank returns, and every later call
// returns an error at once (wrapping the first failure). Group.Err tells
// why a group failed.
//
// Collectives never panic on bad input (that is ErrInvalid) and allocate
// nothing in steady state: the only memory they keep is each rank's scratch
// buffer, which grows to the largest size some algorithm needed and is reused.
package comm
