package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// lnRows and lnDims are the matrix shapes the layer-norm tests take: row
// lengths round the vector widths (4, 16, 32 columns) and the GPT's 128.
var (
	lnRows = []int{1, 3, 64}
	lnDims = []int{1, 3, 4, 5, 7, 16, 17, 31, 32, 33, 100, 128, 130, 785}
)

// lnParams returns gamma and beta for variant v: bit 0 gamma present, bit 1
// beta present; normals, or sample's specials when wild.
func lnParams(r *rand.Rand, d, v int, wild bool) (gamma, beta []float32) {
	gen := func(mu, sd float64) []float32 {
		if wild {
			return sample(r, d)
		}
		return normals(r, d, mu, sd)
	}
	if v&1 != 0 {
		gamma = gen(1, 0.5)
	}
	if v&2 != 0 {
		beta = gen(0, 0.5)
	}
	return gamma, beta
}

// filled returns n copies of 7, a value the kernels never write.
func filled(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 7
	}
	return s
}

func TestLNForwardMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const eps = 1e-5
	for _, rows := range lnRows {
		for _, d := range lnDims {
			for v := range 4 {
				for _, wild := range []bool{false, true} {
					x, _ := bnData(r, bnShape{rows, 1, d, 0, 1}, wild)
					gamma, beta := lnParams(r, d, v, wild)
					want := make([]float64, 2*rows)
					lnRowSumsGo(false, want, x, nil, nil, nil, rows, d)
					for _, lv := range levels() {
						sums := make([]float64, 2*rows)
						lnRowSums(lv, false, sums, x, nil, nil, nil, rows, d)
						y, save := filled(rows*d+1), filled(2*rows+1)
						ln(lv, y, save, x, gamma, beta, rows, d, eps)
						if y[rows*d] != 7 || save[2*rows] != 7 {
							t.Errorf("level %d rows %d d %d: wrote past the end", lv, rows, d)
						}
						for i := range rows {
							xr := x[i*d:][:d]
							var a1 float64 // Σ|x|
							for _, f := range xr {
								a1 += math.Abs(float64(f))
							}
							if !closeSum(sums[2*i], want[2*i], a1/float64(d)) ||
								!closeSum(sums[2*i+1], want[2*i+1], math.Abs(want[2*i+1])) {
								t.Errorf("level %d rows %d d %d wild %v row %d: moments (%v, %v), Go (%v, %v)",
									lv, rows, d, wild, i, sums[2*i], sums[2*i+1], want[2*i], want[2*i+1])
							}
							// the elementwise step is the Go loop's, bit for bit, on this level's moments
							m, k := float32(sums[2*i]), float32(1/math.Sqrt(sums[2*i+1]/float64(d)+eps))
							if !same(save[2*i:2*i+2], []float32{m, k}) {
								t.Errorf("level %d rows %d d %d row %d: save (%v, %v), want (%v, %v)", lv, rows, d, i,
									save[2*i], save[2*i+1], m, k)
							}
							wy := make([]float32, d)
							lnApplyGo(wy, xr, gamma, beta, m, k)
							if !same(y[i*d:][:d], wy) {
								t.Errorf("level %d rows %d d %d variant %d wild %v row %d: y differs from the Go loop",
									lv, rows, d, v, wild, i)
							}
						}
						// in place, and a second call gives the same bits
						in, s2 := append([]float32(nil), x...), make([]float32, 2*rows)
						ln(lv, in, s2, in, gamma, beta, rows, d, eps)
						if !same(in, y[:rows*d]) || !same(s2, save[:2*rows]) {
							t.Errorf("level %d rows %d d %d: in place differs", lv, rows, d)
						}
					}
				}
			}
		}
	}
}

func TestLNGradInputMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, rows := range lnRows {
		for _, d := range lnDims {
			for v := range 2 {
				for _, wild := range []bool{false, true} {
					x, dy := bnData(r, bnShape{rows, 1, d, 0, 1}, wild)
					dy = normals(r, rows*d, 0, 1)
					if wild {
						dy = sample(r, rows*d)
					}
					gamma, _ := lnParams(r, d, v, wild)
					save := make([]float32, 2*rows)
					lnGo(make([]float32, rows*d), save, x, nil, nil, rows, d, 1e-5)
					if wild {
						copy(save, sample(r, 2*rows))
					}
					want := make([]float64, 2*rows)
					lnRowSumsGo(true, want, dy, x, save, gamma, rows, d)
					for _, lv := range levels() {
						sums := make([]float64, 2*rows)
						lnRowSums(lv, true, sums, dy, x, save, gamma, rows, d)
						dx := filled(rows*d + 1)
						lnGradInput(lv, dx, dy, x, save, gamma, rows, d)
						if dx[rows*d] != 7 {
							t.Errorf("level %d rows %d d %d: wrote past the end", lv, rows, d)
						}
						for i := range rows {
							mean, is := save[2*i], save[2*i+1]
							var a0, a1 float64 // Σ|g|, Σ|g·x̂|
							for j := range d {
								gg := float64(dy[i*d+j])
								if gamma != nil {
									gg *= float64(gamma[j])
								}
								a0 += math.Abs(gg)
								a1 += math.Abs(gg * float64((x[i*d+j]-mean)*is))
							}
							if !closeSum(sums[2*i], want[2*i], a0) || !closeSum(sums[2*i+1], want[2*i+1], a1) {
								t.Errorf("level %d rows %d d %d wild %v row %d: sums (%v, %v), Go (%v, %v)",
									lv, rows, d, wild, i, sums[2*i], sums[2*i+1], want[2*i], want[2*i+1])
							}
							wd := make([]float32, d)
							lnGradApplyGo(wd, dy[i*d:][:d], x[i*d:][:d], gamma, mean, is,
								float32(sums[2*i]/float64(d)), float32(sums[2*i+1]/float64(d)))
							if !same(dx[i*d:][:d], wd) {
								t.Errorf("level %d rows %d d %d gamma %v wild %v row %d: dx differs from the Go loop",
									lv, rows, d, gamma != nil, wild, i)
							}
						}
						in := append([]float32(nil), dy...)
						lnGradInput(lv, in, in, x, save, gamma, rows, d)
						if !same(in, dx[:rows*d]) {
							t.Errorf("level %d rows %d d %d: in place differs", lv, rows, d)
						}
					}
				}
			}
		}
	}
}

