// Package scaling predicts how a compiled Plan scales before it is
// launched (`gorun plan --predict`): the time of each training step from
// a measured one-device step, the time of each collective from an
// alpha–beta model per link class (the cluster file's [[link]] tables),
// how much of it the backward pass hides as the Plan places the buckets,
// and the resulting samples/s and scaling efficiency on the cluster and
// on 2×, 4×, … its hosts.
//
// It belongs to the compile half: it reads a Plan (package engine) and
// runs nothing. Errors name the user's thing (the missing [[link]] class,
// the step time); a prediction never fails half-way.
//
// The model, in three parts:
//
//   - Compute. One figure is measured: the time of one optimizer step of
//     one device at the Plan's local batch (the caller measures it, or
//     takes it from --step-time). It is shared out among the Plan's kernel
//     steps by a roofline estimate of each (stepCost: FLOPs of the
//     products at PeakFLOPs, bytes of every input and output at MemoryBW),
//     which only sets each step's share, never the total.
//   - Communication. Each collective step's time is the alpha–beta cost
//     (CollectiveTime) of its algorithm at each level it crosses: the
//     devices of a process (class "inproc"), then the processes (MPI:
//     class "process" on one host, "host" across hosts, where the slowest
//     edge of the ring sets the pace).
//   - Overlap. Collectives the Plan puts on the communication stream
//     (engine.Stream: "comm", the buckets of an overlapping sync) start
//     when both the step that completes them and the previous collective
//     are done, and run beside the rest of backward; the first step of
//     another phase (the update) waits for them. Collectives on the
//     compute stream run in order.
//
// Scaling to k× the hosts keeps the per-device batch (weak scaling, as
// Horovod's and DDP's published figures are measured): the compute per
// device is the same, the collectives span k× the processes.
package scaling

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/ops"
)

// The roofline figures that share the measured step out among the Plan's
// steps (ratios only matter): one core's fp32 peak and memory bandwidth
// on the machines gorun is measured on (docs/speed.md).
const (
	PeakFLOPs = 100e9 // FLOP/s
	MemoryBW  = 30e9  // bytes/s
)

// Topology is how the devices of a run are spread: hosts, processes on
// each host, devices in each process.
type Topology struct {
	Hosts, ProcsPerHost, Devices int
}

// TopologyOf reads a cluster's topology: its [[node]] hosts (each with the
// most slots of any), else one host holding every process.
func TopologyOf(c *engine.Cluster) Topology {
	t := Topology{Hosts: 1, ProcsPerHost: c.ProcessCount(), Devices: c.Devices}
	if len(c.Nodes) > 0 {
		t.Hosts, t.ProcsPerHost = len(c.Nodes), 0
		for _, h := range c.Nodes {
			t.ProcsPerHost = max(t.ProcsPerHost, h.Slots)
		}
	}
	return t
}

// Procs is the number of processes; World the number of devices.
func (t Topology) Procs() int { return t.Hosts * t.ProcsPerHost }

// World is the number of devices (ranks) of the run.
func (t Topology) World() int { return t.Procs() * t.Devices }

// String writes "2 hosts × 1 process × 1 device".
func (t Topology) String() string {
	return fmt.Sprintf("%s × %s × %s", plural(t.Hosts, "host"), plural(t.ProcsPerHost, "process"), plural(t.Devices, "device"))
}

func plural(n int, s string) string {
	if n == 1 {
		return "1 " + s
	}
	if strings.HasSuffix(s, "s") {
		return fmt.Sprintf("%d %ses", n, s)
	}
	return fmt.Sprintf("%d %ss", n, s)
}

// Links are the alpha–beta figures of each link class.
type Links map[engine.LinkClass]engine.Link

// LinksOf collects a cluster's [[link]] tables.
func LinksOf(c *engine.Cluster) Links {
	l := Links{}
	for _, x := range c.Links {
		l[x.Class] = x
	}
	return l
}

// bursty reports whether a link between processes has a burst.
func (l Links) bursty() bool {
	return l[engine.LinkProcess].Burst > 0 || l[engine.LinkHost].Burst > 0
}

// need returns the link of class, or an error saying how to give one.
func (l Links) need(class engine.LinkClass, why string) (engine.Link, error) {
	if x, ok := l[class]; ok {
		return x, nil
	}
	return engine.Link{}, fmt.Errorf("the cluster file has no [[link]] table with class = %q, which %s: add one, such as\n\n[[link]]\nclass = %q\nbandwidth = \"10Gbit/s\"\nlatency = \"50us\"\n\nor measure the links with `gorun launch --cluster C.toml --probe-links`", class, why, class)
}

