package main

import (
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"gorun/engine"
)

// TestProbeLinksFit: fitLink recovers α and β from exact one-way times.
func TestProbeLinksFit(t *testing.T) {
	const alpha, beta = 40e-6, 125e6 // 40 µs, 1 Gbit/s
	var ts []float64
	for _, n := range probeSizes {
		ts = append(ts, alpha+float64(n)/beta) // one way
	}
	for _, n := range probeSizes {
		ts = append(ts, alpha+float64(n)/beta) // both ways at once: a full-duplex link
	}
	l := fitLink(engine.LinkHost, ts)
	if math.Abs(l.Bandwidth-beta)/beta > 0.01 || math.Abs(l.Latency.Seconds()-alpha)/alpha > 0.01 {
		t.Errorf("fit %v, %s; want 40µs, 1Gbit/s", l.Latency, engine.FormatBandwidth(l.Bandwidth))
	}
	if len(l.BySize) != 4 || l.BySize[0].Size != 16<<10 {
		t.Fatalf("by_size %+v, want the 4 sizes from 16 KiB", l.BySize)
	}
	for _, r := range l.BySize {
		if math.Abs(r.Bandwidth-beta)/beta > 0.01 {
			t.Errorf("at %d B: %s, want 1Gbit/s", r.Size, engine.FormatBandwidth(r.Bandwidth))
		}
	}
}

// TestProbePairs: rank 0 with the first rank of every other host, and two
// ranks of the first host with two slots.
func TestProbePairs(t *testing.T) {
	c := engine.Cluster{Nodes: []engine.Host{{Host: "a", Slots: 1}, {Host: "b", Slots: 2}, {Host: "c", Slots: 1}}}
	got := probePairs(&c)
	want := []probePair{{engine.LinkHost, 0, 1, ""}, {engine.LinkHost, 0, 3, ""}, {engine.LinkProcess, 1, 2, ""}}
	if len(got) != len(want) {
		t.Fatalf("pairs %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].class != want[i].class || got[i].a != want[i].a || got[i].b != want[i].b {
			t.Errorf("pair %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[2].name != "rank 1 (b) ↔ rank 2 (b)" {
		t.Errorf("name %q", got[2].name)
	}
}

func TestProbeLinksErrors(t *testing.T) {
	one := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"127.0.0.1\"\n")
	two := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"127.0.0.1\"\nslots = 2\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"launch", "--probe-links"}, 2, "launch --probe-links needs --cluster C.toml"},
		{[]string{"launch", "--probe-links", "--cluster", two, "train.star"}, 2, "launch --probe-links runs no script, got train.star"},
		{[]string{"launch", "--probe-links", "--cluster", one}, 1, "want [[node]] hosts with 2 slots or more in all"},
	} {
		code, _, errOut := gorun(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("gorun %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
		}
	}
	code, out, errOut := gorun(t, "launch", "--probe-links", "--cluster", two, "--dry-run", "--mpirun", "mpirun")
	if code != 0 || !strings.Contains(out, " -np 2 ") || !strings.Contains(out, " "+probeRankCmd+" --cluster "+two) {
		t.Errorf("dry run: exit %d %s\n%s", code, errOut, out)
	}
}

// TestProbeLinksLocal: two ranks on this machine through mpirun measure
// the process and in-process links and print [[link]] tables that parse
// as a cluster file's.
func TestProbeLinksLocal(t *testing.T) {
	bin := mpiGorun(t)
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"127.0.0.1\"\nslots = 2\n")
	cmd := exec.Command(bin, "launch", "--probe-links", "--cluster", cluster)
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	i := strings.Index(s, "\n[[link]]")
	if i < 0 || !strings.Contains(s, "rank 0 (127.0.0.1) ↔ rank 1 (127.0.0.1)") {
		t.Fatalf("no [[link]] tables or pair in\n%s", s)
	}
	c, err := engine.ParseCluster("probed.toml", []byte(s[i:]))
	if err != nil {
		t.Fatalf("the printed tables do not parse: %v\n%s", err, s[i:])
	}
	for _, class := range []engine.LinkClass{engine.LinkProcess, engine.LinkInProc} {
		l, ok := c.Link(class)
		if !ok || !(l.Bandwidth > 1e6) {
			t.Errorf("class %s: %+v, %v: want a measured bandwidth over 1 MB/s", class, l, ok)
		}
	}
	t.Logf("\n%s", s)
}

// TestTrimmedMean: the probe's statistic for chains of exchanges drops
// the fastest and the slowest of the sorted times and averages the rest,
// so that a link whose chains take one of two times (the GPT's at 50
// Mbit/s: 640 or 840 ms) counts both, and one delayed by the machine
// does not.
func TestTrimmedMean(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{ms(636, 641, 660, 835, 842, 900, 3000), 775600 * time.Microsecond}, // (641+660+835+842+900)/5
		{ms(280, 282, 283, 284, 548, 552, 553), 389800 * time.Microsecond},
		{ms(10, 10, 10), 10 * time.Millisecond},
		{ms(10, 30), 20 * time.Millisecond},
		{ms(7), 7 * time.Millisecond},
		{nil, 0},
	} {
		if got := trimmedMean(c.in); got != c.want {
			t.Errorf("trimmedMean(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