// TestLNColSumsMatchGo checks ColSums and LayerNormGradGamma: each column
// is added in row order at every level, so the sums are the Go loop's bits
// (within the 1e-12 tolerance of the other float64 sums, exactly).
func TestLNColSumsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	for _, rows := range append([]int{0}, lnRows...) {
		for _, d := range lnDims {
			for _, wild := range []bool{false, true} {
				x, dy := bnData(r, bnShape{rows, 1, d, 0, 1}, wild)
				save := sample(r, 2*rows)
				if !wild {
					save = normals(r, 2*rows, 0.5, 0.5)
				}
				init := sample(r, d+1)
				for _, acc := range []bool{false, true} {
					wb, wg := append([]float32(nil), init...), append([]float32(nil), init...)
					colSumsGo(wb, dy, nil, nil, rows, d, acc)
					colSumsGo(wg, dy, x, save, rows, d, acc)
					for _, lv := range levels() {
						gb, gg := append([]float32(nil), init...), append([]float32(nil), init...)
						colSums(lv, gb, dy, nil, nil, rows, d, acc)
						colSums(lv, gg, dy, x, save, rows, d, acc)
						if !same(gb, wb) {
							t.Errorf("level %d rows %d d %d wild %v acc %v: column sums differ from the Go loop",
								lv, rows, d, wild, acc)
						}
						if !same(gg, wg) {
							t.Errorf("level %d rows %d d %d wild %v acc %v: gamma gradient differs from the Go loop",
								lv, rows, d, wild, acc)
						}
					}
				}
			}
		}
	}
}

func TestLNChecks(t *testing.T) {
	x := make([]float32, 2*8)
	s := make([]float32, 4)
	for name, f := range map[string]func(){
		"short x":     func() { LayerNorm(x, s, x[:15], nil, nil, 2, 8, 1e-5) },
		"short gamma": func() { LayerNorm(x, s, x, x[:7], nil, 2, 8, 1e-5) },
		"short save":  func() { LayerNormGradInput(x, x, x, s[:3], nil, 2, 8) },
		"short dg":    func() { LayerNormGradGamma(s, x, x, s, 2, 8, false) },
		"short sums":  func() { ColSums(x[:7], x, 2, 8, false) },
		"negative":    func() { ColSums(x, x, -1, 8, false) },
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
	// no rows: the sums are 0; no elements: nothing is written
	c := []float32{5, 5}
	ColSums(c, nil, 0, 2, false)
	if c[0] != 0 || c[1] != 0 {
		t.Errorf("column sums over no rows: %v, want 0", c)
	}
	LayerNorm(nil, nil, nil, nil, nil, 0, 8, 1e-5)
	LayerNormGradInput(nil, nil, nil, nil, nil, 3, 0)
}

// BenchmarkLN measures each kernel at every level next to the Go loop
// (level -1) at the GPT's size: 2048 rows (32 sequences of 64 tokens) of
// 128, with gamma and beta.
func BenchmarkLN(b *testing.B) {
	const rows, d = 2048, 128
	r := rand.New(rand.NewPCG(27, 28))
	x, dy, y := normals(r, rows*d, 0.5, 1), normals(r, rows*d, 0, 0.01), make([]float32, rows*d)
	gamma, beta := normals(r, d, 1, 0.5), normals(r, d, 0, 0.5)
	save, db := make([]float32, 2*rows), make([]float32, d)
	lnGo(y, save, x, gamma, beta, rows, d, 1e-5)
	for _, lv := range append(levels(), -1) {
		for _, k := range []struct {
			name   string
			f, ref func()
		}{
			{"forward", func() { ln(lv, y, save, x, gamma, beta, rows, d, 1e-5) },
				func() { lnGo(y, save, x, gamma, beta, rows, d, 1e-5) }},
			{"gradinput", func() { lnGradInput(lv, y, dy, x, save, gamma, rows, d) },
				func() { lnGradInputGo(y, dy, x, save, gamma, rows, d) }},
			{"gradgamma", func() { colSums(lv, db, dy, x, save, rows, d, false) },
				func() { colSumsGo(db, dy, x, save, rows, d, false) }},
			{"colsums", func() { colSums(lv, db, dy, nil, nil, rows, d, false) },
				func() { colSumsGo(db, dy, nil, nil, rows, d, false) }},
		} {
			f := k.f
			if lv < 0 {
				f = k.ref
			}
			b.Run(fmt.Sprintf("%s/level=%d", k.name, lv), func(b *testing.B) {
				b.SetBytes(int64(4 * rows * d))
				for b.Loop() {
					f()
				}
			})
		}
	}
}
