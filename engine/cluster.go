package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorun/engine/target"
)

// Cluster is where a run executes: how many devices, of which kind, and
// how they talk. It comes from a cluster TOML file (see LoadCluster), from
// flags (see Set), or DefaultCluster, which is one CPU device.
type Cluster struct {
	// Backend is the devices' backend: "cpu" (default), or another a
	// registered Target names ("cuda").
	Backend string
	// Transport connects the processes' devices: "inproc" (default),
	// "mpi", or one that comes with the backend ("nccl" with "cuda").
	Transport string
	Devices   int // devices in each process (default 1)
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
	// TCPFragment is [comm] tcp_fragment: how much of a message Open
	// MPI's TCP transport puts on a connection at a time (its put
	// fragments and its sockets' send buffers), for `gorun launch`:
	// 0 "auto" (the default; TCPFragmentBytes), -1 "off" (Open MPI's own),
	// else a size in bytes. See TCPFragmentBytes.
	TCPFragment int64
	// MemoryLimit bounds the memory the devices of this process may plan,
	// in bytes (default 0: the memory the host has available, for a
	// backend whose memory is the host's, target.Target.HostMemory; a
	// GPU's own memory is checked when a device allocates).
	MemoryLimit int64
	// NoFusion compiles the plan as the script wrote it, every op its own
	// step (cluster.fusion = false; default false: fused steps).
	NoFusion bool
	// Settings are the keys of the backends' tables that the file or Set
	// gave, in full ("cuda.eager": true), as each key's Parse returned
	// them (nil when none); BackendSettings fills in the defaults.
	Settings map[string]any
	// Weights are per-device speeds for the weighted partition strategy,
	// one for each device of the world (ProcessCount()·Devices), in rank
	// order (nil, the default: equal).
	Weights []float64
	// Nodes lists the hosts of a multi-process run, for `gorun launch`
	// (default none).
	Nodes []Host
	// Links are the [[link]] tables: the alpha–beta figures of each link
	// class, for `gorun plan --predict` (default none; see Link).
	Links []Link
	// Network is the network that `gorun launch` has OpenMPI use between
	// hosts, for its daemons and for the ranks' data: CIDR blocks
	// ("10.77.0.0/24") or interface names ("eth1"), comma-separated
	// ("", the default: OpenMPI tries every interface it finds).
	Network string
	// Bind is how `gorun launch` binds each process to cores: "none"
	// (the default, also ""), "core" or "socket". See BindPolicy.
	Bind string
	// SSH is how `gorun launch` reaches the hosts (the [ssh] table).
	SSH SSH
	// File is the TOML file the cluster came from, for errors.
	File string
}

// Host is one host of a multi-process run.
type Host struct {
	Host  string // host name or address, as mpirun's hostfile takes it
	Slots int    // processes to start there (≥ 1)
}

// SSH is how `gorun launch` reaches the hosts of a multi-process run: the
// cluster file's [ssh] table. Launch's own checks of the hosts and OpenMPI's
// start of its daemons (plm_rsh_agent, plm_rsh_args) use the same program
// and arguments (SSH.Args). Zero values leave ssh's own defaults (and
// ~/.ssh/config) in force.
type SSH struct {
	User    string   // ssh -l USER; "": ssh's (the local user)
	Port    int      // ssh -p PORT; 0: ssh's (22)
	Key     string   // ssh -i KEY -o IdentitiesOnly=yes; "": ssh's keys and agent
	Options []string // ssh -o NAME=VALUE, each in order, before launch's own
	// ConnectTimeout bounds connecting to a host, for launch's checks
	// and OpenMPI's start (0: DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Program is the ssh client, a name on PATH or a path ("": "ssh").
	Program string
}

// DefaultConnectTimeout is [ssh] connect_timeout's default.
const DefaultConnectTimeout = 10 * time.Second

// ProgramName is the ssh client to run: Program, or "ssh".
func (s *SSH) ProgramName() string {
	if s.Program == "" {
		return "ssh"
	}
	return s.Program
}

// Timeout is ConnectTimeout, or DefaultConnectTimeout when 0.
func (s *SSH) Timeout() time.Duration {
	if s.ConnectTimeout <= 0 {
		return DefaultConnectTimeout
	}
	return s.ConnectTimeout
}

