package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorun/cmd/gorun/internal/testhosts"
	"gorun/safetensors"
)

// TestCluster runs `gorun launch` across three hosts on this machine
// (network namespaces with their own addresses and sshds, made by package
// testhosts), OpenMPI going over TCP between the addresses: the result
// equals an in-process run's, bit for bit; launch's checks and the ranks'
// comparison of their hosts' copies name the host at fault; a slow link
// changes nothing but the time; Ctrl-C stops every host's rank with a
// checkpoint; and each fault — a cut link, dropped
// packets, a killed rank, a host that stops answering — ends every process
// within comm.timeout and a few seconds, naming the lost rank, its host
// and the collective the others waited in, with the last checkpoint
// intact. make test-cluster runs it (go test -run TestCluster -cluster), as
// root; it prints the time each fault took to stop the run.
// clusterFlag runs TestCluster: it builds namespaces, bridges and sshd
// processes as root for minutes, so `go test ./...` leaves it to make
// test-cluster.
var clusterFlag = flag.Bool("cluster", false, "run TestCluster on three network-namespace hosts (root; make test-cluster)")

func TestCluster(t *testing.T) {
	if !*clusterFlag {
		t.Skip("SKIP: run by make test-cluster (as root)")
	}
	if m := testhosts.Missing(); m != "" {
		t.Skip("SKIP: " + m)
	}
	bin := mpiGorun(t)
	local := filepath.Join(t.TempDir(), "local")
	start := time.Now()
	h, err := testhosts.Up(testhosts.Options{Private: local, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	// Torn down when the test ends, fails or panics, and on Ctrl-C; a run
	// killed outright is cleaned up by the next Up.
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if left := testhosts.Leftovers("grc"); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	stop := make(chan struct{})
	defer func() { signal.Stop(sigs); close(stop) }()
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "TestCluster: %v: removing the test hosts\n", s)
			h.Close()
			os.Exit(1)
		case <-stop:
		}
	}()
	t.Logf("three hosts up in %v", time.Since(start).Round(time.Millisecond))
	ct := &clusterTest{t: t, h: h, bin: bin, local: local}

	t.Run("EqualsInProcess", ct.equalsInProcess)
	t.Run("HostChecks", ct.hostChecks)
	t.Run("HostCopies", ct.hostCopies)
	t.Run("SlowLink", ct.slowLink)
	t.Run("BindCore", ct.bindCore)
	t.Run("Interrupt", ct.interrupt)
	var rows []faultRow
	for _, f := range []string{"link cut", "packets dropped", "rank killed", "host stopped"} {
		t.Run(strings.ReplaceAll(f, " ", "_"), func(t *testing.T) { rows = append(rows, ct.fault(t, f)) })
	}
	if len(rows) == 0 {
		return
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "faults on host 3 of 3, comm.timeout %v; times from the fault (a stopped host's own processes: from its SIGCONT):\n%-16s %-13s %-13s %-5s %s\n",
		clusterTimeout, "fault", "launch ended", "all ended", "exit", "launch's last line")
	for _, r := range rows {
		all := r.all.Round(100 * time.Millisecond).String()
		if r.afterCont > 0 {
			all += fmt.Sprintf(" (+%v)", r.afterCont.Round(100*time.Millisecond))
		}
		fmt.Fprintf(&tab, "%-16s %-13s %-13s %-5d %s\n", r.fault, r.launch.Round(100*time.Millisecond), all, r.code, r.line)
	}
	t.Log(tab.String())
}

// clusterTimeout is comm.timeout in the cluster tests.
const clusterTimeout = 10 * time.Second

// clusterTest is the state the cluster tests share.
type clusterTest struct {
	t     *testing.T
	h     *testhosts.Hosts
	bin   string // gorun built with -tags mpi
	local string // the folder each host has its own copy of
}

// cluster writes a cluster file for the hosts, extra added to [cluster].
func (ct *clusterTest) cluster(t *testing.T, extra string) string {
	t.Helper()
	src := "[cluster]\ntransport = \"mpi\"\n" + extra + ct.h.ClusterTables(1) + fmt.Sprintf("\n[comm]\ntimeout = %q\n", clusterTimeout.String())
	return writeCluster(t, src)
}

// launched is a `gorun launch` run in the launcher's namespace.
type launched struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	code int
	took time.Duration
}

