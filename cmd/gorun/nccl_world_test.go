package main

import (
	"os"
	"strings"
	"testing"

	"gorun/comm"
	"gorun/engine"
)

// clearLauncherEnv unsets the launchers' variables for the test.
func clearLauncherEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
}

func ncclCluster(processes int) engine.Cluster {
	c := engine.DefaultCluster()
	c.Backend, c.Transport, c.Processes = "cuda", "nccl", processes
	return c
}

// TestNCCLLauncher: under a launcher of 4 processes, a cluster with
// transport nccl that names no number of processes takes the launcher's
// (4 processes of one NCCL world, not 4 runs of one); one that names a
// number keeps it (placeProcess then checks it against MPI's), and
// without a launcher a cluster of one process stays one.
func TestNCCLLauncher(t *testing.T) {
	clearLauncherEnv(t)
	c := ncclCluster(0)
	detectLauncher(&c)
	if c.ProcessCount() != 1 || c.Transport != "nccl" {
		t.Errorf("no launcher: %d processes, transport %q", c.ProcessCount(), c.Transport)
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "1")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	c = ncclCluster(0)
	detectLauncher(&c)
	if c.Processes != 4 || c.Transport != "nccl" {
		t.Errorf("mpirun -np 4: %d processes, transport %q, want 4, nccl", c.Processes, c.Transport)
	}
	c = ncclCluster(2)
	detectLauncher(&c)
	if c.Processes != 2 {
		t.Errorf("cluster.processes = 2 under mpirun -np 4: %d processes", c.Processes)
	}
	c = engine.DefaultCluster()
	detectLauncher(&c)
	if c.Transport != "mpi" {
		t.Errorf("inproc under mpirun -np 4: transport %q, want mpi", c.Transport)
	}
}

// TestNCCLWithoutMPI: a gorun without MPI trains transport nccl in one
// process (a world of one: no MPI needed), and refuses several processes
// saying how to build one that has MPI.
func TestNCCLWithoutMPI(t *testing.T) {
	if comm.MPIAvailable() {
		t.Skip("this build has MPI")
	}
	clearLauncherEnv(t)
	c := ncclCluster(0)
	w, err := placeProcess(&c, true)
	if err != nil || w.procs != 1 || w.cross != nil {
		t.Errorf("one process: %+v %v", w, err)
	}
	c = ncclCluster(2)
	c.File = "nccl.toml"
	_, err = placeProcess(&c, true)
	want := `nccl.toml: 2 processes with transport "nccl" need MPI to start and meet: build gorun with ` + "`make build-cuda-mpi` (go build -tags \"cuda mpi\";"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("two processes without MPI: %v\nwant %s", err, want)
	}
	c = ncclCluster(2)
	if w, err := placeProcess(&c, false); err != nil || w.procs != 2 || w.proc != 0 {
		t.Errorf("plan of two processes: %+v %v", w, err)
	}
}

// TestHostRankOf: a process's host rank counts the lower ranks on its
// host, as mpirun's OMPI_COMM_WORLD_LOCAL_RANK does, whatever the mapping.
func TestHostRankOf(t *testing.T) {
	hosts := []string{"a", "b", "a", "a", "b"}
	want := []int{0, 0, 1, 2, 1}
	for p := range hosts {
		if got := hostRankOf(hosts, p); got != want[p] {
			t.Errorf("process %d on %s: host rank %d, want %d", p, hosts[p], got, want[p])
		}
	}
}