// Level is one level of a collective: the ranks it spans over one link
// class, with which algorithm, and its time.
type Level struct {
	Class     engine.LinkClass
	Ranks     int
	Algorithm string // "ring", "tree", "direct", "mpi ring", "mpi recursive doubling", …
	Time      time.Duration
}

// Collective is one collective step of the Plan, timed.
type Collective struct {
	Step   int // 1-based, as gorun plan numbers the steps
	Kind   engine.CollectiveKind
	Tag    string
	Bytes  int64
	Every  int // runs every Every optimizer steps (0: each); Time is amortised
	Stream string
	Levels []Level
	// Time is the collective's whole time (its levels one after the
	// other); Start and End place it in the step, from the step's start;
	// Hidden is how much of it ran beside compute.
	Time, Start, End, Hidden time.Duration
}

// Prediction is one training step of a Plan on a topology.
type Prediction struct {
	Topology Topology
	// Compute is the measured step of one device; Forward, Backward and
	// Update its shares (the forward and backward of every micro-batch).
	Compute, Forward, Backward, Update time.Duration
	Collectives                        []Collective
	// Comm is the sum of the collectives' times, Exposed the part of it
	// that lengthens the step; Step the predicted step.
	Comm, Exposed, Step time.Duration
	// GlobalBatch is the samples of one optimizer step over every device.
	GlobalBatch int
	// SamplesPerS is GlobalBatch / Step; Efficiency the samples/s over
	// World × one device's (GlobalBatch/World / Compute): Compute / Step.
	SamplesPerS, Efficiency float64
}

// Predict times one optimizer step of p's first device on topo, its
// compute being compute (the measured step of one device at the Plan's
// local batch), its collectives timed over links. The Plan's collectives
// are those of its own world; on another topology (Scale) they keep their
// bytes and span topo's ranks.
func Predict(p *engine.Plan, topo Topology, compute time.Duration, links Links) (*Prediction, error) {
	if compute <= 0 {
		return nil, fmt.Errorf("the measured step time must be > 0, got %v", compute)
	}
	prog := p.Devices[0]
	acc := max(1, p.Spec.Accumulate)
	costs := stepCosts(prog)
	var total, fwd, bwd, upd float64
	for i, st := range prog.Steps {
		c := costs[i]
		switch st.Phase {
		case engine.PhaseForward:
			c *= float64(acc)
			fwd += c
		case engine.PhaseBackward:
			c *= float64(acc)
			bwd += c
		default:
			upd += c
		}
		total += c
	}
	if total == 0 {
		return nil, fmt.Errorf("the plan has no kernel steps to time")
	}
	scale := compute.Seconds() / total
	secs := func(x float64) time.Duration { return time.Duration(x * scale * 1e9) }
	pr := &Prediction{Topology: topo, Compute: compute, Forward: secs(fwd), Backward: secs(bwd), Update: secs(upd)}
	pr.GlobalBatch = p.Spec.BatchSize * topo.World() / max(1, p.World)

	// The earlier micro-batches run before the last one's steps, which
	// the timeline walks. A link with a burst holds what it refilled
	// since its last collective, the previous step's last one: a first
	// walk finds when that one ends, before the step's end.
	t0 := float64(acc-1) * (fwd + bwd) / float64(acc) * scale
	end, lastUse, busy, err := pr.timeline(p, topo, links, costs, scale, t0, math.Inf(-1))
	if err != nil {
		return nil, err
	}
	if links.bursty() {
		end, _, busy, err = pr.timeline(p, topo, links, costs, scale, t0, lastUse-end)
		if err != nil {
			return nil, err
		}
	}
	pr.Step = time.Duration(end * 1e9)
	pr.Exposed = pr.Step - compute
	if pr.Exposed < 0 {
		pr.Exposed = 0
	}
	for i := range pr.Collectives {
		c := &pr.Collectives[i]
		if c.Stream != "comm" {
			continue
		}
		var h float64
		for _, b := range busy {
			h += math.Max(0, math.Min(b[1], c.End.Seconds())-math.Max(b[0], c.Start.Seconds()))
		}
		c.Hidden = time.Duration(h * 1e9)
	}
	pr.SamplesPerS = float64(pr.GlobalBatch) / pr.Step.Seconds()
	pr.Efficiency = compute.Seconds() / pr.Step.Seconds()
	return pr, nil
}