// start starts gorun launch with args; it is killed after limit.
func (ct *clusterTest) start(t *testing.T, limit time.Duration, args ...string) *launched {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	l := &launched{out: &syncBuffer{}, done: make(chan struct{})}
	l.cmd = ct.h.Command(ctx, ct.bin, append([]string{"launch"}, args...)...)
	l.cmd.Stdout, l.cmd.Stderr = l.out, l.out
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l.cmd.Cancel = func() error {
		// launch, then mpirun (a process group of its own) and the rest.
		for _, p := range ct.h.Procs(-1) {
			syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		return nil
	}
	begin := time.Now()
	if err := l.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		err := l.cmd.Wait()
		l.took = time.Since(begin)
		if ee, ok := err.(*exec.ExitError); ok {
			l.code = ee.ExitCode()
		} else if err != nil {
			l.code = -1
		}
		close(l.done)
	}()
	return l
}

// launch runs gorun launch with args to the end (at most two minutes).
func (ct *clusterTest) launch(t *testing.T, args ...string) *launched {
	t.Helper()
	l := ct.start(t, 2*time.Minute, args...)
	<-l.done
	return l
}

// wide is a script whose gradients (17,475 floats, 70 kB a step) make
// traffic enough for a slow link to show.
const wide = `
train(
    model = nn.sequential(
        nn.flatten(),
        nn.linear(64, 256, name = "fc1"),
        nn.relu(),
        nn.linear(256, 3, name = "fc2"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.synthetic(size = 300, shape = (1, 8, 8), classes = 3, noise = 0.5),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 30,
    epochs = 3,
    seed = 1,
)
`

