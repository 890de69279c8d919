package comm

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// runSome calls f on the ranks listed, each in its own goroutine, and
// returns their errors (indexed by rank) and how long the slowest took.
func runSome(g *Group, ranks []int, f func(c *Comm) error) ([]error, time.Duration) {
	errs := make([]error, g.Size())
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { errs[r] = f(g.Rank(r)) })
	}
	wg.Wait()
	return errs, time.Since(start)
}

// TestTimeout: rank 3 never calls; the others get ErrTimeout naming it,
// within about the timeout, with every algorithm; later calls fail at once.
func TestTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, alg := range allAlgorithms {
		for _, l := range []int{0, 5, 100000} {
			t.Run(fmt.Sprintf("%v/len=%d", alg, l), func(t *testing.T) {
				t.Parallel()
				g := newGroup(t, 4, Options{Algorithm: alg, Timeout: timeout})
				bufs := make([][]float32, 4)
				for r := range bufs {
					bufs[r] = make([]float32, l)
				}
				tag := Tag{Name: "bucket 2", Step: 17}
				errs, took := runSome(g, []int{0, 1, 2}, func(c *Comm) error {
					return c.AllReduce(bufs[c.Rank()], Sum, tag)
				})
				if took < timeout || took > timeout+900*time.Millisecond {
					t.Errorf("took %v, want about %v", took, timeout)
				}
				want := `comm: allreduce "bucket 2" at step 17: timed out after 100ms waiting for rank 3 (ranks 0,1,2 arrived)`
				for r, err := range errs[:3] {
					var ce *Error
					if !errors.Is(err, ErrTimeout) || !errors.As(err, &ce) {
						t.Fatalf("rank %d: got %v, want a *Error with ErrTimeout", r, err)
					}
					if err.Error() != want {
						t.Errorf("rank %d: got\n%v\nwant\n%v", r, err, want)
					}
					if fmt.Sprint(ce.Missing) != "[3]" || fmt.Sprint(ce.Arrived) != "[0 1 2]" || ce.Op != "allreduce" || ce.Tag != tag {
						t.Errorf("rank %d: fields %+v", r, ce)
					}
				}
				if err := g.Err(); !errors.Is(err, ErrTimeout) {
					t.Errorf("Group.Err() = %v", err)
				}
				// Later calls, on any rank, fail at once: rank 3's first
				// call is the one that timed out, rank 0's next is a later one.
				start := time.Now()
				if err := g.Rank(3).AllReduce(bufs[3], Sum, tag); err == nil || err.Error() != want {
					t.Errorf("late rank 3: %v", err)
				}
				err := g.Rank(0).Broadcast(bufs[0], 0, Tag{Name: "params", Step: 18})
				if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrTimeout) || time.Since(start) > 50*time.Millisecond {
					t.Errorf("later call: %v after %v", err, time.Since(start))
				}
				if !strings.HasPrefix(err.Error(), `comm: broadcast "params" at step 18 on rank 0: group failed earlier: comm: allreduce`) {
					t.Errorf("later call: %v", err)
				}
			})
		}
	}
}

// TestTimeoutSeveralMissing names every rank that did not arrive.
func TestTimeoutSeveralMissing(t *testing.T) {
	g := newGroup(t, 5, Options{Algorithm: Ring, Timeout: 50 * time.Millisecond})
	errs, _ := runSome(g, []int{1, 3}, func(c *Comm) error { return c.Barrier(Tag{Step: 3}) })
	want := "comm: barrier at step 3: timed out after 50ms waiting for ranks 0,2,4 (ranks 1,3 arrived)"
	for _, r := range []int{1, 3} {
		if errs[r] == nil || errs[r].Error() != want {
			t.Errorf("rank %d: got %v, want %v", r, errs[r], want)
		}
	}
}

// TestAbort: a pending collective returns the Abort error on every rank,
// and so does every later one.
func TestAbort(t *testing.T) {
	for _, alg := range allAlgorithms {
		g := newGroup(t, 3, Options{Algorithm: alg, Timeout: 10 * time.Second})
		cause := errors.New("rank 2 ran out of data")
		go func() {
			time.Sleep(20 * time.Millisecond)
			g.Abort(cause)
		}()
		errs, took := runSome(g, []int{0, 1}, func(c *Comm) error {
			return c.AllReduce(make([]float32, 1000), Mean, Tag{Name: "grads", Step: 4})
		})
		if took > 2*time.Second {
			t.Errorf("%v: took %v", alg, took)
		}
		for r, err := range errs[:2] {
			var ce *Error
			if !errors.Is(err, cause) || !errors.Is(err, ErrAborted) || !errors.As(err, &ce) || ce.Rank != r {
				t.Fatalf("%v: rank %d: got %v", alg, r, err)
			}
			want := fmt.Sprintf(`comm: allreduce "grads" at step 4 on rank %d: aborted: rank 2 ran out of data`, r)
			if err.Error() != want {
				t.Errorf("%v: got %q, want %q", alg, err, want)
			}
		}
		for r := range 3 {
			if err := g.Rank(r).Barrier(Tag{}); !errors.Is(err, cause) {
				t.Errorf("%v: later barrier on rank %d: %v", alg, r, err)
			}
		}
		g.Abort(errors.New("again")) // no effect
		if err := g.Err(); err != cause {
			t.Errorf("Err() = %v", err)
		}
	}
}

