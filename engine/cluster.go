package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Cluster is where a run executes: how many devices, of which kind, and
// how they talk. It comes from a cluster TOML file (see LoadCluster), from
// flags (see Set), or DefaultCluster, which is one CPU device.
type Cluster struct {
	Backend   string // "cpu" (default) or "cuda"
	Transport string // "inproc" (default), "mpi" or "nccl"
	Devices   int    // devices in each process (default 1)
	// Processes is the number of processes of the run (its MPI ranks);
	// 0 (the default) means the sum of the Nodes' slots, or 1 without
	// Nodes. See ProcessCount.
	Processes int
	// Algorithm is the collective algorithm: "auto" (default), "ring",
	// "tree" or "direct".
	Algorithm string
	// BucketMB overrides the script's all-reduce bucket size when > 0
	// (default 0: the script's).
	BucketMB float64
	// Timeout bounds every collective (default 60s).
	Timeout time.Duration
	// MemoryLimit bounds the memory the devices of this process may plan,
	// in bytes (default 0: the memory the host has available, for the cpu
	// backend; a GPU's own memory is checked when a device allocates).
	MemoryLimit int64
	// Eager runs a cuda device's steps one by one instead of replaying a
	// captured CUDA graph per step (default false: graphs).
	Eager bool
	// Libraries are paths of shared libraries the cuda backend tries
	// first, by name: "cublas", "nccl" (default none: the system's).
	Libraries map[string]string
	// Weights are per-device speeds for the weighted partition strategy,
	// one for each device of the world (ProcessCount()·Devices), in rank
	// order (nil, the default: equal).
	Weights []float64
	// Nodes lists the hosts of a multi-process run, for `gorun launch`
	// (default none).
	Nodes []Host
	// File is the TOML file the cluster came from, for errors.
	File string
}

// Host is one host of a multi-process run.
type Host struct {
	Host  string // host name or address, as mpirun's hostfile takes it
	Slots int    // processes to start there (≥ 1)
}

// The values Backend, Transport and Algorithm may take.
var (
	clusterBackends   = []string{"cpu", "cuda"}
	clusterTransports = []string{"inproc", "mpi", "nccl"}
	clusterAlgorithms = []string{"auto", "ring", "tree", "direct"}
)

// DefaultCluster is one CPU device in this process.
func DefaultCluster() Cluster {
	return Cluster{Backend: "cpu", Transport: "inproc", Devices: 1, Algorithm: "auto", Timeout: 60 * time.Second}
}

// ProcessCount is the number of processes of the run: Processes when set,
// else the sum of the Nodes' slots, else 1.
func (c *Cluster) ProcessCount() int {
	if c.Processes > 0 {
		return c.Processes
	}
	if n := c.Slots(); n > 0 {
		return n
	}
	return 1
}

// Slots is the sum of the Nodes' slots (0 without Nodes).
func (c *Cluster) Slots() int {
	n := 0
	for _, h := range c.Nodes {
		n += h.Slots
	}
	return n
}

// World is the number of devices of the whole run, its world size:
// ProcessCount()·Devices.
func (c *Cluster) World() int { return c.ProcessCount() * c.Devices }

