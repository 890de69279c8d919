package comm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

var allAlgorithms = []Algorithm{Auto, Ring, Tree, Direct}
var allOps = []ReduceOp{Sum, Mean, Max, Min}

// newGroup makes a group or fails the test.
func newGroup(t testing.TB, n int, opts Options) *Group {
	t.Helper()
	g, err := NewInProc(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// run calls f on every rank of g, each in its own goroutine, and returns
// the ranks' errors.
func run(g *Group, f func(c *Comm) error) []error {
	errs := make([]error, g.Size())
	var wg sync.WaitGroup
	for r := range g.Size() {
		wg.Go(func() { errs[r] = f(g.Rank(r)) })
	}
	wg.Wait()
	return errs
}

// mustRun is run that fails the test on any error.
func mustRun(t testing.TB, g *Group, what string, f func(c *Comm) error) {
	t.Helper()
	for r, err := range run(g, f) {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// exactInputs returns one buffer of length l per rank, holding multiples of
// 1/4 in [-32, 32]: sums of up to 8 of them are exact in float32, so every
// summation order gives the serial result exactly.
func exactInputs(rng *rand.Rand, n, l int) [][]float32 {
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, l)
		for i := range in[r] {
			in[r][i] = float32(rng.IntN(257)-128) / 4
		}
	}
	return in
}

// serial reduces the inputs element by element in rank order: the plain
// computation every algorithm must match on exact inputs.
func serial(in [][]float32, op ReduceOp) []float32 {
	out := slices.Clone(in[0])
	for _, x := range in[1:] {
		for i, v := range x {
			switch op {
			case Sum, Mean:
				out[i] += v
			case Max:
				out[i] = max(out[i], v)
			case Min:
				out[i] = min(out[i], v)
			}
		}
	}
	if op == Mean {
		for i := range out {
			out[i] /= float32(len(in))
		}
	}
	return out
}

func clones(in [][]float32) [][]float32 {
	out := make([][]float32, len(in))
	for r := range in {
		out[r] = slices.Clone(in[r])
	}
	return out
}

// equalBits reports whether a and b hold the same bits.
func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// testLengths are the buffer lengths tried for n ranks: 0, 1, around n,
// odd and even, and not divisible by n.
func testLengths(n int) []int {
	ls := []int{0, 1, 2, 3, n - 1, n, n + 1, 2*n + 1, 17, 64, 1001}
	if raceEnabled {
		ls = []int{0, 1, n - 1, n + 1, 17, 64}
	}
	slices.Sort(ls)
	return slices.Compact(slices.DeleteFunc(ls, func(l int) bool { return l < 0 }))
}

func testSizes() []int {
	if raceEnabled {
		return []int{1, 2, 3, 5, 8}
	}
	return []int{1, 2, 3, 4, 5, 6, 7, 8}
}

func roots(n int) []int { return slices.Compact([]int{0, n / 2, n - 1}) }

// TestCollectives checks every collective with every algorithm against the
// serial computation, for 1 to 8 ranks, many lengths and every op.
func TestCollectives(t *testing.T) {
	for _, n := range testSizes() {
		for _, alg := range allAlgorithms {
			t.Run(fmt.Sprintf("n=%d/%v", n, alg), func(t *testing.T) {
				t.Parallel()
				g := newGroup(t, n, Options{Algorithm: alg, Timeout: 20 * time.Second})
				rng := rand.New(rand.NewPCG(uint64(n), uint64(alg)))
				for _, l := range testLengths(n) {
					checkAllReduce(t, g, rng, l)
					checkReduce(t, g, rng, l)
					checkBroadcast(t, g, rng, l)
					checkAllGather(t, g, rng, l)
					checkReduceScatter(t, g, rng, l)
				}
				mustRun(t, g, "barrier", func(c *Comm) error { return c.Barrier(Tag{Name: "b"}) })
			})
		}
	}
}

func checkAllReduce(t *testing.T, g *Group, rng *rand.Rand, l int) {
	t.Helper()
	n := g.Size()
	for _, op := range allOps {
		in := exactInputs(rng, n, l)
		want := serial(in, op)
		bufs := clones(in)
		what := fmt.Sprintf("allreduce %v len %d", op, l)
		mustRun(t, g, what, func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], op, Tag{Name: what}) })
		for r := range n {
			if !equalBits(bufs[r], want) {
				t.Fatalf("%s: rank %d got %v, want %v", what, r, bufs[r], want)
			}
		}
	}
}