// TestAbortBeforeCalls: Abort on a fresh group, with a nil cause.
func TestAbortBeforeCalls(t *testing.T) {
	g := newGroup(t, 2, Options{})
	g.Abort(nil)
	err := g.Rank(0).AllReduce(nil, Sum, Tag{Name: "x"})
	if !errors.Is(err, ErrAborted) || err.Error() != `comm: allreduce "x" at step 0 on rank 0: aborted` {
		t.Errorf("got %v", err)
	}
}

// TestMismatch: ranks that call different collectives at the same point
// get ErrMismatch naming both calls, long before the timeout.
func TestMismatch(t *testing.T) {
	type call func(c *Comm) error
	allreduce := func(l int, op ReduceOp, tag Tag) call {
		return func(c *Comm) error { return c.AllReduce(make([]float32, l), op, tag) }
	}
	bcast := func(l, root int) call {
		return func(c *Comm) error { return c.Broadcast(make([]float32, l), root, Tag{Name: "params"}) }
	}
	barrier := func(c *Comm) error { return c.Barrier(Tag{Name: "sync"}) }
	b2 := Tag{Name: "bucket 2", Step: 17}
	cases := []struct {
		name  string
		n     int
		calls func(r int) call
		want  string // in the message
	}{
		{"length", 2, func(r int) call { return allreduce(1000+200*r, Sum, b2) },
			`allreduce "bucket 2" at step 17 (1000 floats, sum, `},
		{"op", 3, func(r int) call {
			if r == 2 {
				return allreduce(10, Max, b2)
			}
			return allreduce(10, Sum, b2)
		}, `allreduce "bucket 2" at step 17 (10 floats, max, `},
		{"tag", 2, func(r int) call { return allreduce(10, Sum, Tag{Name: "bucket 2", Step: 17 + r}) },
			`at step 18`},
		{"kind", 2, func(r int) call {
			if r == 0 {
				return allreduce(10, Sum, b2)
			}
			return bcast(10, 0)
		}, `broadcast "params" at step 0 (10 floats, root 0, `},
		{"root", 4, func(r int) call { return bcast(10, r%2) }, `root 1`},
		{"barrier", 4, func(r int) call {
			if r == 3 {
				return barrier
			}
			return allreduce(100000, Sum, b2)
		}, `barrier "sync" at step 0 (`},
	}
	for _, alg := range allAlgorithms {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v/%s", alg, tc.name), func(t *testing.T) {
				t.Parallel()
				g := newGroup(t, tc.n, Options{Algorithm: alg, Timeout: 5 * time.Second})
				errs, took := runSome(g, []int{0, 1, 2, 3}[:tc.n], func(c *Comm) error { return tc.calls(c.Rank())(c) })
				if took > time.Second {
					t.Errorf("took %v", took)
				}
				failed := 0
				for r, err := range errs {
					if err == nil {
						// A rank whose own exchanges all matched may finish;
						// its next call fails.
						if err := g.Rank(r).Barrier(Tag{}); !errors.Is(err, ErrMismatch) {
							t.Errorf("rank %d: next call: %v", r, err)
						}
						continue
					}
					failed++
					if !errors.Is(err, ErrMismatch) {
						t.Fatalf("rank %d: got %v, want ErrMismatch", r, err)
					}
					if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "comm: mismatched collectives: rank ") {
						t.Errorf("rank %d: %v\nwant it to contain %s", r, err, tc.want)
					}
				}
				if failed < 2 {
					t.Errorf("only %d ranks saw the mismatch", failed)
				}
			})
		}
	}
}

// TestInvalid: bad arguments fail the call with ErrInvalid and the group
// with it, so the other ranks do not wait for the timeout.
func TestInvalid(t *testing.T) {
	buf := make([]float32, 12)
	cases := []struct {
		name string
		f    func(c *Comm) error
		want string
	}{
		{"root", func(c *Comm) error { return c.Broadcast(buf[:4], 3, Tag{Name: "p"}) },
			`comm: broadcast "p" at step 0 on rank 0: root 3 out of range [0,2)`},
		{"op", func(c *Comm) error { return c.AllReduce(buf, ReduceOp(9), Tag{}) },
			`comm: allreduce at step 0 on rank 0: invalid ReduceOp(9)`},
		{"allgather", func(c *Comm) error { return c.AllGather(buf[:3], buf[:5], Tag{}) },
			`comm: allgather at step 0 on rank 0: recv has 5 floats, want 2·3`},
		{"reducescatter", func(c *Comm) error { return c.ReduceScatter(buf[:3], buf[4:5], Sum, Tag{}) },
			`comm: reducescatter at step 0 on rank 0: send has 3 floats, want 2·1`},
		{"overlap", func(c *Comm) error { return c.AllGather(buf[1:3], buf[:4], Tag{}) },
			`comm: allgather at step 0 on rank 0: send overlaps recv other than as this rank's block`},
		{"overlap rs", func(c *Comm) error { return c.ReduceScatter(buf[:4], buf[3:5], Sum, Tag{}) },
			`comm: reducescatter at step 0 on rank 0: recv overlaps send other than as this rank's block`},
	}
	for _, tc := range cases {
		g := newGroup(t, 2, Options{Timeout: 5 * time.Second})
		errs, took := runSome(g, []int{0, 1}, func(c *Comm) error {
			if c.Rank() == 0 {
				return tc.f(c)
			}
			return c.AllReduce(make([]float32, 4), Sum, Tag{})
		})
		if !errors.Is(errs[0], ErrInvalid) || errs[0].Error() != tc.want {
			t.Errorf("%s: rank 0 got %v, want %v", tc.name, errs[0], tc.want)
		}
		if !errors.Is(errs[1], ErrInvalid) || took > time.Second {
			t.Errorf("%s: rank 1 got %v after %v", tc.name, errs[1], took)
		}
	}
}

