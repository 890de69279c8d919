package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMPIRankThatNeverJoins: under mpirun, one rank trains and the other
// process never calls MPI_Init (as `gorun plan` or another program does;
// here `sleep`, which also keeps mpirun from ending the job early). MPI_Init
// on the training rank waits for every process of the job, out of reach of
// the collectives' watchdog; it used to wait for ever. Now it gives up
// after comm.timeout, naming itself, and the job ends.
func TestMPIRankThatNeverJoins(t *testing.T) {
	bin := mpiGorun(t)
	script := writeScript(t, small)
	cluster := mpiCluster(t, 1, "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--allow-run-as-root",
		"-np", "1", bin, "--cluster", cluster, "-q", script, ":",
		"-np", "1", "sleep", "60")
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("mpirun still running after %v:\n%s", took, out)
	}
	want := "gorun: rank 0 of 2: MPI_Init did not finish within comm.timeout (3s): another process of this mpirun job never joined MPI"
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("mpirun: %v after %v, output:\n%s\nwant a failure and %q", err, took, out, want)
	}
	if took > 30*time.Second {
		t.Errorf("took %v, want about comm.timeout (3s) plus start-up", took)
	}
}
