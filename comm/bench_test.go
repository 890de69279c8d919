package comm

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// workers runs f iters times on every rank but 0, each rank in its own
// goroutine, and returns a function that waits for them and returns the
// first error.
func workers(g *Group, iters int, f func(c *Comm) error) (wait func() error) {
	var wg sync.WaitGroup
	errs := make([]error, g.Size())
	for r := 1; r < g.Size(); r++ {
		wg.Go(func() {
			for range iters {
				if err := f(g.Rank(r)); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	return func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// TestZeroAllocs: in steady state a collective allocates nothing, on any
// rank, with any algorithm.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const runs = 50
	type coll struct {
		name string
		f    func(c *Comm, buf, big []float32) error
	}
	colls := []coll{
		{"allreduce", func(c *Comm, buf, _ []float32) error { return c.AllReduce(buf, Mean, Tag{Name: "grads"}) }},
		{"broadcast", func(c *Comm, buf, _ []float32) error { return c.Broadcast(buf, 1, Tag{Name: "params"}) }},
		{"reduce", func(c *Comm, buf, _ []float32) error { return c.Reduce(buf, 0, Sum, Tag{Name: "grads"}) }},
		{"allgather", func(c *Comm, buf, big []float32) error { return c.AllGather(buf, big, Tag{}) }},
		{"reducescatter", func(c *Comm, buf, big []float32) error { return c.ReduceScatter(big, buf, Max, Tag{}) }},
		{"barrier", func(c *Comm, _, _ []float32) error { return c.Barrier(Tag{}) }},
	}
	for _, n := range []int{2, 3, 4} {
		for _, alg := range allAlgorithms {
			for _, l := range []int{7, 5000} {
				for _, cl := range colls {
					g := newGroup(t, n, Options{Algorithm: alg, Timeout: 20 * time.Second})
					bufs, bigs := make([][]float32, n), make([][]float32, n)
					for r := range n {
						bufs[r], bigs[r] = make([]float32, l), make([]float32, n*l)
					}
					call := func(c *Comm) error { return cl.f(c, bufs[c.Rank()], bigs[c.Rank()]) }
					// Warm up: scratch buffers reach their size, goroutines start.
					mustRun(t, g, "warm-up", func(c *Comm) error {
						for range 3 {
							if err := call(c); err != nil {
								return err
							}
						}
						return nil
					})
					wait := workers(g, runs+1, call)
					var err error
					allocs := testing.AllocsPerRun(runs, func() {
						if e := call(g.Rank(0)); e != nil && err == nil {
							err = e
						}
					})
					if e := wait(); e != nil || err != nil {
						t.Fatalf("n=%d %v len %d %s: %v %v", n, alg, l, cl.name, err, e)
					}
					if allocs != 0 {
						t.Errorf("n=%d %v len %d %s: %v allocations per call, want 0", n, alg, l, cl.name, allocs)
					}
				}
			}
		}
	}
}

// BenchmarkAllReduce measures in-process AllReduce (Sum) of 1 MB and 25 MB
// per rank, for 2 and 4 ranks and each algorithm, and reports
//
//	algGB/s: bytes of the buffer / time of a call
//	busGB/s: algGB/s · 2(n−1)/n, NCCL's bus bandwidth
//	memcpyGB/s: copy() of a buffer of the same size, measured in the same
//	            benchmark, as the reference
//
// On a machine with fewer cores than ranks the ranks share cores.
func BenchmarkAllReduce(b *testing.B) {
	for _, mb := range []int{1, 25} {
		for _, n := range []int{2, 4} {
			for _, alg := range []Algorithm{Ring, Tree, Direct} {
				b.Run(fmt.Sprintf("%dMB/n=%d/%v", mb, n, alg), func(b *testing.B) {
					benchAllReduce(b, n, alg, mb<<20/4)
				})
			}
		}
	}
}

// BenchmarkAllReduceSmall is the latency of small all-reduces, which
// Auto's thresholds are about.
func BenchmarkAllReduceSmall(b *testing.B) {
	for _, size := range []int{0, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10} {
		for _, n := range []int{2, 4} {
			for _, alg := range []Algorithm{Ring, Tree, Direct} {
				b.Run(fmt.Sprintf("%dB/n=%d/%v", size, n, alg), func(b *testing.B) {
					benchAllReduce(b, n, alg, size/4)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, n int, alg Algorithm, l int) {
	g := newGroup(b, n, Options{Algorithm: alg})
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, l)
		for i := range bufs[r] {
			bufs[r][i] = float32(i%7) - 3
		}
	}
	call := func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], Sum, Tag{Name: "bench"}) }
	mustRun(b, g, "warm-up", call)
	wait := workers(g, b.N, call)
	b.SetBytes(int64(4 * l))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := call(g.Rank(0)); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	b.StopTimer()
	if err := wait(); err != nil {
		b.Fatal(err)
	}
	if l == 0 {
		return
	}
	algbw := float64(4*l) * float64(b.N) / took.Seconds() / 1e9
	b.ReportMetric(algbw, "algGB/s")
	b.ReportMetric(algbw*2*float64(n-1)/float64(n), "busGB/s")
	b.ReportMetric(memcpyGBs(l), "memcpyGB/s")
}

// memcpyGBs times copy() of l floats: the best of a few rounds of enough
// copies to take about 50ms.
func memcpyGBs(l int) float64 {
	src, dst := make([]float32, l), make([]float32, l)
	copy(dst, src)
	reps := max(1, (50<<20)/(4*l)) // about 50 MB per round
	best := 0.0
	for range 3 {
		start := time.Now()
		for range reps {
			copy(dst, src)
		}
		best = max(best, float64(4*l*reps)/time.Since(start).Seconds()/1e9)
	}
	return best
}
