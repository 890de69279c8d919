//go:build !mpi

package comm

import "time"

// PingPong returns the no-MPI error.
func (c *MPIComm) PingPong(peer int, buf []byte, reps int, lead bool) (time.Duration, error) {
	return 0, errNoMPI
}

// Exchange returns the no-MPI error.
func (c *MPIComm) Exchange(peer int, send, recv []byte, reps int) (time.Duration, error) {
	return 0, errNoMPI
}

// OneWay returns the no-MPI error.
func (c *MPIComm) OneWay(peer int, buf []byte, reps int, lead bool) (time.Duration, error) {
	return 0, errNoMPI
}