// TestConcurrentCallsOnOneRank: a second collective while one is running
// on the same rank is refused.
func TestConcurrentCallsOnOneRank(t *testing.T) {
	g := newGroup(t, 2, Options{Timeout: 5 * time.Second})
	done := make(chan error)
	go func() { done <- g.Rank(0).AllReduce(make([]float32, 4), Sum, Tag{Name: "first"}) }()
	for !g.Rank(0).busy.Load() {
		time.Sleep(time.Millisecond)
	}
	err := g.Rank(0).AllReduce(make([]float32, 4), Sum, Tag{Name: "second"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "another collective is running") {
		t.Errorf("got %v", err)
	}
	if err := <-done; !errors.Is(err, ErrInvalid) {
		t.Errorf("first call: %v", err)
	}
}

func TestParse(t *testing.T) {
	for op := range numReduceOps {
		got, err := ParseReduceOp(strings.ToUpper(op.String()))
		if err != nil || got != op {
			t.Errorf("ParseReduceOp(%v) = %v, %v", op, got, err)
		}
	}
	for a := range numAlgorithms {
		var got Algorithm
		if err := got.UnmarshalText([]byte(a.String())); err != nil || got != a {
			t.Errorf("UnmarshalText(%v) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseReduceOp("avg"); err == nil || err.Error() != `comm: unknown reduce op "avg", want one of sum, mean, max, min` {
		t.Errorf("ParseReduceOp(avg): %v", err)
	}
	if _, err := ParseAlgorithm("nccl"); err == nil {
		t.Error("ParseAlgorithm(nccl): no error")
	}
	if _, err := NewInProc(0, Options{}); err == nil {
		t.Error("NewInProc(0): no error")
	}
	if _, err := NewInProc(2, Options{Timeout: -1}); err == nil {
		t.Error("negative timeout: no error")
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		n, count int
		want     Algorithm
	}{
		{1, 0, Direct},
		{2, 0, Direct},
		{4, AutoDirectMaxBytes / 4, Direct},
		{4, AutoDirectMaxBytes/4 + 1, Tree},
		{2, AutoTreeMaxBytes / 4, Tree},
		{8, AutoTreeMaxBytes/4 + 1, Ring},
		{2, 1 << 20, Ring},
	} {
		if got := Auto.Resolve(tc.n, tc.count); got != tc.want {
			t.Errorf("Auto.Resolve(%d, %d) = %v, want %v", tc.n, tc.count, got, tc.want)
		}
	}
	if Tree.Resolve(8, 1<<30) != Tree {
		t.Error("Tree.Resolve changed the algorithm")
	}
}

// TestTimeoutInsideMessage: a timeout with every rank inside the
// collective, waiting for a peer's data (as a timeout shorter than the
// collective takes gives), says so; it used to read "waiting for rank 1
// (all ranks arrived)", as though nothing were missing.
func TestTimeoutInsideMessage(t *testing.T) {
	err := &Error{Op: "allreduce", Tag: Tag{Name: "bucket 2", Step: 17}, Rank: 0, Reason: ErrTimeout,
		Timeout: time.Nanosecond, Arrived: []int{0, 1}, Peer: 1}
	want := `comm: allreduce "bucket 2" at step 17: timed out after 1ns waiting for data from rank 1; every rank had joined the collective, so it was still under way: the timeout is shorter than it takes, or rank 1 stalled inside it`
	if err.Error() != want {
		t.Errorf("got\n%v\nwant\n%v", err, want)
	}
	// A real group with a timeout far too short: whichever way each rank
	// times out, its message names what it waited for truthfully.
	for range 20 {
		g := newGroup(t, 2, Options{Algorithm: Ring, Timeout: time.Nanosecond})
		bufs := [][]float32{make([]float32, 1<<16), make([]float32, 1<<16)}
		errs, _ := runSome(g, []int{0, 1}, func(c *Comm) error {
			return c.AllReduce(bufs[c.Rank()], Sum, Tag{Name: "b", Step: 1})
		})
		for _, err := range errs {
			if err != nil && strings.Contains(err.Error(), "all ranks arrived") {
				t.Fatalf("%v", err)
			}
		}
	}
}
