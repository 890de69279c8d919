//go:build mpi

package comm

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkMPIAllReduce measures all-reduce (Sum) of 1 MB and 25 MB per
// rank over 2 ranks, through MPI (2 processes under mpirun on this
// machine, OpenMPI's default binding and transports) and, in the same run,
// through the in-process transport (2 goroutines, Ring, as
// BenchmarkAllReduce). It reports algGB/s (bytes of the buffer / time of a
// call) and busGB/s (algGB/s · 2(n−1)/n). For MPI, ns/op is the mean time
// of a call, bestGB/s the algGB/s of the fastest round and calls the number
// timed: TestMPIBenchRank does the timing under
// mpirun, where the ranks must agree on the count, so b.N does not apply.
// mpirun runs without --oversubscribe: an oversubscribed OpenMPI yields the
// core while it waits, which is several times slower.
func BenchmarkMPIAllReduce(b *testing.B) {
	if underMPIRun() {
		b.Skip("the launcher")
	}
	for _, mb := range []int{1, 25} {
		l := mb << 20 / 4
		b.Run(fmt.Sprintf("%dMB/n=2/inproc", mb), func(b *testing.B) {
			benchAllReduce(b, 2, Ring, l)
		})
		b.Run(fmt.Sprintf("%dMB/n=2/mpi", mb), func(b *testing.B) {
			// One mpirun (over a second) per sub-benchmark, so that the
			// framework stops at b.N = 1.
			path, err := lookMPIRun()
			if err != nil {
				b.Skip("SKIP: mpirun not found: install OpenMPI (Debian's openmpi-bin and libopenmpi-dev) to run the MPI benchmarks")
			}
			out, err := runMPI(path, []string{"-np", "2"}, "TestMPIBenchRank", fmt.Sprintf("-mpibench.mb=%d", mb))
			if err != nil {
				b.Fatalf("mpirun: %v\n%s", err, out)
			}
			var bytes, iters int
			var seconds, best float64
			i := strings.Index(out, "mpibench ")
			if i < 0 {
				b.Fatalf("no result in the output of mpirun:\n%s", out)
			}
			if _, err := fmt.Sscanf(out[i:], "mpibench bytes=%d iters=%d seconds=%g best=%g", &bytes, &iters, &seconds, &best); err != nil || bytes != 4*l {
				b.Fatalf("bad result (%v):\n%s", err, out)
			}
			perCall := seconds / float64(iters)
			algbw := float64(4*l) / perCall / 1e9
			b.ReportMetric(perCall*1e9, "ns/op")
			b.ReportMetric(algbw, "algGB/s")
			b.ReportMetric(algbw*2*(2-1)/2, "busGB/s")
			b.ReportMetric(float64(4*l)/best/1e9, "bestGB/s")
			b.ReportMetric(float64(iters), "calls")
		})
	}
}

// mpibenchMB is the size of TestMPIBenchRank's all-reduce, in megabytes.
var mpibenchMB = flag.Int("mpibench.mb", 0, "TestMPIBenchRank: the megabytes of each all-reduce (BenchmarkMPIAllReduce passes it to the ranks it starts)")

// TestMPIBenchRank is one rank of the MPI all-reduce benchmark (run by
// BenchmarkMPIAllReduce, which passes -mpibench.mb). After a warm-up it
// times rounds of calls, doubling a round's length until one takes 50 ms,
// until the rounds add up to a second (or 20 s have passed); before each
// round rank 0 broadcasts whether to go on and how many calls to make, so
// every rank makes the same calls. Rank 0 prints the total calls and time
// (the broadcasts between rounds not counted) and the best round's time a
// call, which is steadier on a busy machine.
func TestMPIBenchRank(t *testing.T) {
	if !underMPIRun() {
		t.Skip("runs under mpirun, started by BenchmarkMPIAllReduce")
	}
	c := initMPI(t)
	mb := *mpibenchMB
	if mb < 1 {
		t.Fatalf("-mpibench.mb %d: want the megabytes of each all-reduce (BenchmarkMPIAllReduce passes it)", mb)
	}
	buf := make([]float32, mb<<20/4)
	for i := range buf {
		buf[i] = float32(i%7) - 3
	}
	call := func(k int) {
		for range k {
			if err := c.AllReduce(buf, Sum, Tag{Name: "bench"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	call(3) // warm-up
	var total time.Duration
	calls, round, best := 0, 1, math.Inf(1)
	begin := time.Now()
	for {
		// Rank 0 decides: [go on, calls this round].
		ctl := []float32{0, float32(round)}
		if total < time.Second && time.Since(begin) < 20*time.Second {
			ctl[0] = 1
		}
		if err := c.Broadcast(ctl, 0, Tag{Name: "round"}); err != nil {
			t.Fatal(err)
		}
		if ctl[0] == 0 {
			break
		}
		k := int(ctl[1])
		start := time.Now()
		call(k)
		took := time.Since(start)
		total += took
		calls += k
		best = min(best, took.Seconds()/float64(k))
		if took < 50*time.Millisecond {
			round *= 2
		}
	}
	if c.Rank() == 0 {
		fmt.Fprintf(os.Stdout, "mpibench bytes=%d iters=%d seconds=%g best=%g\n", 4*len(buf), calls, total.Seconds(), best)
	}
}
