package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gorun/safetensors"
)

// These tests start real processes under OpenMPI's mpirun: a gorun built
// with -tags mpi, on localhost. They print a SKIP line naming what is
// missing when mpirun or the MPI headers are not installed.

var (
	mpiOnce sync.Once
	mpiBin  string
	mpiSkip string
)

// mpiGorun builds gorun with MPI once, or skips the test.
func mpiGorun(t testing.TB) string {
	t.Helper()
	mpiOnce.Do(func() {
		if _, err := exec.LookPath("mpirun"); err != nil {
			mpiSkip = "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
			return
		}
		dir, err := os.MkdirTemp("", "gorun-mpi")
		if err != nil {
			mpiSkip = err.Error()
			return
		}
		mpiBin = filepath.Join(dir, "gorun")
		out, err := exec.Command("go", "build", "-tags", "mpi", "-o", mpiBin, ".").CombinedOutput()
		if err != nil {
			mpiSkip = fmt.Sprintf("SKIP: cannot build gorun with -tags mpi (apt-get install libopenmpi-dev): %v\n%s", err, out)
		}
	})
	if mpiSkip != "" {
		t.Skip(mpiSkip)
	}
	return mpiBin
}

// mpirun runs np processes of gorun with args; it returns the exit status
// and the output.
func mpirun(t *testing.T, np int, args ...string) (int, string) {
	t.Helper()
	bin := mpiGorun(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--oversubscribe", "--allow-run-as-root", "-np", strconv.Itoa(np), bin}, args...)
	cmd := exec.CommandContext(ctx, "mpirun", full...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return code, string(out)
}

// mpiCluster writes a cluster file for an MPI run with devices per process.
func mpiCluster(t *testing.T, devices int, timeout string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mpi.toml")
	src := fmt.Sprintf("[cluster]\ntransport = \"mpi\"\ndevices = %d\n\n[comm]\ntimeout = %q\n", devices, timeout)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// finalParams reads a run's model.safetensors.
func finalParams(t *testing.T, out string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(out, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]float32{}
	for _, name := range f.Names() {
		tn, _ := f.Get(name)
		v, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		m[name] = v
	}
	return m
}

// relDiff is the largest |a-b| / max(|a|, |b|, 0.01) over every parameter.
func relDiff(a, b map[string][]float32) float64 {
	d := 0.0
	for name, x := range a {
		y := b[name]
		if len(x) != len(y) {
			return math.Inf(1)
		}
		for i := range x {
			s := math.Max(math.Max(math.Abs(float64(x[i])), math.Abs(float64(y[i]))), 0.01)
			d = math.Max(d, math.Abs(float64(x[i])-float64(y[i]))/s)
		}
	}
	return d
}

// TestMPIEqualsInProcess: 2 and 3 processes of one device, and 2 processes
// of 2 devices, end with the parameters of an in-process run of the same
// world size (the hierarchical all-reduce adds in another order: ≤ 1e-6).
func TestMPIEqualsInProcess(t *testing.T) {
	script := writeScript(t, small)
	for _, c := range []struct{ procs, devices int }{{2, 1}, {3, 1}, {2, 2}} {
		world := c.procs * c.devices
		inproc := filepath.Join(t.TempDir(), "inproc")
		if code, stdout, stderr := gorun(t, script, "--devices", strconv.Itoa(world), "--out", inproc, "-q"); code != 0 {
			t.Fatalf("in-process, %d devices: exit %d\n%s%s", world, code, stdout, stderr)
		}
		out := filepath.Join(t.TempDir(), "mpi")
		code, log := mpirun(t, c.procs, "--cluster", mpiCluster(t, c.devices, "60s"), "--out", out, script)
		if code != 0 {
			t.Fatalf("%d processes × %d devices: exit %d\n%s", c.procs, c.devices, code, log)
		}
		for r := 0; r < world; r++ {
			if !strings.Contains(log, fmt.Sprintf("rank %d epoch 3 loss", r)) {
				t.Errorf("%d × %d: no epoch line of rank %d:\n%s", c.procs, c.devices, r, log)
			}
		}
		if strings.Count(log, "done: ") != 1 {
			t.Errorf("%d × %d: want one summary line (rank 0's process):\n%s", c.procs, c.devices, log)
		}
		d := relDiff(finalParams(t, inproc), finalParams(t, out))
		t.Logf("%d processes × %d devices vs %d in-process devices: max relative difference %.2e", c.procs, c.devices, world, d)
		if d > 1e-6 {
			t.Errorf("%d processes × %d devices differ from %d in-process devices by %.2e", c.procs, c.devices, world, d)
		}
	}
}

// TestMPIZeroEqualsAllReduce: ZeRO stages 1, 2 and 3 over 2 and 3
// processes of one device, and 2 processes of 2 devices (the hierarchical
// group), end with the parameters of in-process allreduce on as many
// devices (≤ 1e-6: the reduce-scatters add in another order), stage 2
// with buckets smaller than a layer; and a stage-2 run's checkpoint made
// over 2 processes resumes as stage 3 over 3, ending within rounding of a
// run over 3 throughout.
func TestMPIZeroEqualsAllReduce(t *testing.T) {
	script := writeScript(t, small)
	adam := "optimizer=optim.adamw(lr=0.01)"
	for _, c := range []struct{ procs, devices int }{{2, 1}, {3, 1}, {2, 2}} {
		world := c.procs * c.devices
		inproc := filepath.Join(t.TempDir(), "inproc")
		if code, stdout, stderr := gorun(t, script, "--devices", strconv.Itoa(world), "--set", adam, "--out", inproc, "-q"); code != 0 {
			t.Fatalf("in-process, %d devices: exit %d\n%s%s", world, code, stdout, stderr)
		}
		for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2, bucket_mb=0.0002)", "sync.fsdp()"} {
			out := filepath.Join(t.TempDir(), "mpi")
			code, log := mpirun(t, c.procs, "--cluster", mpiCluster(t, c.devices, "60s"), "--set", adam, "--set", "sync="+sync, "--out", out, script)
			if code != 0 {
				t.Fatalf("%s, %d processes × %d devices: exit %d\n%s", sync, c.procs, c.devices, code, log)
			}
			d := relDiff(finalParams(t, inproc), finalParams(t, out))
			t.Logf("%s, %d processes × %d devices vs in-process allreduce on %d: max relative difference %.2e", sync, c.procs, c.devices, world, d)
			if d > 1e-6 {
				t.Errorf("%s, %d processes × %d devices differ from in-process allreduce on %d devices by %.2e", sync, c.procs, c.devices, world, d)
			}
		}
	}
	// Without dropout: the third process's dropout RNG cannot come from
	// a checkpoint of two.
	script = writeScript(t, strings.Replace(small, "nn.dropout(0.1),", "", 1))
	whole := filepath.Join(t.TempDir(), "whole")
	if code, log := mpirun(t, 3, "--cluster", mpiCluster(t, 1, "60s"), "--set", adam, "--set", "sync=sync.fsdp()", "--out", whole, script); code != 0 {
		t.Fatalf("stage 3 over 3 processes: exit %d\n%s", code, log)
	}
	part := filepath.Join(t.TempDir(), "part")
	if code, log := mpirun(t, 2, "--cluster", mpiCluster(t, 1, "60s"), "--set", adam, "--set", "sync=sync.zero(stage=2)", "--set", "max_steps=13", "--out", part, script); code != 0 {
		t.Fatalf("stage 2 over 2 processes, max_steps: exit %d\n%s", code, log)
	}
	if code, log := mpirun(t, 3, "--cluster", mpiCluster(t, 1, "60s"), "--set", adam, "--set", "sync=sync.fsdp()", "--resume", part, script); code != 0 {
		t.Fatalf("stage 2's checkpoint resumed as stage 3 over 3 processes: exit %d\n%s", code, log)
	}
	d := relDiff(finalParams(t, whole), finalParams(t, part))
	t.Logf("stage 2 over 2 processes resumed as stage 3 over 3: %.2e from stage 3 over 3 throughout", d)
	if d > 1e-5 { // 13 steps summed over 2 ranks, then over 3: elementwise, rounding apart
		t.Errorf("stage 2 over 2 processes resumed as stage 3 over 3 differs from stage 3 over 3 throughout by %.2e", d)
	}
}

// TestMPIResumeIsBitIdentical: a two-process run stopped part-way and
// resumed ends where an uninterrupted two-process run ends, bit for bit.
func TestMPIResumeIsBitIdentical(t *testing.T) {
	script := writeScript(t, small)
	cluster := mpiCluster(t, 1, "60s")
	for _, sync := range []string{"sync.allreduce()", "sync.local_sgd(every=2)", "sync.parameter_server(root=1)"} {
		whole := filepath.Join(t.TempDir(), "whole")
		if code, log := mpirun(t, 2, "--cluster", cluster, "--set", "sync="+sync, "--out", whole, script); code != 0 {
			t.Fatalf("%s: exit %d\n%s", sync, code, log)
		}
		part := filepath.Join(t.TempDir(), "part")
		if code, log := mpirun(t, 2, "--cluster", cluster, "--set", "sync="+sync, "--set", "max_steps=13", "--out", part, script); code != 0 {
			t.Fatalf("%s, max_steps: exit %d\n%s", sync, code, log)
		}
		if code, log := mpirun(t, 2, "--cluster", cluster, "--set", "sync="+sync, "--resume", part, script); code != 0 {
			t.Fatalf("%s, resume: exit %d\n%s", sync, code, log)
		}
		if d := relDiff(finalParams(t, whole), finalParams(t, part)); d != 0 {
			t.Errorf("%s: resumed two-process run differs from an uninterrupted one by %.2e", sync, d)
		}
	}
}

// TestMPIResumeAnotherWorld: allreduce's checkpoint made over 2
// processes resumes over 3, inside an epoch, and ends within rounding of
// one device's run throughout (the same global batches; without dropout,
// as the third process's dropout RNG cannot come from a checkpoint of
// two); the metrics say from 2 devices to 3.
func TestMPIResumeAnotherWorld(t *testing.T) {
	script := writeScript(t, strings.Replace(small, "nn.dropout(0.1),", "", 1))
	cluster := mpiCluster(t, 1, "60s")
	one := filepath.Join(t.TempDir(), "one")
	if code, stdout, stderr := gorun(t, script, "--devices", "1", "--out", one, "-q"); code != 0 {
		t.Fatalf("one device: exit %d\n%s%s", code, stdout, stderr)
	}
	part := filepath.Join(t.TempDir(), "part")
	if code, log := mpirun(t, 2, "--cluster", cluster, "--set", "max_steps=13", "--out", part, script); code != 0 {
		t.Fatalf("2 processes, max_steps: exit %d\n%s", code, log)
	}
	if code, log := mpirun(t, 3, "--cluster", cluster, "--resume", part, script); code != 0 {
		t.Fatalf("2 processes' checkpoint resumed over 3: exit %d\n%s", code, log)
	}
	d := relDiff(finalParams(t, one), finalParams(t, part))
	t.Logf("allreduce over 2 processes resumed over 3: %.2e from one device throughout", d)
	if d > 1e-5 {
		t.Errorf("allreduce over 2 processes resumed over 3 differs from one device throughout by %.2e", d)
	}
	b, err := os.ReadFile(filepath.Join(part, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"devices":3`) || !strings.Contains(string(b), `"from_devices":2`) || !strings.Contains(string(b), `"kind":"resume"`) {
		t.Errorf("metrics.jsonl has no resume line from 2 devices to 3:\n%s", b)
	}
}

// TestMPIMismatchedPlans: a rank started with another --set stops every
// rank at start, the error naming the first differing step.
func TestMPIMismatchedPlans(t *testing.T) {
	bin := mpiGorun(t)
	script := writeScript(t, small)
	cluster := mpiCluster(t, 1, "20s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// MPMD: rank 0 and rank 1 get different command lines.
	cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--allow-run-as-root",
		"-np", "1", bin, "--cluster", cluster, script, ":",
		"-np", "1", bin, "--cluster", cluster, "--set", "optimizer.lr=0.5", script)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ranks with different --set trained:\n%s", out)
	}
	t.Logf("stopped in %v:\n%s", time.Since(start), firstLines(string(out), 6))
	if time.Since(start) > time.Minute {
		t.Errorf("the mismatch took %v to stop the run", time.Since(start))
	}
	for _, want := range []string{"rank 1's plan differs from rank 0's first at optimizer", "lr 0.5"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestMPIKilledRank: SIGKILL of one rank mid-epoch ends the run with a
// non-zero status well within the collective timeout, the output naming
// the lost rank, and the last checkpoint stays readable.
func TestMPIKilledRank(t *testing.T) {
	bin := mpiGorun(t)
	long := strings.Replace(small, "epochs = 3", "epochs = 400", 1)
	script := writeScript(t, long)
	out := filepath.Join(t.TempDir(), "run")
	cmd, log := startUntilCheckpoint(t, bin, script, out)
	// Rank 1 dies after the first checkpoint.
	victim := rankPID(t, cmd.Process.Pid, 1)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err := cmd.Wait()
	if err == nil {
		t.Fatalf("the run succeeded with rank 1 killed:\n%s", log.String())
	}
	t.Logf("stopped %v after the kill:\n%s", time.Since(killed), firstLines(log.String(), 8))
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("the other rank took %v to stop (timeout 30s)", took)
	}
	if !strings.Contains(log.String(), "rank 1") {
		t.Errorf("the output does not name the lost rank 1:\n%s", log.String())
	}
	m, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "model.safetensors"))
	readable := 0
	for _, f := range m {
		if _, err := safetensors.ReadFile(f); err == nil {
			readable++
		}
	}
	if readable == 0 {
		t.Errorf("no readable checkpoint after the kill: %v", m)
	}
}

// rankPID finds the pid of the gorun process of rank under mpirun.
func rankPID(t *testing.T, mpirunPID, rank int) int {
	t.Helper()
	want := fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", rank)
	for tries := 0; tries < 100; tries++ {
		procs, _ := filepath.Glob("/proc/[0-9]*/environ")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			if !bytes.Contains(b, []byte(want+"\x00")) {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if isDescendant(pid, mpirunPID) {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no process of rank %d under mpirun %d", rank, mpirunPID)
	return 0
}

// isDescendant reports whether pid descends from ancestor.
func isDescendant(pid, ancestor int) bool {
	for i := 0; i < 10 && pid > 1; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(f[1])
		if pid == ancestor {
			return true
		}
	}
	return false
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestMPIInterrupt: SIGTERM to every rank (as a batch scheduler sends it)
// stops them after the same step with a checkpoint and exit status 143,
// the run folder unlocked (TestMPIResumeIsBitIdentical resumes such runs).
func TestMPIInterrupt(t *testing.T) {
	bin := mpiGorun(t)
	long := strings.Replace(small, "epochs = 3", "epochs = 100000", 1)
	script := writeScript(t, long)
	out := filepath.Join(t.TempDir(), "run")
	cmd, log := startUntilCheckpoint(t, bin, script, out)
	for r := 0; r < 2; r++ {
		if err := syscall.Kill(rankPID(t, cmd.Process.Pid, r), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 143 {
		t.Fatalf("mpirun exited %d (%v), want 143:\n%s", code, err, log.String())
	}
	if !strings.Contains(log.String(), "checkpoint saved: continue with --resume") {
		t.Errorf("no interrupt checkpoint:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(out, lockName)); !os.IsNotExist(err) {
		t.Errorf("the run folder's lock was left behind: %v", err)
	}
}

// startUntilCheckpoint starts a two-process run of script into out (a
// 30 s collective timeout, killed after two minutes at most) and returns
// once its first checkpoint exists, with the run still going.
func startUntilCheckpoint(t *testing.T, bin, script, out string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2",
		bin, "--cluster", mpiCluster(t, 1, "30s"), "--out", out, "-q", script)
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if m, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "state.safetensors")); len(m) > 0 {
			return cmd, log
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no checkpoint after a minute:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
