package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bnShape is one [n, ch, l] tensor and the channel block j0 .. j0+nc-1 a
// call does.
type bnShape struct{ n, ch, l, j0, nc int }

// bnShapes returns every n in {1, 3, 64}, ch in {1, 5, 16}, l in {1, 7,
// 49, 196, 785}, each with all its channels and, where ch > 1, with an
// inner block of them.
func bnShapes() []bnShape {
	var s []bnShape
	for _, n := range []int{1, 3, 64} {
		for _, ch := range []int{1, 5, 16} {
			for _, l := range []int{1, 7, 49, 196, 785} {
				s = append(s, bnShape{n, ch, l, 0, ch})
				if ch > 1 {
					s = append(s, bnShape{n, ch, l, 1, ch - 2})
				}
			}
		}
	}
	return s
}

// normals returns n normal values scaled by sd around mu.
func normals(r *rand.Rand, n int, mu, sd float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(mu + sd*r.NormFloat64())
	}
	return s
}

// closeSum reports whether got is within 1e-12 of want relative to abs, the
// sum of the magnitudes of the terms; NaN matches NaN and an infinity
// matches itself.
func closeSum(got, want, abs float64) bool {
	if math.IsNaN(want) || math.IsInf(want, 0) || math.IsInf(abs, 0) {
		return got == want || (math.IsNaN(got) && math.IsNaN(want))
	}
	return math.Abs(got-want) <= 1e-12*abs
}

// absSums returns Σ|x| and Σx² per channel of the block, the magnitude the
// rounding of BNSums is relative to.
func absSums(x []float32, s bnShape) (a1, a2 []float64) {
	a1, a2 = make([]float64, s.nc), make([]float64, s.nc)
	for c := range s.nc {
		for i := range s.n {
			for _, v := range x[(i*s.ch+s.j0+c)*s.l:][:s.l] {
				a1[c] += math.Abs(float64(v))
				a2[c] += float64(v) * float64(v)
			}
		}
	}
	return a1, a2
}

// perChannel returns the block's per-channel parameters: means near the
// data's and scales of both signs, or specials when wild.
func perChannel(r *rand.Rand, nc int, wild bool) (mean, a, b, c []float32) {
	if wild {
		return sample(r, nc), sample(r, nc), sample(r, nc), sample(r, nc)
	}
	return normals(r, nc, 0.5, 0.2), normals(r, nc, 0, 2), normals(r, nc, 0, 1), normals(r, nc, 0, 0.5)
}

// bnData returns x and dy for shape s: normals off zero, or sample's mix of
// NaN, ±Inf, ±0 when wild.
func bnData(r *rand.Rand, s bnShape, wild bool) (x, dy []float32) {
	size := s.n * s.ch * s.l
	if wild {
		return sample(r, size), sample(r, size)
	}
	return normals(r, size, 0.5, 1), normals(r, size, 0, 0.01)
}

func TestBNSumsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range bnShapes() {
		for _, wild := range []bool{false, true} {
			x, dy := bnData(r, s, wild)
			mean, _, _, _ := perChannel(r, s.nc, wild)
			w1, w2 := make([]float64, s.nc), make([]float64, s.nc)
			g0, g1 := make([]float64, s.nc), make([]float64, s.nc)
			bnSumsGo(w1, w2, x, s.n, s.ch, s.l, s.j0, s.nc)
			bnGradSumsGo(g0, g1, dy, x, mean, s.n, s.ch, s.l, s.j0, s.nc)
			a1, a2 := absSums(x, s)
			d1, _ := absSums(dy, s)
			ad := make([]float64, s.nc) // Σ|dy·(x-mean)|
			for c := range s.nc {
				for i := range s.n {
					o := (i*s.ch + s.j0 + c) * s.l
					for k := range s.l {
						ad[c] += math.Abs(float64(dy[o+k]) * float64(x[o+k]-mean[c]))
					}
				}
			}
			for _, lv := range levels() {
				// one more than the block: the last stays untouched
				s1, s2 := make([]float64, s.nc+1), make([]float64, s.nc+1)
				h0, h1 := make([]float64, s.nc+1), make([]float64, s.nc+1)
				s1[s.nc], s2[s.nc], h0[s.nc], h1[s.nc] = 7, 7, 7, 7
				bnSums(lv, s1, s2, x, s.n, s.ch, s.l, s.j0, s.nc)
				bnGradSums(lv, h0, h1, dy, x, mean, s.n, s.ch, s.l, s.j0, s.nc)
				if s1[s.nc] != 7 || s2[s.nc] != 7 || h0[s.nc] != 7 || h1[s.nc] != 7 {
					t.Errorf("level %d %+v: wrote past the block", lv, s)
				}
				for c := range s.nc {
					if !closeSum(s1[c], w1[c], a1[c]) || !closeSum(s2[c], w2[c], a2[c]) {
						t.Errorf("level %d %+v wild %v channel %d: sums (%v, %v), Go (%v, %v)", lv, s, wild, c, s1[c], s2[c], w1[c], w2[c])
					}
					if !closeSum(h0[c], g0[c], d1[c]) || !closeSum(h1[c], g1[c], ad[c]) {
						t.Errorf("level %d %+v wild %v channel %d: gradient sums (%v, %v), Go (%v, %v)", lv, s, wild, c, h0[c], h1[c], g0[c], g1[c])
					}
				}
				// deterministic: a second call gives the same bits
				t1, t2 := make([]float64, s.nc), make([]float64, s.nc)
				bnSums(lv, t1, t2, x, s.n, s.ch, s.l, s.j0, s.nc)
				for c := range s.nc {
					if math.Float64bits(t1[c]) != math.Float64bits(s1[c]) || math.Float64bits(t2[c]) != math.Float64bits(s2[c]) {
						t.Errorf("level %d %+v channel %d: sums differ between calls", lv, s, c)
					}
				}
			}
		}
	}
}

func TestBNElementwiseMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range bnShapes() {
		for _, wild := range []bool{false, true} {
			x, dy := bnData(r, s, wild)
			mean, scale, shift, slope := perChannel(r, s.nc, wild)
			size := s.n * s.ch * s.l
			wantY, wantDX := make([]float32, size), make([]float32, size)
			bnApplyGo(wantY, x, nil, false, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
			bnGradInputGo(wantDX, dy, x, mean, scale, shift, slope, s.n, s.ch, s.l, s.j0, s.nc)
			for _, lv := range levels() {
				y, dx := make([]float32, size+1), make([]float32, size+1)
				for i := range y {
					y[i], dx[i] = 7, 7 // channels outside the block keep it
				}
				want := func(w []float32, i int) float32 {
					if c := i / s.l % s.ch; i < size && c >= s.j0 && c < s.j0+s.nc {
						return w[i]
					}
					return 7
				}
				bnApply(lv, y, x, nil, false, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
				bnGradInput(lv, dx, dy, x, mean, scale, shift, slope, s.n, s.ch, s.l, s.j0, s.nc)
				for i := range y {
					if w := want(wantY, i); !same([]float32{y[i]}, []float32{w}) {
						t.Errorf("level %d %+v wild %v: y[%d] = %v, Go %v", lv, s, wild, i, y[i], w)
						break
					}
				}
				for i := range dx {
					if w := want(wantDX, i); !same([]float32{dx[i]}, []float32{w}) {
						t.Errorf("level %d %+v wild %v: dx[%d] = %v, Go %v", lv, s, wild, i, dx[i], w)
						break
					}
				}
				// in place: y over x, dx over dy
				in := append([]float32(nil), x...)
				bnApply(lv, in, in, nil, false, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
				gi := append([]float32(nil), dy...)
				bnGradInput(lv, gi, gi, x, mean, scale, shift, slope, s.n, s.ch, s.l, s.j0, s.nc)
				for i := range size {
					if c := i / s.l % s.ch; c < s.j0 || c >= s.j0+s.nc {
						continue
					}
					if !same(in[i:i+1], wantY[i:i+1]) || !same(gi[i:i+1], wantDX[i:i+1]) {
						t.Errorf("level %d %+v wild %v: in place differs at %d", lv, s, wild, i)
						break
					}
				}
			}
		}
	}
}

// TestBNApplyAddMatchesUnfused checks BNApplyAdd (batch norm, residual
// add and ReLU in one pass) against BNApply, then an elementwise add, then
// ReLU's rule, bit for bit at every level, in place over the residual too.
func TestBNApplyAddMatchesUnfused(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range bnShapes() {
		for _, wild := range []bool{false, true} {
			x, res := bnData(r, s, wild)
			mean, scale, shift, _ := perChannel(r, s.nc, wild)
			size := s.n * s.ch * s.l
			for _, withRes := range []bool{false, true} {
				for _, relu := range []bool{false, true} {
					want := make([]float32, size)
					for i := range want {
						want[i] = 7 // channels outside the block keep it
					}
					bnApplyGo(want, x, nil, false, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
					for i := range size {
						if c := i / s.l % s.ch; c < s.j0 || c >= s.j0+s.nc {
							continue
						}
						if withRes {
							want[i] += res[i]
						}
						if relu && want[i] < 0 {
							want[i] = 0
						}
					}
					var rs []float32
					if withRes {
						rs = res
					}
					for _, lv := range append(levels(), -1) {
						y := make([]float32, size)
						for i := range y {
							y[i] = 7
						}
						if lv < 0 {
							bnApplyGo(y, x, rs, relu, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
						} else {
							bnApply(lv, y, x, rs, relu, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
						}
						if i := firstDiff(y, want); i >= 0 {
							t.Errorf("level %d %+v wild %v res %v relu %v: y[%d] = %v, unfused %v", lv, s, wild, withRes, relu, i, y[i], want[i])
						}
						if !withRes || lv < 0 {
							continue
						}
						over := append([]float32(nil), res...) // y written over the residual
						bnApply(lv, over, x, over, relu, mean, scale, shift, s.n, s.ch, s.l, s.j0, s.nc)
						for i := range size {
							if c := i / s.l % s.ch; c >= s.j0 && c < s.j0+s.nc && !same(over[i:i+1], want[i:i+1]) {
								t.Errorf("level %d %+v wild %v relu %v: over the residual, y[%d] = %v, unfused %v", lv, s, wild, relu, i, over[i], want[i])
								break
							}
						}
					}
				}
			}
		}
	}
}

// firstDiff is the first index where a and b differ (NaNs equal), or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if !same(a[i:i+1], b[i:i+1]) {
			return i
		}
	}
	return -1
}

func TestBNChecks(t *testing.T) {
	x := make([]float32, 2*3*4)
	s := make([]float64, 3)
	p := make([]float32, 3)
	for name, f := range map[string]func(){
		"channels past ch":  func() { BNSums(s, s, x, 2, 3, 4, 1, 3) },
		"short per-channel": func() { BNApply(x, x, p[:1], p, p, 2, 3, 4, 0, 3) },
		"short tensor":      func() { BNGradInput(x[:23], x, x, p, p, p, p, 2, 3, 4, 0, 3) },
		"negative j0":       func() { BNGradSums(s, s, x, x, p, 2, 3, 4, -1, 1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	// empty blocks and tensors do nothing
	BNSums(nil, nil, nil, 0, 3, 4, 0, 0)
	BNApply(nil, nil, p, p, p, 0, 3, 4, 0, 3)
	BNGradSums(s, s, nil, nil, p, 2, 3, 0, 0, 3)
	if s[0] != 0 || s[2] != 0 {
		t.Errorf("sums over no elements: %v, want 0", s)
	}
}

// BenchmarkBN measures each kernel at every level next to the Go loop
// (level -1) on a ResNet-sized batch norm: batch 64, 32 channels of 14×14.
func BenchmarkBN(b *testing.B) {
	const n, ch, l = 64, 32, 14 * 14
	r := rand.New(rand.NewPCG(11, 12))
	x, dy, y := normals(r, n*ch*l, 0.5, 1), normals(r, n*ch*l, 0, 0.01), make([]float32, n*ch*l)
	mean, scale, shift, slope := perChannel(r, ch, false)
	s1, s2 := make([]float64, ch), make([]float64, ch)
	for _, lv := range append(levels(), -1) {
		for _, k := range []struct {
			name   string
			f, ref func()
		}{
			{"sums", func() { bnSums(lv, s1, s2, x, n, ch, l, 0, ch) }, func() { bnSumsGo(s1, s2, x, n, ch, l, 0, ch) }},
			{"gradsums", func() { bnGradSums(lv, s1, s2, dy, x, mean, n, ch, l, 0, ch) },
				func() { bnGradSumsGo(s1, s2, dy, x, mean, n, ch, l, 0, ch) }},
			{"apply", func() { bnApply(lv, y, x, nil, false, mean, scale, shift, n, ch, l, 0, ch) },
				func() { bnApplyGo(y, x, nil, false, mean, scale, shift, n, ch, l, 0, ch) }},
			{"gradinput", func() { bnGradInput(lv, y, dy, x, mean, scale, shift, slope, n, ch, l, 0, ch) },
				func() { bnGradInputGo(y, dy, x, mean, scale, shift, slope, n, ch, l, 0, ch) }},
		} {
			f := k.f
			if lv < 0 {
				f = k.ref
			}
			b.Run(fmt.Sprintf("%s/level=%d", k.name, lv), func(b *testing.B) {
				b.SetBytes(int64(4 * n * ch * l))
				for b.Loop() {
					f()
				}
			})
		}
	}
}
