package scaling

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
	_ "gorun/engine/backend/cpu"
	"gorun/script"
)

type memFile string

func (m memFile) ReadFile(path string) ([]byte, error) {
	if path == "/t/train.star" {
		return []byte(m), nil
	}
	return nil, os.ErrNotExist
}

// net is a small MNIST-shaped convolutional net with buckets of 0.1 MB,
// so that its 0.1 MB of gradients make several buckets.
const net = `
train(
    model = nn.sequential(
        nn.conv2d(1, 10, kernel = 5, name = "conv1"), nn.maxpool2d(2), nn.relu(),
        nn.conv2d(10, 20, kernel = 5, name = "conv2"), nn.maxpool2d(2), nn.relu(),
        nn.flatten(),
        nn.linear(320, 50, name = "fc1"), nn.relu(),
        nn.linear(50, 10, name = "fc2"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.synthetic(size = 512, shape = (1, 28, 28), classes = 10),
    sync = sync.allreduce(op = "mean", bucket_mb = 0.02, overlap = OVERLAP),
    optimizer = optim.sgd(lr = 0.01, momentum = 0.5),
    batch_size = 128,
    epochs = 1,
)
`

// plan compiles net for hosts hosts of one process each.
func plan(t *testing.T, overlap bool, hosts int, links ...engine.Link) *engine.Plan {
	t.Helper()
	src := strings.Replace(net, "OVERLAP", map[bool]string{true: "True", false: "False"}[overlap], 1)
	s, err := script.Load("/t/train.star", script.WithFileReader(memFile(src)))
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultCluster()
	c.Transport = "mpi"
	for i := range hosts {
		c.Nodes = append(c.Nodes, engine.Host{Host: "10.0.0." + string(rune('1'+i)), Slots: 1})
	}
	c.Links = links
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var gbit = engine.Link{Class: engine.LinkHost, Bandwidth: 125e6, Latency: 50 * time.Microsecond}

func near(a, b time.Duration) bool { return math.Abs(float64(a-b)) <= 2 }

// TestCollectiveTime checks the alpha–beta formulas against figures
// worked out by hand: 1 MB over 4 ranks, α 10 µs, β 1 GB/s.
func TestCollectiveTime(t *testing.T) {
	l := engine.Link{Bandwidth: 1e9, Latency: 10 * time.Microsecond}
	const n = 1e6
	us := time.Microsecond
	for _, tc := range []struct {
		kind engine.CollectiveKind
		alg  comm.Algorithm
		p    int
		want time.Duration
	}{
		{engine.CollectiveAllReduce, comm.Ring, 4, 2 * 3 * (10*us + 250*us)},  // 1.56 ms
		{engine.CollectiveAllReduce, comm.Tree, 4, 2 * 2 * (10*us + 1000*us)}, // 4.04 ms
		{engine.CollectiveAllReduce, comm.Direct, 4, 3 * (10*us + 1000*us)},
		{engine.CollectiveAllReduce, comm.Auto, 4, 2 * 3 * (10*us + 250*us)},  // Auto: 1 MB goes Ring
		{engine.CollectiveAllReduce, comm.Tree, 5, 2 * 3 * (10*us + 1000*us)}, // ⌈log₂5⌉ = 3
		{engine.CollectiveReduceScatter, comm.Ring, 4, 3 * (10*us + 250*us)},
		{engine.CollectiveAllGather, comm.Ring, 4, 3 * (10*us + 250*us)},
		{engine.CollectiveBroadcast, comm.Ring, 4, 3*10*us + 1000*us},
		{engine.CollectiveBroadcast, comm.Tree, 4, 2 * (10*us + 1000*us)},
		{engine.CollectiveReduce, comm.Ring, 4, 3*(10*us+250*us) + 10*us + 750*us},
		{engine.CollectiveBroadcast, comm.Direct, 4, 10*us + 3000*us},
		{engine.CollectiveAllReduce, comm.Ring, 1, 0},
	} {
		if got := CollectiveTime(tc.kind, tc.alg, tc.p, n, l); !near(got, tc.want) {
			t.Errorf("%s %s over %d: %v, want %v", tc.kind, tc.alg, tc.p, got, tc.want)
		}
	}
	// With by_size, each hop's messages take their own rate: a ring's
	// blocks of 250 kB go at the 256KiB rate.
	sized := l
	sized.BySize = []engine.SizeRate{{Size: 256 << 10, Bandwidth: 2e9}, {Size: 1 << 20, Bandwidth: 1e9}}
	if got, want := CollectiveTime(engine.CollectiveAllReduce, comm.Ring, 4, n, sized), 2*3*(10*us+125*us); !near(got, want) {
		t.Errorf("ring with by_size: %v, want %v", got, want)
	}
	// Auto sends a small buffer Direct, as comm does.
	if got, want := CollectiveTime(engine.CollectiveAllReduce, comm.Auto, 4, 64, l), 3*(10*us+64*time.Nanosecond); !near(got, want) {
		t.Errorf("auto on 64 B: %v, want direct's %v", got, want)
	}
}

// TestPredictWithoutOverlap: with the buckets after backward, the step is
// the compute plus every collective, each a ring all-reduce across the
// hosts; the compute's shares add up to the measured step.
func TestPredictWithoutOverlap(t *testing.T) {
	p := plan(t, false, 3, gbit)
	const compute = 20 * time.Millisecond
	pr, err := Predict(p, TopologyOf(&p.Cluster), compute, LinksOf(&p.Cluster))
	if err != nil {
		t.Fatal(err)
	}
	if d := pr.Forward + pr.Backward + pr.Update - compute; d < -3 || d > 3 {
		t.Errorf("forward %v + backward %v + update %v ≠ %v", pr.Forward, pr.Backward, pr.Update, compute)
	}
	if pr.Forward <= 0 || pr.Backward <= pr.Forward/2 || pr.Update <= 0 {
		t.Errorf("shares forward %v, backward %v, update %v: want backward near twice forward", pr.Forward, pr.Backward, pr.Update)
	}
	var buckets int
	var want time.Duration
	for _, c := range pr.Collectives {
		if c.Stream != "compute" {
			t.Errorf("%s on stream %s without overlap", c.Tag, c.Stream)
		}
		if strings.HasPrefix(c.Tag, "bucket ") {
			buckets++
			if len(c.Levels) != 1 || c.Levels[0].Class != engine.LinkHost || c.Levels[0].Ranks != 3 {
				t.Errorf("%s: levels %+v, want one over the 3 hosts", c.Tag, c.Levels)
			}
			alg, name := TunedAlgorithm(engine.CollectiveAllReduce, 3, c.Bytes)
			if w := TunedTime(engine.CollectiveAllReduce, alg, 3, float64(c.Bytes), gbit); !near(c.Time, w) || c.Levels[0].Algorithm != "mpi "+name {
				t.Errorf("%s (%d B): %v by %q, want Open MPI's %s's %v", c.Tag, c.Bytes, c.Time, c.Levels[0].Algorithm, name, w)
			}
		}
		want += c.Time
	}
	if buckets < 3 {
		t.Fatalf("%d buckets, want several (bucket_mb = 0.02)", buckets)
	}
	if !near(pr.Comm, want) || !near(pr.Step, compute+want) || !near(pr.Exposed, want) {
		t.Errorf("step %v, comm %v, exposed %v; want %v + %v", pr.Step, pr.Comm, pr.Exposed, compute, want)
	}
	if e := compute.Seconds() / pr.Step.Seconds(); math.Abs(pr.Efficiency-e) > 1e-9 {
		t.Errorf("efficiency %g, want %g", pr.Efficiency, e)
	}
	if want := float64(128) / pr.Step.Seconds(); math.Abs(pr.SamplesPerS-want) > 1e-6*want {
		t.Errorf("samples/s %g, want %g", pr.SamplesPerS, want)
	}
}

// TestPredictOverlap: with overlap the buckets start during backward, so
// the step is shorter than without, but never shorter than the compute
// or than the communication after the first bucket is ready.
func TestPredictOverlap(t *testing.T) {
	const compute = 20 * time.Millisecond
	for _, bw := range []float64{125e6, 6.25e6} { // 1 Gbit/s: comm < backward; 50 Mbit/s: comm ≫ compute
		l := gbit
		l.Bandwidth = bw
		seq, err := Predict(plan(t, false, 2, l), Topology{2, 1, 1}, compute, Links{engine.LinkHost: l})
		if err != nil {
			t.Fatal(err)
		}
		p := plan(t, true, 2, l)
		ov, err := Predict(p, TopologyOf(&p.Cluster), compute, LinksOf(&p.Cluster))
		if err != nil {
			t.Fatal(err)
		}
		var hidden, buckets time.Duration
		firstStart := time.Duration(math.MaxInt64)
		for _, c := range ov.Collectives {
			if strings.HasPrefix(c.Tag, "bucket ") {
				if c.Stream != "comm" {
					t.Errorf("%s on stream %s with overlap", c.Tag, c.Stream)
				}
				hidden += c.Hidden
				buckets += c.Time
				firstStart = min(firstStart, c.Start)
			}
		}
		if hidden <= 0 || ov.Step >= seq.Step {
			t.Errorf("β %g: overlap step %v (hidden %v), without %v: want shorter", bw, ov.Step, hidden, seq.Step)
		}
		if ov.Step < compute || ov.Step < firstStart+buckets {
			t.Errorf("β %g: overlap step %v shorter than compute %v or first bucket's start %v + buckets %v", bw, ov.Step, compute, firstStart, buckets)
		}
		if firstStart < ov.Forward {
			t.Errorf("β %g: a bucket starts at %v, before backward (forward ends at %v)", bw, firstStart, ov.Forward)
		}
	}
}

// TestScaleEfficiency: on more hosts the ring's time grows towards
// 2·n/β and the efficiency falls, never rising; the global batch grows
// with the devices.
func TestScaleEfficiency(t *testing.T) {
	p := plan(t, true, 2, gbit)
	ps, err := Scale(p, TopologyOf(&p.Cluster), 20*time.Millisecond, LinksOf(&p.Cluster), []int{1, 2, 4, 32, 256})
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range ps {
		if pr.GlobalBatch != 64*pr.Topology.World() {
			t.Errorf("%d hosts: global batch %d, want 64 a device", pr.Topology.Hosts, pr.GlobalBatch)
		}
		if i > 0 && pr.Efficiency > ps[i-1].Efficiency {
			t.Errorf("efficiency rises from %d hosts (%.3f) to %d (%.3f)", ps[i-1].Topology.Hosts, ps[i-1].Efficiency, pr.Topology.Hosts, pr.Efficiency)
		}
	}
	if ps[0].Topology.Hosts != 2 || ps[4].Topology.Hosts != 512 {
		t.Errorf("hosts %d … %d, want 2 … 512", ps[0].Topology.Hosts, ps[4].Topology.Hosts)
	}
}

// TestMissingLink: a prediction that needs a link class the cluster file
// lacks says which and how to give it.
func TestMissingLink(t *testing.T) {
	p := plan(t, true, 2)
	_, err := Predict(p, TopologyOf(&p.Cluster), 20*time.Millisecond, LinksOf(&p.Cluster))
	if err == nil || !strings.Contains(err.Error(), `no [[link]] table with class = "host"`) || !strings.Contains(err.Error(), "--probe-links") {
		t.Errorf("got %v, want the missing host link named", err)
	}
	// One process of one device needs no link at all.
	one := plan(t, true, 1)
	one.Cluster.Nodes = nil
	pr, err := Predict(one, Topology{1, 1, 1}, 20*time.Millisecond, nil)
	if err != nil || pr.Step != 20*time.Millisecond || pr.Efficiency != 1 {
		t.Errorf("one device: %+v, %v", pr, err)
	}
	if _, err := Predict(one, Topology{1, 1, 1}, 0, nil); err == nil {
		t.Errorf("a step time of 0 was taken")
	}
}

// TestPredictHier: two hosts of one process with two devices each: every
// bucket crosses comm.Hier's levels, a tree in memory (reduce and
// broadcast back) and the all-reduce across the hosts; a cluster file
// without an inproc link says so.
func TestPredictHier(t *testing.T) {
	p := plan(t, true, 2, gbit)
	p.Cluster.Devices = 2
	s := *p.Spec
	q, err := engine.CompileProcess(&s, p.Cluster, 0)
	if err != nil {
		t.Fatal(err)
	}
	topo := TopologyOf(&q.Cluster)
	if topo != (Topology{Hosts: 2, ProcsPerHost: 1, Devices: 2}) || topo.World() != 4 {
		t.Fatalf("topology %+v", topo)
	}
	if _, err := Predict(q, topo, 10*time.Millisecond, Links{engine.LinkHost: gbit}); err == nil || !strings.Contains(err.Error(), `class = "inproc", which the 2 devices of a process use`) {
		t.Errorf("no inproc link: got %v", err)
	}
	in := engine.Link{Class: engine.LinkInProc, Bandwidth: 10e9, Latency: time.Microsecond}
	pr, err := Predict(q, topo, 10*time.Millisecond, Links{engine.LinkHost: gbit, engine.LinkInProc: in})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pr.Collectives {
		if !strings.HasPrefix(c.Tag, "bucket ") {
			continue
		}
		if len(c.Levels) != 2 || c.Levels[0].Class != engine.LinkInProc || c.Levels[1].Class != engine.LinkHost || c.Levels[1].Ranks != 2 {
			t.Fatalf("%s: levels %+v, want inproc then host over 2 processes", c.Tag, c.Levels)
		}
		n := float64(c.Bytes)
		if want := 2 * CollectiveTime(engine.CollectiveBroadcast, comm.Tree, 2, n, in); !near(c.Levels[0].Time, want) {
			t.Errorf("%s in memory: %v, want a tree there and back %v", c.Tag, c.Levels[0].Time, want)
		}
		if !near(c.Time, c.Levels[0].Time+c.Levels[1].Time) {
			t.Errorf("%s: %v is not the sum of its levels", c.Tag, c.Time)
		}
	}
}

// TestTunedAlgorithm checks the transcribed decision tables of Open MPI
// 4.1's coll/tuned at their edges (coll_tuned_decision_fixed.c: "<"
// bounds, so a message of exactly a bound takes the next row).
func TestTunedAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		kind engine.CollectiveKind
		p    int
		n    int64
		alg  int
		name string
	}{
		{engine.CollectiveAllReduce, 2, 4, 4, "ring"},
		{engine.CollectiveAllReduce, 3, 4095, 3, "recursive doubling"},
		{engine.CollectiveAllReduce, 3, 4096, 4, "ring"},
		{engine.CollectiveAllReduce, 3, 87_320, 5, "segmented ring"}, // the MNIST Net's one bucket
		{engine.CollectiveAllReduce, 2, 262_143, 5, "segmented ring"},
		{engine.CollectiveAllReduce, 3, 262_144, 6, "rabenseifner"},
		{engine.CollectiveAllReduce, 3, 3_334_144, 6, "rabenseifner"}, // the GPT's
		{engine.CollectiveAllReduce, 4, 8191, 3, "recursive doubling"},
		{engine.CollectiveAllReduce, 4, 8192, 6, "rabenseifner"},
		{engine.CollectiveAllReduce, 200, 100_000, 2, "nonoverlapping"},
		{engine.CollectiveAllReduce, 5000, 20_000, 3, "recursive doubling"},
		{engine.CollectiveBroadcast, 3, 1 << 20, 5, "binary tree"},
		{engine.CollectiveBroadcast, 3, 20_000, 1, "basic linear"},
		{engine.CollectiveBroadcast, 16, 1<<20 - 1, 6, "binomial"},
		{engine.CollectiveBroadcast, 16, 1 << 20, 8, "scatter allgather"},
		{engine.CollectiveReduceScatter, 3, 3 * 131_071, 4, "butterfly"}, // by one rank's block
		{engine.CollectiveReduceScatter, 3, 3 * 131_072, 1, "basic linear"},
		{engine.CollectiveReduceScatter, 8, 8 * 1000, 3, "recursive halving"},
		{engine.CollectiveAllGather, 2, 1 << 20, 6, "two proc"},
		{engine.CollectiveAllGather, 3, 1 << 20, 3, "recursive doubling"},
		{engine.CollectiveAllGather, 40, 40 * 70_000, 4, "ring"},
		{engine.CollectiveReduce, 3, 1 << 20, 0, ""},
	} {
		alg, name := TunedAlgorithm(tc.kind, tc.p, tc.n)
		if alg != tc.alg || name != tc.name {
			t.Errorf("%s over %d, %d B: %d %q, want %d %q", tc.kind, tc.p, tc.n, alg, name, tc.alg, tc.name)
		}
	}
}

