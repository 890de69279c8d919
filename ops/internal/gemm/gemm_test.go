package gemm

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand"
	"sync"
	"testing"
)

// naive is the reference Gemm: one dot product per element of C.
func naive[T float32 | float64](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				var av, bv T
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// problem is one Gemm call's arguments; c is the C given as input.
type problem[T float32 | float64] struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    T
	a, b, c        []T
	lda, ldb, ldc  int
}

func (p *problem[T]) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d alpha=%v beta=%v lda=%d ldb=%d ldc=%d",
		p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.beta, p.lda, p.ldb, p.ldc)
}

// newProblem makes random matrices for the given shape, with each stride
// larger than the minimum by up to pad. When beta is 0, C is NaN.
func newProblem[T float32 | float64](rng *rand.Rand, transA, transB bool, m, n, k int, alpha, beta T, pad int) *problem[T] {
	p := &problem[T]{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	ld := func(cols int) int {
		if pad == 0 {
			return cols
		}
		return cols + rng.Intn(pad+1)
	}
	fill := func(rows, cols, ld int, nan bool) []T {
		x := make([]T, (rows-1)*ld+cols)
		for i := range x {
			if nan {
				x[i] = T(math.NaN())
			} else {
				x[i] = T(rng.Float64()*2 - 1)
			}
		}
		return x
	}
	p.lda, p.ldb, p.ldc = ld(ac), ld(bc), ld(n)
	p.a = fill(ar, ac, p.lda, false)
	p.b = fill(br, bc, p.ldb, false)
	p.c = fill(m, n, p.ldc, beta == 0)
	return p
}

func (p *problem[T]) run(f func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)) []T {
	c := append([]T(nil), p.c...)
	f(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
	return c
}

// reference is the naive result of a problem and, per element of C, the
// magnitude |alpha|·Σ|A||B| + |beta·C| its rounding error scales with.
type reference[T float32 | float64] struct {
	want []T
	mag  []float64
}

func (p *problem[T]) reference() *reference[T] {
	ref := &reference[T]{want: p.run(naive[T]), mag: make([]float64, len(p.c))}
	for r := 0; r < p.m; r++ {
		for j := 0; j < p.n; j++ {
			mag := 0.0
			for q := 0; q < p.k; q++ {
				var av, bv T
				if p.transA {
					av = p.a[q*p.lda+r]
				} else {
					av = p.a[r*p.lda+q]
				}
				if p.transB {
					bv = p.b[j*p.ldb+q]
				} else {
					bv = p.b[q*p.ldb+j]
				}
				mag += math.Abs(float64(av) * float64(bv))
			}
			mag *= math.Abs(float64(p.alpha))
			if p.beta != 0 {
				mag += math.Abs(float64(p.beta) * float64(p.c[r*p.ldc+j]))
			}
			ref.mag[r*p.ldc+j] = mag
		}
	}
	return ref
}

// check compares got with the reference: element by element within tol
// relative to the magnitude, and bit for bit outside the m×n part of C (the
// padding between rows must be untouched).
func (p *problem[T]) check(t *testing.T, label string, got []T, ref *reference[T], tol float64) {
	t.Helper()
	bad := 0
	for i := range got {
		r, j := i/p.ldc, i%p.ldc
		if j >= p.n {
			if math.Float64bits(float64(got[i])) != math.Float64bits(float64(p.c[i])) {
				t.Errorf("%s %v: C[%d,%d] (padding) changed to %v", label, p, r, j, got[i])
				return
			}
			continue
		}
		d := math.Abs(float64(got[i]) - float64(ref.want[i]))
		if bound := tol * (ref.mag[i] + 1e-30); !(d <= bound) {
			t.Errorf("%s %v: C[%d,%d] = %v, want %v (|diff| %.3g, bound %.3g)", label, p, r, j, got[i], ref.want[i], d, bound)
			if bad++; bad > 5 {
				return
			}
		}
	}
}

// float32 implementations under test: Gemm, the hand-written path and every
// C kernel this CPU runs, and OpenBLAS when linked (-tags openblas).
func impls32() map[string]func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int) {
	fs := map[string]func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int){
		"Gemm":   Gemm[float32],
		"goGemm": goGemm[float32],
		"hand":   sgemmHand,
	}
	if haveOpenBLAS {
		fs["openblas"] = sgemmOpenBLAS
	}
	for l := 0; l <= cpuLevel; l++ {
		fs[fmt.Sprintf("level%d", l)] = func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
			sgemmLevel(l, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}
	}
	return fs
}

func tol32(k int) float64 { return 1e-5 * float64(k+1) }

