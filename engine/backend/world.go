package backend

import (
	"time"

	"gorun/comm"
)

// WorldConnector is a Backend whose own transport (cuda's nccl) connects
// the devices of every process of a run into one group, instead of
// reducing inside the process and then across processes through the host
// communicators. The runner calls ConnectWorld in place of Connect when
// the cluster's transport is one the backend brings (its Target's
// Transports), also for a run of one device: the transport is set up
// (and its collectives used) even then.
type WorldConnector interface {
	// ConnectWorld joins this process's devices (one per Program, in rank
	// order) with the other processes' devices into one group of w.Size
	// ranks, and returns each local device's collectives. It returns
	// within w.Timeout or with an error: a rank that never joins fails
	// the others instead of holding them.
	ConnectWorld(devs []Device, w World) ([]Collectives, error)
}

// World is this process's place in a run's group, as a WorldConnector
// needs it.
type World struct {
	// Transport is the cluster's transport ("nccl").
	Transport string
	// Cross connects this process to the others (MPI): one rank per
	// process, Process being this one's. nil for a run of one process.
	Cross comm.Communicator
	// Process and Processes are this process's index and the number of
	// processes; HostRank is its rank among the processes of its host.
	Process, Processes, HostRank int
	// Ranks are the global ranks of this process's devices, in order;
	// Size the number of ranks of the run.
	Ranks []int
	Size  int
	// Devices is the number of devices each process runs (cluster.devices).
	Devices int
	// Timeout bounds the set-up (comm.timeout).
	Timeout time.Duration
}
