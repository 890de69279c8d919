package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorun/engine"
	"gorun/engine/runner"
)

// elasticFake is a set-up for launch's restarts without MPI or hosts: a
// fake mpirun that does, call by call, what plan says, and logs its
// arguments and hostfile; a fake ssh that runs a command here, as a host
// would, but with the run folder replaced by a folder of the host's own
// (no shared filesystem, unless a file "shared" exists), and that fails
// for a host once a file down-HOST exists; a run folder with a checkpoint at step 10.
type elasticFake struct {
	dir, run, mpirun, ssh, script string
}

// newElasticFake writes the fakes. The plan's actions, one a line (a call
// each): "ok"; "fail" (a rank's own error); "lose HOST [DOWN]" (OpenMPI
// lost HOST's daemon; host DOWN stops answering ssh); "killed RANK HOST
// SIGNAL NAME"; "interrupt" (SIGINT to launch, then lose host 10.0.0.3
// unless SIGUSR2 came); "lose-int HOST OTHER" (lose HOST; the
// restart's check of host OTHER sends SIGINT to launch and hangs).
func newElasticFake(t *testing.T, plan ...string) *elasticFake {
	t.Helper()
	e := &elasticFake{dir: t.TempDir()}
	e.run = filepath.Join(e.dir, "run")
	e.mpirun = filepath.Join(e.dir, "mpirun")
	e.ssh = filepath.Join(e.dir, "ssh")
	e.script = writeScript(t, small)
	write := func(path, text string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(e.dir, "plan"), strings.Join(plan, "\n")+"\n", 0o644)
	write(e.mpirun, `#!/bin/sh
D=`+shellQuote(e.dir)+`
n=$(cat "$D/calls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$D/calls"
echo "call $n: $*" >> "$D/log"
sed 's/^/  hostfile: /' "$2" | grep -v '^  hostfile: #' >> "$D/log"
set -- $(sed -n "${n}p" "$D/plan")
case "$1" in
ok) exit 0;;
fail) echo "gorun: rank 1 of 3 (host h2): train.star:12:5: train: batch_size: must be ≥ 1" >&2; exit 1;;
lose-int) echo "  Remote daemon: [[43405,0],2] on node $2" >&2; touch "$D/interrupt-$3"; exit 1;;
lose) echo "An ORTE daemon has unexpectedly failed after launch and before communicating back to mpirun." >&2
  echo "  Remote daemon: [[43405,0],2] on node $2" >&2
  [ -n "$3" ] && touch "$D/down-$3"; exit 1;;
killed) echo "mpirun noticed that process rank $2 with PID 4242 on node $3 exited on signal $4 ($5)." >&2; exit 1;;
interrupt) trap 'echo "got SIGUSR2" >> "$D/log"; exit 143' USR2
  kill -INT $PPID; sleep 5 & wait; echo "  Remote daemon: [[43405,0],2] on node 10.0.0.3" >&2; exit 1;;
esac
exit 99
`, 0o755)
	write(e.ssh, `#!/bin/sh
for a; do host=$cmd; cmd=$a; done
if [ -e `+shellQuote(e.dir)+`/down-"$host" ]; then echo "ssh: connect to host $host port 22: Connection timed out" >&2; exit 255; fi
if [ -e `+shellQuote(e.dir)+`/interrupt-"$host" ]; then kill -INT $PPID; sleep 10; fi
[ -e `+shellQuote(e.dir)+`/shared ] || cmd=$(printf '%s' "$cmd" | sed "s|`+e.run+`|`+e.run+`-$host|g")
exec sh -c "$cmd"
`, 0o755)
	write(filepath.Join(e.run, "metrics.jsonl"), `{"kind":"step","step":10}`+"\n", 0o644)
	for _, f := range []string{"model.safetensors", "state.safetensors"} {
		write(filepath.Join(e.run, "checkpoints", "step-10", f), "step 10's "+f, 0o644)
	}
	write(filepath.Join(e.run, "checkpoints", "step-20", "model.safetensors"), "half written", 0o644)
	return e
}

