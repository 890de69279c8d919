package comm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// hierWorld builds procs × local ranks of two-level groups, the processes
// simulated by in-process groups (one per process, plus the cross group of
// their local ranks 0), and runs f on every global rank.
func hierWorld(t *testing.T, procs, local int, f func(h *Hier) error) {
	t.Helper()
	cross := newGroup(t, procs, Options{})
	var ranks []*Hier
	for p := range procs {
		lg := newGroup(t, local, Options{})
		for l := range local {
			var x Communicator
			if l == 0 {
				x = cross.Rank(p)
			}
			h, err := NewHier(lg.Rank(l), x, p, procs)
			if err != nil {
				t.Fatal(err)
			}
			ranks = append(ranks, h)
		}
	}
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, h := range ranks {
		if h.Rank() != i || h.Size() != procs*local {
			t.Fatalf("rank %d says rank %d of %d", i, h.Rank(), h.Size())
		}
		wg.Go(func() { errs[i] = f(h) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestHierMatchesSerial checks every collective of the two-level group
// against a plain serial computation, for 1–3 processes of 1–3 devices.
func TestHierMatchesSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, procs := range []int{1, 2, 3} {
		for _, local := range []int{1, 2, 3} {
			n := procs * local
			for _, l := range []int{0, 1, 7, 1000} {
				name := fmt.Sprintf("%d×%d len %d", procs, local, l)
				in := exactInputs(rng, n, l)
				for _, op := range allOps {
					want := serial(in, op)
					out := clones(in)
					hierWorld(t, procs, local, func(h *Hier) error {
						return h.AllReduce(out[h.Rank()], op, Tag{Name: "x"})
					})
					for r := range out {
						if !slices.Equal(out[r], want) {
							t.Fatalf("%s allreduce %s: rank %d differs", name, op, r)
						}
					}
					for _, root := range []int{0, n - 1, n / 2} {
						out := clones(in)
						hierWorld(t, procs, local, func(h *Hier) error {
							return h.Reduce(out[h.Rank()], root, op, Tag{Name: "x"})
						})
						for r := range out {
							w := in[r]
							if r == root {
								w = want
							}
							if !slices.Equal(out[r], w) {
								t.Fatalf("%s reduce %s root %d: rank %d wrong", name, op, root, r)
							}
						}
					}
				}
				for _, root := range []int{0, n - 1, n / 2} {
					out := clones(in)
					hierWorld(t, procs, local, func(h *Hier) error {
						return h.Broadcast(out[h.Rank()], root, Tag{Name: "x"})
					})
					for r := range out {
						if !slices.Equal(out[r], in[root]) {
							t.Fatalf("%s broadcast root %d: rank %d wrong", name, root, r)
						}
					}
				}
				gathered := make([][]float32, n)
				for r := range gathered {
					gathered[r] = make([]float32, n*l)
				}
				hierWorld(t, procs, local, func(h *Hier) error {
					return h.AllGather(in[h.Rank()], gathered[h.Rank()], Tag{Name: "x"})
				})
				flat := slices.Concat(in...)
				for r := range gathered {
					if !slices.Equal(gathered[r], flat) {
						t.Fatalf("%s allgather: rank %d wrong", name, r)
					}
				}
				big := exactInputs(rng, n, n*l)
				sum := serial(big, Sum)
				recv := make([][]float32, n)
				for r := range recv {
					recv[r] = make([]float32, l)
				}
				hierWorld(t, procs, local, func(h *Hier) error {
					return h.ReduceScatter(big[h.Rank()], recv[h.Rank()], Sum, Tag{Name: "x"})
				})
				for r := range recv {
					if !slices.Equal(recv[r], sum[r*l:(r+1)*l]) {
						t.Fatalf("%s reduce_scatter: rank %d wrong", name, r)
					}
				}
				hierWorld(t, procs, local, func(h *Hier) error { return h.Barrier(Tag{Name: "b"}) })
			}
		}
	}
}
