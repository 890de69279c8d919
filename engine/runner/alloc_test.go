package runner

import (
	"io"
	"sync"
	"testing"

	"gorun/engine"
)

// TestOptimizerStepAllocatesNothing drives whole optimizer steps as Run
// does — gather, forward, backward, the overlapped gradient all-reduce,
// the finiteness check, the loss/stop/non-finite agreement, the update and
// the metrics line — on one device and on two, and counts allocations on
// every rank: none in the steady state.
func TestOptimizerStepAllocatesNothing(t *testing.T) {
	for _, devices := range []int{1, 2} {
		p := compile(t, loadSpec(t, mnistScript), devices)
		rs := &runState{plan: p, train: newMNISTLike(256), log: io.Discard, lead: true}
		if err := rs.openDevices(); err != nil {
			t.Fatal(err)
		}
		if err := rs.initParams(); err != nil {
			t.Fatal(err)
		}
		var err error
		if rs.metrics, err = openMetrics(t.TempDir(), false); err != nil {
			t.Fatal(err)
		}
		if err := rs.connect(); err != nil {
			t.Fatal(err)
		}
		s := p.Spec
		rs.schedules = make([]*engine.Schedule, s.Epochs)
		rs.schedOnce = make([]sync.Once, s.Epochs)
		rs.schedErr = make([]error, s.Epochs)
		sc, err := rs.schedule(0)
		if err != nil {
			t.Fatal(err)
		}
		prs := make([]*progress, devices)
		for r := range prs {
			prs[r] = rs.startProgress()
		}
		// Ranks other than 0 step on goroutines of their own, in lock step.
		next := make(chan int)
		done := make(chan error)
		for r := 1; r < devices; r++ {
			go func() {
				for g := range next {
					done <- rs.optimizerStep(rs.workers[r], prs[r], sc, 0, g, g+1)
				}
			}()
		}
		g := 0
		step := func() {
			m := g % sc.Steps
			for r := 1; r < devices; r++ {
				next <- m
			}
			if err := rs.optimizerStep(rs.workers[0], prs[0], sc, 0, m, m+1); err != nil {
				t.Fatal(err)
			}
			for r := 1; r < devices; r++ {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			g++
		}
		step()
		if n := testing.AllocsPerRun(20, step); n != 0 {
			t.Errorf("%d devices: an optimizer step allocates %.1f times", devices, n)
		}
		close(next)
		for _, d := range rs.workers {
			d.stopAsync()
		}
		rs.metrics.close()
		rs.closeDevices()
	}
}