// TestTunedTime checks Open MPI's algorithms' times against figures
// worked out by hand: 1 MB over 2, 3 and 4 processes, α 10 µs, β 1 GB/s
// (1 µs a KB).
func TestTunedTime(t *testing.T) {
	l := engine.Link{Bandwidth: 1e9, Latency: 10 * time.Microsecond}
	const n = 1e6
	us := time.Microsecond
	ar, bc, rs, ag := engine.CollectiveAllReduce, engine.CollectiveBroadcast, engine.CollectiveReduceScatter, engine.CollectiveAllGather
	for _, tc := range []struct {
		kind   engine.CollectiveKind
		alg, p int
		want   time.Duration
	}{
		// Rabenseifner on 3: rank 1 swaps halves with rank 0 (10+500),
		// sends it its half back (10+500), the 2 left swap quarters and
		// halves (2·(10+250)), rank 1 sends rank 0 the whole (10+1000).
		{ar, 6, 3, 3050 * us},
		{ar, 6, 2, 1020 * us}, // 2·(10 + 500)
		{ar, 6, 4, 1540 * us}, // 2·((10+500) + (10+250))
		{ar, 4, 3, 1373333},   // 4·(10 + 333.3)
		{ar, 5, 3, 1373333},   // the ring's
		{ar, 3, 3, 3030 * us}, // (1 + 2)·(10 + 1000)
		{ar, 3, 4, 2020 * us}, // 2·(10 + 1000)
		{ar, 1, 3, 4040 * us}, // 4·(10 + 1000)
		{ar, 2, 3, 4040 * us}, // 2·2·(10 + 1000)
		{bc, 1, 3, 2020 * us}, // 2·(10 + 1000)
		{bc, 5, 3, 2020 * us}, // min(2, 2)·(10 + 1000)
		{bc, 5, 8, 6060 * us}, // 6·(10 + 1000)
		{bc, 6, 4, 2020 * us}, // 2·(10 + 1000)
		{bc, 4, 4, 1530 * us}, // 3·(10 + 500)
		{bc, 8, 4, 1540 * us}, // 4·10 + 2·3·250
		{rs, 1, 4, 2800 * us}, // 2·(10+1000) + 3·(10+250)
		{rs, 3, 4, 770 * us},  // 2·10 + 3/4·1000
		{rs, 3, 3, 1863333},   // 10 + 500 + (10 + 1000) + (10 + 333.3)
		{rs, 2, 4, 1270 * us}, // 2·10 + (2 − 3/4)·1000
		{ag, 4, 4, 780 * us},  // 3·(10 + 250)
		{ag, 3, 4, 770 * us},  // 2·10 + 3·250
		{ag, 3, 3, 686667},    // Bruck: 2·10 + 2·333.3
		{ag, 5, 3, 686667},    // odd: the ring's 2·(10 + 333.3)
		{ag, 6, 2, 510 * us},  // 10 + 500
	} {
		got := TunedTime(tc.kind, tc.alg, tc.p, n, l)
		if d := got - tc.want; d < -2 || d > 2 {
			t.Errorf("%s algorithm %d over %d: %v, want %v", tc.kind, tc.alg, tc.p, got, tc.want)
		}
	}
}

