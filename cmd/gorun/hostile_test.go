package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests for issue 13 (hostile input) on the command line.

// TestPanicIsOneLine: a panic becomes one line naming what was running,
// exit 1; the Go stack only with -v.
func TestPanicIsOneLine(t *testing.T) {
	script := writeScript(t, small)
	phaseHook = func(p string) {
		if strings.HasPrefix(p, "compiling the plan of") {
			panic(fmt.Errorf("runtime error: index out of range [5] with length 3"))
		}
	}
	defer func() { phaseHook = nil }()
	code, _, stderr := gorun(t, "plan", script)
	want := "gorun: internal error while compiling the plan of " + script + ": runtime error: index out of range [5] with length 3"
	if code != 1 || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "goroutine") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and one line starting %q", code, stderr, want)
	}
	code, _, stderr = gorun(t, "plan", script, "-v")
	if code != 1 || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "goroutine ") || !strings.Contains(stderr, "cmd/gorun.run(") {
		t.Errorf("-v: exit %d, stderr:\n%s\nwant the Go stack", code, stderr)
	}
}

// TestUsageChecks: flags that make no sense are usage errors (exit 2)
// naming the flag.
func TestUsageChecks(t *testing.T) {
	script := writeScript(t, small)
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{script, "--devices", "0"}, "--devices 0: want at least 1"},
		{[]string{"plan", script, "--devices=-2"}, "--devices -2: want at least 1"},
		{[]string{script, "--init", "w.safetensors", "--resume", dir}, "--init and --resume conflict"},
		{[]string{script, "--overwrite", "--resume", dir}, "--overwrite and --resume conflict"},
		{[]string{script, "--overwrite"}, "--overwrite needs --out"},
		{[]string{script, "--dot", filepath.Join(dir, "p.dot")}, "--dot writes the compiled Plan as Graphviz: use it with gorun plan, not train"},
		{[]string{script, "--set", "epochs=1+"}, `invalid value "epochs=1+" for flag -set: --set epochs=1+: the value is not a Starlark expression (column 3: got end of file, want primary expression)`},
		{[]string{"plan", script, "--set", "optimizer=optim.sgd(lr=0.1"}, `--set optimizer=optim.sgd(lr=0.1: the value is not a Starlark expression`},
	}
	for _, c := range cases {
		code, _, stderr := gorun(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("gorun %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
	// A plain word stays a string: the error is train()'s, exit 1.
	code, _, stderr := gorun(t, "plan", script, "--set", "loss=cross-entropy")
	if code != 1 || !strings.Contains(stderr, `loss must be "nll", "cross_entropy" or "mse", got "cross-entropy"`) {
		t.Errorf("--set loss=cross-entropy: exit %d, %s", code, stderr)
	}
}

// TestHostileScripts: scripts that ask for huge memory, recurse without end
// or pass NaN end with a located error, exit 1.
func TestHostileScripts(t *testing.T) {
	cases := []struct{ src, want string }{
		{"x = list(range(1 << 40))\n", "range: len = 1099511627776 is more than the limit of 67108864 elements"},
		{"x = shuffle(1 << 40, 1)\n", "shuffle: n = 1099511627776 is more than the limit of 67108864 elements"},
		{strings.Replace(small, "lr = 0.05", `lr = float("nan")`, 1), ":15:26: in <toplevel>\nError in optim.sgd: optim.sgd: for parameter \"lr\": got nan, want a finite number"},
		{strings.Replace(small, "noise = 0.5)", `noise = float("inf"))`, 1), `for parameter "noise": got +inf, want a finite number`},
	}
	for _, c := range cases {
		script := writeScript(t, c.src)
		code, _, stderr := gorun(t, "plan", script)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 and %q", c.src[:min(len(c.src), 40)], code, stderr, c.want)
		}
	}
	// A deep recursion prints its first and last frames, not 10,000.
	script := writeScript(t, "def down(n):\n    return down(n + 1)\n\ndown(0)\n")
	code, _, stderr := gorun(t, "plan", script)
	if code != 1 || !strings.Contains(stderr, "frames omitted") || strings.Count(stderr, "\n") > 30 ||
		!strings.Contains(stderr, "recursion deeper than 10000 calls") || !strings.Contains(stderr, script+":4:5: in <toplevel>") {
		t.Errorf("recursion: exit %d, %d lines:\n%s", code, strings.Count(stderr, "\n"), stderr)
	}
}

// TestRunFolderReuse: a non-empty --out is refused unless --resume or
// --overwrite; --overwrite removes the old run's files; stale temporaries
// are removed at start; the lock file goes with the run.
func TestRunFolderReuse(t *testing.T) {
	script := writeScript(t, small)
	out := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", out, "-q"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, lockName)); !os.IsNotExist(err) {
		t.Errorf("the lock file outlives the run: %v", err)
	}
	code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", out, "-q")
	if code != 2 || !strings.Contains(stderr, "--out "+out+": the folder is not empty") || !strings.Contains(stderr, "--resume "+out) {
		t.Fatalf("second run into the same folder: exit %d, %s", code, stderr)
	}
	// Temporaries of interrupted writes: metrics', safetensors', plots'.
	stale := []string{
		filepath.Join(out, "metrics.jsonl.tmp"),
		filepath.Join(out, ".model.safetensors.tmp-1234"),
		filepath.Join(out, ".loss_steps.png.5678.tmp"),
		filepath.Join(out, "checkpoints", ".step-10.safetensors.tmp-99"),
	}
	for _, p := range stale {
		writeFile(t, p, "partial")
	}
	code, _, stderr = gorun(t, script, "--set", "epochs=2", "--resume", out, "-q")
	if code != 0 || !strings.Contains(stderr, "removed 4 stale temporary file(s)") {
		t.Fatalf("resume: exit %d, %s", code, stderr)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there", p)
		}
	}
	// A run that failed before its first step leaves an empty
	// metrics.jsonl: that is no run to protect.
	failed := t.TempDir()
	writeFile(t, filepath.Join(failed, "metrics.jsonl"), "")
	if code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", failed, "-q"); code != 0 {
		t.Errorf("a folder holding only an empty metrics.jsonl: exit %d, %s", code, stderr)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if code, _, stderr := gorun(t, script, "--resume", missing, "-q"); code != 1 || !strings.Contains(stderr, "--resume "+missing+": no run folder there") {
		t.Errorf("--resume of a missing folder: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("--resume created the missing folder: %v", err)
	}
	writeFile(t, filepath.Join(out, "notes.txt"), "mine")
	code, _, stderr = gorun(t, script, "--set", "epochs=1", "--out", out, "--overwrite", "-q")
	if code != 0 || !strings.Contains(stderr, "--overwrite: removed") {
		t.Fatalf("--overwrite: exit %d, %s", code, stderr)
	}
	b, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if n := strings.Count(string(b), `"kind":"summary"`); n != 1 || strings.Count(string(b), `"kind":"epoch"`) != 1 {
		t.Errorf("after --overwrite, metrics.jsonl holds %d summaries (want the new run's only):\n%s", n, b)
	}
	if _, err := os.Stat(filepath.Join(out, "notes.txt")); err != nil {
		t.Errorf("--overwrite removed a file that is not a run's: %v", err)
	}
}

