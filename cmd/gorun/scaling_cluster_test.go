package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorun/cmd/gorun/internal/testhosts"
	"gorun/engine"
)

// The flags of TestPredictScaling (make predict-check): which models,
// host counts and link rates it measures, how many steps each run takes,
// and a file the table is also written to.
var (
	predictCheck  = flag.Bool("predict-check", false, "run TestPredictScaling: prediction against measurement on shaped links of the namespace hosts (root; make predict-check)")
	predictModels = flag.String("predict-models", "mnist,gpt", "TestPredictScaling: the models (mnist, gpt)")
	predictHosts  = flag.String("predict-hosts", "2,3", "TestPredictScaling: host counts")
	predictRates  = flag.String("predict-rates", "full,1gbit,200mbit,50mbit", "TestPredictScaling: link rates (tc's units; full: unshaped)")
	predictRepeat = flag.Int("predict-repeat", 0, "TestPredictScaling: runs of each kind (sync.none, then the model) at each rate, alternating; the medians count (0: each model's own, 5 for the MNIST Net, 3 for the GPT)")
	predictTable  = flag.String("predict-table", "", "TestPredictScaling: also write the table to this file")
	predictPin    = flag.String("predict-pin", "auto", "TestPredictScaling: keep host i on CPU i mod the machine's cores: always, never, or auto (when the hosts outnumber the cores)")
)

// predictModel is a model TestPredictScaling measures: its script, the
// optimizer steps of a run (the first predictWarmup are not timed) and
// how many runs of each kind make a row (-predict-repeat 0). The MNIST
// Net's step is about 3 ms on this machine, and where two ranks, mpirun
// and sshd land on its two cores moves a run's by a third (2.1 to 3.8 ms
// a step over three runs of one row): five runs, cheap at that speed,
// give a median that one or two such runs do not move.
type predictModel struct {
	name, script string
	steps        int
	repeat       int
}

var predictScripts = map[string]predictModel{
	"mnist": {"MNIST Net", "../../scripts/examples/mnist.star", 150, 5},
	"gpt":   {"GPT", "../../scripts/examples/gpt_text.star", 16, 3},
}

const predictWarmup = 3

// predictTolerance is the criterion: the predicted step within
// 20% of the measured one.
const predictTolerance = 0.20

