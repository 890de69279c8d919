package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorun/cmd/gorun/internal/testhosts"
)

// TestElasticCluster runs on three network-namespace hosts (package
// testhosts), under make test-cluster (go test -cluster, as root):
//
//   - ZeroStage2: 3 processes on 3 addresses under sync.zero(stage = 2)
//     end with the parameters of a 3-device in-process run, bit for bit
//     where both sum the gradients in the same order (the in-process
//     tree), within float rounding where not;
//   - Elastic: a run launched with --max-restarts 1 loses host 3 (its link
//     cut) after its first checkpoint, restarts on hosts 1 and 2 — the
//     checkpoint copied to host 2, as no folder is shared — and finishes;
//     its final parameters equal (≤ 1e-5) those of a run that does the
//     same epochs on 3 hosts, stops as planned at the same step, and is
//     resumed on 2; it logs the time to recover; the same with host 3's
//     rank killed, and under sync.zero(stage = 2), whose optimizer state
//     is re-sharded for the 2 processes left;
//   - LeadLost: rank 0's host lost, the run folder not shared: launch
//     stops, naming the host;
//   - LeadLostShared: rank 0's host lost, the run folder shared: the run
//     restarts on hosts 2 and 3.
//
// Run it alone, under the lock the cluster tests share on this machine:
//
//	flock /tmp/testhosts.lock go test -count=1 -timeout 10m ./cmd/gorun/ -cluster -run TestElasticCluster -v
func TestElasticCluster(t *testing.T) {
	if !*clusterFlag {
		t.Skip("SKIP: run by make test-cluster (as root)")
	}
	if m := testhosts.Missing(); m != "" {
		t.Skip("SKIP: " + m)
	}
	bin := mpiGorun(t)
	local := filepath.Join(t.TempDir(), "local")
	h, err := testhosts.Up(testhosts.Options{Private: local, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	ct := &clusterTest{t: t, h: h, bin: bin, local: local}
	t.Run("ZeroStage2", ct.zeroStage2)
	for _, c := range []struct{ fault, sync string }{{"link cut", ""}, {"packets dropped", ""}, {"rank killed", ""}, {"host stopped", ""}, {"rank killed", "sync.zero(stage = 2)"}} {
		name := "Elastic_" + strings.ReplaceAll(c.fault, " ", "_")
		if c.sync != "" {
			name += "_zero2"
		}
		t.Run(name, func(t *testing.T) { ct.elastic(t, c.fault, c.sync, 1) })
	}
	t.Run("Elastic_rank_killed_2_slots", func(t *testing.T) { ct.elastic(t, "rank killed", "", 2) })
	t.Run("LeadLost", ct.leadLost)
	t.Run("LeadLostShared", ct.leadLostShared)
}

// zeroStage2: sync.zero(stage = 2) over 3 hosts equals 3 in-process
// devices bit for bit when they sum in the order OpenMPI's
// MPI_Reduce_scatter_block sums 3 ranks in here (comm.algorithm "tree"),
// and within float rounding otherwise (the in-process default, "auto",
// sums in another order: measured 2.98e-8 at most, 5.3e-7 relative, over
// three epochs).
func (ct *clusterTest) zeroStage2(t *testing.T) {
	script := writeScript(t, strings.Replace(small, "    seed = 1,", "    seed = 1,\n    sync = sync.zero(stage = 2, bucket_mb = 0.0005),", 1))
	l := ct.launch(t, "--cluster", ct.cluster(t, ""), script, "--out", filepath.Join(ct.local, "zero2"), "-q")
	if l.code != 0 {
		t.Fatalf("launch: exit %d\n%s", l.code, l.out.String())
	}
	got := finalParams(t, filepath.Join(ct.h.PrivateDir(0), "zero2"))
	// The in-process run with the default algorithm, then with each: the
	// differences say whether only the order of the sums differs.
	var diffs []string
	for _, alg := range []string{"auto", "ring", "tree", "direct"} {
		inproc := filepath.Join(t.TempDir(), "inproc-"+alg)
		if code, stdout, stderr := gorun(t, script, "--devices", "3", "--set", "comm.algorithm="+alg, "--out", inproc, "-q"); code != 0 {
			t.Fatalf("in-process: exit %d\n%s%s", code, stdout, stderr)
		}
		want := finalParams(t, inproc)
		d := relDiff(want, got)
		diffs = append(diffs, fmt.Sprintf("%s %.3g relative, %.3g absolute", alg, d, maxAbsDiff(want, got)))
		switch {
		case alg == "tree" && d != 0:
			t.Errorf("sync.zero(stage = 2): 3 hosts differ from 3 in-process devices summing as a tree by %.3g (relative), %.3g at most (absolute); want bit for bit", d, maxAbsDiff(want, got))
		case d > 1e-5:
			t.Errorf("sync.zero(stage = 2): 3 hosts differ from 3 in-process devices (comm.algorithm %s) by %.3g (relative), more than float rounding", alg, d)
		}
	}
	t.Logf("sync.zero(stage = 2), 3 hosts (%v) vs 3 in-process devices by comm.algorithm: %s", l.took.Round(time.Millisecond), strings.Join(diffs, "; "))
}

// maxAbsDiff is the largest absolute difference between two sets of
// parameters.
func maxAbsDiff(a, b map[string][]float32) float64 {
	d := 0.0
	for name, x := range a {
		y := b[name]
		for i := range min(len(x), len(y)) {
			d = math.Max(d, math.Abs(float64(x[i])-float64(y[i])))
		}
	}
	return d
}

// elasticScript trains long enough (six epochs of 100 steps) for a fault
// to come inside the run, with a partition strategy, which shares out
// the samples anew for each world.
const elasticScript = `
load("partition.star", "strided")

train(
    model = nn.sequential(
        nn.flatten(),
        nn.linear(64, 64, name = "fc1"),
        nn.relu(),
        nn.linear(64, 3, name = "fc2"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.synthetic(size = 3000, shape = (1, 8, 8), classes = 3, noise = 0.5),
    partition = strided,
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 30,
    epochs = 6,
    seed = 1,
)
`

// elastic: a run that loses host 3 after its first checkpoint (fault:
// "link cut", "packets dropped", "rank killed", "host stopped") restarts
// on hosts 1 and 2 and ends where a planned stop and --resume do. With
// 2 slots a host, 6 processes lose 2 and go on with 4 (the global batch
// 60, whole on 6 and on 4).
func (ct *clusterTest) elastic(t *testing.T, fault, sync string, slots int) {
	src := elasticScript
	if sync != "" { // its optimizer state re-sharded for 2 processes
		src = strings.Replace(src, "    seed = 1,", "    seed = 1,\n    sync = "+sync+",", 1)
	}
	if slots > 1 {
		src = strings.Replace(src, "batch_size = 30", "batch_size = 60", 1)
	}
	script := writeScript(t, src)
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n"+ct.h.ClusterTables(slots)+fmt.Sprintf("\n[comm]\ntimeout = %q\n", clusterTimeout.String()))
	name := "elastic-" + strings.ReplaceAll(fault, " ", "-") + map[bool]string{true: "-zero2"}[sync != ""] + map[bool]string{true: "-slots"}[slots > 1]
	out := filepath.Join(ct.local, name) // host 1's own: no shared folder
	own := filepath.Join(ct.h.PrivateDir(0), name)
	l := ct.start(t, 4*time.Minute, "--cluster", cluster, "--max-restarts", "1", script, "--out", out, "-q")
	defer func() {
		select {
		case <-l.done:
		default:
			l.cmd.Cancel()
			<-l.done
		}
	}()
	ct.waitCheckpoint(t, l, own)
	time.Sleep(200 * time.Millisecond) // inside the next epoch
	began := time.Now()
	restore := ct.induce(t, fault) // host 3 back as it was, for the planned run
	defer restore()
	// The times: the restart decided (launch's line), the run resumed
	// (rank 0's restart line in metrics.jsonl), the run finished.
	var restarted, resumed time.Duration
	for running := true; running; {
		select {
		case <-l.done:
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		if restarted == 0 && strings.Contains(l.out.String(), "gorun: launch: restart 1 of 1: ") {
			restarted = time.Since(began)
		}
		if resumed == 0 {
			if b, err := os.ReadFile(filepath.Join(own, "metrics.jsonl")); err == nil && strings.Contains(string(b), `"kind":"restart"`) {
				resumed = time.Since(began)
			}
		}
	}
	finished := time.Since(began)
	log := l.out.String()
	if l.code != 0 {
		t.Fatalf("the elastic run: exit %d\n%s", l.code, tail(log, 40))
	}
	lostRanks := "rank 2"
	if slots == 2 { // both killed; mpirun may tell of the first it saw end
		lostRanks = "(?:rank 4|rank 5|ranks 4 and 5)"
	}
	m := regexp.MustCompile(`gorun: launch: restart 1 of 1: lost node\[3\] ` + regexp.QuoteMeta(ct.h.Addrs[2]) + ` \(` + lostRanks + `\); resuming from step (\d+) \((.*)\) on ` + fmt.Sprint(2*slots) + ` processes: ` +
		regexp.QuoteMeta(ct.h.Addrs[0]+", "+ct.h.Addrs[1])).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no restart line naming host 3 and %d processes:\n%s", 2*slots, tail(log, 40))
	}
	step, _ := strconv.Atoi(m[1])
	ckptName := filepath.Base(m[2]) // step-00000100
	if !strings.Contains(log, fmt.Sprintf("gorun: launch: copied checkpoint %s from node[1] %s to node[2] %s", ckptName, ct.h.Addrs[0], ct.h.Addrs[1])) {
		t.Errorf("no copy of the checkpoint to host 2:\n%s", tail(log, 40))
	}
	// Rank 0's restart line and summary.
	var restart, summary map[string]any
	b, err := os.ReadFile(filepath.Join(own, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			t.Errorf("metrics.jsonl: %q", line)
			continue
		}
		switch rec["kind"] {
		case "restart":
			restart = rec
		case "summary":
			summary = rec
		}
	}
	if restart == nil || restart["step"] != float64(step) || restart["processes"] != float64(2*slots) || restart["from_processes"] != float64(3*slots) ||
		fmt.Sprint(restart["lost_hosts"]) != "["+ct.h.Addrs[2]+"]" {
		t.Errorf("restart line %v", restart)
	}
	if summary == nil || summary["restarts"] != 1.0 {
		t.Errorf("summary %v", summary)
	}

	// The planned run: the same steps on 3 hosts, a stop, --resume on 2
	// (host 2 given host 1's checkpoint by hand).
	name = "planned-" + strings.ReplaceAll(fault, " ", "-") + map[bool]string{true: "-zero2"}[sync != ""] + map[bool]string{true: "-slots"}[slots > 1]
	planned := filepath.Join(ct.local, name)
	ownPlanned := filepath.Join(ct.h.PrivateDir(0), name)
	restore()
	// The lost run's processes on host 3 (a stopped host's go on once
	// it runs again) end before the planned run starts there.
	for wait := time.Now(); len(ours(ct.h.Procs(2))) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Since(wait) > 30*time.Second {
			t.Fatalf("host 3, back after the %s: the lost run's processes still run 30 s later: %v", fault, ours(ct.h.Procs(2)))
		}
	}
	if p := ct.launch(t, "--cluster", cluster, script, "--out", planned, "-q", "--set", fmt.Sprintf("max_steps=%d", step)); p.code != 0 {
		t.Fatalf("the planned run's first part: exit %d\n%s", p.code, tail(p.out.String(), 30))
	}
	ckpt := filepath.Join(name, "checkpoints", ckptName)
	if err := os.CopyFS(filepath.Join(ct.h.PrivateDir(1), ckpt), os.DirFS(filepath.Join(ct.h.PrivateDir(0), ckpt))); err != nil {
		t.Fatal(err)
	}
	if p := ct.launch(t, "--cluster", cluster, script, "--resume", planned, "-q", "--set", fmt.Sprintf("cluster.processes=%d", 2*slots)); p.code != 0 {
		t.Fatalf("the planned run's --resume on 2 hosts: exit %d\n%s", p.code, tail(p.out.String(), 30))
	}
	want, got := finalParams(t, ownPlanned), finalParams(t, own)
	d := relDiff(want, got)
	t.Logf("%s: elastic run (lost host 3 after step %d's checkpoint, went on on 2) vs planned stop and --resume on 2: %.3g relative, %.3g absolute", strings.TrimSpace(fault+" "+sync), step, d, maxAbsDiff(want, got))
	if d > 1e-5 {
		t.Errorf("the elastic run's parameters differ from the planned run's by %.3g (want ≤ 1e-5)", d)
	}
	t.Logf("time to recover from host 3's %s (comm.timeout %v): restart decided after %v, training resumed after %v (restart line: down %.1fs, redo %.1fs, lost %.1fs); the run finished %v after the fault",
		fault, clusterTimeout, restarted.Round(100*time.Millisecond), resumed.Round(100*time.Millisecond),
		restart["down_seconds"], restart["redo_seconds"], restart["seconds_lost"], finished.Round(100*time.Millisecond))
}

// leadLost: when rank 0's host (node 1) is lost and no folder is shared,
// the run folder cannot be reached: launch does not restart, names the
// host, and exits with mpirun's status; the checkpoint stays on host 1.
func (ct *clusterTest) leadLost(t *testing.T) {
	script := writeScript(t, elasticScript)
	out := filepath.Join(ct.local, "lead")
	own := filepath.Join(ct.h.PrivateDir(0), "lead")
	l := ct.start(t, 3*time.Minute, "--cluster", ct.cluster(t, ""), "--max-restarts", "2", script, "--out", out, "-q")
	defer func() {
		select {
		case <-l.done:
		default:
			l.cmd.Cancel()
			<-l.done
		}
	}()
	ct.waitCheckpoint(t, l, own)
	if err := ct.h.CutLink(0, true); err != nil {
		t.Fatal(err)
	}
	defer ct.h.CutLink(0, false)
	<-l.done
	log := l.out.String()
	want := fmt.Sprintf("gorun: launch: not restarting: node[1] %s held the run folder %s (rank 0 writes its metrics.jsonl and checkpoints on its own host) and is lost; node[2] %s, rank 0's host now, does not see it",
		ct.h.Addrs[0], out, ct.h.Addrs[1])
	if l.code == 0 || !strings.Contains(log, want) || strings.Contains(log, "restart 1 of") {
		t.Errorf("rank 0's host lost: exit %d\n%s\nwant a non-zero exit and %q", l.code, tail(log, 30), want)
	}
	if m, _ := filepath.Glob(filepath.Join(own, "checkpoints", "step-*", "state.safetensors")); len(m) == 0 {
		t.Error("host 1's checkpoint is gone")
	}
	t.Logf("rank 0's host lost: exit %d after %v; %s", l.code, l.took.Round(100*time.Millisecond), lastLine(log))
}

// leadLostShared: with a run folder every host shares, losing rank 0's
// host (node 1) restarts on hosts 2 and 3, rank 0 now on host 2, once the
// lost rank 0's lock on the folder is released.
func (ct *clusterTest) leadLostShared(t *testing.T) {
	script := writeScript(t, elasticScript)
	out := filepath.Join(t.TempDir(), "shared") // every namespace sees it
	l := ct.start(t, 3*time.Minute, "--cluster", ct.cluster(t, ""), "--max-restarts", "1", script, "--out", out, "-q")
	defer func() {
		select {
		case <-l.done:
		default:
			l.cmd.Cancel()
			<-l.done
		}
	}()
	ct.waitCheckpoint(t, l, out)
	if err := ct.h.CutLink(0, true); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	defer ct.h.CutLink(0, false)
	<-l.done
	log := l.out.String()
	want := fmt.Sprintf("gorun: launch: restart 1 of 1: lost node[1] %s (rank 0); resuming from step ", ct.h.Addrs[0])
	if l.code != 0 || !strings.Contains(log, want) || !strings.Contains(log, "gorun: launch: finished after 1 restart") {
		t.Fatalf("rank 0's host lost, a shared folder: exit %d\n%s\nwant exit 0 and %q", l.code, tail(log, 40), want)
	}
	t.Logf("rank 0's host lost, a shared folder: finished %v after the fault; %s", time.Since(began).Round(100*time.Millisecond),
		strings.Join(regexp.MustCompile(`gorun: launch: (waiting|restart)[^\n]*`).FindAllString(log, -1), "; "))
}
