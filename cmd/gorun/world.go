package main

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/target"
)

// world is this process's place in a run of several processes.
type world struct {
	proc, procs int
	cross       *comm.MPIComm // nil for a single process, or for `plan`
	// hostRank is this process's rank among its host's processes when
	// gorun worked it out (hostRankSet): the launcher did not say, and
	// the transport (nccl) needs one GPU per rank (see ownHostRank).
	hostRank    int
	hostRankSet bool
}

// placeProcess decides which process of the cluster this one is. With
// transport "mpi" it reads the launcher's environment (mpirun's
// OMPI_COMM_WORLD_*, or RANK/WORLD_SIZE): for `plan` that is all; for
// training it joins MPI, whose world then sets the number of processes.
// Without a launcher a multi-process cluster plans (and refuses to train)
// as process 0.
func placeProcess(c *engine.Cluster, train bool) (*world, error) {
	w := &world{procs: c.ProcessCount()}
	if c.Transport != "mpi" && w.procs == 1 {
		return w, nil
	}
	if c.Transport != "mpi" && train && !comm.MPIAvailable() {
		// NCCL moves the tensors, but its processes find each other through MPI.
		return nil, fmt.Errorf("%s: %d processes with transport %q need MPI to start and meet: build gorun with `make build-cuda-mpi` (go build -tags \"cuda mpi\"; needs libopenmpi-dev and nvidia-cuda-dev)", clusterName(c), w.procs, c.Transport)
	}
	rank, size, _, ok := comm.EnvWorld()
	if !ok {
		if !train {
			return w, nil
		}
		if w.procs > 1 {
			return nil, fmt.Errorf("%s: transport %q with %d processes: start the run with `gorun launch --cluster %s SCRIPT` (or mpirun -np %d gorun …)", clusterName(c), c.Transport, w.procs, clusterName(c), w.procs)
		}
	}
	if train {
		m, err := joinMPI(c.Timeout, rank, size, ok)
		if err != nil {
			return nil, err
		}
		if ok && size != m.Size() {
			return nil, fmt.Errorf("the environment says a world of %d processes (rank %d), but MPI started %d: start the ranks with mpirun or `gorun launch`, which connect them", size, rank, m.Size())
		}
		rank, size = m.Rank(), m.Size()
		m.SetTimeout(c.Timeout)
		w.cross = m
	}
	if c.Processes > 0 && c.Processes != size {
		return nil, fmt.Errorf("%s: cluster.processes is %d, but %d processes were started", clusterName(c), c.Processes, size)
	}
	c.Processes = size
	w.proc, w.procs = rank, size
	if w.cross != nil && c.Transport != "mpi" {
		if err := ownHostRank(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func clusterName(c *engine.Cluster) string {
	if c.File != "" {
		return c.File
	}
	return "cluster"
}

// detectLauncher turns a plain `mpirun -np N gorun …` (no cluster file
// saying so) into an MPI run of N processes: a cluster with the default
// in-process transport started by a launcher of several processes takes
// transport "mpi".
//
// A cluster whose transport comes with its backend (nccl) and that names
// no number of processes takes the launcher's: `mpirun -np 4 gorun
// --cluster nccl.toml` is 4 processes of one NCCL world, not 4 runs.
func detectLauncher(c *engine.Cluster) {
	_, size, _, ok := comm.EnvWorld()
	if !ok || size <= 1 || c.ProcessCount() != 1 {
		return
	}
	switch {
	case c.Transport == "inproc":
		c.Transport = "mpi"
	case target.TransportOwner(c.Transport) != nil:
		c.Processes = size
	}
}

// mpiWorld is MPI once joined (one MPI_Init per process); mpiJoined
// holds it too, for the signal handler's goroutine.
var (
	mpiWorld  *comm.MPIComm
	mpiJoined atomic.Pointer[comm.MPIComm]
)

// MPI_Init returns only once every process of the mpirun job has called
// it: a process that never does (`gorun plan` among training ranks, or
// another program) would leave this one waiting for ever, unreachable by
// comm.timeout's watchdog, which guards collectives. So joining has its own
// deadline, the same comm.timeout: past it the process names itself and
// what went wrong, and exits (mpirun then ends the job).
func joinMPI(timeout time.Duration, rank, size int, known bool) (*comm.MPIComm, error) {
	if mpiWorld != nil {
		return mpiWorld, nil
	}
	if timeout <= 0 {
		timeout = comm.DefaultTimeout
	}
	who := "this process"
	if known {
		who = fmt.Sprintf("rank %d of %d", rank, size)
	}
	watchdog := time.AfterFunc(timeout, func() {
		fmt.Fprintf(os.Stderr, "gorun: %s: MPI_Init did not finish within comm.timeout (%v): another process of this mpirun job never joined MPI; every rank must train the same script (did one run `gorun plan`, or another program?)\n", who, timeout)
		os.Exit(1)
	})
	m, err := comm.InitMPI()
	watchdog.Stop()
	if err != nil {
		return nil, err
	}
	mpiWorld = m
	mpiJoined.Store(m)
	return m, nil
}

// leaveMPI ends MPI at exit: after a failure on a process of a run of
// several it aborts the whole job (naming this rank and the error), so no
// other rank waits for it in a collective; otherwise it finalises.
func leaveMPI(err error) {
	if mpiWorld == nil {
		return
	}
	var ie *interrupted
	if err != nil && !errors.As(err, &ie) && mpiWorld.Size() > 1 {
		// An interrupt stops every rank after the same step, together; any
		// other failure of this rank must not leave the others waiting.
		mpiWorld.Abort(err.Error())
		os.Exit(1) // Abort does not return; in case it did
	}
	mpiWorld.Finalize()
}

// checkBuild says how to get a gorun that has the cluster's backend and
// transport when this one lacks them. The transports are comm's and those
// that come with a backend this gorun has (nccl with cuda).
func checkBuild(c *engine.Cluster) error {
	transports := comm.Transports()
	for _, name := range backend.Names() {
		for _, tr := range target.Lookup(name).Transports {
			transports = append(transports, tr.Name)
		}
	}
	return c.CheckBuild(backend.Names(), transports)
}

// ownHostRank works out this process's rank among the processes of its
// host when the launcher does not say (no OMPI_COMM_WORLD_LOCAL_RANK or
// LOCAL_RANK): every process tells the others its host name, and a
// process's host rank is the number of lower ranks on the same host.
// Process k of a host opens GPUs from k·devices on, so a transport of one
// rank per GPU (nccl) needs it right; without it every process would take
// the first GPU.
func ownHostRank(w *world) error {
	if _, set := comm.EnvLocalRank(); set {
		return nil
	}
	host, _ := os.Hostname()
	card, err := comm.EncodeCard(hostCardBytes, host)
	if err != nil {
		return fmt.Errorf("host name %q: %w", host, err)
	}
	cards, err := comm.GatherBytes(w.cross, card, comm.Tag{Name: "host names (for each process's GPUs)"})
	if err != nil {
		return err
	}
	hosts := make([]string, len(cards))
	for r, c := range cards {
		f, err := comm.DecodeCard(c, 1)
		if err != nil {
			return fmt.Errorf("process %d's host name: %w", r, err)
		}
		hosts[r] = f[0]
	}
	w.hostRank, w.hostRankSet = hostRankOf(hosts, w.proc), true
	return nil
}

// hostCardBytes holds a host name (at most 255 bytes) and its end.
const hostCardBytes = 256

// hostRankOf is the number of processes before proc whose host is proc's.
func hostRankOf(hosts []string, proc int) int {
	n := 0
	for _, h := range hosts[:proc] {
		if h == hosts[proc] {
			n++
		}
	}
	return n
}