// TestMPIAlgorithm: [comm] algorithm forces Open MPI's algorithm where
// Open MPI has one of that kind, else its own choice stands.
func TestMPIAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		alg    comm.Algorithm
		kind   engine.CollectiveKind
		num    int
		name   string
		forced bool
	}{
		{comm.Auto, engine.CollectiveAllReduce, 6, "rabenseifner", false},
		{comm.Ring, engine.CollectiveAllReduce, 4, "ring", true},
		{comm.Ring, engine.CollectiveReduceScatter, 1, "basic linear", false}, // no ring reduce-scatter in Open MPI 4.1
		{comm.Tree, engine.CollectiveBroadcast, 6, "binomial", true},
		{comm.Direct, engine.CollectiveAllGather, 1, "linear", true},
		{comm.Ring, engine.CollectiveReduce, 0, "", false},
	} {
		num, name, forced := MPIAlgorithm(tc.alg, tc.kind, 3, 3<<20)
		if num != tc.num || name != tc.name || forced != tc.forced {
			t.Errorf("%v %s: %d %q forced %v, want %d %q %v", tc.alg, tc.kind, num, name, forced, tc.num, tc.name, tc.forced)
		}
	}
}

// TestTunedTimeOneWayBurst: hops that go one way take the link's one-way
// rate, exchanges its both-ways rate; a burst lets the first bytes each
// rank sends through at once. 1 MB, α 10 µs, 1 GB/s both ways, 2 GB/s
// one way.
func TestTunedTimeOneWayBurst(t *testing.T) {
	l := engine.Link{Bandwidth: 1e9, OneWay: 2e9, Latency: 10 * time.Microsecond}
	const n = 1e6
	us := time.Microsecond
	ar, bc := engine.CollectiveAllReduce, engine.CollectiveBroadcast
	for _, tc := range []struct {
		kind   engine.CollectiveKind
		alg, p int
		tokens float64
		want   time.Duration
	}{
		// Rabenseifner on 3: halves swapped (10+500), one half's sum
		// sent one way (10+250), halves swapped twice by the 2 left
		// (2·(10+500)), the whole result sent one way (10+500).
		{ar, 6, 3, 0, 2300 * us},
		{ar, 6, 2, 0, 1020 * us},   // exchanges only: 2·(10 + 500)
		{ar, 4, 3, 0, 1373333},     // the ring: exchanges only
		{bc, 6, 4, 0, 1020 * us},   // binomial: 2·(10 + 500), one way
		{ar, 6, 2, 3e5, 720 * us},  // the first 300 kB at once: 2·10 + 200 + 500
		{ar, 6, 2, 2e6, 20 * us},   // all of it
		{ar, 6, 3, 6e5, 1750 * us}, // the first hop's 500 kB and 100 kB of the one-way half at once: 2300 − 500 − 50
	} {
		got := TunedTimeBurst(tc.kind, tc.alg, tc.p, n, l, tc.tokens)
		if d := got - tc.want; d < -2 || d > 2 {
			t.Errorf("%s algorithm %d over %d, %g bytes of burst: %v, want %v", tc.kind, tc.alg, tc.p, tc.tokens, got, tc.want)
		}
	}
}

