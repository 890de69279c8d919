package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/ops"
)

// sgemmColMajor is a reference column-major SGEMM as cuBLAS defines it:
// C = alpha·op(A)·op(B) + beta·C, op(A) m×k, op(B) k×n, element (i, j) of
// a matrix X with leading dimension ld at X[i + j·ld].
func sgemmColMajor(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, l int) float32 {
		if transA {
			return a[l+i*lda]
		}
		return a[i+l*lda]
	}
	bt := func(l, j int) float32 {
		if transB {
			return b[j+l*ldb]
		}
		return b[l+j*ldb]
	}
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s float64
			for l := 0; l < k; l++ {
				s += float64(at(i, l)) * float64(bt(l, j))
			}
			c[i+j*ldc] = alpha*float32(s) + beta*c[i+j*ldc]
		}
	}
}

// runCall runs a mapped call with the reference GEMM, as blasHandle.gemm
// hands operands to cuBLAS.
func runCall(g gemmCall, alpha, beta float32, a, b, c []float32) {
	x, y := a, b
	if g.SwapOperands {
		x, y = b, a
	}
	for p := 0; p < max(g.Batch, 1); p++ {
		sgemmColMajor(g.TransA, g.TransB, g.M, g.N, g.K, alpha, x[int64(p)*g.StrideA:], g.LDA, y[int64(p)*g.StrideB:], g.LDB, beta, c[int64(p)*g.StrideC:], g.LDC)
	}
}

// rowMajor is the naive row-major product C = op(A)·op(B) + beta·C.
func rowMajor(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for l := 0; l < k; l++ {
				var av, bv float32
				if transA {
					av = a[l*lda+i]
				} else {
					av = a[i*lda+l]
				}
				if transB {
					bv = b[j*ldb+l]
				} else {
					bv = b[l*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			c[i*ldc+j] = float32(s) + beta*c[i*ldc+j]
		}
	}
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

func close32(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s: [%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestRowMajorGemmMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		m, n, k := 1+r.IntN(7), 1+r.IntN(7), 1+r.IntN(7)
		ta, tb := r.IntN(2) == 1, r.IntN(2) == 1
		// Leading dimensions of the stored (row-major) matrices, with
		// padding sometimes.
		lda, ldb, ldc := k, n, n+r.IntN(3)
		ar := m
		if ta {
			lda, ar = m, k
		}
		br := k
		if tb {
			ldb, br = k, n
		}
		lda += r.IntN(2)
		ldb += r.IntN(2)
		a := randSlice(r, ar*lda)
		b := randSlice(r, br*ldb)
		c0 := randSlice(r, m*ldc)
		beta := float32(r.IntN(2))
		want := slices.Clone(c0)
		rowMajor(ta, tb, m, n, k, a, lda, b, ldb, beta, want, ldc)
		got := slices.Clone(c0)
		g := rowMajorGemm(ta, tb, m, n, k, lda, ldb, ldc)
		runCall(g, 1, beta, a, b, got)
		close32(t, "gemm", got, want, 1e-5)
	}
}

func TestRowMajorGemmBatched(t *testing.T) {
	// The conv forward as a strided batch: y_n[O×P] = W[O×K]·col[:, n·P:(n+1)·P].
	r := rand.New(rand.NewPCG(3, 4))
	o, k, p, n := 3, 5, 4, 3
	l := n * p
	w := randSlice(r, o*k)
	col := randSlice(r, k*l)
	want := make([]float32, n*o*p)
	for s := 0; s < n; s++ {
		rowMajor(false, false, o, p, k, w, k, col[s*p:], l, 0, want[s*o*p:], p)
	}
	got := make([]float32, n*o*p)
	runCall(rowMajorGemmBatched(false, false, o, p, k, k, l, p, n, 0, int64(p), int64(o*p)), 1, 0, w, col, got)
	close32(t, "batched", got, want, 1e-5)
}

// TestBatchMatMulAsCuBLAS runs BatchMatMul as the CUDA device does (one
// strided batched GEMM, batchMatMulCall) against ops.Kernels32 for every
// transpose combination, two leading dimensions and a partial batch.
func TestBatchMatMulAsCuBLAS(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, h, m, k, p = 3, 2, 4, 5, 6
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			a := &ops.Attrs{TransA: ta, TransB: tb}
			xs, ys := []int{n, h, m, k}, []int{n, h, k, p}
			if ta {
				xs = []int{n, h, k, m}
			}
			if tb {
				ys = []int{n, h, p, k}
			}
			x, y := randSlice(r, n*h*m*k), randSlice(r, n*h*k*p)
			for _, live := range []int{n, n - 1} {
				lx, ly, lz := append([]int{live}, xs[1:]...), append([]int{live}, ys[1:]...), []int{live, h, m, p}
				want := make([]float32, n*h*m*p)
				ops.Kernels32[ops.BatchMatMul](&ops.Ctx[float32]{}, a, []*ops.Buf[float32]{buf(x, lx...), buf(y, ly...)}, []*ops.Buf[float32]{buf(want, lz...)})
				g, ok := batchMatMulCall(a, xs, ys, live*h*m*k)
				if !ok {
					t.Fatal("batchMatMulCall: no work")
				}
				got := make([]float32, n*h*m*p)
				runCall(g, 1, 0, x, y, got)
				close32(t, fmt.Sprintf("batch_matmul transA %v transB %v batch %d", ta, tb, live), got, want, 1e-5)
			}
			if _, ok := batchMatMulCall(a, xs, ys, 0); ok {
				t.Error("batchMatMulCall has work for an empty batch")
			}
		}
	}
}