func checkReduce(t *testing.T, g *Group, rng *rand.Rand, l int) {
	t.Helper()
	n := g.Size()
	for _, root := range roots(n) {
		for _, op := range allOps {
			in := exactInputs(rng, n, l)
			want := serial(in, op)
			bufs := clones(in)
			what := fmt.Sprintf("reduce %v root %d len %d", op, root, l)
			mustRun(t, g, what, func(c *Comm) error { return c.Reduce(bufs[c.Rank()], root, op, Tag{Name: what}) })
			for r := range n {
				w := in[r] // unchanged
				if r == root {
					w = want
				}
				if !equalBits(bufs[r], w) {
					t.Fatalf("%s: rank %d got %v, want %v", what, r, bufs[r], w)
				}
			}
		}
	}
}

func checkBroadcast(t *testing.T, g *Group, rng *rand.Rand, l int) {
	t.Helper()
	n := g.Size()
	for _, root := range roots(n) {
		in := exactInputs(rng, n, l)
		bufs := clones(in)
		what := fmt.Sprintf("broadcast root %d len %d", root, l)
		mustRun(t, g, what, func(c *Comm) error { return c.Broadcast(bufs[c.Rank()], root, Tag{Name: what}) })
		for r := range n {
			if !equalBits(bufs[r], in[root]) {
				t.Fatalf("%s: rank %d got %v, want %v", what, r, bufs[r], in[root])
			}
		}
	}
}

func checkAllGather(t *testing.T, g *Group, rng *rand.Rand, l int) {
	t.Helper()
	n := g.Size()
	in := exactInputs(rng, n, l)
	want := slices.Concat(in...)
	for _, inPlace := range []bool{false, true} {
		recvs := make([][]float32, n)
		sends := clones(in)
		for r := range n {
			recvs[r] = make([]float32, n*l)
			for i := range recvs[r] {
				recvs[r][i] = float32(math.NaN())
			}
			if inPlace {
				copy(recvs[r][r*l:], in[r])
				sends[r] = recvs[r][r*l : (r+1)*l]
			}
		}
		what := fmt.Sprintf("allgather len %d in place %v", l, inPlace)
		mustRun(t, g, what, func(c *Comm) error { return c.AllGather(sends[c.Rank()], recvs[c.Rank()], Tag{Name: what}) })
		for r := range n {
			if !equalBits(recvs[r], want) {
				t.Fatalf("%s: rank %d got %v, want %v", what, r, recvs[r], want)
			}
			if !inPlace && !equalBits(sends[r], in[r]) {
				t.Fatalf("%s: rank %d: send changed", what, r)
			}
		}
	}
}

func checkReduceScatter(t *testing.T, g *Group, rng *rand.Rand, l int) {
	t.Helper()
	n := g.Size()
	for _, op := range allOps {
		for _, inPlace := range []bool{false, true} {
			in := exactInputs(rng, n, n*l)
			want := serial(in, op)
			sends := clones(in)
			recvs := make([][]float32, n)
			for r := range n {
				if inPlace {
					recvs[r] = sends[r][r*l : (r+1)*l]
				} else {
					recvs[r] = make([]float32, l)
				}
			}
			what := fmt.Sprintf("reducescatter %v len %d in place %v", op, l, inPlace)
			mustRun(t, g, what, func(c *Comm) error {
				return c.ReduceScatter(sends[c.Rank()], recvs[c.Rank()], op, Tag{Name: what})
			})
			for r := range n {
				if w := want[r*l : (r+1)*l]; !equalBits(recvs[r], w) {
					t.Fatalf("%s: rank %d got %v, want %v", what, r, recvs[r], w)
				}
				if !inPlace && !equalBits(sends[r], in[r]) {
					t.Fatalf("%s: rank %d: send changed", what, r)
				}
			}
		}
	}
}

// normalInputs returns buffers of random normal values, whose sums round
// differently in different orders.
func normalInputs(seed uint64, n, l int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, l)
		for i := range in[r] {
			in[r][i] = float32(rng.NormFloat64() * math.Exp(4*rng.NormFloat64()))
		}
	}
	return in
}

