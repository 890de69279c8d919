package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	predictProbe  = flag.Bool("predict-probe", false, "TestPredictScaling: also probe the links at each rate (logged)")
	predictTable  = flag.String("predict-table", "", "TestPredictScaling: also write the table to this file")
)

// predictModel is a model TestPredictScaling measures: its script and the
// optimizer steps of a run (the first predictWarmup are not timed).
type predictModel struct {
	name, script string
	steps        int
}

var predictScripts = map[string]predictModel{
	"mnist": {"MNIST Net", "../../scripts/examples/mnist.star", 60},
	"gpt":   {"GPT", "../../scripts/examples/gpt_text.star", 14},
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
//   - the bandwidth β: the tbf rate, or the probe's for the unshaped link;
//   - the one-device step: measured by `gorun plan --predict` itself, in
//     as many processes at once as the run has hosts — the hosts share
//     this machine's cores, so a host's device computes at that share.
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
	bin := mpiGorun(t)
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
	// clusterFile is a cluster file for the first n hosts, with extra
	// (the [[link]] tables) at its end.
	clusterFile := func(n int, name, extra string) string {
		tables := strings.Split(h.ClusterTables(1), "\n[[node]]")
		src := "[cluster]\ntransport = \"mpi\"\n" + strings.Join(tables[:n+1], "\n[[node]]") + "\n[comm]\ntimeout = \"60s\"\n" + extra
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	type row struct {
		model               string
		hosts               int
		rate                string
		link                engine.Link
		compute             time.Duration
		predicted, measured time.Duration
		commMeasured        time.Duration
	}
	var rows []row
	for _, n := range hostCounts {
		// α (and the unshaped β) from the probe on the unshaped links.
		plain := clusterFile(n, fmt.Sprintf("probe%d.toml", n), "")
		pl := ct.launch(t, "--probe-links", "--cluster", plain)
		if pl.code != 0 {
			t.Fatalf("%d hosts: --probe-links: exit %d\n%s", n, pl.code, pl.out.String())
		}
		probed := pl.out.String()
		i := strings.Index(probed, "\n[[link]]")
		if i < 0 {
			t.Fatalf("%d hosts: no [[link]] tables in\n%s", n, probed)
		}
		pc, err := engine.ParseCluster("probe", []byte(probed[i:]))
		if err != nil {
			t.Fatalf("%d hosts: the probe's tables: %v\n%s", n, err, probed)
		}
		hostLink, ok := pc.Link(engine.LinkHost)
		if !ok {
			t.Fatalf("%d hosts: the probe gave no host link:\n%s", n, probed)
		}
		t.Logf("%d hosts, unshaped links: %s\n%s", n, hostLink, probed)

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
			compute := contendedStep(t, bin, n, script, set)
			for _, rate := range strings.Split(*predictRates, ",") {
				link := hostLink
				if rate != "full" {
					bw, err := engine.ParseBandwidth(tcRate(rate))
					if err != nil {
						t.Fatalf("-predict-rates %q: %v", rate, err)
					}
					link.Bandwidth = bw
				}
				cf := clusterFile(n, fmt.Sprintf("%s-%d-%s.toml", key, n, rate), fmt.Sprintf("\n[[link]]\n%s\n", strings.ReplaceAll(link.String(), ", ", "\n")))
				code, out, errOut := gorun(t, "plan", "--cluster", cf, "--predict", "--step-time", compute.String(), script, "--set", set)
				mm := regexp.MustCompile(`(?m)^  step (\S+) = compute`).FindStringSubmatch(out)
				if code != 0 || mm == nil {
					t.Fatalf("%s, %d hosts, %s: gorun plan --predict: exit %d %s\n%s", m.name, n, rate, code, errOut, out)
				}
				predicted, err := time.ParseDuration(mm[1])
				if err != nil {
					t.Fatal(err)
				}
				if rate != "full" {
					for i := range n {
						if err := h.RateLimit(i, rate); err != nil {
							t.Fatal(err)
						}
					}
				}
				if *predictProbe && rate != "full" {
					pl := ct.launch(t, "--probe-links", "--cluster", plain)
					t.Logf("%d hosts at %s: --probe-links (exit %d):\n%s", n, rate, pl.code, pl.out.String())
				}
				runDir := filepath.Join(dir, fmt.Sprintf("run-%s-%d-%s", key, n, rate))
				l := ct.launch(t, "--cluster", cf, script, "--set", set, "--out", runDir, "-q")
				for i := range n {
					h.RateLimit(i, "")
				}
				if l.code != 0 {
					t.Fatalf("%s, %d hosts, %s: launch: exit %d\n%s", m.name, n, rate, l.code, l.out.String())
				}
				measured, comm := measuredStep(t, filepath.Join(runDir, "metrics.jsonl"))
				r := row{m.name, n, rate, link, compute, predicted, measured, comm}
				t.Logf("%s, %d hosts, %s: predicted %v, measured %v (comm %v)", r.model, n, rate, predicted, measured, comm)
				rows = append(rows, r)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "predicted vs measured step time, namespace hosts on one machine (2 cores shared), links shaped with tc tbf on every host, α from --probe-links on the unshaped links:\n\n")
	fmt.Fprintf(&b, "| model | hosts | link | α | β used | one-device step (contended) | predicted step | measured step | measured comm (rank 0) | error |\n|---|---|---|---|---|---|---|---|---|---|\n")
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

// tcRate turns tc's rate ("200mbit") into ParseBandwidth's ("200Mbit/s").
func tcRate(r string) string {
	r = strings.ToLower(r)
	for _, u := range []struct{ tc, ours string }{{"gbit", "Gbit/s"}, {"mbit", "Mbit/s"}, {"kbit", "kbit/s"}} {
		if num, ok := strings.CutSuffix(r, u.tc); ok {
			return num + u.ours
		}
	}
	return r
}

// contendedStep measures one device's step of script as `gorun plan
// --predict` does, in n processes at once (as the n hosts share this
// machine's cores), and returns the slowest of their medians.
func contendedStep(t *testing.T, bin string, n int, script, set string) time.Duration {
	t.Helper()
	re := regexp.MustCompile(`compute of one device's step: (\S+) \(measured here`)
	out := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := exec.Command(bin, "plan", "--predict", script, "--set", set).CombinedOutput()
			m := re.FindSubmatch(o)
			if err != nil || m == nil {
				errs[i] = fmt.Errorf("gorun plan --predict %s: %v\n%s", script, err, o)
				return
			}
			out[i], errs[i] = time.ParseDuration(string(m[1]))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return slices.Max(out)
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