// timeline walks the steps of p's first device from t (seconds from the
// step's start), each kernel step costs[i]·scale, each collective timed
// over links; the links between processes were last used at lastUse
// (−∞: long ago, a burst full). It sets pr's Collectives and Comm and
// returns when the step ends, when its last collective between
// processes ends, and when the compute stream ran kernels.
func (pr *Prediction) timeline(p *engine.Plan, topo Topology, links Links, costs []float64, scale, t, lastUse float64) (end, used float64, busy [][2]float64, err error) {
	prog := p.Devices[0]
	pr.Collectives, pr.Comm = nil, 0
	commFree := 0.0
	phase := engine.Phase(255)
	for i, st := range prog.Steps {
		if st.Kind != engine.CollectiveStep {
			if st.Phase != phase && phase != 255 {
				t = math.Max(t, commFree) // a new phase waits for the collectives
			}
			phase = st.Phase
			x := costs[i] * scale
			if n := len(busy); n > 0 && busy[n-1][1] == t {
				busy[n-1][1] = t + x
			} else {
				busy = append(busy, [2]float64{t, t + x})
			}
			t += x
			continue
		}
		start := math.Max(t, commFree)
		c, err := timeCollective(p, st, topo, links, start-lastUse)
		if err != nil {
			return 0, 0, nil, err
		}
		c.Step = i + 1
		d := c.Time.Seconds()
		if topo.Procs() > 1 {
			lastUse = start + d
		}
		if c.Stream == "comm" {
			commFree = start + d
		} else {
			t = start + d
			commFree = t
		}
		c.Start, c.End = time.Duration(start*1e9), time.Duration((start+d)*1e9)
		pr.Comm += c.Time
		pr.Collectives = append(pr.Collectives, c)
	}
	return math.Max(t, commFree), lastUse, busy, nil
}

// Scale predicts p's script on factor× topo's hosts, for each factor:
// the script is compiled again for that cluster (ScaledCluster), with the
// per-device batch of p's first device, so that the collectives are
// those of that world (a world of one has none, a sharded strategy's
// blocks shrink).
func Scale(p *engine.Plan, topo Topology, compute time.Duration, links Links, factors []int) ([]*Prediction, error) {
	var out []*Prediction
	for _, f := range factors {
		t := topo
		t.Hosts *= f
		q := p
		if f != 1 {
			s := *p.Spec
			s.BatchSize = p.LocalBatch[0] * t.World()
			var err error
			if q, err = engine.CompileProcess(&s, ScaledCluster(&p.Cluster, t), 0); err != nil {
				return nil, fmt.Errorf("on %s: %w", t, err)
			}
		}
		pr, err := Predict(q, t, compute, links)
		if err != nil {
			return nil, fmt.Errorf("on %s: %w", t, err)
		}
		out = append(out, pr)
	}
	return out, nil
}

// ScaledCluster is c spread over topo: topo.Hosts [[node]] tables of
// topo.ProcsPerHost slots (c's hosts first, then made-up names), MPI
// between processes when there are several.
func ScaledCluster(c *engine.Cluster, topo Topology) engine.Cluster {
	n := *c
	n.Processes, n.Weights, n.Nodes = 0, nil, nil
	for i := range topo.Hosts {
		h := fmt.Sprintf("host%d", i+1)
		if i < len(c.Nodes) {
			h = c.Nodes[i].Host
		}
		n.Nodes = append(n.Nodes, engine.Host{Host: h, Slots: topo.ProcsPerHost})
	}
	if topo.Procs() > 1 && n.Transport == "inproc" {
		n.Transport = "mpi"
	}
	return n
}