// cluster writes a cluster file of the hosts, one slot each, with the
// fake ssh.
func (e *elasticFake) cluster(t *testing.T, hosts ...string) string {
	src := "[cluster]\ntransport = \"mpi\"\n[ssh]\nprogram = \"" + e.ssh + "\"\n"
	for _, h := range hosts {
		src += "[[node]]\nhost = \"" + h + "\"\n"
	}
	return writeCluster(t, src)
}

// log is what the fake mpirun logged.
func (e *elasticFake) log(t *testing.T) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "log"))
	return string(b)
}

// launch runs gorun launch with the fakes.
func (e *elasticFake) launch(t *testing.T, cluster string, flags ...string) (int, string) {
	t.Helper()
	args := append([]string{"launch", "--cluster", cluster, "--mpirun", e.mpirun}, flags...)
	code, stdout, stderr := gorunWithin(t, time.Minute, append(args, e.script, "--out", e.run, "-q")...)
	return code, stdout + stderr
}

// TestElasticRestart: a job that loses a host restarts from the newest
// complete checkpoint on the hosts that still answer — the lost one left
// out, a host that then fails the ssh check left out too, naming why —
// with --resume, the processes left and the restart's facts for the
// ranks; a host without rank 0's copy of the checkpoint gets it (no
// shared filesystem); launch says so on stderr, and exits 0 when the
// restarted job finishes.
func TestElasticRestart(t *testing.T) {
	e := newElasticFake(t, "lose 10.0.0.4 10.0.0.3", "ok")
	cluster := e.cluster(t, "127.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
	code, out := e.launch(t, cluster, "--max-restarts", "2", "--init", "w.safetensors")
	log := e.log(t)
	if code != 0 {
		t.Fatalf("exit %d\n%s\nmpirun's log:\n%s", code, out, log)
	}
	t.Logf("launch:\n%s\nmpirun's log:\n%s", out, log)
	calls := strings.Split(log, "call ")[1:]
	if len(calls) != 2 {
		t.Fatalf("%d calls of mpirun, want 2", len(calls))
	}
	if !strings.Contains(calls[0], " -np 4 ") || !strings.Contains(calls[0], " --init w.safetensors") {
		t.Errorf("first call: %s", calls[0])
	}
	for _, want := range []string{" -np 2 ", "hostfile: 127.0.0.1 slots=1\n  hostfile: 10.0.0.2 slots=1\n",
		" --out " + e.run + " -q --resume " + e.run + " --set cluster.processes=2 --elastic-restart at="} {
		if !strings.Contains(calls[1], want) {
			t.Errorf("the restart's call lacks %q:\n%s", want, calls[1])
		}
	}
	if strings.Contains(calls[1], "--init") || strings.Contains(calls[1], "10.0.0.3") && !strings.Contains(calls[1], "dropped=10.0.0.3") {
		t.Errorf("the restart's call keeps --init or host 3: %s", calls[1])
	}
	if !strings.Contains(calls[1], "&dropped=10.0.0.3&from=4&lost=10.0.0.4&n=1") {
		t.Errorf("the restart's facts: %s", calls[1])
	}
	for _, want := range []string{
		"gorun: launch: lost rank 3 on node[4] 10.0.0.4: OpenMPI lost its daemon there",
		"gorun: launch: leaving out node[3] 10.0.0.3: does not answer ssh: ssh: connect to host 10.0.0.3 port 22: Connection timed out",
		"gorun: launch: copied checkpoint step-10 from node[1] 127.0.0.1 to node[2] 10.0.0.2 (",
		"gorun: launch: restart 1 of 2: lost node[4] 10.0.0.4 (rank 3); resuming from step 10 (" + filepath.Join(e.run, "checkpoints", "step-10") + ") on 2 processes: 127.0.0.1, 10.0.0.2; ",
		"gorun: launch: finished after 1 restart: 10.0.0.4 lost, resumed from step 10 (each has a restart line in " + filepath.Join(e.run, "metrics.jsonl") + ")",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("launch's output lacks %q:\n%s", want, out)
		}
	}
	// Host 2's own run folder got rank 0's checkpoint, whole.
	for _, f := range []string{"model.safetensors", "state.safetensors"} {
		b, err := os.ReadFile(filepath.Join(e.run+"-10.0.0.2", "checkpoints", "step-10", f))
		if err != nil || string(b) != "step 10's "+f {
			t.Errorf("host 2's copy of %s: %q, %v", f, b, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(e.run+"-10.0.0.2", "checkpoints", ".copy-*")); len(left) > 0 {
		t.Errorf("the copy left %v", left)
	}
}

// TestElasticNoRestart: launch does not restart a job whose failure would
// repeat or that may not go on — the ranks' own error, a rank that
// crashed, a user's Ctrl-C, the restarts used up, fewer processes left
// than --min-processes, rank 0's lost host holding the only run folder —
// and says why, exiting with mpirun's status; the checkpoints stay.
func TestElasticNoRestart(t *testing.T) {
	hosts := []string{"127.0.0.1", "10.0.0.2", "10.0.0.3"}
	for _, c := range []struct {
		name  string
		plan  []string
		flags []string
		calls int
		code  int
		want  string
	}{
		{"script error", []string{"fail"}, nil, 1, 1,
			"gorun: launch: not restarting: mpirun exited with status 1 and no host or process was lost: the ranks' own error (above) would repeat"},
		{"crash", []string{"killed 1 10.0.0.2 11 Segfault"}, nil, 1, 1,
			"gorun: launch: not restarting: rank 1 on node[2] 10.0.0.2 died of signal 11 (Segfault): a crash of gorun itself, which a restart would repeat"},
		{"used up", []string{"killed 2 10.0.0.3 9 Killed", "lose 10.0.0.2"}, nil, 2, 1,
			"gorun: launch: not restarting: the job lost node[2] 10.0.0.2, and --max-restarts 1 allows no more restarts (1 restart made)"},
		{"min processes", []string{"lose 10.0.0.3"}, []string{"--min-processes", "3"}, 1, 1,
			"gorun: launch: not restarting: the job lost node[3] 10.0.0.3; 2 processes left on the hosts that answer (127.0.0.1, 10.0.0.2), fewer than --min-processes 3; the checkpoints in "},
		{"rank 0's host", []string{"lose 127.0.0.1"}, nil, 1, 1,
			"gorun: launch: not restarting: node[1] 127.0.0.1 held the run folder "},
		{"interrupt", []string{"interrupt", "ok"}, nil, 1, 143,
			"gorun: launch: not restarting: SIGINT stopped the run (a user's interrupt is never followed by a restart)"},
		{"interrupt between jobs", []string{"lose-int 10.0.0.3 10.0.0.2", "ok"}, nil, 1, 130,
			"gorun: launch: SIGINT: stopping; no job starts after an interrupt\ngorun: launch: not restarting: SIGINT stopped the run during the restart"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			e := newElasticFake(t, c.plan...)
			code, out := e.launch(t, e.cluster(t, hosts...), append([]string{"--max-restarts", "1"}, c.flags...)...)
			log := e.log(t)
			if n := strings.Count(log, "call "); code != c.code || n != c.calls || !strings.Contains(out, c.want) {
				t.Errorf("exit %d after %d calls of mpirun, want %d after %d and %q:\n%s\nmpirun's log:\n%s", code, n, c.code, c.calls, c.want, out, log)
			}
			if _, err := os.Stat(filepath.Join(e.run, "checkpoints", "step-10", "state.safetensors")); err != nil {
				t.Errorf("the checkpoint: %v", err)
			}
			t.Logf("%s", lastLine(out))
		})
	}
}

// TestElasticFlags: --max-restarts and --min-processes are launch's own
// (not passed to the ranks), and settings that cannot work are usage
// errors before anything starts.
func TestElasticFlags(t *testing.T) {
	cluster := writeCluster(t, twoHosts)
	code, stdout, stderr := gorun(t, "launch", "--cluster", cluster, "--dry-run", "--mpirun", "mpirun", "--max-restarts", "3", "--min-processes=2", "x.star", "--out", "o")
	if code != 0 || strings.Contains(stdout, "restarts") || strings.Contains(stdout, "min-processes") || !strings.HasSuffix(stdout, " x.star --cluster "+cluster+" --out o\n") {
		t.Errorf("exit %d, printed %s%s", code, stdout, stderr)
	}
	os.RemoveAll("o")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-restarts", "2", "x.star"}, "--max-restarts 2 needs --out DIR (or --resume DIR): a restart resumes the run from the newest checkpoint there"},
		{[]string{"--max-restarts", "-1", "x.star"}, "--max-restarts -1: want 0 (no restart, the default) or more"},
		{[]string{"--min-processes", "2", "x.star"}, "--min-processes says how few processes a restart may go on with: give --max-restarts N too"},
		{[]string{"--max-restarts", "1", "--min-processes", "6", "--out", "o", "x.star"}, "--min-processes 6: want 1 to the cluster's 5 processes"},
		{[]string{"--max-restarts", "1", "--set", "cluster.weights=[1,1,1,1,2]", "--out", "o", "x.star"}, "cluster.weights gives a speed for each of the 5 devices, which a restart on fewer devices cannot use"},
	} {
		code, _, stderr := gorun(t, append([]string{"launch", "--cluster", cluster, "--dry-run"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
	// The ranks' flag.
	code, _, stderr = gorun(t, writeScript(t, small), "--elastic-restart", "n=1&from=2&at=1")
	if code != 2 || !strings.Contains(stderr, "--elastic-restart comes with --resume DIR") {
		t.Errorf("--elastic-restart without --resume: exit %d, %s", code, stderr)
	}
	r, err := parseRestartInfo(restartInfo(&restartFacts))
	if err != nil || r.Number != 2 || r.FromProcesses != 3 || strings.Join(r.LostHosts, " ") != "10.77.0.3 node-4.example" ||
		r.FailedAt.Sub(restartFacts.FailedAt).Abs() > time.Millisecond {
		t.Errorf("restart facts round trip: %+v, %v", r, err)
	}
	if _, err := parseRestartInfo("n=x"); err == nil || !strings.Contains(err.Error(), "gorun launch --max-restarts sets this flag") {
		t.Errorf("bad --elastic-restart: %v", err)
	}
	// withoutFlags drops flags with their values, in both spellings.
	fs := newFlagSet(&flags{}, os.Stderr)
	got := withoutFlags(fs, []string{"--init", "w", "-q", "--resume=r", "--set", "a=1", "--overwrite"}, "init", "resume", "overwrite")
	if strings.Join(got, " ") != "-q --set a=1" {
		t.Errorf("withoutFlags: %q", got)
	}
}

// restartFacts is a restart for the round trip of --elastic-restart.
var restartFacts = runner.Restart{Number: 2, FromProcesses: 3, LostHosts: []string{"10.77.0.3", "node-4.example"},
	FailedAt: time.Date(2026, 12, 2, 8, 30, 1, 250e6, time.UTC)}

// TestDecideRestart: the restart decision, by what mpirun's output said.
func TestDecideRestart(t *testing.T) {
	c, err := engine.ParseCluster("c.toml", []byte("[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"a\"\nslots = 2\n[[node]]\nhost = \"b\"\nslots = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	watch := func(lines string) jobEnd {
		w := &jobWatch{}
		w.Write([]byte(lines))
		return jobEnd{code: 1, watch: w}
	}
	for _, tc := range []struct {
		name, out string
		sig       os.Signal
		restarts  int
		restart   bool
		lost      []int
		ranks     []int
	}{
		{"host lost", "  Remote daemon: [[1,0],1] on node b\n", nil, 0, true, []int{1}, []int{2, 3}},
		{"rank killed", "process rank 1 with PID 7 on node a exited on signal 9 (Killed).\n", nil, 0, true, []int{0}, []int{1}},
		{"keepalives", "Timeout, server b not responding.\n", nil, 1, true, []int{1}, []int{2, 3}},
		{"used up", "  Remote daemon: [[1,0],1] on node b\n", nil, 2, false, []int{1}, []int{2, 3}},
		{"interrupted", "  Remote daemon: [[1,0],1] on node b\n", syscall.SIGTERM, 0, false, nil, nil},
		{"own error", "gorun: rank 0 of 4 (host a): bad\n", nil, 0, false, nil, nil},
		{"abort", "process rank 3 with PID 7 on node b exited on signal 6 (Aborted).\n", nil, 0, false, nil, nil},
	} {
		d := decideRestart(&c, &c, watch(tc.out), tc.sig, tc.restarts, 2)
		if d.restart != tc.restart || !slices.Equal(d.lost, tc.lost) || !slices.Equal(d.ranks, tc.ranks) {
			t.Errorf("%s: restart %v, lost nodes %v ranks %v (%s); want %v, %v, %v", tc.name, d.restart, d.lost, d.ranks, d.why, tc.restart, tc.lost, tc.ranks)
		}
	}
}

// TestElasticLeadLostShared: when rank 0's host is lost but the run
// folder is shared, the restart waits until the lost rank 0's lock on the
// folder is released (its collectives time out), then restarts on the
// other hosts, rank 0 now on node 2.
func TestElasticLeadLostShared(t *testing.T) {
	e := newElasticFake(t, "lose 10.0.0.1", "ok")
	if err := os.WriteFile(filepath.Join(e.dir, "shared"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The lost rank 0 holds the folder's lock for 6 s more: long enough
	// that launch, its first job and the host checks reach the wait
	// before it ends on a loaded machine (1.5 s was not, under a load
	// average of 6 on 2 cores).
	lock := filepath.Join(e.run, "gorun.lock")
	holder := exec.Command("flock", lock, "sleep", "6")
	if err := holder.Start(); err != nil {
		t.Skipf("SKIP: flock (util-linux): %v", err)
	}
	defer holder.Wait()
	// Until the holder has the lock (not merely until the file exists).
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if exec.Command("flock", "-n", lock, "true").Run() != nil || time.Since(start) > 5*time.Second {
			break
		}
	}
	begin := time.Now()
	code, out := e.launch(t, e.cluster(t, "10.0.0.1", "10.0.0.2", "10.0.0.3"), "--max-restarts", "1")
	log := e.log(t)
	if code != 0 {
		t.Fatalf("exit %d\n%s\nmpirun's log:\n%s", code, out, log)
	}
	for _, want := range []string{
		"gorun: launch: waiting for rank 0's process on the lost node[1] 10.0.0.1 to release the run folder " + e.run + " (at most 1m10s)",
		"gorun: launch: restart 1 of 1: lost node[1] 10.0.0.1 (rank 0); resuming from step 10 (",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("launch's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "copied checkpoint") {
		t.Errorf("a shared folder's checkpoint was copied:\n%s", out)
	}
	if calls := strings.Split(log, "call "); len(calls) != 3 || !strings.Contains(calls[2], "hostfile: 10.0.0.2 slots=1\n  hostfile: 10.0.0.3 slots=1\n") {
		t.Errorf("mpirun's log:\n%s", log)
	}
	if took := time.Since(begin); took < 4*time.Second {
		t.Errorf("restarted after %v, before the lock was free", took)
	}
}