// Validate checks the cluster's values, each on its own and against each
// other (weights against the world size, processes against transport and
// slots); an error is a *ClusterError naming the key. It does not check
// that this build has the backend and transport: that is CheckBuild.
func (c *Cluster) Validate() error {
	fail := func(key, format string, args ...any) error {
		return &ClusterError{File: c.File, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Devices < 1:
		return fail("cluster.devices", "must be ≥ 1, got %d", c.Devices)
	case c.Processes < 0:
		return fail("cluster.processes", "must be ≥ 0 (0: the sum of the [[node]] slots), got %d", c.Processes)
	case !slices.Contains(clusterBackends, c.Backend):
		return fail("cluster.backend", "must be %s, got %q", oneOf(clusterBackends), c.Backend)
	case !slices.Contains(clusterTransports, c.Transport):
		return fail("cluster.transport", "must be %s, got %q", oneOf(clusterTransports), c.Transport)
	case !slices.Contains(clusterAlgorithms, c.Algorithm):
		return fail("comm.algorithm", "must be %s, got %q", oneOf(clusterAlgorithms), c.Algorithm)
	case c.BucketMB < 0:
		return fail("comm.bucket_mb", "must be positive (0: the script's bucket size), got %g", c.BucketMB)
	case c.Timeout <= 0:
		return fail("comm.timeout", "must be positive, got %v", c.Timeout)
	}
	for i, h := range c.Nodes {
		if h.Host == "" {
			return fail("node.host", "node %d of %d has no host", i+1, len(c.Nodes))
		}
		if h.Slots < 1 {
			return fail("node.slots", "node %d of %d (%s): must be ≥ 1, got %d", i+1, len(c.Nodes), h.Host, h.Slots)
		}
	}
	if s := c.Slots(); c.Processes > 0 && s > 0 && c.Processes > s {
		return fail("cluster.processes", "%d processes but the [[node]] entries have only %d slots", c.Processes, s)
	}
	if n := c.ProcessCount(); n > 1 && c.Transport == "inproc" {
		return fail("cluster.transport", "\"inproc\" connects the devices of one process, but the cluster has %d processes: use \"mpi\" (or \"nccl\" with backend \"cuda\")", n)
	}
	if c.Transport == "nccl" && c.Backend != "cuda" {
		return fail("cluster.transport", "\"nccl\" needs backend \"cuda\", got backend %q", c.Backend)
	}
	if c.Weights != nil && len(c.Weights) != c.World() {
		if c.ProcessCount() == 1 {
			return fail("cluster.weights", "%d weights for %d devices: give one per device", len(c.Weights), c.Devices)
		}
		return fail("cluster.weights", "%d weights for %d devices (%d processes × %d devices): give one per device of the world", len(c.Weights), c.World(), c.ProcessCount(), c.Devices)
	}
	for i, w := range c.Weights {
		if !(w > 0) {
			return fail("cluster.weights", "weight of device %d must be positive, got %g", i, w)
		}
	}
	return nil
}

// CheckBuild reports whether this gorun build can run the cluster: whether
// haveBackends (say ["cpu"]) holds its Backend and haveTransports (say
// ["inproc"], see comm.Transports) its Transport. The error says which make
// target builds a gorun that has them and what that build needs.
func (c *Cluster) CheckBuild(haveBackends, haveTransports []string) error {
	where := "cluster"
	if c.File != "" {
		where = c.File
	}
	if !slices.Contains(haveBackends, c.Backend) {
		return fmt.Errorf("%s: cluster.backend %q is not in this gorun build (it has %s): %s",
			where, c.Backend, strings.Join(haveBackends, ", "), buildHint(c.Backend))
	}
	if !slices.Contains(haveTransports, c.Transport) {
		return fmt.Errorf("%s: cluster.transport %q is not in this gorun build (it has %s): %s",
			where, c.Transport, strings.Join(haveTransports, ", "), buildHint(c.Transport))
	}
	return nil
}

// buildHint says how to get a gorun with a backend or transport.
func buildHint(what string) string {
	switch what {
	case "cuda":
		return "build gorun with `make build-cuda` (-tags cuda); it needs Debian's nvidia-cuda-dev to build, and the CUDA driver (libcuda.so.1) and an NVIDIA GPU to run"
	case "nccl":
		return "build gorun with `make build-cuda` (-tags cuda); it needs the CUDA driver (libcuda.so.1), an NVIDIA GPU and NCCL (libnccl.so.2, loaded at run time)"
	case "mpi":
		return "build gorun with `make build-mpi` (-tags mpi); it needs OpenMPI: Debian's libopenmpi-dev to build and openmpi-bin (mpirun) to run"
	}
	return "no gorun build has it"
}

// oneOf writes `"a", "b" or "c"`.
func oneOf(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = fmt.Sprintf("%q", v)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