// TestPermuteArgs: gorun_permute's dimensions and strides, padded to rank
// 6, against the permutation applied on the host.
func TestPermuteArgs(t *testing.T) {
	dims, strides, n, err := permuteArgs([]int{2, 3, 4, 5}, [ops.MaxPermRank]int8{0, 2, 1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if dims != [6]int{1, 1, 2, 4, 3, 5} || strides != [6]int{0, 0, 60, 5, 20, 1} || n != 120 {
		t.Errorf("permuteArgs = %v, %v, %d", dims, strides, n)
	}
	if _, _, _, err := permuteArgs([]int{2, 3}, [ops.MaxPermRank]int8{0, 2}); err == nil {
		t.Error("permuteArgs accepted dimension 2 of a rank-2 input")
	}
}

// TestEmbeddingRowsPer: the buckets of gorun_embedding_grad cover every
// row, with about embeddingThreads threads when there are rows enough.
func TestEmbeddingRowsPer(t *testing.T) {
	for _, c := range [][2]int{{1, 1}, {10, 1}, {50257, 768}, {1000, 64}, {3, 100000}, {0, 8}} {
		v, d := c[0], c[1]
		per := embeddingRowsPer(v, d)
		buckets := (v + per - 1) / per
		if per < 1 || buckets*per < v || (v > 0 && (buckets-1)*per >= v) {
			t.Errorf("embeddingRowsPer(%d, %d) = %d: %d buckets", v, d, per, buckets)
		}
		if buckets*d > 2*embeddingThreads && buckets > 1 {
			t.Errorf("embeddingRowsPer(%d, %d) = %d: %d threads", v, d, per, buckets*d)
		}
	}
}

func buf(data []float32, shape ...int) *ops.Buf[float32] {
	return &ops.Buf[float32]{Data: data, Shape: shape}
}

// TestLinearAsCuBLAS runs Linear and its gradients the way the CUDA
// device does (rowMajorGemm, then a bias add) against ops.Kernels32.
func TestLinearAsCuBLAS(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	n, i, o := 4, 6, 3
	x, w, b := randSlice(r, n*i), randSlice(r, o*i), randSlice(r, o)
	dy := randSlice(r, n*o)
	ctx := &ops.Ctx[float32]{}

	want := make([]float32, n*o)
	ops.Kernels32[ops.Linear](ctx, &ops.Attrs{}, []*ops.Buf[float32]{buf(x, n, i), buf(w, o, i), buf(b, o)}, []*ops.Buf[float32]{buf(want, n, o)})
	got := make([]float32, n*o)
	runCall(rowMajorGemm(false, true, n, o, i, i, i, o), 1, 0, x, w, got)
	for r := 0; r < n; r++ {
		for j := 0; j < o; j++ {
			got[r*o+j] += b[j]
		}
	}
	close32(t, "linear", got, want, 1e-5)

	wantDx := make([]float32, n*i)
	ops.Kernels32[ops.LinearGradInput](ctx, &ops.Attrs{}, []*ops.Buf[float32]{buf(dy, n, o), buf(w, o, i)}, []*ops.Buf[float32]{buf(wantDx, n, i)})
	gotDx := make([]float32, n*i)
	runCall(rowMajorGemm(false, false, n, i, o, o, i, i), 1, 0, dy, w, gotDx)
	close32(t, "linear_grad_input", gotDx, wantDx, 1e-5)

	for _, acc := range []bool{false, true} {
		dw0 := randSlice(r, o*i)
		wantDw := slices.Clone(dw0)
		ops.Kernels32[ops.LinearGradWeight](ctx, &ops.Attrs{Accumulate: acc}, []*ops.Buf[float32]{buf(dy, n, o), buf(x, n, i)}, []*ops.Buf[float32]{buf(wantDw, o, i)})
		gotDw := slices.Clone(dw0)
		runCall(rowMajorGemm(true, false, o, i, n, o, i, i), 1, f32(acc), dy, x, gotDw)
		close32(t, "linear_grad_weight", gotDw, wantDw, 1e-5)
	}
}

// TestConvGemmsAsCuBLAS checks the three convolution GEMMs' mapping
// (forward, grad input, grad weight) on an [O×K]·[K×L] problem against the
// row-major products ops/conv.go computes.
func TestConvGemmsAsCuBLAS(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	o, k, l := 4, 9, 10
	w, col, dyT := randSlice(r, o*k), randSlice(r, k*l), randSlice(r, o*l)

	want := make([]float32, o*l)
	rowMajor(false, false, o, l, k, w, k, col, l, 0, want, l)
	got := make([]float32, o*l)
	runCall(rowMajorGemm(false, false, o, l, k, k, l, l), 1, 0, w, col, got)
	close32(t, "conv forward", got, want, 1e-5)

	wantDcol := make([]float32, k*l)
	rowMajor(true, false, k, l, o, w, k, dyT, l, 0, wantDcol, l)
	gotDcol := make([]float32, k*l)
	runCall(rowMajorGemm(true, false, k, l, o, k, l, l), 1, 0, w, dyT, gotDcol)
	close32(t, "conv grad input", gotDcol, wantDcol, 1e-5)

	wantDw := make([]float32, o*k)
	rowMajor(false, true, o, k, l, dyT, l, col, l, 0, wantDw, k)
	gotDw := make([]float32, o*k)
	runCall(rowMajorGemm(false, true, o, k, l, l, l, k), 1, 0, dyT, col, gotDw)
	close32(t, "conv grad weight", gotDw, wantDw, 1e-5)
}

func TestGeometry(t *testing.T) {
	for _, c := range []struct{ n, grid int }{{0, 1}, {1, 1}, {256, 1}, {257, 2}, {1 << 30, maxGrid}} {
		g := elementwise(c.n)
		if g.Grid != c.grid || g.Block != 256 || g.Shared != 0 {
			t.Errorf("elementwise(%d) = %+v, want grid %d block 256", c.n, g, c.grid)
		}
		if g.Grid*g.Block < min(c.n, maxGrid*256) {
			t.Errorf("elementwise(%d) covers %d threads", c.n, g.Grid*g.Block)
		}
	}
	if g := oneBlock(); g != (geometry{Grid: 1, Block: 256}) {
		t.Errorf("oneBlock() = %+v", g)
	}
	if g := blockPer(10); g != (geometry{Grid: 10, Block: 256}) {
		t.Errorf("blockPer(10) = %+v", g)
	}
	if !blockPer(0).empty() || elementwise(0).empty() {
		t.Error("blockPer(0) must be empty and elementwise(0) not")
	}
}

func TestLibrarySearch(t *testing.T) {
	got := librarySearch("cublas", "/opt/x/libcublas.so.12")
	want := []string{"/opt/x/libcublas.so.12", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	if !slices.Equal(got, want) {
		t.Errorf("librarySearch = %q, want %q", got, want)
	}
	if got := librarySearch("nccl", ""); !slices.Equal(got, []string{"libnccl.so.2", "libnccl.so"}) {
		t.Errorf("librarySearch(nccl) = %q", got)
	}
	// The override that is a default soname is tried once.
	if got := librarySearch("nccl", "libnccl.so.2"); !slices.Equal(got, []string{"libnccl.so.2", "libnccl.so"}) {
		t.Errorf("librarySearch(nccl, libnccl.so.2) = %q", got)
	}
}

func TestOpenFirst(t *testing.T) {
	var tried []string
	open := func(name string) (int, string) {
		tried = append(tried, name)
		if name == "libcublas.so.11" {
			return 7, ""
		}
		return 0, name + ": cannot open shared object file: No such file or directory"
	}
	h, name, err := openFirst("cublas", librarySearch("cublas", ""), open)
	if err != nil || h != 7 || name != "libcublas.so.11" {
		t.Fatalf("openFirst = %d, %q, %v", h, name, err)
	}
	if !slices.Equal(tried, []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}) {
		t.Errorf("tried %q", tried)
	}
	none := func(name string) (int, string) { return 0, name + ": cannot open shared object file" }
	_, _, err = openFirst("cublas", librarySearch("cublas", "/x/libcublas.so"), none)
	if err == nil {
		t.Fatal("openFirst found a library in none")
	}
	msg := err.Error()
	for _, s := range []string{"cannot load cuBLAS", "/x/libcublas.so (/x/libcublas.so: cannot open shared object file)",
		"libcublas.so.13 (", "libcublas.so.12 (", "libcublas.so.11 (", "[cuda] cublas", "LD_LIBRARY_PATH"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if e := loadError("nccl", nil); !strings.Contains(e.Error(), "NCCL") || errors.Unwrap(e) != nil {
		t.Errorf("loadError(nccl) = %v", e)
	}
}

func TestGraphKey(t *testing.T) {
	periods := stepPeriods([]int{0, 4, 0, 2, 4})
	if !slices.Equal(periods, []int{2, 4}) {
		t.Fatalf("stepPeriods = %v", periods)
	}
	k := func(batch int, first, last, update bool, step int) graphKey {
		return newGraphKey(batch, first, last, update, step, periods)
	}
	// Steps 1 and 3 run the same steps; 2 adds the period-2 steps, 4 both.
	if k(64, true, true, false, 1) != k(64, true, true, false, 3) {
		t.Error("steps 1 and 3 differ")
	}
	if k(64, true, true, false, 2) == k(64, true, true, false, 1) || k(64, true, true, false, 4) == k(64, true, true, false, 2) {
		t.Error("period steps do not change the key")
	}
	// Not last: periods do not matter (they are sync and update steps).
	if k(64, true, false, false, 2) != k(64, true, false, false, 1) {
		t.Error("a micro-batch that is not the last depends on the step")
	}
	if k(64, true, true, false, 1) == k(32, true, true, false, 1) || k(64, true, true, false, 1) == k(64, false, true, false, 1) ||
		k(64, true, true, false, 1) == k(64, true, false, false, 1) || k(64, true, true, false, 1) == k(64, true, true, true, 1) {
		t.Error("batch, first, last and update must each change the key")
	}
	// The update phase does not depend on first.
	if k(64, true, false, true, 1) != k(64, false, true, true, 1) {
		t.Error("the update key depends on first or last")
	}
	if s := k(64, true, true, false, 4).String(); s != "batch 64, first, last, every 2,4" {
		t.Errorf("String() = %q", s)
	}
}

func TestArgResolve(t *testing.T) {
	v := &dynValues{lossScale: 0.5, lrScale: 0.25, step: 7, seed: 1 << 40, offset: 1000}
	for _, c := range []struct {
		a    arg
		want uint64
	}{
		{intArg(-1), 0xffffffff},
		{floatArg(1.5), uint64(math.Float32bits(1.5))},
		{ptrArg(0xdeadbeef00), 0xdeadbeef00},
		{lossScaleArg(), uint64(math.Float32bits(0.5))},
		{stepArg(), 7},
		{firstStepArg(), 2},
		{seedArg(), 1 << 40},
		{offsetArg(24), 1024},
		{boolArg(true), 1},
		{lrArg(0.1), uint64(math.Float32bits(0.025))}, // the schedule's scale
	} {
		if got := c.a.resolve(v); got != c.want {
			t.Errorf("%+v resolves to %#x, want %#x", c.a, got, c.want)
		}
	}
	if got := lrArg(0.1).resolve(&dynValues{}); got != uint64(math.Float32bits(0.1)) {
		t.Errorf("lrArg without a scale resolves to %#x, want the optimizer's 0.1", got)
	}
	if err := checkArgs(kReLU, []arg{ptrArg(0), ptrArg(0), intArg(1)}); err != nil {
		t.Error(err)
	}
	if err := checkArgs(kReLU, []arg{ptrArg(0), intArg(1), intArg(1)}); err == nil {
		t.Error("checkArgs accepted an int for a pointer")
	}
	if err := checkArgs(kReLU, []arg{ptrArg(0), ptrArg(0)}); err == nil {
		t.Error("checkArgs accepted too few arguments")
	}
}

// TestKernelArgs: every kernel's parameters fit the argument block a
// launch fills (maxArgs slots). kernelSigs itself is generated from
// kernels.h (cuda/kernels/internal/genkernels checks it is current).
func TestKernelArgs(t *testing.T) {
	for k := kernelID(0); k < numKernels; k++ {
		if n := len(kernelSigs[k].args); n > maxArgs {
			t.Errorf("%s takes %d arguments, more than maxArgs (%d)", k, n, maxArgs)
		}
	}
	if got := kernelID(numKernels).String(); got != fmt.Sprintf("kernel(%d)", numKernels) {
		t.Errorf("an id past the kernels prints as %q", got)
	}
}

// TestCheckWork: a convolution whose program has too little scratch is
// refused at Load instead of faulting on the GPU.
func TestCheckWork(t *testing.T) {
	x := &engine.Buffer{Name: "x", Max: []int{4, 3, 9, 9}}
	w := &engine.Buffer{Name: "w", Max: []int{5, 3, 3, 3}}
	y := &engine.Buffer{Name: "y", Max: []int{4, 5, 7, 7}}
	st := &engine.Step{Kind: engine.KernelStep, Op: ops.Conv2D, In: []*engine.Buffer{x, w, nil}, Out: []*engine.Buffer{y}}
	need := ops.Workspace(ops.Conv2D, &st.Attrs, [][]int{x.Max, w.Max, nil}, [][]int{y.Max})
	if need == 0 {
		t.Fatal("conv2d needs no workspace")
	}
	prog := &engine.Program{}
	if err := checkWork(prog, st); err == nil {
		t.Error("a conv2d without Work passed")
	}
	prog.Work = &engine.Buffer{Name: "scratch", Max: []int{need - 1}}
	if err := checkWork(prog, st); err == nil {
		t.Error("a conv2d with too little Work passed")
	}
	prog.Work.Max = []int{need}
	if err := checkWork(prog, st); err != nil {
		t.Error(err)
	}
	relu := &engine.Step{Kind: engine.KernelStep, Op: ops.ReLU, In: []*engine.Buffer{x}, Out: []*engine.Buffer{x}}
	if err := checkWork(&engine.Program{}, relu); err != nil {
		t.Error(err)
	}
}

// TestSplitSum checks the split sum's chunking: one chunk up to sumChunk
// elements, chunks of sumChunk to 4·sumChunk elements below the cap, at
// most maxSplit of them, covering every element with no empty chunk.
func TestSplitSum(t *testing.T) {
	for _, total := range []int{0, 1, 255, sumChunk, sumChunk + 1, 24 * 24 * 512, 3 * sumChunk, maxSplit * sumChunk,
		maxSplit*sumChunk + 1, 1 << 28, 1<<31 - 1} {
		s, chunk := splitSum(total)
		if s < 1 || s > maxSplit || s*chunk < total || (total > 0 && (s-1)*chunk >= total) {
			t.Errorf("splitSum(%d) = %d chunks of %d", total, s, chunk)
		}
		if (total <= sumChunk) != (s == 1) {
			t.Errorf("splitSum(%d) = %d chunks: want one exactly up to %d elements", total, s, sumChunk)
		}
		if s > 1 && s < maxSplit && (chunk > 4*sumChunk || chunk < sumChunk/2) {
			t.Errorf("splitSum(%d) = %d chunks of %d, want about %d", total, s, chunk, sumChunk)
		}
		if want := map[bool]int{true: 0, false: 7 * s}[s == 1]; splitPartials(7, total) != want {
			t.Errorf("splitPartials(7, %d) = %d, want %d", total, splitPartials(7, total), want)
		}
	}
	// conv1 of the MNIST Net at batch 512: 10 channels of 24·24·512.
	if s, _ := splitSum(24 * 24 * 512); s < 16 {
		t.Errorf("conv1's bias gradient gets %d chunks per channel, want at least 16", s)
	}
}

// TestPartialsNeeded: the scratch Load reserves covers the largest bias
// gradient (conv and linear, where the batch alone is cut) and the
// finiteness check over the largest float32 buffer.
func TestPartialsNeeded(t *testing.T) {
	dyConv := &engine.Buffer{Name: "dy", Batched: true, Max: []int{512, 10, 24, 24}}
	dyLin := &engine.Buffer{Name: "dy2", Batched: true, Max: []int{100000, 3}}
	db := &engine.Buffer{Name: "db", Max: []int{10}}
	flat := &engine.Buffer{Name: "grads", Max: []int{300 * sumChunk}}
	labels := &engine.Buffer{Name: "labels", DType: engine.Int32, Max: []int{1000 * maxSplit * sumChunk}}
	bias := func(op ops.Op, dy *engine.Buffer) *engine.Step {
		return &engine.Step{Kind: engine.KernelStep, Op: op, In: []*engine.Buffer{dy}, Out: []*engine.Buffer{db}}
	}
	xBN := &engine.Buffer{Name: "x", Batched: true, Max: []int{4, 6, 3, 3}}
	bnStats := &engine.Buffer{Name: "stats", Max: []int{3, 10}}
	bn := func(op ops.Op, x, out *engine.Buffer) *engine.Step {
		return &engine.Step{Kind: engine.KernelStep, Op: op, In: []*engine.Buffer{x}, Out: []*engine.Buffer{out}}
	}
	convS, _ := splitSum(512 * 24 * 24)
	linS, _ := splitSum(100000)
	for _, c := range []struct {
		prog *engine.Program
		want int
	}{
		{&engine.Program{}, 0},
		{&engine.Program{Buffers: []*engine.Buffer{db, labels}}, 0},
		{&engine.Program{Buffers: []*engine.Buffer{dyConv, db}, Steps: []*engine.Step{bias(ops.Conv2DGradBias, dyConv)}}, 10 * convS},
		{&engine.Program{Buffers: []*engine.Buffer{dyLin, db}, Eval: []*engine.Step{bias(ops.LinearGradBias, dyLin)}}, 3 * linS},
		{&engine.Program{Buffers: []*engine.Buffer{flat, dyConv}}, maxSplit},
		// Batch norm: its sums take two partials per chunk, one chunk
		// included; its parameters 4·C floats.
		{&engine.Program{Buffers: []*engine.Buffer{dyConv, db}, Steps: []*engine.Step{bn(ops.BatchNormStats, dyConv, bnStats)}}, 2 * 10 * convS},
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Eval: []*engine.Step{bn(ops.BatchNormGradStats, xBN, bnStats)}}, 2 * 6},
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Steps: []*engine.Step{bn(ops.BatchNormNorm, xBN, xBN)}}, 2 * 6},
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Steps: []*engine.Step{bn(ops.BatchNormEval, xBN, xBN)}}, 2 * 6},
		// Layer norm's gamma: two partials per chunk of its 4·6·3 rows,
		// for each of its 3 columns; beta's split sum needs none (one
		// chunk); clipping 300 chunks' worth of gradients: two partials
		// for each of maxSplit chunks.
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Steps: []*engine.Step{bn(ops.LayerNormGradGamma, xBN, db)}}, 2 * 3},
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Steps: []*engine.Step{bn(ops.LayerNormGradBeta, xBN, db)}}, 0},
		{&engine.Program{Buffers: []*engine.Buffer{db}, Steps: []*engine.Step{{Kind: engine.KernelStep, Op: ops.ClipGradNorm, In: []*engine.Buffer{flat}}}}, 2 * maxSplit},
		// The fused classifier: a loss term per row of the logits
		// [4, 6, 3, 3] (72 rows of 3).
		{&engine.Program{Buffers: []*engine.Buffer{xBN, db}, Steps: []*engine.Step{bn(ops.CrossEntropyFused, xBN, db)}}, 4 * 6 * 3},
	} {
		if got := partialsNeeded(c.prog); got != c.want {
			t.Errorf("partialsNeeded(%d buffers, %d steps) = %d, want %d", len(c.prog.Buffers), len(c.prog.Steps)+len(c.prog.Eval), got, c.want)
		}
	}
}