// timeCollective times the collective step st on topo: in the devices of
// a process, then across processes.
//
// idle is how long the link between processes has been idle (seconds,
// +Inf: long enough to fill its burst).
func timeCollective(p *engine.Plan, st *engine.Step, topo Topology, links Links, idle float64) (Collective, error) {
	c := st.Collective
	out := Collective{Kind: c.Kind, Tag: c.Tag, Bytes: c.Bytes, Every: st.Every, Stream: engine.Stream(p, st)}
	alg, err := comm.ParseAlgorithm(p.Cluster.Algorithm)
	if err != nil {
		return out, err
	}
	n := float64(c.Bytes)
	d, procs := topo.Devices, topo.Procs()
	if d > 1 {
		in, err := links.need(engine.LinkInProc, fmt.Sprintf("the %d devices of a process use for %s", d, c.Tag))
		if err != nil {
			return out, err
		}
		if procs == 1 {
			a := alg.Resolve(d, c.Elems)
			out.Levels = append(out.Levels, Level{engine.LinkInProc, d, a.String(), CollectiveTime(c.Kind, a, d, n, in)})
		} else {
			// comm.Hier: a tree reduction into local rank 0, the cross
			// collective, a tree broadcast back (for a reduction that
			// ends on every rank); one way only otherwise.
			ways := 1
			if c.Kind == engine.CollectiveAllReduce {
				ways = 2
			}
			tm := time.Duration(ways) * CollectiveTime(engine.CollectiveBroadcast, comm.Tree, d, n, in)
			out.Levels = append(out.Levels, Level{engine.LinkInProc, d, "tree", tm})
		}
	}
	if procs > 1 {
		class, why := engine.LinkProcess, fmt.Sprintf("the %d processes of one host use for %s", procs, c.Tag)
		if topo.Hosts > 1 {
			class, why = engine.LinkHost, fmt.Sprintf("the %d hosts use for %s", topo.Hosts, c.Tag)
		}
		l, err := links.need(class, why)
		if err != nil {
			return out, err
		}
		// [comm] algorithm is forced on MPI by gorun launch only with
		// transport "mpi" (cmd/gorun's mpiForced).
		forced := comm.Auto
		if p.Cluster.Transport == "mpi" {
			forced = alg
		}
		tokens := 0.0
		if l.Burst > 0 && idle > 0 {
			tokens = math.Min(float64(l.Burst), idle*l.OneWayAt(float64(l.Burst)))
		}
		name, tm := mpiTime(forced, c.Kind, procs, n, l, tokens)
		out.Levels = append(out.Levels, Level{class, procs, name, tm})
	}
	for _, lv := range out.Levels {
		out.Time += lv.Time
	}
	if st.Every > 1 {
		out.Time /= time.Duration(st.Every)
	}
	return out, nil
}

// smallBytes is where the MPI model of a reduce switches from a
// binomial tree to a pipelined chain (comm.AutoTreeMaxBytes, the same
// switch gorun's own Auto makes).
const smallBytes = comm.AutoTreeMaxBytes

// mpiTime is the alpha–beta time of a collective that MPI runs across
// procs processes: the algorithm Open MPI 4.1's coll/tuned runs for its
// size and bytes (TunedAlgorithm), or the one the cluster's [comm]
// algorithm forces on it (ForcedTuned, marked "forced"), timed by
// TunedTime, for an all-reduce, a broadcast, a reduce-scatter and an
// all-gather. A reduce: a binomial tree for small buffers, a pipelined
// chain for large ones.
func mpiTime(alg comm.Algorithm, kind engine.CollectiveKind, procs int, n float64, l engine.Link, tokens float64) (string, time.Duration) {
	if num, name, forced := MPIAlgorithm(alg, kind, procs, int64(n)); num != 0 {
		if forced {
			name += " (forced)"
		}
		return "mpi " + name, TunedTimeBurst(kind, num, procs, n, l, tokens)
	}
	if n <= smallBytes {
		return "mpi binomial tree", CollectiveTime(kind, comm.Tree, procs, n, l)
	}
	return "mpi pipelined chain", CollectiveTime(engine.CollectiveBroadcast, comm.Ring, procs, n, l)
}