// TestPredictScaling checks `gorun plan --predict` against `gorun launch`
// on the namespace hosts, their links shaped by tc's tbf (both ways, each
// host's): for each model, host count and rate, the predicted step time
// against the measured one (the median step of a run, from the time
// column of metrics.jsonl, after predictWarmup steps). The figures the
// prediction takes:
//
//   - the latency α of the host links, from `gorun launch --probe-links`
//     on the unshaped links (calibrated once; tbf adds no latency);
//   - the bandwidth β: the probe's on the links as shaped (tbf's bucket
//     and queue: testhosts.RateLimit), with its rate at each size;
//   - the one-device step: a run of the same script with sync.none on
//     the same hosts just before (the hosts share this machine's cores;
//     when they outnumber them, each host is pinned to one, host 1
//     sharing its, -predict-pin).
//
// It prints the table and fails for every row beyond predictTolerance.
// As root: make predict-check (go test -run TestPredictScaling
// -predict-check, under flock /tmp/testhosts.lock).
func TestPredictScaling(t *testing.T) {
	if !*predictCheck {
		t.Skip("SKIP: run by make predict-check (as root)")
	}
	if m := testhosts.Missing(); m != "" {
		t.Skip("SKIP: " + m)
	}
	if !slices.Contains([]string{"auto", "always", "never"}, *predictPin) {
		t.Fatalf("-predict-pin %q: want auto, always or never", *predictPin)
	}
	bin := mpiGorun(t)
	// The hosts share this machine's cores, more ranks than cores on 3
	// hosts, which OpenMPI cannot see (each host has 1 slot): a rank
	// waiting in a collective yields its core rather than spin on it
	// (mpirun passes OMPI_MCA_ settings on to every rank).
	t.Setenv("OMPI_MCA_mpi_yield_when_idle", "1")
	h, err := testhosts.Up(testhosts.Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	ct := &clusterTest{t: t, h: h, bin: bin}
	var hostCounts []int
	for _, s := range strings.Split(*predictHosts, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 2 || n > len(h.Addrs) {
			t.Fatalf("-predict-hosts %q: want counts from 2 to %d", *predictHosts, len(h.Addrs))
		}
		hostCounts = append(hostCounts, n)
	}
	dir := t.TempDir()
	// clusterFile is a cluster file for the first n hosts, extra (the
	// link key, before any table) first.
	clusterFile := func(n int, name, extra string) string {
		tables := strings.Split(h.ClusterTables(1), "\n[[node]]")
		src := extra + "[cluster]\ntransport = \"mpi\"\n" + strings.Join(tables[:n+1], "\n[[node]]") + "\n[comm]\ntimeout = \"60s\"\n"
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	// probe runs --probe-links on the first n hosts (their links as they
	// are now) and returns the host link it measured.
	probe := func(n int, file string) engine.Link {
		// Two passes at 50 Mbit/s on 3 hosts take about two minutes.
		pl := ct.start(t, 6*time.Minute, "--probe-links", "--cluster", file)
		<-pl.done
		if pl.code != 0 {
			t.Fatalf("%d hosts: --probe-links: exit %d\n%s", n, pl.code, pl.out.String())
		}
		// The last tables: a second pass's when the first's changed
		// the TCP fragment (probeLinksCmd).
		probed := pl.out.String()
		links, err := probedLinks(probed)
		if err != nil {
			t.Fatalf("%d hosts: the probe's tables: %v\n%s", n, err, probed)
		}
		pc := engine.Cluster{Links: links}
		l, ok := pc.Link(engine.LinkHost)
		if !ok {
			t.Fatalf("%d hosts: the probe gave no host link:\n%s", n, probed)
		}
		t.Logf("%d hosts: %s\n%s", n, l, probed)
		return l
	}

	type row struct {
		model               string
		hosts               int
		rate                string
		link                engine.Link // α from the unshaped probe, β from the probe at rate
		compute             time.Duration
		predicted, measured time.Duration
		commMeasured        time.Duration
	}
	var rows []row
	loadStart, started := loadAverage(), time.Now().UTC()
	var pinned []string // the host counts run pinned, as the table says
	for _, n := range hostCounts {
		// Hosts that outnumber the cores take turns on them as the
		// scheduler moves them: pinned, host i on core i mod cores, so
		// that host 1 (rank 0) shares its core, its one-device step
		// (sync.none) is the slowest host's, and a synchronized step
		// cannot beat it.
		pin := *predictPin == "always" || *predictPin == "auto" && n > runtime.NumCPU()
		for i := range h.Addrs {
			cpus := ""
			if pin && i < n {
				cpus = strconv.Itoa(i % runtime.NumCPU())
			}
			if err := h.PinCPU(i, cpus); err != nil {
				t.Fatal(err)
			}
		}
		if pin {
			t.Logf("%d hosts: host i on CPU i mod %d", n, runtime.NumCPU())
			how := fmt.Sprintf("%d hosts", n)
			if n > runtime.NumCPU() {
				how += " (host 1, rank 0, sharing its CPU)"
			}
			pinned = append(pinned, how)
		}
		// α (and the unshaped β) from the probe on the unshaped links.
		plain := clusterFile(n, fmt.Sprintf("probe%d.toml", n), "")
		hostLink := probe(n, plain)
		// β at each rate: the probe's on the shaped links.
		shaped := map[string]engine.Link{"full": hostLink}
		for _, rate := range strings.Split(*predictRates, ",") {
			if rate == "full" {
				continue
			}
			shapeHosts(t, h, n, rate)
			l := probe(n, plain)
			shapeHosts(t, h, n, "")
			l.Latency = hostLink.Latency // calibrated on the unshaped links: tbf adds none
			shaped[rate] = l
		}

		for _, key := range strings.Split(*predictModels, ",") {
			m, ok := predictScripts[key]
			if !ok {
				t.Fatalf("-predict-models: no model %q (mnist, gpt)", key)
			}
			script, err := filepath.Abs(m.script)
			if err != nil {
				t.Fatal(err)
			}
			set := fmt.Sprintf("max_steps=%d", m.steps)
			noneScript := syncNone(t, script, dir)
			for _, rate := range strings.Split(*predictRates, ",") {
				link := shaped[rate]
				// One device's step: the same script with sync.none (no
				// gradient collectives), launched on the same hosts just
				// before each run it predicts (the machine's load moves).
				cf := clusterFile(n, fmt.Sprintf("%s-%d-%s.toml", key, n, rate), "link = [{ "+link.String()+" }]\n")
				var computes, steps, comms []time.Duration
				repeat := m.repeat
				if *predictRepeat > 0 {
					repeat = *predictRepeat
				}
				for k := range repeat {
					alone := filepath.Join(dir, fmt.Sprintf("none-%s-%d-%s-%d", key, n, rate, k))
					shapeHosts(t, h, n, rate)
					l := ct.launch(t, "--cluster", plain, noneScript, "--set", set, "--out", alone, "-q")
					if l.code != 0 {
						shapeHosts(t, h, n, "")
						t.Fatalf("%s, %d hosts, sync.none: exit %d\n%s", m.name, n, l.code, l.out.String())
					}
					c, _ := measuredStep(t, filepath.Join(alone, "metrics.jsonl"))
					runDir := filepath.Join(dir, fmt.Sprintf("run-%s-%d-%s-%d", key, n, rate, k))
					l = ct.launch(t, "--cluster", cf, script, "--set", set, "--out", runDir, "-q")
					shapeHosts(t, h, n, "")
					if l.code != 0 {
						t.Fatalf("%s, %d hosts, %s: launch: exit %d\n%s", m.name, n, rate, l.code, l.out.String())
					}
					st, cm := measuredStep(t, filepath.Join(runDir, "metrics.jsonl"))
					t.Logf("%s, %d hosts, %s, run %d: one device %v, step %v (comm %v)", m.name, n, rate, k+1, c, st, cm)
					computes, steps, comms = append(computes, c), append(steps, st), append(comms, cm)
				}
				compute, measured, comm := median(computes), median(steps), median(comms)
				code, out, errOut := gorun(t, "plan", "--cluster", cf, "--predict", "--step-time", compute.String(), script, "--set", set)
				mm := regexp.MustCompile(`(?m)^  step (\S+) = compute`).FindStringSubmatch(out)
				if code != 0 || mm == nil {
					t.Fatalf("%s, %d hosts, %s: gorun plan --predict: exit %d %s\n%s", m.name, n, rate, code, errOut, out)
				}
				predicted, err := time.ParseDuration(mm[1])
				if err != nil {
					t.Fatal(err)
				}
				r := row{m.name, n, rate, link, compute, predicted, measured, comm}
				t.Logf("%s, %d hosts, %s: predicted %v, measured %v (comm %v)", r.model, n, rate, predicted, measured, comm)
				rows = append(rows, r)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "predicted vs measured step time, namespace hosts on one machine (2 cores shared), links shaped with tc tbf on every host; α from --probe-links on the unshaped links, β from --probe-links on the shaped ones, the one-device step from a sync.none run on the same hosts:\n\n")
	fmt.Fprintf(&b, "%s to %s; load average (1, 5, 15 min) %s at the start, %s at the end\n\n", started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 MST"), loadStart, loadAverage())
	if len(pinned) > 0 {
		fmt.Fprintf(&b, "on %s each host's processes pinned, host i to CPU i mod %d\n\n", strings.Join(pinned, " and "), runtime.NumCPU())
	}
	fmt.Fprintf(&b, "| model | hosts | tbf rate | α | β probed (4 MiB) | one-device step | predicted step | measured step | measured comm (rank 0) | error |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		e := (r.predicted.Seconds() - r.measured.Seconds()) / r.measured.Seconds()
		mark := ""
		if e > predictTolerance || e < -predictTolerance {
			mark = " ✗"
			t.Errorf("%s, %d hosts, %s: predicted %v, measured %v: off by %+.0f%%, beyond ±%.0f%%", r.model, r.hosts, r.rate, r.predicted, r.measured, 100*e, 100*predictTolerance)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %v | %s | %v | %v | %v | %v | %+.0f%%%s |\n", r.model, r.hosts, r.rate, r.link.Latency,
			engine.FormatBandwidth(r.link.Bandwidth), r.compute.Round(10*time.Microsecond), r.predicted.Round(10*time.Microsecond),
			r.measured.Round(10*time.Microsecond), r.commMeasured.Round(10*time.Microsecond), 100*e, mark)
	}
	t.Log("\n" + b.String())
	if *predictTable != "" {
		if err := os.WriteFile(*predictTable, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// shapeHosts limits the links of the first n hosts to rate (tc's tbf,
// both ways, testhosts.RateLimit); "" or "full" removes the limits.
func shapeHosts(t *testing.T, h *testhosts.Hosts, n int, rate string) {
	t.Helper()
	if rate == "full" {
		rate = ""
	}
	for i := range n {
		if err := h.RateLimit(i, rate); err != nil {
			t.Fatal(err)
		}
	}
}

// syncNone writes a copy of script into dir that trains with sync.none()
// (each rank on its own, no gradient collectives).
func syncNone(t *testing.T, script, dir string) string {
	t.Helper()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	re := regexp.MustCompile(`(?m)^(\s*)sync\s*=.*$`)
	if re.MatchString(s) {
		s = re.ReplaceAllString(s, "${1}sync = sync.none(),")
	} else {
		s = strings.Replace(s, "train(\n", "train(\n    sync = sync.none(),\n", 1)
	}
	if !strings.Contains(s, "sync.none()") {
		t.Fatalf("%s: found no place for sync = sync.none()", script)
	}
	out := filepath.Join(dir, "none-"+filepath.Base(script))
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// median is the middle of ds (the mean of the middle two).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measuredStep reads a run's metrics.jsonl: the median time between
// consecutive step lines after predictWarmup steps, and the median of
// rank 0's comm_seconds.
func measuredStep(t *testing.T, path string) (step, comm time.Duration) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var times, comms []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Kind string  `json:"kind"`
			Step int     `json:"step"`
			Time float64 `json:"time"`
			Comm float64 `json:"comm_seconds"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Kind != "step" || m.Step < predictWarmup {
			continue
		}
		times = append(times, m.Time)
		if m.Step > predictWarmup {
			comms = append(comms, m.Comm)
		}
	}
	var d []float64
	for i := 1; i < len(times); i++ {
		d = append(d, times[i]-times[i-1])
	}
	if len(d) == 0 {
		t.Fatalf("%s: too few step lines", path)
	}
	slices.Sort(d)
	slices.Sort(comms)
	return time.Duration(d[len(d)/2] * 1e9), time.Duration(comms[len(comms)/2] * 1e9)
}

// loadAverage is the machine's load average (/proc/loadavg's first three
// figures), for the table: the hosts share its cores with other work.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
