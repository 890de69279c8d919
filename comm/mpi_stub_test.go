//go:build !mpi

package comm

import (
	"strings"
	"testing"
)

// TestNoMPI: the default build has no MPI, and says how to get it.
func TestNoMPI(t *testing.T) {
	if MPIAvailable() {
		t.Error("MPIAvailable() in a build without -tags mpi")
	}
	c, err := InitMPI()
	if c != nil || err == nil {
		t.Fatalf("InitMPI() = %v, %v", c, err)
	}
	for _, want := range []string{"make build-mpi", "libopenmpi-dev", "openmpi-bin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	var m *MPIComm
	if m.AllReduce(nil, Sum, Tag{}) == nil || m.Size() != 1 {
		t.Error("the stub MPIComm works")
	}
}