func TestRandomSmall(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	alphas := []float64{1, -0.5, 2, 0}
	betas := []float64{0, 1, 0.3}
	for trial := 0; trial < 400; trial++ {
		m, n, k := 1+rng.Intn(33), 1+rng.Intn(33), 1+rng.Intn(33)
		tA, tB := trial&1 != 0, trial&2 != 0
		alpha, beta := alphas[rng.Intn(len(alphas))], betas[rng.Intn(len(betas))]
		pad := 0
		if trial%3 != 0 {
			pad = 5
		}
		p32 := newProblem(rng, tA, tB, m, n, k, float32(alpha), float32(beta), pad)
		ref32 := p32.reference()
		for name, f := range impls32() {
			p32.check(t, name, p32.run(f), ref32, tol32(k))
		}
		p64 := newProblem(rng, tA, tB, m, n, k, alpha, beta, pad)
		p64.check(t, "float64", p64.run(Gemm[float64]), p64.reference(), 1e-14*float64(k+1))
	}
}

// layerShapes are the shapes of the MNIST CNN's convolution and linear
// layers, forward and backward.
var layerShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"conv1_fwd", false, false, 10, 36864, 25},
	{"conv1_wgrad", false, true, 10, 25, 36864},
	{"conv2_fwd", false, false, 20, 4096, 250},
	{"conv2_wgrad", false, true, 20, 250, 4096},
	{"conv2_igrad", true, false, 250, 4096, 20},
	{"linear_fwd", false, true, 64, 50, 320},
	{"linear_dx", false, false, 64, 320, 50},
	{"linear_dw", true, false, 50, 320, 64},
	{"fc2_fwd", false, true, 64, 10, 50},
	{"fc2_dx", false, false, 64, 50, 10},
	{"fc2_dw", true, false, 10, 50, 64},
}

func TestLayerShapes(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i, s := range layerShapes {
		// Accumulate (beta 1) on every other shape.
		beta := float32(0)
		if i%2 == 1 {
			beta = 1
		}
		p := newProblem(rng, s.transA, s.transB, s.m, s.n, s.k, 1, beta, 0)
		ref := p.reference()
		for name, f := range impls32() {
			p.check(t, s.name+"/"+name, p.run(f), ref, tol32(s.k))
		}
	}
}

// TestBigStrides covers several depth and column blocks with padded strides.
func TestBigStrides(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			p := newProblem(rng, tA, tB, 131, 2100, 300, float32(0.7), float32(-1.5), 7)
			ref := p.reference()
			for name, f := range impls32() {
				p.check(t, name, p.run(f), ref, tol32(300))
			}
		}
	}
}

func TestZeroSizes(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	Gemm(false, false, 0, 2, 3, 1, nil, 3, nil, 2, 0, c, 2)
	Gemm(false, false, 2, 0, 3, 1, nil, 3, nil, 0, 0, c, 2)
	if c[0] != 1 || c[3] != 4 {
		t.Fatalf("m or n = 0 changed C: %v", c)
	}
	Gemm(false, false, 2, 2, 0, 1, nil, 0, nil, 2, 2, c, 2)
	if c[0] != 2 || c[3] != 8 {
		t.Fatalf("k = 0, beta 2: C = %v, want [2 4 6 8]", c)
	}
	c64 := []float64{math.NaN(), 1}
	Gemm(false, false, 1, 2, 0, 1, nil, 0, nil, 2, 0, c64, 2)
	if c64[0] != 0 || c64[1] != 0 {
		t.Fatalf("k = 0, beta 0: C = %v, want zeros", c64)
	}
}

func TestPanics(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	for name, f := range map[string]func(){
		"short A":   func() { Gemm(false, false, 2, 2, 3, 1, a[:5], 3, b, 2, 0, c, 2) },
		"short B":   func() { Gemm(false, true, 2, 2, 3, 1, a, 3, b[:5], 3, 0, c, 2) },
		"short C":   func() { Gemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) },
		"small lda": func() { Gemm(true, false, 2, 2, 3, 1, a, 1, b, 2, 0, c, 2) },
		"negative":  func() { Gemm(false, false, -1, 2, 3, 1, a, 3, b, 2, 0, c, 2) },
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
}