// Args are the ssh client's arguments before the host: -l, -p, -i, the
// table's options, then BatchMode=yes (nothing may wait for a password
// on a terminal), ConnectTimeout and, when alive > 0, ServerAliveInterval
// = alive with ServerAliveCountMax = 3, so that a host that stops
// answering ends the session within 3·alive. ssh keeps the first value of
// an option, so the table's options override launch's.
func (s *SSH) Args(alive time.Duration) []string {
	var a []string
	if s.User != "" {
		a = append(a, "-l", s.User)
	}
	if s.Port != 0 {
		a = append(a, "-p", strconv.Itoa(s.Port))
	}
	if s.Key != "" {
		a = append(a, "-i", s.Key, "-o", "IdentitiesOnly=yes")
	}
	for _, o := range s.Options {
		a = append(a, "-o", o)
	}
	a = append(a, "-o", "BatchMode=yes", "-o", "ConnectTimeout="+strconv.Itoa(ceilSeconds(s.Timeout())))
	if alive > 0 {
		a = append(a, "-o", "ServerAliveInterval="+strconv.Itoa(ceilSeconds(alive)), "-o", "ServerAliveCountMax=3")
	}
	return a
}

// ceilSeconds is d in whole seconds, rounded up, at least 1.
func ceilSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// The values Bind may take ("" is "none").
var clusterBinds = []string{"none", "core", "socket"}

// BindPolicy is Bind, or "none" when unset. Processes are not bound by
// default: a gorun process runs Go's scheduler and garbage collector
// beside its devices' threads, which a single core would squeeze (Go
// sizes GOMAXPROCS to the cores a process may use), and OpenMPI counts the
// cores of each host as it sees them, so hosts that share cores (virtual
// machines, containers, network namespaces on one machine) all bind their
// first process to core 0. "core" suits hosts given whole to the run with
// no more processes than cores; "socket" keeps a process on its socket's
// memory.
func (c *Cluster) BindPolicy() string {
	if c.Bind == "" {
		return "none"
	}
	return c.Bind
}

// The values Transport and Algorithm may take; Backend takes a registered
// Target's name (target.Names), and Transport also a transport that comes
// with one (transports).
var (
	hostTransports    = []string{"inproc", "mpi"}
	clusterAlgorithms = []string{"auto", "ring", "tree", "direct"}
)

// transports are the transports a cluster may name: the host's (package
// comm's) and those that come with a registered backend.
func transports() []string {
	ts := slices.Clone(hostTransports)
	for _, t := range target.All() {
		for _, tr := range t.Transports {
			ts = append(ts, tr.Name)
		}
	}
	return ts
}

// Target is the registered Target of the cluster's backend, or nil.
func (c *Cluster) Target() *target.Target { return target.Lookup(c.Backend) }

// BackendSettings are the settings of the cluster's backend, by key of its
// table ("eager"): the file's or Set's value, else the key's default. The
// runner opens the backend's devices with them (backend.Options).
func (c *Cluster) BackendSettings() map[string]any {
	t := c.Target()
	if t == nil {
		return nil
	}
	out := make(map[string]any, len(t.Keys))
	for _, k := range t.Keys {
		out[k.Name] = k.Default
		if v, ok := c.Settings[t.Name+"."+k.Name]; ok {
			out[k.Name] = v
		}
	}
	return out
}

// MinTimeout is the shortest comm.timeout a cluster file or Set accepts:
// a collective given less fails while its data are still on the way,
// with every rank inside it. (A Cluster built in Go may hold less, as
// tests of timeouts do.)
const MinTimeout = 100 * time.Millisecond

// DefaultCluster is one CPU device in this process.
func DefaultCluster() Cluster {
	return Cluster{Backend: "cpu", Transport: "inproc", Devices: 1, Algorithm: "auto", Timeout: 60 * time.Second}
}