// TestRunFolderLock: a second gorun on a locked run folder fails naming the
// holder's pid.
func TestRunFolderLock(t *testing.T) {
	script := writeScript(t, small)
	out := t.TempDir()
	unlock, err := lockRunFolder(out)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", out, "-q")
	unlock()
	want := fmt.Sprintf("run folder %s is in use by another gorun (pid %d, started ", out, os.Getpid())
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}
	if code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", out, "-q"); code != 0 {
		t.Fatalf("after the lock is released: exit %d, %s", code, stderr)
	}
}

// TestSignals: SIGINT and SIGTERM cancel the script or the partition
// strategy under way and end with 130 and 143; during training they stop
// after a checkpoint, with the same statuses.
func TestSignals(t *testing.T) {
	bin := buildGorun(t)
	dir := t.TempDir()
	spin := `print("started")
for i in range(60000000):
    pass
` + small
	strategy := strings.Replace(small, "    seed = 1,", `    seed = 1,
    partition = slow,`, 1)
	strategy = `def slow(ctx):
    print("started")
    for i in range(60000000):
        pass
    return [list(range(ctx.size))]
` + strategy
	long := strings.Replace(small, "data.synthetic(size = 300,", "data.synthetic(size = 30000,", 1)
	long = strings.Replace(long, "epochs = 3", "epochs = 100", 1)
	cases := []struct {
		name, src, wait string
		sig             syscall.Signal
		code            int
		want            string
	}{
		{"script SIGTERM", spin, "started", syscall.SIGTERM, 143, "interrupted by SIGTERM while loading"},
		{"script SIGINT", spin, "started", syscall.SIGINT, 130, "interrupted by SIGINT while loading"},
		{"strategy SIGTERM", strategy, "started", syscall.SIGTERM, 143, "interrupted by SIGTERM while training"},
		{"training SIGTERM", long, "epoch 1/100", syscall.SIGTERM, 143, "checkpoint saved: continue with --resume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".star")
			writeFile(t, script, c.src)
			out := filepath.Join(dir, "out_"+strings.ReplaceAll(c.name, " ", "_"))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, script, "--out", out)
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = pw, pw
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pw.Close()
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(pr)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			var log strings.Builder
			for line := range lines {
				log.WriteString(line + "\n")
				if strings.Contains(line, c.wait) {
					break
				}
			}
			sent := time.Now()
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			for line := range lines {
				log.WriteString(line + "\n")
			}
			err = cmd.Wait()
			took := time.Since(sent)
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != c.code || !strings.Contains(log.String(), c.want) {
				t.Errorf("exit %d, want %d and %q; output:\n%s", code, c.code, c.want, log.String())
			}
			if took > 10*time.Second {
				t.Errorf("gorun took %v to stop after the signal", took)
			}
		})
	}
}