// equalsInProcess: 3 processes on 3 addresses end with the parameters of
// a 3-device in-process run, bit for bit; each host runs one rank; only
// rank 0's host writes the run folder (in its own copy of the private
// folder: no shared filesystem).
func (ct *clusterTest) equalsInProcess(t *testing.T) {
	script := writeScript(t, small)
	inproc := filepath.Join(t.TempDir(), "inproc")
	if code, stdout, stderr := gorun(t, script, "--devices", "3", "--out", inproc, "-q"); code != 0 {
		t.Fatalf("in-process: exit %d\n%s%s", code, stdout, stderr)
	}
	out := filepath.Join(ct.local, "equal")
	l := ct.start(t, 2*time.Minute, "--cluster", ct.cluster(t, ""), script, "--out", out)
	// Which hosts run a rank, seen while it runs.
	ranHere := make([]bool, 3)
	for running := true; running; {
		select {
		case <-l.done:
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		for i := range 3 {
			for _, p := range ct.h.Procs(i) {
				if strings.HasPrefix(p.Cmd, ct.bin+" ") {
					ranHere[i] = true
				}
			}
		}
	}
	log := l.out.String()
	if l.code != 0 {
		t.Fatalf("launch: exit %d\n%s", l.code, log)
	}
	t.Logf("3 hosts, 3 processes: %v", l.took.Round(time.Millisecond))
	for r := range 3 {
		if !strings.Contains(log, fmt.Sprintf("rank %d epoch 3 loss", r)) {
			t.Errorf("no epoch line of rank %d:\n%s", r, log)
		}
		if !ranHere[r] {
			t.Errorf("host %d (%s) ran no rank", r+1, ct.h.Addrs[r])
		}
	}
	got := finalParams(t, filepath.Join(ct.h.PrivateDir(0), "equal"))
	if d := relDiff(finalParams(t, inproc), got); d != 0 {
		t.Errorf("3 hosts differ from 3 in-process devices by %.3g (want bit for bit)", d)
	} else {
		t.Logf("3 hosts equal 3 in-process devices bit for bit (%d tensors)", len(got))
	}
	for i := 1; i < 3; i++ {
		if _, err := os.Stat(filepath.Join(ct.h.PrivateDir(i), "equal")); !os.IsNotExist(err) {
			t.Errorf("host %d has a run folder (%v): only rank 0's host writes it", i+1, err)
		}
	}
}

// hostChecks: launch names, before mpirun starts, a host that lacks the
// script and a host that does not answer.
func (ct *clusterTest) hostChecks(t *testing.T) {
	script := filepath.Join(ct.local, "x.star")
	for _, dir := range []string{ct.local, ct.h.PrivateDir(0), ct.h.PrivateDir(1)} { // not host 3's
		if err := os.WriteFile(filepath.Join(dir, "x.star"), []byte(small), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cluster := ct.cluster(t, "")
	l := ct.launch(t, "--cluster", cluster, script)
	want := fmt.Sprintf("node[3] %s (%s): has no script %s: every host needs it at the same path as here", ct.h.Addrs[2], ct.h.Names[2], script)
	if log := l.out.String(); l.code != 1 || !strings.Contains(log, want) || strings.Contains(log, "node[1]") || strings.Contains(log, "mpirun") {
		t.Errorf("a host without the script: exit %d:\n%s\nwant exit 1 and %q", l.code, log, want)
	}
	if err := ct.h.CutLink(2, true); err != nil {
		t.Fatal(err)
	}
	defer ct.h.CutLink(2, false)
	l = ct.launch(t, "--cluster", cluster, writeScript(t, small))
	want = fmt.Sprintf("node[3] %s: does not answer ssh: ssh: connect to host %s port 22: ", ct.h.Addrs[2], ct.h.Addrs[2])
	if log := l.out.String(); l.code != 1 || !strings.Contains(log, want) {
		t.Errorf("a host whose link is cut: exit %d:\n%s\nwant exit 1 and %q", l.code, log, want)
	}
	if l.took > 15*time.Second {
		t.Errorf("naming a host that does not answer took %v (ssh.connect_timeout 5s)", l.took)
	}
}

// hostCopies: each host reads its own copy of a data file (in its private
// folder); copies that differ or are missing are named before step 1.
func (ct *clusterTest) hostCopies(t *testing.T) {
	data := filepath.Join(ct.local, "data.safetensors")
	script := writeScript(t, `
train(
    model = nn.sequential(nn.linear(4, 2, name = "fc"), nn.log_softmax()),
    loss = "nll",
    data = data.tensors(`+strconv.Quote(data)+`, x = "x", y = "y"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 6,
    epochs = 1,
    seed = 1,
)
`)
	write := func(i int, scale float32) {
		x := make([]float32, 12*4)
		y := make([]int64, 12)
		for k := range x {
			x[k] = scale * float32(k%7)
		}
		for k := range y {
			y[k] = int64(k % 2)
		}
		err := safetensors.WriteFile(filepath.Join(ct.h.PrivateDir(i), "data.safetensors"),
			[]safetensors.Tensor{safetensors.F32("x", []int{12, 4}, x), safetensors.I64("y", []int{12}, y)}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	cluster := ct.cluster(t, "")
	for i := range 3 {
		write(i, 1)
	}
	if l := ct.launch(t, "--cluster", cluster, script, "-q"); l.code != 0 {
		t.Fatalf("the same copies: exit %d\n%s", l.code, l.out.String())
	}
	write(2, 2)
	l := ct.launch(t, "--cluster", cluster, script, "-q")
	want := fmt.Sprintf("rank 2 (host %s) has another data.tensors file %s than rank 0 (host %s): sha256 ", ct.h.Names[2], data, ct.h.Names[0])
	if log := l.out.String(); l.code == 0 || !strings.Contains(log, want) {
		t.Errorf("host 3's copy differs: exit %d:\n%s\nwant %q", l.code, log, want)
	}
	// A missing copy stops that rank as it compiles (the data's header
	// gives the plan's shapes), naming it and its host.
	os.Remove(filepath.Join(ct.h.PrivateDir(1), "data.safetensors"))
	l = ct.launch(t, "--cluster", cluster, script, "-q")
	want = fmt.Sprintf("gorun: rank 1 of 3 (host %s): %s:5:24: data.tensors: datasets: data.safetensors: safetensors: open %s: no such file or directory", ct.h.Names[1], script, data)
	if log := l.out.String(); l.code == 0 || !strings.Contains(log, want) {
		t.Errorf("host 2's copy is missing: exit %d:\n%s\nwant %q", l.code, log, want)
	}
}

// slowLink: with host 3's link limited (tc tbf, both ways) the run ends
// with the same parameters as on the full link, slower, also with Open
// MPI's TCP fragments set (comm.tcp_fragment).
func (ct *clusterTest) slowLink(t *testing.T) {
	script := writeScript(t, wide)
	cluster := ct.cluster(t, "")
	fast := filepath.Join(t.TempDir(), "fast")
	lf := ct.launch(t, "--cluster", cluster, script, "--out", fast, "-q")
	if lf.code != 0 {
		t.Fatalf("full link: exit %d\n%s", lf.code, lf.out.String())
	}
	const rate = "4mbit"
	if err := ct.h.RateLimit(2, rate); err != nil {
		t.Fatal(err)
	}
	defer ct.h.RateLimit(2, "")
	// The slow run with Open MPI's TCP fragments and send buffers at 32
	// KiB (comm.tcp_fragment; the full run has Open MPI's own sizes):
	// the same numbers.
	slow := filepath.Join(t.TempDir(), "slow")
	ls := ct.launch(t, "--cluster", cluster, script, "--out", slow, "-q", "--set", "comm.tcp_fragment=32KiB")
	if ls.code != 0 {
		t.Fatalf("slow link: exit %d\n%s", ls.code, ls.out.String())
	}
	if d := relDiff(finalParams(t, fast), finalParams(t, slow)); d != 0 {
		t.Errorf("host 3 on a %s link: parameters differ from the full link's by %.3g", rate, d)
	}
	t.Logf("host 3's link at %s, 32 KiB TCP fragments: %v, at full speed: %v; the same parameters", rate, ls.took.Round(time.Millisecond), lf.took.Round(time.Millisecond))
	if ls.took < lf.took {
		t.Errorf("the slow link (%v) was faster than the full one (%v)", ls.took, lf.took)
	}
}

// samplesPerS reads the samples/s of a run's done line.
func samplesPerS(log string) string {
	if m := regexp.MustCompile(`done: \d+ steps, (\d+) samples/s`).FindStringSubmatch(log); m != nil {
		return m[1]
	}
	return "?"
}

// bindCore: cluster.bind = "core" reaches mpirun and trains to the same
// parameters as unbound processes; the speed of both is logged (on hosts
// that share one machine's cores OpenMPI binds every host's rank to core
// 0, which is why launch binds nothing by default).
func (ct *clusterTest) bindCore(t *testing.T) {
	script := writeScript(t, wide)
	runs := map[string]*launched{}
	outs := map[string]string{}
	allowed := map[string]map[string]bool{} // bind → the ranks' Cpus_allowed_list values seen
	for _, bind := range []string{"none", "core"} {
		outs[bind] = filepath.Join(t.TempDir(), bind)
		l := ct.start(t, 2*time.Minute, "--cluster", ct.cluster(t, fmt.Sprintf("bind = %q\n", bind)), script, "--out", outs[bind])
		allowed[bind] = map[string]bool{}
		for running := true; running; {
			select {
			case <-l.done:
				running = false
			case <-time.After(50 * time.Millisecond):
			}
			for i := range 3 {
				for _, p := range ct.h.Procs(i) {
					if strings.HasPrefix(p.Cmd, ct.bin+" ") {
						if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid)); err == nil {
							if m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)`).FindSubmatch(b); m != nil {
								allowed[bind][string(m[1])] = true
							}
						}
					}
				}
			}
		}
		if l.code != 0 {
			t.Fatalf("bind %s: exit %d\n%s", bind, l.code, l.out.String())
		}
		runs[bind] = l
	}
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	if len(allowed["none"]) != 1 || !allowed["none"][all] {
		t.Errorf("unbound ranks may run on CPUs %v, want all (%s)", allowed["none"], all)
	}
	for cpus := range allowed["core"] {
		if strings.ContainsAny(cpus, "-,") {
			t.Errorf("a rank bound to a core may run on CPUs %s", cpus)
		}
	}
	if len(allowed["core"]) == 0 {
		t.Error("saw no bound rank")
	}
	if d := relDiff(finalParams(t, outs["none"]), finalParams(t, outs["core"])); d != 0 {
		t.Errorf("bound to cores, the parameters differ by %.3g", d)
	}
	var cores []string
	for c := range allowed["core"] {
		cores = append(cores, c)
	}
	slices.Sort(cores)
	t.Logf("3 hosts on this machine's %d cores: %s samples/s unbound, %s bound to cores (the ranks bound to CPUs %s)",
		runtime.NumCPU(), samplesPerS(runs["none"].out.String()), samplesPerS(runs["core"].out.String()), strings.Join(cores, ", "))
}

// interrupt: SIGINT to gorun launch (Ctrl-C) stops the ranks on every
// host after the same step with a checkpoint, exit 143, and the run
// resumes from it.
func (ct *clusterTest) interrupt(t *testing.T) {
	script := writeScript(t, strings.Replace(small, "epochs = 3", "epochs = 400", 1))
	cluster := ct.cluster(t, "")
	out := filepath.Join(t.TempDir(), "run")
	l := ct.start(t, 2*time.Minute, "--cluster", cluster, script, "--out", out, "-q")
	ct.waitCheckpoint(t, l, out)
	l.cmd.Process.Signal(os.Interrupt)
	<-l.done
	log := l.out.String()
	if l.code != 143 || !strings.Contains(log, "checkpoint saved: continue with --resume") || !strings.Contains(log, "gorun: launch: SIGINT: every rank stops") {
		t.Fatalf("SIGINT to launch: exit %d, want 143 and an interrupt checkpoint:\n%s", l.code, log)
	}
	if n := strings.Count(log, "SIGUSR2 (gorun launch's stop): stopping"); n != 3 {
		t.Errorf("%d ranks said they were stopping, want 3:\n%s", n, log)
	}
	r := ct.launch(t, "--cluster", cluster, script, "--resume", out, "--set", "max_steps=200", "-q")
	if r.code != 0 {
		t.Errorf("resuming the interrupted run: exit %d\n%s", r.code, r.out.String())
	}
}

// waitCheckpoint waits until the run into out has its first checkpoint.
func (ct *clusterTest) waitCheckpoint(t *testing.T, l *launched, out string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if m, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "state.safetensors")); len(m) > 0 {
			return
		}
		select {
		case <-l.done:
			t.Fatalf("the run ended before its first checkpoint: exit %d\n%s", l.code, l.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after a minute:\n%s", l.out.String())
		}
	}
}

// faultRow is one line of the fault table.
type faultRow struct {
	fault     string
	launch    time.Duration // from the fault to gorun launch's exit
	all       time.Duration // to the last of launch, mpirun, orted, ssh and the ranks
	code      int
	line      string // launch's last line
	afterCont time.Duration
}

// ours are a host's processes that the run started (the ranks, orted,
// and on the launcher gorun launch, mpirun and ssh), not sshd's.
func ours(ps []testhosts.Proc) []testhosts.Proc {
	return slices.DeleteFunc(ps, func(p testhosts.Proc) bool { return strings.HasPrefix(p.Cmd, "sshd") })
}

// fault starts a long run on the three hosts, waits for its first
// checkpoint, makes the fault on host 3, and measures how long every
// process of the run takes to end; then checks the exit status, launch's
// last line, the checkpoint, and that the run resumes once the host is
// back.
func (ct *clusterTest) fault(t *testing.T, fault string) faultRow {
	row := faultRow{fault: fault}
	long := strings.Replace(small, "epochs = 3", "epochs = 400", 1)
	script := writeScript(t, long)
	cluster := ct.cluster(t, "")
	out := filepath.Join(t.TempDir(), "run")
	l := ct.start(t, 3*time.Minute, "--cluster", cluster, script, "--out", out, "-q")
	defer func() {
		select {
		case <-l.done:
		default:
			l.cmd.Cancel()
			<-l.done
		}
	}()
	ct.waitCheckpoint(t, l, out)
	time.Sleep(500 * time.Millisecond) // well inside an epoch's collectives
	begin := time.Now()
	restore := ct.induce(t, fault)
	defer restore()
	limit := clusterTimeout + 10*time.Second
	select {
	case <-l.done:
		row.launch = time.Since(begin)
	case <-time.After(limit + 20*time.Second):
		t.Fatalf("%s: launch still runs %v later:\n%s", fault, time.Since(begin), l.out.String())
	}
	// Every process of the run, on the launcher and the hosts (but a
	// stopped host's, which cannot end until it runs again).
	hosts := []int{-1, 0, 1, 2}
	if fault == "host stopped" {
		hosts = hosts[:3]
	}
	left := func(hosts []int) []string {
		var s []string
		for _, i := range hosts {
			for _, p := range ours(ct.h.Procs(i)) {
				s = append(s, fmt.Sprintf("host %d: %d %s", i+1, p.Pid, p.Cmd))
			}
		}
		return s
	}
	for len(left(hosts)) > 0 && time.Since(begin) < limit+20*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	row.all = time.Since(begin)
	if l := left(hosts); len(l) > 0 {
		t.Errorf("%s: processes left %v after the fault:\n%s", fault, row.all, strings.Join(l, "\n"))
	}
	if fault == "host stopped" {
		restore()
		cont := time.Now()
		for len(left([]int{2})) > 0 && time.Since(cont) < 30*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		row.afterCont = time.Since(cont)
		if l := left([]int{2}); len(l) > 0 {
			t.Errorf("host 3, stopped then resumed: processes left %v later:\n%s", row.afterCont, strings.Join(l, "\n"))
		}
		t.Logf("host 3's processes ended %v after it resumed", row.afterCont.Round(100*time.Millisecond))
	}
	restore()

	log := l.out.String()
	row.code = l.code
	row.line = lastLine(log)
	t.Logf("%s: launch ended after %v, every process after %v, exit %d", fault, row.launch.Round(100*time.Millisecond),
		row.all.Round(100*time.Millisecond), l.code)
	defer func() {
		if t.Failed() {
			t.Logf("the run's output ended:\n%s", tail(log, 30))
		}
	}()
	if l.code == 0 {
		t.Errorf("%s: launch exited 0", fault)
	}
	if row.all > limit {
		t.Errorf("%s: the run took %v to end, more than comm.timeout (%v) and 10 s", fault, row.all, clusterTimeout)
	}
	want := fmt.Sprintf(`gorun: launch: lost rank 2 on node[3] %s: `, ct.h.Addrs[2])
	if !strings.HasPrefix(row.line, want) {
		t.Errorf("%s: launch's last line is %q, want it to begin %q", fault, row.line, want)
	}
	if !regexp.MustCompile(`waiting for it:? .*in (allreduce|broadcast|barrier|reduce|allgather)( "[^"]*")? at step \d+`).MatchString(row.line) {
		t.Errorf("%s: launch's last line names no collective: %q", fault, row.line)
	}
	// The last checkpoint is whole, and the run resumes from it.
	ckpts, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*"))
	slices.Sort(ckpts)
	if len(ckpts) == 0 {
		t.Fatalf("%s: no checkpoint left", fault)
	}
	newest := ckpts[len(ckpts)-1]
	for _, f := range []string{"model.safetensors", "state.safetensors"} {
		if _, err := safetensors.ReadFile(filepath.Join(newest, f)); err != nil {
			t.Errorf("%s: the last checkpoint: %v", fault, err)
		}
	}
	step, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(newest), "step-"))
	r := ct.launch(t, "--cluster", cluster, script, "--resume", out, "--set", fmt.Sprintf("max_steps=%d", step+10), "-q")
	if r.code != 0 {
		t.Errorf("%s: resuming from step %d: exit %d\n%s", fault, step, r.code, r.out.String())
	}
	return row
}

// induce makes fault on host 3 while one of the run's ranks runs there:
// "link cut", "packets dropped" (nftables), "host stopped" (SIGSTOP to
// every process of the host, its sshd too) or "rank killed" (SIGKILL to
// each of its ranks). restore undoes it (nothing for a kill) and may be
// called more than once.
func (ct *clusterTest) induce(t *testing.T, fault string) (restore func()) {
	t.Helper()
	var ranks []int
	for _, p := range ct.h.Procs(2) {
		if strings.HasPrefix(p.Cmd, ct.bin+" ") {
			ranks = append(ranks, p.Pid)
		}
	}
	if len(ranks) == 0 {
		t.Fatalf("host 3 runs no rank: %v", ct.h.Procs(2))
	}
	var undo func()
	switch fault {
	case "link cut":
		if err := ct.h.CutLink(2, true); err != nil {
			t.Fatal(err)
		}
		undo = func() { ct.h.CutLink(2, false) }
	case "packets dropped":
		if err := ct.h.Drop(2, true); err != nil {
			t.Fatal(err)
		}
		undo = func() { ct.h.Drop(2, false) }
	case "host stopped":
		ct.h.Signal(2, syscall.SIGSTOP)
		undo = func() { ct.h.Signal(2, syscall.SIGCONT) }
	case "rank killed":
		for _, pid := range ranks {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("killing rank process %d on host 3: %v", pid, err)
			}
		}
		return func() {}
	default:
		t.Fatalf("no fault %q", fault)
	}
	return sync.OnceFunc(undo)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
