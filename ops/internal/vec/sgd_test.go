package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSGD runs every level's SGD step against the Go loop and a float64
// reference, on odd lengths, for every combination of weight decay,
// momentum, dampening, Nesterov and first step; the C levels agree bit for
// bit.
func TestSGD(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 15, 16, 17, 100, 1031} {
		p0, g := make([]float32, n), make([]float32, n)
		b0 := make([]float32, n)
		for i := range p0 {
			p0[i], g[i], b0[i] = float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		for _, a := range []SGDArgs{
			{LR: 0.1},
			{LR: 0.01, WeightDecay: 5e-4},
			{LR: 0.1, Momentum: 0.9, Keep: 1, First: true},
			{LR: 0.1, Momentum: 0.9, Keep: 1},
			{LR: 0.05, Momentum: 0.5, Keep: 0.75, WeightDecay: 1e-3},
			{LR: 0.1, Momentum: 0.9, Keep: 1, Nesterov: true, WeightDecay: 0.1},
		} {
			name := fmt.Sprintf("n=%d %+v", n, a)
			// float64 reference
			wantP, wantB := make([]float64, n), make([]float64, n)
			for i := range wantP {
				d := float64(g[i]) + float64(a.WeightDecay)*float64(p0[i])
				if a.Momentum != 0 {
					b := d
					if !a.First {
						b = float64(a.Momentum)*float64(b0[i]) + float64(a.Keep)*d
					}
					wantB[i] = b
					if a.Nesterov {
						d += float64(a.Momentum) * b
					} else {
						d = b
					}
				}
				wantP[i] = float64(p0[i]) - float64(a.LR)*d
			}
			var first, firstB []float32
			for _, lv := range append(levels(), -1) {
				p, b := append([]float32(nil), p0...), append([]float32(nil), b0...)
				if lv < 0 {
					sgdGo(&a, p, g, b)
				} else if n > 0 {
					sgd(lv, &a, p, g, b)
				}
				if i, ok := close32(p, wantP, 1e-5); !ok {
					t.Errorf("%s level %d: p[%d] = %v, want %v", name, lv, i, p[i], wantP[i])
				}
				if a.Momentum != 0 {
					if i, ok := close32(b, wantB, 1e-5); !ok {
						t.Errorf("%s level %d: buf[%d] = %v, want %v", name, lv, i, b[i], wantB[i])
					}
				}
				if lv < 0 {
					// the Go loop rounds fma twice: at most one unit off the C levels
					for i := range p {
						if first != nil && math.Abs(float64(p[i]-first[i])) > math.Abs(float64(first[i]))*1.2e-7 {
							t.Errorf("%s: Go p[%d] = %v, C %v", name, i, p[i], first[i])
						}
					}
				} else if first == nil {
					first, firstB = p, b
				} else if !same(first, p) || !same(firstB, b) {
					t.Errorf("%s level %d: differs from the first level", name, lv)
				}
			}
		}
	}
}
