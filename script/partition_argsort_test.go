package script

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

// TestSortByIsStable compares the radix sort of ints (and the sort of
// floats) with sort.SliceStable, on values of every width, negative ones
// and int64's extremes included, starting from a scrambled order.
func TestSortByIsStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, span := range []int64{1, 2, 10, 1000, 1 << 16, 1<<16 + 1, 1 << 33, 1 << 50, math.MaxInt64} {
		for _, n := range []int{1, 2, 7, 1000, 20000} {
			xs := make([]int64, n)
			fs := make([]float64, n)
			for i := range xs {
				xs[i] = rng.Int64N(span) - span/2
				fs[i] = float64(xs[i] % 100)
			}
			if n > 2 && span == math.MaxInt64 {
				xs[0], xs[1] = math.MinInt64, math.MaxInt64
			}
			start := rng.Perm(n)
			want := append([]int(nil), start...)
			sort.SliceStable(want, func(a, b int) bool { return xs[want[a]] < xs[want[b]] })
			got := append([]int(nil), start...)
			sortByInts(xs, got)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("span %d, n %d: sortByInts differs from a stable sort", span, n)
			}
			want = append(want[:0], start...)
			sort.SliceStable(want, func(a, b int) bool { return fs[want[a]] < fs[want[b]] })
			got = append(got[:0], start...)
			sortByFloats(fs, got)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("span %d, n %d: sortByFloats differs from a stable sort", span, n)
			}
		}
	}
}