// TestDeterministic checks that repeated calls, and calls whose operands
// sit at other alignments, give bit-identical results, for Gemm, the
// hand-written path and OpenBLAS (when linked). It logs a hash of each
// implementation's results, to compare from run to run (go test -v).
func TestDeterministic(t *testing.T) {
	impls := []struct {
		name string
		f    sgemmFunc
	}{{"Gemm", Gemm[float32]}, {"hand", sgemmHand}}
	if haveOpenBLAS {
		impls = append(impls, struct {
			name string
			f    sgemmFunc
		}{"openblas", sgemmOpenBLAS})
	}
	for _, im := range impls {
		rng := rand.New(rand.NewSource(4))
		h := fnv.New64a()
		for _, s := range layerShapes {
			p := newProblem(rng, s.transA, s.transB, s.m, s.n, s.k, float32(1), float32(0.5), 0)
			first := p.run(im.f)
			for _, x := range first {
				binary.Write(h, binary.LittleEndian, math.Float32bits(x))
			}
			for off := 0; off < 4; off++ {
				a := append(make([]float32, off), p.a...)[off:]
				b := append(make([]float32, off+1), p.b...)[off+1:]
				c := append(make([]float32, off+2), p.c...)[off+2:]
				im.f(p.transA, p.transB, p.m, p.n, p.k, p.alpha, a, p.lda, b, p.ldb, p.beta, c, p.ldc)
				for i := range c {
					if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
						t.Fatalf("%s %s: run at offset %d differs at %d: %v vs %v", im.name, s.name, off, i, c[i], first[i])
					}
				}
			}
		}
		t.Logf("%s: results hash %016x", im.name, h.Sum64())
	}
}

func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, s := range layerShapes {
		p := newProblem(rng, s.transA, s.transB, s.m, s.n, s.k, float32(1), float32(0), 0)
		c := make([]float32, len(p.c))
		if n := testing.AllocsPerRun(10, func() {
			Gemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
		}); n != 0 {
			t.Errorf("float32 %s: %v allocs per call", s.name, n)
		}
	}
	p := newProblem(rng, true, true, 17, 13, 11, 1.0, 1.0, 2)
	if n := testing.AllocsPerRun(10, func() {
		Gemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, p.c, p.ldc)
	}); n != 0 {
		t.Errorf("float64: %v allocs per call", n)
	}
}

// TestConcurrent calls Gemm from several goroutines at once; each result
// must be bit-identical to the serial one.
func TestConcurrent(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	const workers, iters = 8, 20
	var probs []*problem[float32]
	var wants [][]float32
	for w := 0; w < workers; w++ {
		s := layerShapes[(w+2)%len(layerShapes)]
		if s.m*s.n*s.k > 1<<22 {
			s.m, s.n, s.k = 33+w, 300+w, 257
		}
		p := newProblem(rng, s.transA, s.transB, s.m, s.n, s.k, float32(1), float32(0.5), 3)
		probs = append(probs, p)
		wants = append(wants, p.run(Gemm[float32]))
	}
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(p *problem[float32], want []float32) {
			defer wg.Done()
			for it := 0; it < iters; it++ {
				got := p.run(Gemm[float32])
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						errs <- fmt.Sprintf("%v: iteration %d differs at %d", p, it, i)
						return
					}
				}
			}
		}(probs[w], wants[w])
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func benchShape[T float32 | float64](b *testing.B, f func(bool, bool, int, int, int, T, []T, int, []T, int, T, []T, int), tA, tB bool, m, n, k int) {
	rng := rand.New(rand.NewSource(7))
	p := newProblem(rng, tA, tB, m, n, k, T(1), T(0), 0)
	c := make([]T, len(p.c))
	b.ResetTimer()
	for b.Loop() {
		f(tA, tB, m, n, k, 1, p.a, p.lda, p.b, p.ldb, 0, c, p.ldc)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkGemm32(b *testing.B) {
	for _, s := range layerShapes {
		b.Run(s.name, func(b *testing.B) { benchShape(b, Gemm[float32], s.transA, s.transB, s.m, s.n, s.k) })
	}
}

func BenchmarkNaive32(b *testing.B) {
	s := layerShapes[2] // conv2_fwd
	b.Run(s.name, func(b *testing.B) { benchShape(b, naive[float32], s.transA, s.transB, s.m, s.n, s.k) })
}

func BenchmarkGemm64(b *testing.B) {
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			b.Run(fmt.Sprintf("64x64x64_tA=%v_tB=%v", tA, tB), func(b *testing.B) { benchShape(b, Gemm[float64], tA, tB, 64, 64, 64) })
		}
	}
}

// TestRowsMultipleOfEight covers the AVX-512 MR=8 kernel (m a multiple of 8
// but not of 10) against the reference, with m past one MC block and k past
// one KC block, both transposes.
func TestRowsMultipleOfEight(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	for _, m := range []int{8, 16, 24, 32, 64, 144, 296} {
		for _, nk := range [][2]int{{33, 17}, {784, 144}, {49, 300}} {
			for trial := 0; trial < 4; trial++ {
				tA, tB := trial&1 != 0, trial&2 != 0
				p := newProblem(rng, tA, tB, m, nk[0], nk[1], float32(1), float32(0.5), 3)
				ref := p.reference()
				for name, f := range impls32() {
					p.check(t, name, p.run(f), ref, tol32(nk[1]))
				}
			}
		}
	}
}