// TestPredictBurst: on a link with a burst, each collective between hosts
// starts with what the link refilled (at its one-way rate) since its last
// collective, the previous step's last one for the first: the buckets of
// a step without overlap run back to back, so only the first gets any.
func TestPredictBurst(t *testing.T) {
	l := gbit
	l.Burst = 20 << 10
	p := plan(t, false, 3, l)
	const compute = 20 * time.Millisecond
	links := LinksOf(&p.Cluster)
	pr, err := Predict(p, TopologyOf(&p.Cluster), compute, links)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Predict(p, TopologyOf(&p.Cluster), compute, Links{engine.LinkHost: gbit})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Collectives) < 2 {
		t.Fatalf("%d collectives, want the buckets", len(pr.Collectives))
	}
	for i, c := range pr.Collectives {
		want := plain.Collectives[i].Time
		if i == 0 {
			// Idle since the previous step's last bucket: its update
			// and this step's forward and backward, ample to refill
			// 20 KiB at 1 Gbit/s (164 µs).
			num, _, _ := MPIAlgorithm(comm.Auto, c.Kind, 3, c.Bytes)
			want = TunedTimeBurst(c.Kind, num, 3, float64(c.Bytes), l, float64(l.Burst))
		}
		if !near(c.Time, want) {
			t.Errorf("bucket %d: %v, want %v", i, c.Time, want)
		}
	}
	if pr.Step >= plain.Step {
		t.Errorf("step %v with the burst, %v without: want it shorter", pr.Step, plain.Step)
	}
	// A link idle for less than it takes to refill its burst holds what
	// it refilled: with a 1 µs step nothing idles long.
	short, err := Predict(p, TopologyOf(&p.Cluster), time.Microsecond, links)
	if err != nil {
		t.Fatal(err)
	}
	c := short.Collectives[0]
	num, _, _ := MPIAlgorithm(comm.Auto, c.Kind, 3, c.Bytes)
	if full := TunedTimeBurst(c.Kind, num, 3, float64(c.Bytes), l, float64(l.Burst)); c.Time <= full {
		t.Errorf("after a 1µs step: %v, want more than with a full burst (%v)", c.Time, full)
	}
}
