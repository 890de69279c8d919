//go:build !mpi

package comm

import (
	"errors"
	"time"
)

// errNoMPI is what the MPI functions of a build without MPI return.
var errNoMPI = errors.New("comm: this gorun was built without MPI: build it with `make build-mpi` (go build -tags mpi), which needs OpenMPI: Debian's libopenmpi-dev to build and openmpi-bin (mpirun) to run")

// MPIAvailable reports whether this build has the MPI transport: false,
// it was built without -tags mpi.
func MPIAvailable() bool { return false }

// MPIComm is this process's rank of MPI_COMM_WORLD in a build with MPI
// (-tags mpi). In this build there is none: InitMPI returns an error, and
// the methods exist only so that code using MPIComm builds either way.
type MPIComm struct{}

var _ Communicator = (*MPIComm)(nil)

// InitMPI returns an error saying how to build gorun with MPI.
func InitMPI() (*MPIComm, error) { return nil, errNoMPI }

// Finalize returns the no-MPI error.
func (c *MPIComm) Finalize() error { return errNoMPI }

// Rank returns 0.
func (c *MPIComm) Rank() int { return 0 }

// Size returns 1.
func (c *MPIComm) Size() int { return 1 }

// SetTimeout does nothing.
func (c *MPIComm) SetTimeout(time.Duration) {}

// Abort panics with msg: without MPI there is no job to abort.
func (c *MPIComm) Abort(msg string) { panic("comm: Abort without MPI: " + msg) }

// Who returns "rank 0 of 1".
func (c *MPIComm) Who() string { return "rank 0 of 1" }

// Pending returns ok false: no collective runs without MPI.
func (c *MPIComm) Pending() (call string, waited time.Duration, ok bool) { return "", 0, false }

// Broadcast returns the no-MPI error.
func (c *MPIComm) Broadcast([]float32, int, Tag) error { return errNoMPI }

// Reduce returns the no-MPI error.
func (c *MPIComm) Reduce([]float32, int, ReduceOp, Tag) error { return errNoMPI }

// AllReduce returns the no-MPI error.
func (c *MPIComm) AllReduce([]float32, ReduceOp, Tag) error { return errNoMPI }

// AllGather returns the no-MPI error.
func (c *MPIComm) AllGather(_, _ []float32, _ Tag) error { return errNoMPI }

// ReduceScatter returns the no-MPI error.
func (c *MPIComm) ReduceScatter(_, _ []float32, _ ReduceOp, _ Tag) error { return errNoMPI }

// Barrier returns the no-MPI error.
func (c *MPIComm) Barrier(Tag) error { return errNoMPI }
