package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorun/ops/internal/vec"
)

// TestMaxPool2x2F32 checks the vectorised float32 path (package vec, the
// level this CPU runs) against the plain one on values with many ties, ±0,
// infinities and NaNs, on planes narrower and wider than a vector.
func TestMaxPool2x2F32(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2.5, -2.5,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -float32(math.NaN()),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32}
	for trial := 0; trial < 2000; trial++ {
		w, h := []int{9, 37, 70}[trial%3], 6 // odd widths: the last column is dropped
		oh, ow := h/2, w/2
		x := make([]float32, h*w)
		for i := range x {
			if r.IntN(3) == 0 {
				x[i] = float32(r.NormFloat64())
			} else {
				x[i] = special[r.IntN(len(special))]
			}
		}
		y1, y2 := make([]float32, oh*ow), make([]float32, oh*ow)
		i1, i2 := make([]int32, oh*ow), make([]int32, oh*ow)
		maxPool2x2(x, y1, i1, w, oh, ow)
		vec.MaxPool2x2(x, y2, i2, 1, h, w, oh, ow)
		for j := range y1 {
			same := y1[j] == y2[j] || (y1[j] != y1[j] && y2[j] != y2[j])
			if !same || i1[j] != i2[j] {
				t.Fatalf("window %d of %v: plain %v at %d, branch-free %v at %d", j, x, y1[j], i1[j], y2[j], i2[j])
			}
		}
	}
}
