package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLaunchMPILocal: gorun launch with its OpenMPI parameters (the ssh
// agent, keepalives, sessions left attached, mapping by slot) runs two
// ranks on this machine to the parameters of two in-process devices, and
// SIGTERM to launch (Ctrl-C) still stops every rank after the same step
// with a checkpoint, exit 143.
func TestLaunchMPILocal(t *testing.T) {
	bin := mpiGorun(t)
	script := writeScript(t, small)
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[comm]\ntimeout = \"30s\"\n[[node]]\nhost = \"127.0.0.1\"\nslots = 2\n")
	inproc := filepath.Join(t.TempDir(), "inproc")
	if code, stdout, stderr := gorun(t, script, "--devices", "2", "--out", inproc, "-q"); code != 0 {
		t.Fatalf("in-process: exit %d\n%s%s", code, stdout, stderr)
	}
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "launch", "--cluster", cluster, script, "--out", out, "-q")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("launch: %v\n%s", err, b)
	}
	if d := relDiff(finalParams(t, inproc), finalParams(t, out)); d > 1e-6 {
		t.Errorf("two launched ranks differ from two in-process devices by %.2e", d)
	}

	long := writeScript(t, strings.Replace(small, "epochs = 3", "epochs = 100000", 1))
	out = filepath.Join(t.TempDir(), "long")
	cmd = exec.Command(bin, "launch", "--cluster", cluster, long, "--out", out, "-q")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		if m, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*", "state.safetensors")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no checkpoint after a minute:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 143 || !strings.Contains(log.String(), "checkpoint saved: continue with --resume") {
			t.Errorf("SIGTERM to launch: exit %d (%v), want 143 and an interrupt checkpoint:\n%s", code, err, log.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("SIGTERM did not stop launch within a minute:\n%s", log.String())
	}
}
