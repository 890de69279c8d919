package runner

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak runs 20 short trainings in one process — seeds, 1 to 4
// devices, every sync strategy — and checks that none leaves a goroutine
// behind and that the heap does not grow from run to run.
func TestSoak(t *testing.T) {
	syncs := []string{"sync.allreduce()", "sync.allreduce(overlap=False)", "sync.parameter_server(root=0)", "sync.local_sgd(every=2)", "sync.none()"}
	settle := func() (int, uint64) {
		var ms runtime.MemStats
		for i := 0; i < 3; i++ {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	g0, _ := settle()
	var heap []uint64
	for i := 0; i < 20; i++ {
		devices := 1 + i%4
		sets := []string{fmt.Sprintf("seed=%d", i), "sync=" + syncs[i%len(syncs)], "epochs=1", "max_steps=12"}
		p := compile(t, loadSpec(t, dropoutScript, sets...), devices)
		if _, err := Run(p, RunOptions{Out: t.TempDir()}); err != nil {
			t.Fatalf("run %d (%v, %d devices): %v", i, sets, devices, err)
		}
		var g int
		var h uint64
		for wait := 0; wait < 100; wait++ { // goroutines that end as a run ends
			if g, h = settle(); g <= g0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if g > g0 {
			t.Fatalf("run %d left %d goroutines behind (%d before the first run)", i, g-g0, g0)
		}
		heap = append(heap, h)
	}
	// After the first runs warm caches up, the heap stays put.
	if grow := int64(heap[19]) - int64(heap[4]); grow > 2<<20 {
		t.Errorf("the heap grew by %d KiB from run 5 to run 20: %v", grow>>10, heap)
	}
}

// panicky is a dataset whose Fill panics on its third call.
type panicky struct {
	randomSet
	calls atomic.Int32
}

func (p *panicky) Fill(idx []int, x []float32, y []int32) {
	if p.calls.Add(1) == 3 {
		var m map[string]int
		m["boom"]++ // a nil map: a real runtime panic
	}
	p.randomSet.Fill(idx, x, y)
}

// TestRankPanicIsAnError: a panic on one rank's goroutine becomes a
// *PanicError from Run, the other ranks released, no hang.
func TestRankPanicIsAnError(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript, "eval=None"), 2)
	ds := &panicky{randomSet: *newMNISTLike(256)}
	done := make(chan error, 1)
	go func() {
		_, err := Run(p, RunOptions{Train: ds})
		done <- err
	}()
	select {
	case err := <-done:
		var pe *PanicError
		if !errors.As(err, &pe) || len(pe.Stack) == 0 {
			t.Fatalf("error %v (%T), want a *PanicError with its stack", err, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a rank's panic hung the run")
	}
}