// CollectiveTime is the alpha–beta time of one collective of kind over p
// ranks by algorithm alg on a buffer of n bytes (the payload of each
// rank, engine.Collective.Bytes), every hop crossing link l (α its
// latency, β its bandwidth for the hop's messages, BandwidthAt):
//
//	ring   all-reduce        2(p−1)·(α + n/(pβ))
//	       reduce-scatter,
//	       all-gather        (p−1)·(α + n/(pβ))
//	       reduce            (p−1)·(α + n/(pβ)) + α + (p−1)·n/(pβ)
//	       broadcast         (p−1)·α + n/β       (pipelined chain)
//	tree   all-reduce        2⌈log₂p⌉·(α + n/β)
//	       broadcast, reduce ⌈log₂p⌉·(α + n/β)
//	       all-gather,
//	       reduce-scatter    ⌈log₂p⌉·α + (p−1)/p·n/β
//	direct all-reduce        (p−1)·(α + n/β)     (every rank sends its
//	                                              buffer to every other)
//	       broadcast, reduce α + (p−1)·n/β      (through the root's link)
//	       all-gather,
//	       reduce-scatter    (p−1)·(α + n/(pβ))
//
// One rank (p ≤ 1) takes no time. Auto is resolved as comm does, by n.
func CollectiveTime(kind engine.CollectiveKind, alg comm.Algorithm, p int, n float64, l engine.Link) time.Duration {
	if p <= 1 {
		return 0
	}
	a := l.Latency.Seconds()
	pf := float64(p)
	logp := math.Ceil(math.Log2(pf))
	alg = alg.Resolve(p, int(n/4))
	// β is the link's rate for the messages each hop sends
	// (engine.Link.BandwidthAt): a ring's blocks of n/p, a tree's or a
	// direct send's whole buffer.
	b := l.BandwidthAt(n)
	if alg == comm.Ring && kind != engine.CollectiveBroadcast || alg == comm.Direct && kind.Blocks() {
		b = l.BandwidthAt(n / pf)
	}
	var s float64
	switch alg {
	case comm.Tree:
		switch kind {
		case engine.CollectiveAllReduce:
			s = 2 * logp * (a + n/b)
		case engine.CollectiveBroadcast, engine.CollectiveReduce:
			s = logp * (a + n/b)
		default:
			s = logp*a + (pf-1)/pf*n/b
		}
	case comm.Direct:
		switch kind {
		case engine.CollectiveAllReduce:
			s = (pf - 1) * (a + n/b)
		case engine.CollectiveBroadcast, engine.CollectiveReduce:
			s = a + (pf-1)*n/b
		default:
			s = (pf - 1) * (a + n/(pf*b))
		}
	default: // ring
		switch kind {
		case engine.CollectiveAllReduce:
			s = 2 * (pf - 1) * (a + n/(pf*b))
		case engine.CollectiveReduce:
			s = (pf-1)*(a+n/(pf*b)) + a + (pf-1)*n/(pf*b)
		case engine.CollectiveBroadcast:
			s = (pf-1)*a + n/b
		default:
			s = (pf - 1) * (a + n/(pf*b))
		}
	}
	return time.Duration(s * 1e9)
}

// stepCosts estimates each step of prog in seconds of a roofline machine
// (PeakFLOPs, MemoryBW): the bytes of its inputs and outputs, plus the
// FLOPs of a product (a step that takes a parameter or a gradient of two
// or more dimensions: a linear or convolution layer's forward or one of
// its gradients; a batch_matmul). Collectives cost 0 here.
func stepCosts(prog *engine.Program) []float64 {
	weights := map[*engine.Buffer]bool{}
	for _, b := range prog.Params {
		weights[b] = true
	}
	for _, b := range prog.Grads {
		weights[b] = true
	}
	out := make([]float64, len(prog.Steps))
	for i, st := range prog.Steps {
		if st.Kind == engine.CollectiveStep {
			continue
		}
		var elems float64
		for _, bs := range [][]*engine.Buffer{st.In, st.Out} {
			for _, b := range bs {
				if b != nil {
					elems += float64(b.Elems())
				}
			}
		}
		out[i] = 4*elems/MemoryBW + productFLOPs(st, weights)/PeakFLOPs
	}
	return out
}

// productFLOPs is the multiply-adds (×2) of a product step, 0 for others.
func productFLOPs(st *engine.Step, weights map[*engine.Buffer]bool) float64 {
	if st.Op == ops.BatchMatMul && len(st.In) >= 2 && len(st.Out) >= 1 && st.In[0] != nil && st.Out[0] != nil {
		a := st.In[0].Max
		if len(a) < 2 {
			return 0
		}
		k := a[len(a)-1]
		if st.Attrs.TransA {
			k = a[len(a)-2]
		}
		return 2 * float64(st.Out[0].Elems()) * float64(k)
	}
	var w *engine.Buffer
	for _, bs := range [][]*engine.Buffer{st.In, st.Out} {
		for _, b := range bs {
			if b != nil && weights[b] && len(b.Max) >= 2 {
				w = b
			}
		}
	}
	if w == nil {
		return 0
	}
	// The rows the weight multiplies: a batched buffer's elements over
	// its channels (the last dimension up to rank 3, [B, T, C]; the
	// second in NCHW).
	var rows float64
	for _, bs := range [][]*engine.Buffer{st.In, st.Out} {
		for _, b := range bs {
			if b == nil || !b.Batched || len(b.Max) < 2 {
				continue
			}
			ch := b.Max[len(b.Max)-1]
			if len(b.Max) == 4 {
				ch = b.Max[1]
			}
			rows = math.Max(rows, float64(b.Elems())/float64(max(1, ch)))
		}
	}
	return 2 * float64(w.Elems()) * rows
}
