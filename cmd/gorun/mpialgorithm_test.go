package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLaunchForcesAlgorithm: [comm] algorithm = "ring" with transport
// "mpi" makes launch force Open MPI's ring collectives, and
// `gorun plan --predict` times and names the forced ring; "auto" forces
// nothing and the prediction names Open MPI's own choice.
func TestLaunchForcesAlgorithm(t *testing.T) {
	ring := writeCluster(t, strings.Replace(linkedHosts, "[[node]]", "[comm]\nalgorithm = \"ring\"\n\n[[node]]", 1))
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, "launch", "--cluster", ring, "--dry-run", "train.star", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 --mca coll_tuned_bcast_algorithm 3 --mca coll_tuned_allgather_algorithm 4 "
	if !strings.Contains(stdout, want) {
		t.Errorf("ring: no %q in\n%s", want, stdout)
	}
	auto := writeCluster(t, linkedHosts)
	code, stdout, stderr = gorun(t, "launch", "--cluster", auto, "--dry-run", "train.star", "--out", out)
	if code != 0 || strings.Contains(stdout, "coll_tuned") {
		t.Errorf("auto: exit %d %s, want no coll_tuned settings in\n%s", code, stderr, stdout)
	}

	script := writeScript(t, small)
	for _, tc := range []struct{ cluster, want string }{
		{ring, "host mpi ring (forced) over 2"},
		{auto, "host mpi recursive doubling over 2"}, // Open MPI's for 604 B on 2
	} {
		code, out, errOut := gorun(t, "plan", "--cluster", tc.cluster, "--predict", "--step-time", "2ms", script)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("exit %d %s: no %q in\n%s", code, errOut, tc.want, out)
		}
	}
}
