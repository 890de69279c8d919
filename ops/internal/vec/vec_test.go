package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// levels returns every kernel level this CPU can run: the C bodies from
// plain C up to Level(), or only the Go loops (-1) in a build without cgo.
func levels() []int {
	if Level() < 0 {
		return []int{-1}
	}
	var ls []int
	for l := 0; l <= Level(); l++ {
		ls = append(ls, l)
	}
	return ls
}

// sample returns n values with the awkward ones mixed in: NaN, ±Inf, -0,
// +0 and ties.
func sample(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0, 1, -1}
	for i := range s {
		if r.IntN(8) == 0 {
			s[i] = special[r.IntN(len(special))]
		} else {
			s[i] = float32(r.NormFloat64())
		}
	}
	return s
}

// same reports whether a and b hold the same bits.
func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			return false
		}
	}
	return true
}

var sizes = []int{0, 1, 3, 15, 16, 17, 31, 33, 100, 1023, 4099}

func TestElementwiseMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, lv := range levels() {
		for _, n := range sizes {
			x, y, g := sample(r, n), sample(r, n), sample(r, n)
			want, got := make([]float32, n), make([]float32, n+1)
			got[n] = 7 // past the end: untouched

			reluGo(want, x)
			relu(lv, got, x)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d n %d: relu differs from the Go loop", lv, n)
			}
			inPlace := append([]float32(nil), x...)
			relu(lv, inPlace, inPlace)
			if !same(want, inPlace) {
				t.Errorf("level %d n %d: relu in place differs", lv, n)
			}

			reluGradGo(want, g, nil, y)
			reluGrad(lv, got, g, nil, y)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d n %d: relu gradient differs from the Go loop", lv, n)
			}
			// with a second gradient: the sum's relu gradient, as Add then
			// ReLUGrad round it; in place over either
			sum := make([]float32, n)
			addGo(sum, g, x)
			reluGradGo(want, sum, nil, y)
			for _, f := range []func([]float32){
				func(out []float32) { reluGradGo(out, g, x, y) },
				func(out []float32) { reluGrad(lv, out, g, x, y) },
			} {
				f(got)
				if !same(want, got[:n]) || got[n] != 7 {
					t.Errorf("level %d n %d: relu gradient of a sum differs from add then relu gradient", lv, n)
				}
			}
			for _, over := range []int{0, 1} {
				a, b := append([]float32(nil), g...), append([]float32(nil), x...)
				dst := [][]float32{a, b}[over]
				reluGrad(lv, dst, a, b, y)
				if !same(want, dst) {
					t.Errorf("level %d n %d: relu gradient of a sum over input %d differs", lv, n, over)
				}
			}

			addGo(want, x, y)
			add(lv, got, x, y)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d n %d: add differs from the Go loop", lv, n)
			}
			inPlace = append([]float32(nil), x...)
			add(lv, inPlace, inPlace, y)
			if !same(want, inPlace) {
				t.Errorf("level %d n %d: add in place differs", lv, n)
			}
		}
	}
}

func TestSumMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, lv := range levels() {
		for _, n := range sizes {
			x := make([]float32, n)
			var exact float64
			for i := range x {
				x[i] = float32(r.NormFloat64())
				exact += float64(x[i])
			}
			want, got := sumGo(x), sum(lv, x)
			if math.Float32bits(want) != math.Float32bits(got) {
				t.Errorf("level %d n %d: sum %v, the Go loop %v", lv, n, got, want)
			}
			if d := math.Abs(float64(got) - exact); d > 1e-5*math.Sqrt(float64(n)+1) {
				t.Errorf("level %d n %d: sum %v, exact %v", lv, n, got, exact)
			}
		}
	}
}

func TestBiasGradMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, lv := range levels() {
		for _, dims := range [][3]int{{1, 1, 1}, {3, 5, 17}, {64, 10, 576}, {2, 3, 0}, {0, 4, 9}} {
			n, o, plane := dims[0], dims[1], dims[2]
			dy := sample(r, n*o*plane)
			for i := range dy {
				if dy[i] != dy[i] || math.IsInf(float64(dy[i]), 0) {
					dy[i] = 1
				}
			}
			for _, acc := range []bool{false, true} {
				want, got := make([]float32, o), make([]float32, o+1)
				for j := range o {
					want[j], got[j] = 2, 2
				}
				got[o] = 7
				biasGradGo(dy, n, o, plane, want, acc)
				biasGrad(lv, dy, n, o, plane, got, acc)
				if !same(want, got[:o]) || got[o] != 7 {
					t.Errorf("level %d %v accumulate %v: %v, the Go loop %v", lv, dims, acc, got[:o], want)
				}
			}
		}
	}
}

func TestMaxPool2x2MatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, lv := range levels() {
		for _, tc := range []struct{ planes, h, w int }{
			{1, 2, 2}, {3, 24, 24}, {2, 8, 8}, {5, 7, 9}, {2, 28, 70}, {1, 3, 33}, {4, 64, 64}, {2, 2, 34}, {0, 4, 4},
		} {
			for _, ties := range []bool{false, true} {
				oh, ow := tc.h/2, tc.w/2
				x := sample(r, tc.planes*tc.h*tc.w)
				if ties { // few distinct values: many ties, ±0 among them
					for i := range x {
						x[i] = []float32{0, float32(math.Copysign(0, -1)), 1, -1}[r.IntN(4)]
					}
				}
				n := tc.planes * oh * ow
				wantY, gotY := make([]float32, n), make([]float32, n+1)
				wantI, gotI := make([]int32, n), make([]int32, n+1)
				gotY[n], gotI[n] = 7, 7
				maxPool2x2Go(x, wantY, wantI, tc.planes, tc.h, tc.w, oh, ow)
				maxPool2x2(lv, x, gotY, gotI, tc.planes, tc.h, tc.w, oh, ow)
				if !same(wantY, gotY[:n]) || gotY[n] != 7 || gotI[n] != 7 {
					t.Errorf("level %d %+v ties %v: pooled values differ from the Go loop", lv, tc, ties)
				}
				for i := range wantI {
					if wantI[i] != gotI[i] {
						t.Errorf("level %d %+v ties %v: index %d is %d, want %d", lv, tc, ties, i, gotI[i], wantI[i])
						break
					}
				}
			}
		}
	}
}

// TestScalePlanesMatchesGo: every level writes the Go loop's bits (NaN,
// ±Inf and -0 in the planes and the scales, planes of lengths around the
// vector width), in place too, and nothing past the planes.
func TestScalePlanesMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, lv := range levels() {
		for _, tc := range []struct{ planes, hw int }{{1, 1}, {3, 15}, {2, 16}, {5, 17}, {4, 64}, {7, 33}, {0, 9}, {3, 0}} {
			n := tc.planes * tc.hw
			x, s := sample(r, n), sample(r, tc.planes)
			want, got := make([]float32, n), make([]float32, n+1)
			got[n] = 7
			scalePlanesGo(want, x, s, tc.hw)
			scalePlanes(lv, got, x, s, tc.hw)
			if !same(want, got[:n]) || got[n] != 7 {
				t.Errorf("level %d %+v: differs from the Go loop", lv, tc)
			}
			in := append([]float32(nil), x...)
			scalePlanes(lv, in, in, s, tc.hw)
			if !same(want, in) {
				t.Errorf("level %d %+v in place: differs from the Go loop", lv, tc)
			}
		}
	}
}

