package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSoftmaxRowsMatchesGo: every level writes the Go loop's bits (rows,
// maxima and sums), for rows of every length around the vector width,
// causal rows, and rows holding NaN, ±Inf and -0; and the result is within
// 5·10⁻⁶ of softmax computed in float64 (the exponential loses a few units
// in the last place far below the maximum).
func TestSoftmaxRowsMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, lv := range append(levels(), -1) {
		for _, tc := range []struct{ rows, k, causal int }{
			{1, 1, 0}, {3, 5, 0}, {4, 16, 0}, {2, 17, 0}, {5, 33, 0}, {2, 256, 0}, {0, 8, 0},
			{8, 8, 8}, {64, 64, 64}, {40, 20, 20}, {6, 3, 3}, {9, 31, 3},
		} {
			for _, special := range []bool{false, true} {
				n := tc.rows * tc.k
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(4 * r.NormFloat64())
				}
				if special && n > 0 {
					x = sample(r, n)
				}
				want, got := make([]float32, n), make([]float32, n+1)
				wms, gms := make([]float32, 2*tc.rows), make([]float32, 2*tc.rows+1)
				got[n], gms[2*tc.rows] = 7, 7
				softmaxGo(x, want, tc.rows, tc.k, tc.causal, wms)
				if lv < 0 {
					softmaxGo(x, got, tc.rows, tc.k, tc.causal, gms)
				} else {
					softmax(lv, x, got, tc.rows, tc.k, tc.causal, gms)
				}
				if !same(want, got[:n]) || !same(wms, gms[:2*tc.rows]) || got[n] != 7 || gms[2*tc.rows] != 7 {
					t.Errorf("level %d %+v special %v: differs from the Go loop", lv, tc, special)
				}
				if special {
					continue
				}
				for row := range tc.rows {
					keep := tc.k
					if tc.causal > 0 {
						keep = min(row%tc.causal+1, tc.k)
					}
					xr, yr := x[row*tc.k:][:tc.k], got[row*tc.k:][:tc.k]
					m := math.Inf(-1)
					for _, v := range xr[:keep] {
						m = max(m, float64(v))
					}
					var s float64
					for _, v := range xr[:keep] {
						s += math.Exp(float64(v) - m)
					}
					for j, v := range yr {
						w := 0.0
						if j < keep {
							w = math.Exp(float64(xr[j])-m) / s
						}
						if math.Abs(float64(v)-w) > 5e-6*w+1e-12 {
							t.Fatalf("level %d %+v row %d column %d: %v, float64 softmax %v", lv, tc, row, j, v, w)
						}
					}
				}
			}
		}
	}
}

// TestSoftmaxRowsSpecial pins the rules for awkward rows.
func TestSoftmaxRowsSpecial(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, lv := range append(levels(), -1) {
		run := func(x []float32) []float32 {
			y := make([]float32, len(x))
			if lv < 0 {
				softmaxGo(x, y, 1, len(x), 0, nil)
			} else {
				softmax(lv, x, y, 1, len(x), 0, nil)
			}
			return y
		}
		if y := run([]float32{0, -inf, 0}); y[0] != 0.5 || y[1] != 0 || y[2] != 0.5 {
			t.Errorf("level %d: softmax(0, -Inf, 0) = %v, want 0.5, 0, 0.5", lv, y)
		}
		if y := run([]float32{1, nan, 2}); y[0] == y[0] || y[1] == y[1] || y[2] == y[2] {
			t.Errorf("level %d: a row with a NaN gives %v, want NaN throughout", lv, y)
		}
		if y := run([]float32{0, -200}); y[0] != 1 || y[1] != 0 {
			t.Errorf("level %d: softmax(0, -200) = %v, want 1, 0", lv, y)
		}
	}
}