// settingsLine lists the settings that change what a run computes or how,
// for `gorun plan`: cluster.fusion and every key of the backend's table,
// defaults included ("cluster.fusion = true, cpu.help = true").
func (c *Cluster) settingsLine() string {
	parts := []string{fmt.Sprintf("cluster.fusion = %v", !c.NoFusion)}
	if t := c.Target(); t != nil {
		set := c.BackendSettings()
		for _, k := range t.Keys {
			v := set[k.Name]
			if s, ok := v.(string); ok {
				v = strconv.Quote(s)
			}
			parts = append(parts, fmt.Sprintf("%s.%s = %v", t.Name, k.Name, v))
		}
	}
	return strings.Join(parts, ", ")
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
	case len(target.Names()) == 0:
		return fail("cluster.backend", "no backend is registered in this program (import gorun/engine/backend/cpu)")
	case c.Target() == nil:
		return fail("cluster.backend", "must be %s, got %q", oneOf(target.Names()), c.Backend)
	case !slices.Contains(transports(), c.Transport):
		return fail("cluster.transport", "must be %s, got %q", oneOf(transports()), c.Transport)
	case !slices.Contains(clusterAlgorithms, c.Algorithm):
		return fail("comm.algorithm", "must be %s, got %q", oneOf(clusterAlgorithms), c.Algorithm)
	case c.BucketMB < 0:
		return fail("comm.bucket_mb", "must be positive (0: the script's bucket size), got %g", c.BucketMB)
	case c.Timeout <= 0:
		return fail("comm.timeout", "must be positive, got %v", c.Timeout)
	}
	for i, h := range c.Nodes {
		if msg := CheckHost(h.Host); msg != "" {
			return fail(fmt.Sprintf("node[%d].host", i+1), "%s", msg)
		}
		if h.Slots < 1 {
			return fail(fmt.Sprintf("node[%d].slots", i+1), "must be ≥ 1, got %d", h.Slots)
		}
	}
	if msg := CheckNetwork(c.Network); msg != "" {
		return fail("cluster.network", "%s", msg)
	}
	if c.Bind != "" && !slices.Contains(clusterBinds, c.Bind) {
		return fail("cluster.bind", "must be %s, got %q", oneOf(clusterBinds), c.Bind)
	}
	if key, msg := c.SSH.check(); msg != "" {
		return fail(key, "%s", msg)
	}
	if s := c.Slots(); c.Processes > 0 && s > 0 && c.Processes > s {
		return fail("cluster.processes", "%d processes but the [[node]] entries have only %d slots", c.Processes, s)
	}
	if n := c.ProcessCount(); n > 1 && c.Transport == "inproc" {
		var or []string
		for _, t := range target.All() {
			for _, tr := range t.Transports {
				or = append(or, fmt.Sprintf(" (or %q with backend %q)", tr.Name, t.Name))
			}
		}
		return fail("cluster.transport", "\"inproc\" connects the devices of one process, but the cluster has %d processes: use \"mpi\"%s", n, strings.Join(or, ""))
	}
	if o := target.TransportOwner(c.Transport); o != nil && o.Name != c.Backend {
		return fail("cluster.transport", "%q needs backend %q, got backend %q", c.Transport, o.Name, c.Backend)
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

// buildHint says how to get a gorun with a backend or transport: the
// Target's hint for a backend or a transport that comes with one.
func buildHint(what string) string {
	if t := target.Lookup(what); t != nil && t.Hint != "" {
		return t.Hint
	}
	if t := target.TransportOwner(what); t != nil {
		for _, tr := range t.Transports {
			if tr.Name == what && tr.Hint != "" {
				return tr.Hint
			}
		}
	}
	if what == "mpi" {
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
	if len(q) == 0 {
		return "one of none (nothing is registered)"
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// Bounds and the auto rule of [comm] tcp_fragment (TCPFragmentBytes).
const (
	MinTCPFragment  = 4 << 10  // the smallest size the key takes
	MaxTCPFragment  = 1 << 30  // the largest
	AutoTCPFragment = 32 << 10 // auto's least
	// TCPFragmentTime is how long auto's fragment takes on the host link.
	TCPFragmentTime = 250 * time.Microsecond
)

// TCPFragmentBytes is how many bytes of a message `gorun launch` lets
// Open MPI's TCP transport put on a connection at a time: its put
// fragments (btl_tcp_rdma_pipeline_frag_size) and its sockets' send
// buffers (btl_tcp_sndbuf); 0 leaves Open MPI's own (the whole message
// one fragment, buffers as large as the kernel's autotuning makes them).
//
// Open MPI's TCP transport carries a rendezvous's control messages (the
// receiver's go-ahead) on the same connection as the other direction's
// data, behind whatever of it is queued. In an exchange whose two ranks
// come to it apart, the later one's go-ahead then waits behind the
// earlier one's whole message, and the two directions run one after
// the other instead of at once. On the namespace hosts at 200 Mbit/s
// (docs/scaling.md) two chained exchanges of 1.59 MiB took 208 ms with
// Open MPI's own sizes, 142 ms (both directions at once) now and then,
// and 142–148 ms every time with 32 KiB; at 1 Gbit/s 40 ms (28 ms now
// and then) against 28 ms. Fragments that small cost CPU on a fast link
// (unshaped, 3.7–5.2 ms against 1.3–2.4 ms; 128 KiB 1.7–3.0 ms, 640
// KiB 1.5–2.6 ms), so auto takes TCPFragmentTime of the host link's
// rate, at least AutoTCPFragment, rounded up to a power of two.
//
// "auto" (TCPFragment 0) sizes it from the [[link]] table of class
// "host" (its one_way rate, else its bandwidth): 32 KiB up to 1 Gbit/s,
// 256 KiB at 8 Gbit/s, 4 MiB at 100 Gbit/s; without one, 0. "off" (−1):
// 0. A size: that size.
func (c *Cluster) TCPFragmentBytes() int64 {
	switch {
	case c.TCPFragment > 0:
		return c.TCPFragment
	case c.TCPFragment < 0:
		return 0
	}
	l, ok := c.Link(LinkHost)
	if !ok {
		return 0
	}
	rate := l.OneWay
	if rate <= 0 {
		rate = l.Bandwidth
	}
	want := rate * TCPFragmentTime.Seconds()
	n := int64(AutoTCPFragment)
	for float64(n) < want && n < MaxTCPFragment {
		n *= 2
	}
	return n
}
