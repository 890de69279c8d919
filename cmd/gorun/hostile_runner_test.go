package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests for issue 29 (hostile input, round two) on the run folder, sample
// and the ranks of an MPI run.

// TestMPIFlagMismatch: mpirun giving --init to one rank only (an MPMD
// command line) stops every rank at start-up, naming the rank and the
// flag, instead of training from rank 0's weights as if --init had not
// been given.
func TestMPIFlagMismatch(t *testing.T) {
	bin := mpiGorun(t)
	script := writeScript(t, small)
	init := filepath.Join(t.TempDir(), "init")
	if code, stdout, stderr := gorun(t, script, "--set", "max_steps=2", "--out", init, "-q"); code != 0 {
		t.Fatalf("the run that makes the weights: exit %d\n%s%s", code, stdout, stderr)
	}
	weights := filepath.Join(init, "model.safetensors")
	cluster := mpiCluster(t, 1, "20s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--allow-run-as-root",
		"-np", "1", bin, "--cluster", cluster, script, ":",
		"-np", "1", bin, "--cluster", cluster, "--init", weights, script)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ranks with different --init trained:\n%s", out)
	}
	t.Logf("%s", firstLines(string(out), 6))
	want := "rank 1 was started with --init " + weights + ", unlike rank 0: every process of the run must be given the same --init"
	if !bytes.Contains(out, []byte(want)) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(string(out), "done: ") {
		t.Errorf("a rank trained:\n%s", out)
	}
}
