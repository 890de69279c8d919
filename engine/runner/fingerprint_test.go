package runner

import (
	"strings"
	"sync"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
)

// TestFlagMismatchNamesRankAndFlag: ranks that compiled the same Plan but
// were given another run-shaping flag (RunOptions.Flags: --init on one
// rank only, as `mpirun … : …` allows) stop at start-up, the rank that
// differs naming itself and the flag; the same flags pass.
func TestFlagMismatchNamesRankAndFlag(t *testing.T) {
	plan := []engine.PlanStep{{Label: "train settings", Text: "batch_size 16"}, {Label: "forward step 1", Text: "matmul"}}
	flags := func(init string) []engine.PlanStep {
		return append(append([]engine.PlanStep(nil), plan...),
			engine.PlanStep{Label: "--init", Text: init},
			engine.PlanStep{Label: "--out", Text: "runs/a"})
	}
	check := func(fps ...[]engine.PlanStep) []error {
		g, err := comm.Open(len(fps), comm.Options{Timeout: 10 * time.Second}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(fps))
		var wg sync.WaitGroup
		for r, host := range g.Ranks() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = checkRank(&worker{rank: r, host: host, world: len(fps)}, fps[r])
			}()
		}
		wg.Wait()
		return errs
	}
	errs := check(flags(""), flags("w.safetensors"), flags(""))
	want := []string{
		"rank 1's plan or flags differ from rank 0's (its error names what differs)",
		"rank 1 was started with --init w.safetensors, unlike rank 0: every process of the run must be given the same --init",
		"rank 1's plan or flags differ from rank 0's (its error names what differs)",
	}
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), want[r]) {
			t.Errorf("--init on rank 1 only: rank %d: %v; want %q", r, err, want[r])
		}
	}
	errs = check(flags("w.safetensors"), flags(""))
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 1 was started with no --init, unlike rank 0") {
		t.Errorf("--init on rank 0 only: rank 1: %v", errs[1])
	}
	for r, err := range check(flags("w.safetensors"), flags("w.safetensors")) {
		if err != nil {
			t.Errorf("the same flags: rank %d: %v", r, err)
		}
	}
}
