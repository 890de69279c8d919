//go:build mpi

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNCCLWorldJoin runs TestNCCLWorldJoinRank as 3 processes under
// mpirun (this test binary, built with -tags mpi): how a process of an
// NCCL run joins its world, without a GPU.
func TestNCCLWorldJoin(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		t.Skip("the launcher; TestNCCLWorldJoinRank is the rank")
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	cmd := exec.Command(path, "--allow-run-as-root", "--oversubscribe", "-np", "3",
		os.Args[0], "-test.run", "^TestNCCLWorldJoinRank$", "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "--- PASS: TestNCCLWorldJoinRank") != 3 {
		t.Fatalf("mpirun -np 3: %v\n%s", err, out)
	}
}

// TestNCCLWorldJoinRank is one process of TestNCCLWorldJoin: a cluster
// with transport nccl and no number of processes takes mpirun's 3, joins
// MPI, and — the launcher's local rank hidden — works out its host rank
// from the host names (all 3 on this host: its own rank).
func TestNCCLWorldJoinRank(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		t.Skip("runs under mpirun, started by TestNCCLWorldJoin")
	}
	rank, _ := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_RANK"))
	os.Unsetenv("OMPI_COMM_WORLD_LOCAL_RANK")
	c := ncclCluster(0)
	c.Timeout = 20 * time.Second
	detectLauncher(&c)
	w, err := placeProcess(&c, true)
	if err != nil {
		t.Fatal(err)
	}
	defer leaveMPI(nil)
	if w.procs != 3 || w.proc != rank || c.Processes != 3 || w.cross == nil {
		t.Fatalf("rank %d: world %+v, cluster.processes %d", rank, w, c.Processes)
	}
	if !w.hostRankSet || w.hostRank != rank {
		t.Errorf("rank %d: host rank %d (set %v), want %d", rank, w.hostRank, w.hostRankSet, rank)
	}
	fmt.Fprintf(os.Stderr, "rank %d of %d: host rank %d\n", w.proc, w.procs, w.hostRank)
}
