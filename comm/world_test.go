package comm

import (
	"sync"
	"testing"
	"time"
)

// TestOpenWorld: the factory gives in-process ranks for one process, and
// two-level ranks numbered process-major when a cross group joins several.
func TestOpenWorld(t *testing.T) {
	w, err := Open(3, Options{Timeout: time.Second}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for r, c := range w.Ranks() {
		if c.Rank() != r || c.Size() != 3 {
			t.Errorf("single process: rank %d says %d of %d", r, c.Rank(), c.Size())
		}
	}
	cross := newGroup(t, 2, Options{Timeout: time.Second})
	var worlds []*World
	for p := 0; p < 2; p++ {
		w, err := Open(2, Options{Timeout: time.Second}, cross.Rank(p), p)
		if err != nil {
			t.Fatal(err)
		}
		worlds = append(worlds, w)
	}
	var wg sync.WaitGroup
	sums := make([]float32, 4)
	for p, w := range worlds {
		for l, c := range w.Ranks() {
			if want := p*2 + l; c.Rank() != want || c.Size() != 4 {
				t.Fatalf("process %d local %d: rank %d of %d, want %d of 4", p, l, c.Rank(), c.Size(), want)
			}
			wg.Go(func() {
				buf := []float32{float32(c.Rank() + 1)}
				if err := c.AllReduce(buf, Sum, Tag{Name: "x"}); err != nil {
					t.Error(err)
				}
				sums[c.Rank()] = buf[0]
			})
		}
	}
	wg.Wait()
	for r, s := range sums {
		if s != 10 {
			t.Errorf("rank %d: sum %g, want 10", r, s)
		}
	}
}