// TestDeterminism runs the reductions on values whose sums depend on the
// order, many times, with random delays before each rank's call: the
// results must be bit-identical across ranks (AllReduce) and across runs,
// and close to the float64 sum.
func TestDeterminism(t *testing.T) {
	sizes := []int{2, 3, 4, 5, 7, 8}
	runs := 8
	if raceEnabled {
		sizes, runs = []int{3, 4}, 3
	}
	const l = 1003
	for _, n := range sizes {
		for _, alg := range allAlgorithms[1:] {
			t.Run(fmt.Sprintf("n=%d/%v", n, alg), func(t *testing.T) {
				t.Parallel()
				in := normalInputs(uint64(n), n, l)
				exact := make([]float64, l)
				for _, x := range in {
					for i, v := range x {
						exact[i] += float64(v)
					}
				}
				var first [][]float32 // allreduce, reduce at root 1, reducescatter gathered
				for run := range runs {
					g := newGroup(t, n, Options{Algorithm: alg, Timeout: 20 * time.Second})
					rng := rand.New(rand.NewPCG(uint64(run), 3))
					delays := make([]time.Duration, n)
					for r := range delays {
						delays[r] = time.Duration(rng.IntN(200)) * time.Microsecond
					}
					ar, red := clones(in), clones(in)
					rs := make([]float32, l-l%n)
					mustRun(t, g, "determinism", func(c *Comm) error {
						r := c.Rank()
						time.Sleep(delays[r])
						if err := c.AllReduce(ar[r], Sum, Tag{Name: "ar"}); err != nil {
							return err
						}
						time.Sleep(delays[(r+1)%n])
						if err := c.Reduce(red[r], 1, Sum, Tag{Name: "red"}); err != nil {
							return err
						}
						m := len(rs) / n
						return c.ReduceScatter(in[r][:len(rs)], rs[r*m:(r+1)*m], Sum, Tag{Name: "rs"})
					})
					for r := 1; r < n; r++ {
						if !equalBits(ar[r], ar[0]) {
							t.Fatalf("run %d: allreduce results of ranks 0 and %d differ", run, r)
						}
					}
					got := [][]float32{ar[0], red[1], rs}
					if run == 0 {
						first = got
						for _, res := range got {
							for i, v := range res {
								if d := math.Abs(float64(v) - exact[i]); d > 1e-5*math.Max(1, math.Abs(exact[i]))*float64(n) {
									t.Fatalf("element %d: got %v, float64 sum %v", i, v, exact[i])
								}
							}
						}
						continue
					}
					for k := range got {
						if !equalBits(got[k], first[k]) {
							t.Fatalf("run %d: result %d differs from run 0", run, k)
						}
					}
				}
			})
		}
	}
}

// TestMaxMinNaN checks that NaN propagates through Max and Min.
func TestMaxMinNaN(t *testing.T) {
	nan := float32(math.NaN())
	for _, alg := range allAlgorithms[1:] {
		g := newGroup(t, 3, Options{Algorithm: alg})
		for _, op := range []ReduceOp{Max, Min} {
			bufs := [][]float32{{1, nan, 3}, {nan, 2, 2}, {0, 0, nan}}
			mustRun(t, g, "nan", func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], op, Tag{}) })
			for r, b := range bufs {
				for i, v := range b {
					if !math.IsNaN(float64(v)) {
						t.Errorf("%v %v: rank %d element %d = %v, want NaN", alg, op, r, i, v)
					}
				}
			}
		}
	}
}

// TestReuse runs many collectives of changing kinds and sizes on one group.
func TestReuse(t *testing.T) {
	const n = 4
	g := newGroup(t, n, Options{Timeout: 20 * time.Second})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		l := rng.IntN(20000)
		in := exactInputs(rng, n, l)
		want := serial(in, Sum)
		bufs := clones(in)
		mustRun(t, g, "reuse", func(c *Comm) error {
			if err := c.Barrier(Tag{Step: i}); err != nil {
				return err
			}
			return c.AllReduce(bufs[c.Rank()], Sum, Tag{Name: "x", Step: i})
		})
		for r := range n {
			if !equalBits(bufs[r], want) {
				t.Fatalf("iteration %d (len %d): rank %d wrong", i, l, r)
			}
		}
	}
}