// TestMaxPool2x2GradMatchesScatter: every level and the Go loop write
// exactly what clearing dx and adding each dy at its index gives (-0 and
// NaN included), over every element of dx (which starts as garbage) and
// nothing past it, for planes of odd sizes whose last row or column no
// window covers.
func TestMaxPool2x2GradMatchesScatter(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, lv := range append(levels(), -1) {
		for _, tc := range []struct{ planes, h, w int }{
			{1, 2, 2}, {3, 24, 24}, {2, 8, 8}, {5, 7, 9}, {2, 28, 70}, {1, 3, 33}, {4, 64, 64}, {2, 2, 34},
			{0, 4, 4}, {2, 1, 5}, {3, 5, 1}, {1, 9, 47},
		} {
			oh, ow := tc.h/2, tc.w/2
			x := sample(r, tc.planes*tc.h*tc.w)
			n := tc.planes * oh * ow
			y, idx := make([]float32, n), make([]int32, n)
			maxPool2x2Go(x, y, idx, tc.planes, tc.h, tc.w, oh, ow)
			dy := sample(r, n)
			hw := tc.h * tc.w
			want := make([]float32, tc.planes*hw)
			for p := range tc.planes {
				for j := range oh * ow {
					want[p*hw+int(idx[p*oh*ow+j])] += dy[p*oh*ow+j]
				}
			}
			got := sample(r, len(want)+1)
			got[len(want)] = 7
			if lv < 0 {
				maxPool2x2GradGo(dy, idx, got, tc.planes, tc.h, tc.w, oh, ow)
			} else {
				maxPool2x2Grad(lv, dy, idx, got, tc.planes, tc.h, tc.w, oh, ow)
			}
			if got[len(want)] != 7 {
				t.Errorf("level %d %+v: wrote past dx", lv, tc)
			}
			for i := range want {
				if !same(want[i:i+1], got[i:i+1]) {
					t.Errorf("level %d %+v: dx[%d] = %v, the scatter gives %v", lv, tc, i, got[i], want[i])
					break
				}
			}
		}
	}
}

// TestMaxPoolNaNWindow pins the NaN rule on a window the vector path would
// otherwise take: the last NaN wins.
func TestMaxPoolNaNWindow(t *testing.T) {
	nan := float32(math.NaN())
	x := make([]float32, 2*32)
	for i := range x {
		x[i] = float32(i)
	}
	x[0], x[33] = nan, nan // window 0: r0[0] and r1[1] are NaN
	y, idx := make([]float32, 16), make([]int32, 16)
	MaxPool2x2(x, y, idx, 1, 2, 32, 1, 16)
	if y[0] == y[0] || idx[0] != 33 {
		t.Errorf("window with two NaNs: got %v at %d, want NaN at 33", y[0], idx[0])
	}
	if y[1] != 35 || idx[1] != 35 {
		t.Errorf("window 1: got %v at %d, want 35 at 35", y[1], idx[1])
	}
}

// BenchmarkKernels measures each kernel at every level next to the Go loop
// (level -1) on a ResNet-sized activation (batch 64, 16×28×28).
func BenchmarkKernels(b *testing.B) {
	const planes, h, w = 64 * 16, 28, 28
	n := planes * h * w
	x, y := sample(rand.New(rand.NewPCG(5, 6)), n), make([]float32, n)
	for i := range x {
		if x[i] != x[i] {
			x[i] = 0 // NaN windows take the scalar path
		}
	}
	idx := make([]int32, n/4)
	for _, lv := range append(levels(), -1) {
		for _, k := range []struct {
			name string
			f    func()
		}{
			{"relu", func() { relu(lv, y, x) }},
			{"add", func() { add(lv, y, x, y) }},
			{"maxpool2x2", func() { maxPool2x2(lv, x, y, idx, planes, h, w, h/2, w/2) }},
			{"maxpool2x2_grad", func() { maxPool2x2Grad(lv, x[:n/4], idx, y, planes, h, w, h/2, w/2) }},
		} {
			f := k.f
			if lv < 0 {
				f = map[string]func(){
					"relu":            func() { reluGo(y, x) },
					"add":             func() { addGo(y, x, y) },
					"maxpool2x2":      func() { maxPool2x2Go(x, y, idx, planes, h, w, h/2, w/2) },
					"maxpool2x2_grad": func() { maxPool2x2GradGo(x[:n/4], idx, y, planes, h, w, h/2, w/2) },
				}[k.name]
			}
			b.Run(fmt.Sprintf("%s/level=%d", k.name, lv), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					f()
				}
			})
		}
	}
}
