//go:build cgo

package hostcheck

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/ops"
)

// The kernels run here on the CPU and are compared with gorun/ops' float32
// kernels on random inputs of odd sizes. Buffers are sized for more
// samples than are live (a partial batch) and start as NaN, so that missed
// writes and writes past the live part show.

// TestSourcesStamp fails when the kernel sources changed after
// sources.h was written: Go would then test a stale build of them.
func TestSourcesStamp(t *testing.T) {
	var names []string
	for _, pat := range []string{"*.cu", "*.cuh", "*.h"} {
		m, err := filepath.Glob(filepath.Join("..", pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			names = append(names, filepath.Base(f))
		}
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", n))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\n", n)
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if built := SourcesSHA256(); sum != built {
		t.Fatalf("cuda/kernels sources changed since hostcheck/sources.h was written (sha256 %s, built from %s): run `make kernels` (or cuda/kernels/stamp.sh without nvcc)", sum, built)
	}
	// build.sh stamps each PTX file with the same sum: a PTX file not
	// rebuilt after an edit shows here, without nvcc.
	want := "// gorun kernel sources sha256 " + sum
	for _, f := range []string{"gorun_sm80.ptx", "gorun_sm90.ptx"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(string(b), "\n"); first != want {
			t.Errorf("cuda/kernels/%s starts %q, want %q: the sources changed since it was built; run `make kernels` (needs nvcc 11.8) and commit the PTX", f, first, want)
		}
	}
}

// ---- helpers ----

func newRand(a uint64) *rand.Rand { return rand.New(rand.NewPCG(a, 0x5eed)) }

// randf returns capacity elements, the first n in (-1, 1), the rest NaN.
func randf(r *rand.Rand, n, capacity int) []float32 {
	s := nans(capacity)
	for i := range n {
		s[i] = float32(2*r.Float64() - 1)
	}
	return s
}

func nans(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

func fbuf(data []float32, shape ...int) *ops.Buf[float32] {
	return &ops.Buf[float32]{Data: data, Shape: shape}
}

func ibuf(idx []int32, shape ...int) *ops.Buf[float32] {
	return &ops.Buf[float32]{Idx: idx, Shape: shape}
}

func run(op ops.Op, a *ops.Attrs, c *ops.Ctx[float32], in []*ops.Buf[float32], out ...*ops.Buf[float32]) {
	if a == nil {
		a = &ops.Attrs{}
	}
	if c == nil {
		c = &ops.Ctx[float32]{LossScale: 1, Step: 1}
	}
	ops.Kernels32[op](c, a, in, out)
}

func isNaN(v float32) bool { return v != v }

// b2i is a flag as the kernels take it: 1 or 0.
func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// checkClose compares the first n elements: |got-want| <= 1e-5·max(|want|,
// 1), NaN matching NaN.
func checkClose(t *testing.T, what string, got, want []float32, n int) {
	t.Helper()
	for i := range n {
		g, w := float64(got[i]), float64(want[i])
		if isNaN(got[i]) && isNaN(want[i]) || g == w { // infinities too
			continue
		}
		if !(math.Abs(g-w) <= 1e-5*math.Max(math.Abs(w), 1)) {
			t.Errorf("%s: element %d = %v, want %v (of %d)", what, i, g, w, n)
			return
		}
	}
}

// checkExact compares the first n elements bit for bit (any NaN matching
// any NaN).
func checkExact(t *testing.T, what string, got, want []float32, n int) {
	t.Helper()
	for i := range n {
		if isNaN(got[i]) && isNaN(want[i]) {
			continue
		}
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: element %d = %v, want %v (of %d)", what, i, got[i], want[i], n)
			return
		}
	}
}

// checkTail fails unless s[n:] is still all NaN.
func checkTail(t *testing.T, what string, s []float32, n int) {
	t.Helper()
	for i := n; i < len(s); i++ {
		if !isNaN(s[i]) {
			t.Errorf("%s: element %d past the live %d written: %v", what, i, n, s[i])
			return
		}
	}
}

// geoms returns ELEMENTWISE(n) and odd geometries that the grid-stride
// kernels must handle as well.
func geoms(n int) []Geom {
	return []Geom{Elementwise(n), {1, 1}, {1, 32}, {3, 64}}
}

// gemm is a plain reference C[m×n] = op(A)·op(B) (row-major, sums in
// float64), standing in for cuBLAS.
func gemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var av, bv float32
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
				s += float64(av) * float64(bv)
			}
			c[i*ldc+j] = float32(s)
		}
	}
}

// ---- elementwise ----

func TestElementwise(t *testing.T) {
	r := newRand(1)
	for _, n := range []int{1, 7, 300, 1025} {
		capacity := n + 5
		x := randf(r, n, capacity)
		if n > 4 {
			x[1], x[2], x[3], x[4] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0
		}
		b := randf(r, n, capacity)
		dy := randf(r, n, capacity)
		for _, g := range geoms(n) {
			name := fmt.Sprintf("n=%d geom=%v", n, g)
			want, got := nans(capacity), nans(capacity)
			run(ops.ReLU, nil, nil, []*ops.Buf[float32]{fbuf(x, n)}, fbuf(want, n))
			ReLU(g, x, got, n)
			checkExact(t, "relu "+name, got, want, n)
			checkTail(t, "relu "+name, got, n)
			inplace := slices.Clone(x)
			ReLU(g, inplace, inplace, n)
			checkExact(t, "relu in place "+name, inplace, want, n)

			y := want
			want, got = nans(capacity), nans(capacity)
			run(ops.ReLUGrad, nil, nil, []*ops.Buf[float32]{fbuf(dy, n), fbuf(y, n)}, fbuf(want, n))
			ReLUGrad(g, dy, nil, y, got, n)
			checkExact(t, "relu_grad "+name, got, want, n)
			checkTail(t, "relu_grad "+name, got, n)
			// with a second gradient (x's values), as the engine fuses Add in
			want, got = nans(capacity), nans(capacity)
			run(ops.ReLUGrad, nil, nil, []*ops.Buf[float32]{fbuf(dy, n), fbuf(y, n), fbuf(x, n)}, fbuf(want, n))
			ReLUGrad(g, dy, x, y, got, n)
			checkExact(t, "relu_grad of a sum "+name, got, want, n)
			checkTail(t, "relu_grad of a sum "+name, got, n)
			over := slices.Clone(x)
			ReLUGrad(g, dy, over, y, over, n)
			checkExact(t, "relu_grad of a sum in place "+name, over, want, n)

			got = nans(capacity)
			Copy(g, x, got, n)
			checkExact(t, "copy "+name, got, x, n)
			checkTail(t, "copy "+name, got, n)

			got = nans(capacity)
			Fill(g, got, n, 2.5)
			for i := range n {
				if got[i] != 2.5 {
					t.Fatalf("fill %s: element %d = %v", name, i, got[i])
				}
			}
			checkTail(t, "fill "+name, got, n)

			got = slices.Clone(b)
			Scale(g, got, n, -0.3)
			want = slices.Clone(b)
			for i := range n {
				want[i] *= -0.3
			}
			checkExact(t, "scale "+name, got, want, n)

			got = slices.Clone(b)
			Accumulate(g, got, dy, n)
			want = slices.Clone(b)
			for i := range n {
				want[i] += dy[i]
			}
			checkExact(t, "accumulate "+name, got, want, n)

			got = slices.Clone(b)
			Axpy(g, got, dy, n, 0.7)
			want = slices.Clone(b)
			for i := range n {
				want[i] = float32(math.FMA(float64(float32(0.7)), float64(dy[i]), float64(b[i])))
			}
			checkClose(t, "axpy "+name, got, want, n)
		}
	}
}

// TestUnaryBinary checks gorun_unary and gorun_binary op by op against
// ops (Sigmoid, Tanh, LeakyReLU, Scale, GELU, SiLU; Add, Sub, Mul,
// SigmoidGrad, TanhGrad, LeakyReLUGrad, GELUGrad, SiLUGrad) with NaN, ±Inf
// and -0 among the inputs, out of place and in place (out = a and out =
// b), under several geometries, and with n = 0. Exact but for the ops
// built on exp, erf and tanh (the C library's and Go's may differ in the
// last bit).
func TestUnaryBinary(t *testing.T) {
	r := newRand(16)
	slope, alpha := f32(0.01), f32(-1.7)
	unary := []struct {
		name  string
		op    ops.Op
		code  int
		alpha float64
		exact bool
	}{
		{"sigmoid", ops.Sigmoid, UnarySigmoid, 0, false},
		{"tanh", ops.Tanh, UnaryTanh, 0, false},
		{"leaky_relu", ops.LeakyReLU, UnaryLeakyReLU, slope, true},
		{"leaky_relu slope 0", ops.LeakyReLU, UnaryLeakyReLU, 0, true},
		{"scale", ops.Scale, UnaryScale, alpha, true},
		{"gelu", ops.GELU, UnaryGELU, 0, false},
		{"gelu tanh", ops.GELU, UnaryGELUTanh, 0, false},
		{"silu", ops.SiLU, UnarySilu, 0, false},
	}
	binary := []struct {
		name string
		op   ops.Op
		code int
	}{
		{"add", ops.Add, BinaryAdd},
		{"sub", ops.Sub, BinarySub},
		{"mul", ops.Mul, BinaryMul},
		{"sigmoid_grad", ops.SigmoidGrad, BinarySigmoidGrad},
		{"tanh_grad", ops.TanhGrad, BinaryTanhGrad},
		{"leaky_relu_grad", ops.LeakyReLUGrad, BinaryLeakyReLUGrad},
		{"gelu_grad", ops.GELUGrad, BinaryGELUGrad},
		{"gelu_grad tanh", ops.GELUGrad, BinaryGELUTanhGrad},
		{"silu_grad", ops.SiLUGrad, BinarySiluGrad},
	}
	check := func(exact bool, what string, got, want []float32, n int) {
		t.Helper()
		if exact {
			checkExact(t, what, got, want, n)
		} else {
			checkClose(t, what, got, want, n)
		}
	}
	for _, n := range []int{0, 1, 7, 300, 1025} {
		capacity := n + 5
		a, b := randf(r, n, capacity), randf(r, n, capacity)
		for i := range n {
			a[i] *= 12 // sigmoid and tanh near saturation too
		}
		specials := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.Copysign(0, -1)), 0}
		for j, v := range specials {
			if i := 2*j + 1; i < n {
				a[i] = v
			}
			if i := 3*j + 2; i < n {
				b[i] = v
			}
		}
		for _, g := range geoms(n) {
			name := fmt.Sprintf("n=%d geom=%v", n, g)
			for _, u := range unary {
				attrs := &ops.Attrs{NegativeSlope: u.alpha, Alpha: u.alpha, Approximate: u.code == UnaryGELUTanh}
				want, got := nans(capacity), nans(capacity)
				run(u.op, attrs, nil, []*ops.Buf[float32]{fbuf(a, n)}, fbuf(want, n))
				Unary(g, a, got, n, u.code, float32(u.alpha))
				check(u.exact, u.name+" "+name, got, want, n)
				checkTail(t, u.name+" "+name, got, n)
				inplace := slices.Clone(a)
				Unary(g, inplace, inplace, n, u.code, float32(u.alpha))
				check(u.exact, u.name+" in place "+name, inplace, want, n)
			}
			for _, bo := range binary {
				attrs := &ops.Attrs{NegativeSlope: slope, Approximate: bo.code == BinaryGELUTanhGrad}
				// GELU's and SiLU's derivatives use erf, exp and tanh: the C
				// library's and Go's may differ in the last bit.
				exact := bo.op != ops.GELUGrad && bo.op != ops.SiLUGrad
				want, got := nans(capacity), nans(capacity)
				run(bo.op, attrs, nil, []*ops.Buf[float32]{fbuf(a, n), fbuf(b, n)}, fbuf(want, n))
				Binary(g, a, b, got, n, bo.code, float32(slope))
				check(exact, bo.name+" "+name, got, want, n)
				checkTail(t, bo.name+" "+name, got, n)
				inA, inB := slices.Clone(a), slices.Clone(b)
				Binary(g, inA, b, inA, n, bo.code, float32(slope))
				check(exact, bo.name+" in place of a "+name, inA, want, n)
				Binary(g, a, inB, inB, n, bo.code, float32(slope))
				check(exact, bo.name+" in place of b "+name, inB, want, n)
			}
		}
	}
}

// ---- dropout ----

func TestDropout(t *testing.T) {
	r := newRand(2)
	const n = 100003
	const p = float32(0.3)
	x := randf(r, n, n+3)
	y, mask := nans(n+3), nans(n+3)
	Dropout(Elementwise(n), x, y, mask, n, p, 42, 0)
	scale := float32(1) / float32(1-float64(p))
	zeros := 0
	for i := range n {
		switch mask[i] {
		case 0:
			zeros++
		case scale:
		default:
			t.Fatalf("mask[%d] = %v, want 0 or %v", i, mask[i], scale)
		}
		if y[i] != x[i]*mask[i] {
			t.Fatalf("y[%d] = %v, want %v·%v", i, y[i], x[i], mask[i])
		}
	}
	checkTail(t, "dropout y", y, n)
	checkTail(t, "dropout mask", mask, n)
	rate, sd := float64(zeros)/n, math.Sqrt(float64(p)*(1-float64(p))/n)
	if math.Abs(rate-float64(p)) > 5*sd {
		t.Errorf("dropout rate %v, want %v ± %v", rate, p, 5*sd)
	}

	// Reproducible from (seed, offset), whatever the geometry.
	y2, mask2 := nans(n), nans(n)
	Dropout(Geom{3, 64}, x, y2, mask2, n, p, 42, 0)
	checkExact(t, "dropout again", mask2, mask, n)
	checkExact(t, "dropout again y", y2, y, n)
	// Offset k continues the same stream.
	y3, mask3 := nans(1000), nans(1000)
	Dropout(Elementwise(1000), x[500:], y3, mask3, 1000, p, 42, 500)
	checkExact(t, "dropout offset 500", mask3, mask[500:], 1000)
	// Another seed draws another mask; another offset too.
	for _, so := range [][2]uint64{{43, 0}, {42, 1}} {
		Dropout(Elementwise(n), x, y2, mask2, n, p, so[0], so[1])
		same := 0
		for i := range n {
			if mask2[i] == mask[i] {
				same++
			}
		}
		// Independent masks agree on about p²+(1-p)² = 58% of elements.
		if frac := float64(same) / n; frac > 0.65 {
			t.Errorf("seed %d offset %d: mask agrees with seed 42 offset 0 on %.2f of elements", so[0], so[1], frac)
		}
	}

	// p = 0 keeps everything (evaluation), p = 1 drops everything.
	Dropout(Elementwise(n), x, y2, mask2, n, 0, 42, 0)
	for i := range n {
		if mask2[i] != 1 || y2[i] != x[i] {
			t.Fatalf("p=0: mask[%d] = %v, y = %v, x = %v", i, mask2[i], y2[i], x[i])
		}
	}
	Dropout(Elementwise(n), x, y2, mask2, n, 1, 42, 0)
	for i := range n {
		if mask2[i] != 0 || y2[i] != 0 {
			t.Fatalf("p=1: mask[%d] = %v, y = %v", i, mask2[i], y2[i])
		}
	}

	// In place, and the gradient against ops.
	inplace := slices.Clone(x)
	Dropout(Elementwise(n), inplace, inplace, mask2, n, p, 42, 0)
	checkExact(t, "dropout in place", inplace, y, n)
	dy := randf(r, n, n+3)
	want, got := nans(n+3), nans(n+3)
	run(ops.DropoutGrad, nil, nil, []*ops.Buf[float32]{fbuf(dy, n), fbuf(mask, n)}, fbuf(want, n))
	DropoutGrad(Geom{2, 32}, dy, mask, got, n)
	checkExact(t, "dropout_grad", got, want, n)
	checkTail(t, "dropout_grad", got, n)
}

func TestDropout2D(t *testing.T) {
	r := newRand(3)
	for _, c := range []struct{ n, c, hw, capN int }{{1, 1, 25, 2}, {3, 3, 45, 5}, {7, 3, 81, 7}, {20000, 1, 1, 20000}} {
		planes, capPlanes := c.n*c.c, c.capN*c.c
		const p = float32(0.4)
		x := randf(r, planes*c.hw, capPlanes*c.hw)
		y, mask := nans(capPlanes*c.hw), nans(capPlanes)
		Dropout2D(Elementwise(planes*c.hw), x, y, mask, planes, c.hw, p, 7, 1234)
		// The plane masks are the draws dropout makes for the same
		// (seed, offset).
		want1, mask1 := nans(planes), nans(planes)
		Dropout(Elementwise(planes), make([]float32, planes), want1, mask1, planes, p, 7, 1234)
		checkExact(t, "dropout2d mask", mask, mask1, planes)
		checkTail(t, "dropout2d mask", mask, planes)
		checkTail(t, "dropout2d y", y, planes*c.hw)
		for j := range planes {
			for k := range c.hw {
				if i := j*c.hw + k; y[i] != x[i]*mask[j] {
					t.Fatalf("dropout2d %v: y[%d] = %v, want %v·%v", c, i, y[i], x[i], mask[j])
				}
			}
		}
		y2, mask2 := nans(planes*c.hw), nans(planes)
		Dropout2D(Geom{1, 32}, x, y2, mask2, planes, c.hw, p, 7, 1234)
		checkExact(t, "dropout2d again", mask2, mask, planes)
		checkExact(t, "dropout2d again y", y2, y, planes*c.hw)
		if planes >= 10000 {
			zeros := 0
			for _, m := range mask[:planes] {
				if m == 0 {
					zeros++
				}
			}
			rate, sd := float64(zeros)/float64(planes), math.Sqrt(float64(p)*(1-float64(p))/float64(planes))
			if math.Abs(rate-float64(p)) > 5*sd {
				t.Errorf("dropout2d rate %v, want %v ± %v", rate, p, 5*sd)
			}
		}
		dy := randf(r, planes*c.hw, capPlanes*c.hw)
		want, got := nans(capPlanes*c.hw), nans(capPlanes*c.hw)
		shape := []int{c.n, c.c, c.hw, 1}
		run(ops.Dropout2DGrad, nil, nil, []*ops.Buf[float32]{fbuf(dy, shape...), fbuf(mask, c.n, c.c)}, fbuf(want, shape...))
		Dropout2DGrad(Elementwise(planes*c.hw), dy, mask, got, planes, c.hw)
		checkExact(t, "dropout2d_grad", got, want, planes*c.hw)
		checkTail(t, "dropout2d_grad", got, planes*c.hw)
	}
}

// ---- convolution and linear ----

// convCase is one convolution: c input and o output channels in g groups.
type convCase struct {
	n, c, h, w, o, kh, kw, stride, pad, capN, g int
}

var convCases = []convCase{
	{1, 1, 5, 5, 2, 3, 3, 1, 0, 3, 1},
	{3, 3, 9, 5, 4, 3, 3, 1, 1, 4, 1},
	{7, 3, 5, 9, 2, 3, 2, 2, 1, 7, 1},
	{3, 1, 9, 9, 3, 5, 5, 2, 0, 3, 1},
	{2, 2, 7, 8, 5, 3, 2, 2, 1, 3, 1},
	{1, 3, 5, 9, 4, 2, 2, 2, 1, 1, 1},
	{3, 3, 9, 5, 2, 1, 1, 1, 0, 3, 1},
	{2, 1, 5, 6, 2, 3, 3, 3, 2, 2, 1},
	{7, 1, 9, 9, 3, 5, 5, 1, 2, 9, 1},
	// Grouped: two groups, depthwise (a group per channel, two outputs
	// each), one sample, and three groups of two channels.
	{3, 6, 9, 5, 4, 3, 3, 1, 1, 4, 2},
	{2, 3, 7, 8, 6, 3, 2, 2, 1, 3, 3},
	{1, 4, 5, 9, 2, 2, 2, 2, 1, 1, 2},
	{3, 6, 5, 5, 3, 1, 1, 1, 0, 3, 3},
}

// TestConv2D composes im2col, a reference GEMM and the permute and bias
// kernels as the CUDA backend does with cuBLAS (once per group for a
// grouped convolution), and compares the result with ops' Conv2D and its
// three gradients.
func TestConv2D(t *testing.T) {
	r := newRand(4)
	for _, cc := range convCases {
		name := fmt.Sprintf("%+v", cc)
		oh := (cc.h+2*cc.pad-cc.kh)/cc.stride + 1
		ow := (cc.w+2*cc.pad-cc.kw)/cc.stride + 1
		cg, og := cc.c/cc.g, cc.o/cc.g // one group's channels
		k, l, plane := cg*cc.kh*cc.kw, cc.n*oh*ow, oh*ow
		xg := cg * cc.h * cc.w // one group's offset in x
		g := ConvGeom{N: cc.n, C: cg, CX: cc.c, H: cc.h, W: cc.w, KH: cc.kh, KW: cc.kw, OH: oh, OW: ow, Stride: cc.stride, Pad: cc.pad}
		attrs := &ops.Attrs{Stride: cc.stride, Padding: cc.pad, Groups: cc.g}
		xLen, yLen := cc.n*cc.c*cc.h*cc.w, cc.n*cc.o*plane
		xCap, yCap := cc.capN*cc.c*cc.h*cc.w, cc.capN*cc.o*plane
		x := randf(r, xLen, xCap)
		w := randf(r, cc.o*k, cc.o*k)
		b := randf(r, cc.o, cc.o)
		dy := randf(r, yLen, yCap)
		xs, ws, ys := []int{cc.n, cc.c, cc.h, cc.w}, []int{cc.o, cg, cc.kh, cc.kw}, []int{cc.n, cc.o, oh, ow}
		ctx := &ops.Ctx[float32]{LossScale: 1, Step: 1, Work: make([]float32, (k+cc.o)*cc.capN*plane)}

		// Forward.
		want := nans(yCap)
		run(ops.Conv2D, attrs, ctx, []*ops.Buf[float32]{fbuf(x, xs...), fbuf(w, ws...), fbuf(b, cc.o)}, fbuf(want, ys...))
		cols := make([][]float32, cc.g) // each group's, for the weight gradient
		tmp := nans(cc.o * l)
		for gi := range cc.g {
			col := nans(k*l + 3)
			g.Im2col(Elementwise(k*l), x[gi*xg:], col)
			checkTail(t, "im2col "+name, col, k*l)
			col2 := nans(k * l)
			g.Im2col(Geom{2, 32}, x[gi*xg:], col2)
			checkExact(t, "im2col geometry "+name, col2, col, k*l)
			gemm(false, false, og, l, k, w[gi*og*k:], k, col, l, tmp[gi*og*l:], l)
			cols[gi] = col
		}
		got := nans(yCap)
		ONLToNOL(Elementwise(yLen), tmp, got, cc.n, cc.o, plane)
		if cc.n == 1 {
			checkExact(t, "onl_to_nol at N=1 is the identity "+name, got, tmp, yLen)
		}
		BiasAdd(Elementwise(yLen), got, b, cc.n, cc.o, plane)
		checkClose(t, "conv2d "+name, got, want, yLen)
		checkTail(t, "conv2d "+name, got, yLen)

		// Gradient of the input.
		want = nans(xCap)
		run(ops.Conv2DGradInput, attrs, ctx, []*ops.Buf[float32]{fbuf(dy, ys...), fbuf(w, ws...)}, fbuf(want, xs...))
		dyT := nans(cc.o*l + 2)
		NOLToONL(Elementwise(yLen), dy, dyT, cc.n, cc.o, plane)
		checkTail(t, "nol_to_onl "+name, dyT, cc.o*l)
		if cc.n == 1 {
			checkExact(t, "nol_to_onl at N=1 is the identity "+name, dyT, dy, yLen)
		}
		back := nans(yLen)
		ONLToNOL(Geom{1, 7}, dyT, back, cc.n, cc.o, plane)
		checkExact(t, "onl_to_nol inverts nol_to_onl "+name, back, dy, yLen)
		got = nans(xCap)
		got2 := nans(xLen)
		for gi := range cc.g {
			dcol := nans(k * l)
			gemm(true, false, k, l, og, w[gi*og*k:], k, dyT[gi*og*l:], l, dcol, l)
			// Each group writes its own channels of dx and no others.
			g.Col2im(Elementwise(cc.n*cg*cc.h*cc.w), dcol, got[gi*xg:])
			g.Col2im(Geom{3, 64}, dcol, got2[gi*xg:])
			if gi == 0 && cc.g > 1 {
				for i := range xLen {
					if ch := i / (cc.h * cc.w) % cc.c; ch >= cg && !isNaN(got[i]) {
						t.Fatalf("col2im %s: group 0 wrote element %d (channel %d)", name, i, ch)
					}
				}
			}
		}
		checkClose(t, "conv2d_grad_input "+name, got, want, xLen)
		checkTail(t, "conv2d_grad_input "+name, got, xLen)
		checkExact(t, "col2im geometry "+name, got2, got, xLen)

		// Gradient of the weight.
		want = nans(cc.o * k)
		run(ops.Conv2DGradWeight, attrs, ctx, []*ops.Buf[float32]{fbuf(dy, ys...), fbuf(x, xs...)}, fbuf(want, ws...))
		got = nans(cc.o * k)
		for gi := range cc.g {
			gemm(false, true, og, k, l, dyT[gi*og*l:], l, cols[gi], l, got[gi*og*k:], k)
		}
		checkClose(t, "conv2d_grad_weight "+name, got, want, cc.o*k)

		// Gradient of the bias, overwritten and accumulated.
		for _, acc := range []bool{false, true} {
			init := randf(r, cc.o, cc.o)
			want = slices.Clone(init)
			run(ops.Conv2DGradBias, &ops.Attrs{Accumulate: acc}, ctx, []*ops.Buf[float32]{fbuf(dy, ys...)}, fbuf(want, cc.o))
			for _, geo := range []Geom{BlockPer(cc.o), {2, 256}, {1, 64}} {
				got = slices.Clone(init)
				BiasGrad(geo, dy, got, cc.n, cc.o, plane, b2i(acc))
				checkClose(t, fmt.Sprintf("conv2d_grad_bias accumulate=%v geom=%v %s", acc, geo, name), got, want, cc.o)
			}
		}
	}
}

func TestLinearBias(t *testing.T) {
	r := newRand(5)
	const in, out, capN = 5, 3, 9
	for _, n := range []int{1, 3, 7, 300} {
		c := max(capN, n)
		x, w, b := randf(r, n*in, c*in), randf(r, out*in, out*in), randf(r, out, out)
		want := nans(c * out)
		run(ops.Linear, nil, nil, []*ops.Buf[float32]{fbuf(x, n, in), fbuf(w, out, in), fbuf(b, out)}, fbuf(want, n, out))
		got := nans(c * out)
		gemm(false, true, n, out, in, x, in, w, in, got, out)
		BiasAdd(Elementwise(n*out), got, b, n, out, 1)
		checkClose(t, fmt.Sprintf("linear n=%d", n), got, want, n*out)
		checkTail(t, fmt.Sprintf("linear n=%d", n), got, n*out)

		dy := randf(r, n*out, c*out)
		for _, acc := range []bool{false, true} {
			init := randf(r, out, out)
			want = slices.Clone(init)
			run(ops.LinearGradBias, &ops.Attrs{Accumulate: acc}, nil, []*ops.Buf[float32]{fbuf(dy, n, out)}, fbuf(want, out))
			got = slices.Clone(init)
			BiasGrad(BlockPer(out), dy, got, n, out, 1, b2i(acc))
			checkClose(t, fmt.Sprintf("linear_grad_bias n=%d accumulate=%v", n, acc), got, want, out)
		}
	}
}

// runSplitSum runs kernels.h's split sum of dy[n, c, plane] into db in s
// chunks: gorun_bias_grad alone when s is 1, else gorun_bias_partial
// (geometry g1) into NaN-filled scratch, whose tail past c·s must stay
// untouched, then gorun_bias_finish (g2).
func runSplitSum(t *testing.T, what string, g1, g2 Geom, dy, db []float32, n, c, plane, s int, acc bool) {
	t.Helper()
	if s == 1 {
		BiasGrad(g2, dy, db, n, c, plane, b2i(acc))
		return
	}
	chunk := (n*plane + s - 1) / s
	part := make([]float64, c*s+3)
	for i := range part {
		part[i] = math.NaN()
	}
	BiasPartial(g1, dy, part, n, c, plane, s, chunk)
	for i := c * s; i < len(part); i++ {
		if !math.IsNaN(part[i]) {
			t.Errorf("%s: partial %d past the %d written: %v", what, i, c*s, part[i])
			break
		}
	}
	BiasFinish(g2, part, db, c, s, b2i(acc))
}

// ulp32 is the gap between |v| and the next float32 up.
func ulp32(v float32) float64 {
	a := float32(math.Abs(float64(v)))
	return float64(math.Nextafter32(a, float32(math.Inf(1))) - a)
}

// TestSplitSum checks the split sum (bias gradients and the finiteness
// check) against ops.Conv2DGradBias / LinearGradBias and against the
// exact sum rounded to float32 (within one float32 ulp: the kernels sum in
// double), for one chunk and several, chunks that end inside a plane or
// span many, plane 1 (linear: the chunks cut the batch), odd block
// geometries, accumulate on and off, and an empty batch.
func TestSplitSum(t *testing.T) {
	r := newRand(15)
	cases := []struct {
		n, c, plane int
		splits      []int
	}{
		{3, 3, 1003, []int{1, 5}},
		{5, 2, 4099, []int{1, 3}},
		{3001, 3, 1, []int{1, 4}},
		{301, 5, 7, []int{1, 3}},
		{9, 2, 255, []int{2}},
		{9, 2, 257, []int{3}},
		{1, 1, 20011, []int{1, 3}}, // Finite's flat vector
		{0, 3, 5, []int{1, 3}},
	}
	for _, cc := range cases {
		capN := cc.n + 2
		dy := randf(r, cc.n*cc.c*cc.plane, capN*cc.c*cc.plane)
		exact := make([]float64, cc.c)
		for i := range cc.n {
			for ch := range cc.c {
				for k := range cc.plane {
					exact[ch] += float64(dy[(i*cc.c+ch)*cc.plane+k])
				}
			}
		}
		for _, acc := range []bool{false, true} {
			init := randf(r, cc.c, cc.c)
			want := slices.Clone(init)
			if cc.plane == 1 {
				run(ops.LinearGradBias, &ops.Attrs{Accumulate: acc}, nil, []*ops.Buf[float32]{fbuf(dy, cc.n, cc.c)}, fbuf(want, cc.c))
			} else {
				run(ops.Conv2DGradBias, &ops.Attrs{Accumulate: acc}, nil, []*ops.Buf[float32]{fbuf(dy, cc.n, cc.c, cc.plane)}, fbuf(want, cc.c))
			}
			for _, s := range cc.splits {
				var first []float32
				geos := [][2]Geom{{BlockPer(cc.c * s), BlockPer(cc.c)}}
				if !acc && s > 1 { // odd geometries once (a host launch is slow; TestConv2D has gorun_bias_grad's)
					geos = append(geos, [2]Geom{{2, 256}, {1, 256}}, [2]Geom{{3, 64}, {2, 100}})
				}
				for gi, geo := range geos {
					what := fmt.Sprintf("split sum n=%d c=%d plane=%d s=%d accumulate=%v geom=%v", cc.n, cc.c, cc.plane, s, acc, geo)
					got := append(slices.Clone(init), float32(math.NaN()))
					runSplitSum(t, what, geo[0], geo[1], dy, got, cc.n, cc.c, cc.plane, s, acc)
					checkClose(t, what, got, want, cc.c)
					checkTail(t, what, got, cc.c)
					for ch := range cc.c {
						// Rounding the double sum to float32 may go either way
						// near a tie (one ulp), and so may the add to db.
						e := float32(exact[ch])
						w, tol := e, ulp32(e)
						if acc {
							w = init[ch] + e
							tol += ulp32(w)
						}
						if math.Abs(float64(got[ch])-float64(w)) > tol {
							t.Errorf("%s: channel %d = %v, want %v (the exact sum %v rounded)", what, ch, got[ch], w, exact[ch])
						}
					}
					// The same block size gives the same bits whatever the
					// grid: a block's partial does not depend on it.
					if gi == 0 {
						first = got
					} else if geo[0].Block == 256 && geo[1].Block == 256 {
						checkExact(t, what+" vs BLOCK_PER", got, first, cc.c)
					}
				}
			}
		}
	}
	// NaN and ±Inf anywhere make the sum non-finite (the finiteness check).
	const m = 30011
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, m - 1} {
			x := randf(r, m, m)
			x[at] = bad
			got := []float32{0}
			const s = (m + 8191) / 8192
			runSplitSum(t, "finite", BlockPer(s), BlockPer(1), x, got, 1, 1, m, s, false)
			if v := got[0]; v-v == 0 {
				t.Errorf("split sum with %v at %d = %v, want a non-finite sum", bad, at, v)
			}
		}
	}
}

// ---- batch normalisation ----

// runBNSums runs kernels.h's batch norm sums over a[n, c, plane] (and b)
// in s chunks: gorun_bn_partial (geometry g1) into NaN-filled scratch,
// whose tail past 2·c·s must stay untouched, then gorun_bn_finish (g2).
func runBNSums(t *testing.T, what string, g1, g2 Geom, mode int, a, b, save, out []float32, n, c, plane, s, count int) {
	t.Helper()
	chunk := (n*plane + s - 1) / s
	part := make([]float64, 2*c*s+3)
	for i := range part {
		part[i] = math.NaN()
	}
	BNPartial(g1, a, b, save, part, n, c, plane, s, chunk, mode)
	for i := 2 * c * s; i < len(part); i++ {
		if !math.IsNaN(part[i]) {
			t.Errorf("%s: partial %d past the %d written: %v", what, i, 2*c*s, part[i])
			break
		}
	}
	BNFinish(g2, part, out, c, s, count)
}

// TestBatchNorm checks the batch norm kernels against ops' BatchNorm*
// ops: the per-channel sums (stats and gradient stats: one chunk and
// several, odd geometries, which give the same bits at block 256) within
// the float32 tolerance, and, given the CPU's sums, everything else bit
// for bit: the normalisation and its saved moments, evaluation with
// running statistics, the gradients of gamma (accumulate on and off), beta
// and the input, with and without gamma and beta, and the running
// statistics' update (momentum and cumulative average, counts of 0, 1 and
// more). Inputs sit away from 0 (mean 2) so that the variance is a
// difference of large sums, as in real activations; N = 0 is an empty
// batch.
func TestBatchNorm(t *testing.T) {
	r := newRand(18)
	eps := float32(1e-5)
	cases := []struct {
		n, c, plane, capN int
		splits            []int
	}{
		{3, 3, 25, 5, []int{1, 3}},
		{7, 2, 1, 9, []int{1, 2}}, // x[N, C]
		{1, 3, 1, 2, []int{1}},    // one value per channel: count 1
		{0, 3, 5, 2, []int{1, 2}}, // an empty batch
		{5, 2, 4099, 6, []int{1, 3}},
		{301, 5, 7, 301, []int{1, 3}},
	}
	for _, cc := range cases {
		n, c, plane := cc.n, cc.c, cc.plane
		name := fmt.Sprintf("n=%d c=%d plane=%d", n, c, plane)
		shape := []int{n, c, plane}
		if plane == 1 {
			shape = shape[:2]
		}
		total, capacity := n*c*plane, cc.capN*c*plane
		x, dy := randf(r, total, capacity), randf(r, total, capacity)
		for i := range total {
			x[i] = 3*x[i] + 2
		}
		gamma, beta := randf(r, c, c), randf(r, c, c)
		attrs := &ops.Attrs{Eps: float64(eps)}

		// Stats.
		wantS := nans(3 * c)
		run(ops.BatchNormStats, attrs, nil, []*ops.Buf[float32]{fbuf(x, shape...)}, fbuf(wantS, 3, c))
		for _, s := range cc.splits {
			var first []float32
			for gi, geo := range [][2]Geom{{BlockPer(c * s), BlockPer(c)}, {{2, 256}, {1, 256}}, {{3, 64}, {2, 100}}} {
				what := fmt.Sprintf("batch_norm_stats %s s=%d geom=%v", name, s, geo)
				got := nans(3*c + 1)
				runBNSums(t, what, geo[0], geo[1], BNSums, x, nil, nil, got, n, c, plane, s, n*plane)
				checkClose(t, what, got, wantS, 2*c)
				checkExact(t, what+" count", got[2*c:], wantS[2*c:], c)
				checkTail(t, what, got, 3*c)
				if gi == 0 {
					first = got
				} else if geo[0].Block == 256 && geo[1].Block == 256 {
					checkExact(t, what+" vs BLOCK_PER", got, first, 3*c)
				}
			}
		}

		// Normalisation, with and without gamma and beta; the CPU's stats.
		affine := []struct {
			name        string
			gamma, beta []float32
		}{{"affine", gamma, beta}, {"no affine", nil, nil}, {"gamma only", gamma, nil}}
		opt := func(b []float32) *ops.Buf[float32] {
			if b == nil {
				return nil
			}
			return fbuf(b, c)
		}
		var save []float32 // the CPU's, for the backward kernels
		for _, af := range affine {
			what := name + " " + af.name
			wantY, wantSave := nans(capacity), nans(3*c)
			run(ops.BatchNormNorm, attrs, nil, []*ops.Buf[float32]{fbuf(x, shape...), fbuf(wantS, 3, c), opt(af.gamma), opt(af.beta)},
				fbuf(wantY, shape...), fbuf(wantSave, 3, c))
			save = wantSave
			for _, geo := range geoms(total) {
				gotY, gotSave, par := nans(capacity), nans(3*c+1), nans(4*c+1)
				BNParams(Elementwise(c), wantS, nil, af.gamma, af.beta, gotSave, par, c, eps, BNNorm)
				checkExact(t, "batch_norm_norm save "+what, gotSave, wantSave, 3*c)
				checkTail(t, "batch_norm_norm save "+what, gotSave, 3*c)
				checkTail(t, "batch_norm_norm params "+what, par, 3*c)
				BNApply(geo, x, par, nil, gotY, n, c, plane, 0)
				checkExact(t, fmt.Sprintf("batch_norm_norm %s geom=%v", what, geo), gotY, wantY, total)
				checkTail(t, "batch_norm_norm "+what, gotY, total)
				if geo == geoms(total)[0] {
					inplace := slices.Clone(x)
					BNApply(geo, inplace, par, nil, inplace, n, c, plane, 0)
					checkExact(t, "batch_norm_norm in place "+what, inplace, wantY, total)
				}
			}
			// Fused with a residual (dy) and ReLU, as the engine's fuse pass
			// emits, against the CPU's fused op; y over the residual too.
			for _, relu := range []bool{false, true} {
				fa := *attrs
				fa.ReLU = relu
				wantF := nans(capacity)
				run(ops.BatchNormNorm, &fa, nil, []*ops.Buf[float32]{fbuf(x, shape...), fbuf(wantS, 3, c), opt(af.gamma), opt(af.beta), fbuf(dy, shape...)},
					fbuf(wantF, shape...), fbuf(nans(3*c), 3, c))
				par := nans(4*c + 1)
				BNParams(Elementwise(c), wantS, nil, af.gamma, af.beta, nans(3*c), par, c, eps, BNNorm)
				for _, geo := range geoms(total) {
					gotF := nans(capacity)
					BNApply(geo, x, par, dy, gotF, n, c, plane, b2i(relu))
					checkExact(t, fmt.Sprintf("batch_norm_norm + residual, relu %v %s geom=%v", relu, what, geo), gotF, wantF, total)
					checkTail(t, "batch_norm_norm + residual "+what, gotF, total)
				}
				over := slices.Clone(dy)
				BNApply(Geom{3, 64}, x, par, over, over, n, c, plane, b2i(relu))
				checkExact(t, fmt.Sprintf("batch_norm_norm over the residual, relu %v %s", relu, what), over, wantF, total)
			}

			// Evaluation with running statistics.
			rm, rv := randf(r, c, c), randf(r, c, c)
			for j := range rv {
				rv[j] = float32(math.Abs(float64(rv[j])))
			}
			wantY = nans(capacity)
			run(ops.BatchNormEval, attrs, nil, []*ops.Buf[float32]{fbuf(x, shape...), fbuf(rm, c), fbuf(rv, c), opt(af.gamma), opt(af.beta)},
				fbuf(wantY, shape...))
			gotY, par := nans(capacity), nans(4*c+1)
			BNParams(Geom{1, 2}, rm, rv, af.gamma, af.beta, nil, par, c, eps, BNEval)
			checkTail(t, "batch_norm_eval params "+what, par, 3*c)
			BNApply(Geom{3, 64}, x, par, nil, gotY, n, c, plane, 0)
			checkExact(t, "batch_norm_eval "+what, gotY, wantY, total)
			checkTail(t, "batch_norm_eval "+what, gotY, total)
		}
		// save is now from gamma only; the moments do not depend on gamma.

		// Gradient stats, against the CPU's save.
		wantG := nans(2 * c)
		run(ops.BatchNormGradStats, attrs, nil, []*ops.Buf[float32]{fbuf(dy, shape...), fbuf(x, shape...), fbuf(save, 3, c)}, fbuf(wantG, 2, c))
		for _, s := range cc.splits {
			var first []float32
			for gi, geo := range [][2]Geom{{BlockPer(c * s), BlockPer(c)}, {{2, 256}, {1, 256}}, {{3, 64}, {2, 100}}} {
				what := fmt.Sprintf("batch_norm_grad_stats %s s=%d geom=%v", name, s, geo)
				got := nans(2*c + 1)
				runBNSums(t, what, geo[0], geo[1], BNGradSums, dy, x, save, got, n, c, plane, s, -1)
				checkClose(t, what, got, wantG, 2*c)
				checkTail(t, what, got, 2*c)
				if gi == 0 {
					first = got
				} else if geo[0].Block == 256 && geo[1].Block == 256 {
					checkExact(t, what+" vs BLOCK_PER", got, first, 2*c)
				}
			}
		}

		// Gamma's and beta's gradients, overwritten and accumulated.
		for _, acc := range []bool{false, true} {
			a := &ops.Attrs{Eps: float64(eps), Accumulate: acc}
			init := randf(r, c, c)
			want, got := slices.Clone(init), slices.Clone(init)
			run(ops.BatchNormGradGamma, a, nil, []*ops.Buf[float32]{fbuf(wantG, 2, c), fbuf(save, 3, c)}, fbuf(want, c))
			BNGradGamma(Geom{1, 2}, wantG, save, got, c, eps, b2i(acc))
			checkExact(t, fmt.Sprintf("batch_norm_grad_gamma %s accumulate=%v", name, acc), got, want, c)
			want, got = slices.Clone(init), slices.Clone(init)
			run(ops.BatchNormGradBeta, a, nil, []*ops.Buf[float32]{fbuf(wantG, 2, c)}, fbuf(want, c))
			if acc {
				Accumulate(Elementwise(c), got, wantG, c)
			} else {
				Copy(Elementwise(c), wantG, got, c)
			}
			checkExact(t, fmt.Sprintf("batch_norm_grad_beta %s accumulate=%v", name, acc), got, want, c)
		}

		// The input's gradient, with and without gamma.
		for _, g := range [][]float32{gamma, nil} {
			what := fmt.Sprintf("batch_norm_grad_input %s gamma=%v", name, g != nil)
			want := nans(capacity)
			run(ops.BatchNormGradInput, attrs, nil, []*ops.Buf[float32]{fbuf(dy, shape...), fbuf(x, shape...), fbuf(save, 3, c), fbuf(wantG, 2, c), opt(g)},
				fbuf(want, shape...))
			par := nans(4*c + 1)
			BNParams(Elementwise(c), save, wantG, g, nil, nil, par, c, eps, BNGrad)
			checkTail(t, what+" params", par, 4*c)
			for _, geo := range geoms(total) {
				got := nans(capacity)
				BNGradInput(geo, dy, x, par, got, n, c, plane)
				checkExact(t, fmt.Sprintf("%s geom=%v", what, geo), got, want, total)
				checkTail(t, what, got, total)
			}
			inplace := slices.Clone(dy)
			BNGradInput(Elementwise(total), inplace, x, par, inplace, n, c, plane)
			checkExact(t, what+" in place", inplace, want, total)
		}

		// Running statistics, two updates: momentum 0.1 and the cumulative
		// average, under several geometries (one block of any size; other
		// blocks leave).
		for _, m := range []float64{f32(0.1), -1} {
			for _, geo := range []Geom{OneBlock, {1, 32}, {3, 64}} {
				what := fmt.Sprintf("batch_norm_running %s momentum=%v geom=%v", name, m, geo)
				rm, rv := randf(r, c, c), randf(r, c, c)
				tracked := []float32{3}
				wantM, wantV, wantT := slices.Clone(rm), slices.Clone(rv), slices.Clone(tracked)
				for range 2 {
					run(ops.BatchNormRunning, &ops.Attrs{BNMomentum: m}, nil, []*ops.Buf[float32]{fbuf(save, 3, c), fbuf(wantM, c), fbuf(wantV, c), fbuf(wantT, 1)})
					BNRunning(geo, save, rm, rv, tracked, c, float32(m))
				}
				checkExact(t, what+" mean", rm, wantM, c)
				checkExact(t, what+" var", rv, wantV, c)
				checkExact(t, what+" tracked", tracked, wantT, 1)
				if n*plane == 0 && tracked[0] != 3 {
					t.Errorf("%s: an empty batch counted: tracked = %v", what, tracked[0])
				}
			}
		}
	}
}

// TestLayerNorm: layer norm over rows (x[N, T, D] and [N, D]) against ops,
// with and without gamma and beta, an empty batch, a row longer than a
// block: the forward (within the float32 tolerance: the row sums' order
// differs; save's invstd likewise), and given the CPU's save, the input's
// gradient (likewise: Σg and Σg·x̂), gamma's gradient (bn_partial's
// GORUN_LN_GAMMA_SUMS and gorun_bias_finish on the second half of the
// partials, one chunk and several, accumulate on and off) and beta's (the
// split sum over [rows, D, 1]).
// lnGeoms are the geometries layer norm runs under here: BLOCK_PER(rows)
// for a few rows, and small grids and blocks (a host launch runs a
// std::thread per CUDA thread).
func lnGeoms(rows int) []Geom {
	if rows <= 8 {
		return []Geom{BlockPer(rows), {2, 32}}
	}
	return []Geom{{3, 64}, {2, 32}}
}

func TestLayerNorm(t *testing.T) {
	r := newRand(21)
	eps := float32(1e-5)
	cases := []struct {
		shape  []int
		capN   int
		splits []int
	}{
		{[]int{3, 5, 7}, 4, []int{1, 2}},
		{[]int{7, 300}, 9, []int{1, 3}}, // a row longer than a block
		{[]int{1, 1, 1}, 2, []int{1}},
		{[]int{0, 5, 7}, 2, []int{1, 2}},
		{[]int{30, 3}, 31, []int{1, 4}},
	}
	opt := func(b []float32, d int) *ops.Buf[float32] {
		if b == nil {
			return nil
		}
		return fbuf(b, d)
	}
	for _, cc := range cases {
		d := cc.shape[len(cc.shape)-1]
		per := 1 // rows per sample
		for _, v := range cc.shape[1 : len(cc.shape)-1] {
			per *= v
		}
		rows := cc.shape[0] * per
		total, capacity := rows*d, cc.capN*per*d
		saveShape := append(slices.Clone(cc.shape[:len(cc.shape)-1]), 2)
		name := fmt.Sprintf("shape=%v", cc.shape)
		x, dy := randf(r, total, capacity), randf(r, total, capacity)
		for i := range total {
			x[i] = 3*x[i] + 2
		}
		gamma, beta := randf(r, d, d), randf(r, d, d)
		attrs := &ops.Attrs{Eps: float64(eps)}
		var save []float32 // the CPU's
		for _, af := range []struct {
			name        string
			gamma, beta []float32
		}{{"affine", gamma, beta}, {"no affine", nil, nil}, {"beta only", nil, beta}} {
			what := name + " " + af.name
			wantY, wantSave := nans(capacity), nans(2*rows+1)
			run(ops.LayerNorm, attrs, nil, []*ops.Buf[float32]{fbuf(x, cc.shape...), opt(af.gamma, d), opt(af.beta, d)},
				fbuf(wantY, cc.shape...), fbuf(wantSave, saveShape...))
			save = wantSave
			for _, geo := range lnGeoms(rows) {
				gotY, gotSave := nans(capacity), nans(2*rows+1)
				LayerNorm(geo, x, af.gamma, af.beta, gotY, gotSave, rows, d, eps)
				checkClose(t, fmt.Sprintf("layer_norm %s geom=%v", what, geo), gotY, wantY, total)
				checkTail(t, "layer_norm "+what, gotY, total)
				checkClose(t, "layer_norm save "+what, gotSave, wantSave, 2*rows)
				checkTail(t, "layer_norm save "+what, gotSave, 2*rows)
			}
			inplace := slices.Clone(x)
			LayerNorm(Geom{2, 64}, inplace, af.gamma, af.beta, inplace, nans(2*rows), rows, d, eps)
			checkClose(t, "layer_norm in place "+what, inplace, wantY, total)
		}

		for _, g := range [][]float32{gamma, nil} {
			what := fmt.Sprintf("layer_norm_grad_input %s gamma=%v", name, g != nil)
			want := nans(capacity)
			run(ops.LayerNormGradInput, attrs, nil, []*ops.Buf[float32]{fbuf(dy, cc.shape...), fbuf(x, cc.shape...), fbuf(save, saveShape...), opt(g, d)},
				fbuf(want, cc.shape...))
			for _, geo := range lnGeoms(rows) {
				got := nans(capacity)
				LayerNormGradInput(geo, dy, x, save, g, got, rows, d)
				checkClose(t, fmt.Sprintf("%s geom=%v", what, geo), got, want, total)
				checkTail(t, what, got, total)
			}
			inplace := slices.Clone(dy)
			LayerNormGradInput(Geom{2, 64}, inplace, x, save, g, inplace, rows, d)
			checkClose(t, what+" in place", inplace, want, total)
		}

		for _, acc := range []bool{false, true} {
			a := &ops.Attrs{Eps: float64(eps), Accumulate: acc}
			init := randf(r, d, d)
			wantG, wantB := slices.Clone(init), slices.Clone(init)
			run(ops.LayerNormGradGamma, a, nil, []*ops.Buf[float32]{fbuf(dy, cc.shape...), fbuf(x, cc.shape...), fbuf(save, saveShape...)}, fbuf(wantG, d))
			run(ops.LayerNormGradBeta, a, nil, []*ops.Buf[float32]{fbuf(dy, cc.shape...)}, fbuf(wantB, d))
			for _, s := range cc.splits {
				what := fmt.Sprintf("%s s=%d accumulate=%v", name, s, acc)
				chunk := (rows + s - 1) / s
				part := make([]float64, 2*d*s+1)
				for i := range part {
					part[i] = math.NaN()
				}
				// Small grids: a host launch runs a std::thread per CUDA thread.
				BNPartial(Geom{2, 64}, dy, x, save, part, rows, d, 1, s, chunk, LNGammaSums)
				if !math.IsNaN(part[2*d*s]) {
					t.Errorf("layer_norm_grad_gamma %s: a partial past the end written", what)
				}
				got := append(slices.Clone(init), float32(math.NaN()))
				BiasFinish(Geom{2, 64}, part[d*s:], got, d, s, b2i(acc))
				checkClose(t, "layer_norm_grad_gamma "+what, got, wantG, d)
				checkTail(t, "layer_norm_grad_gamma "+what, got, d)

				got = append(slices.Clone(init), float32(math.NaN()))
				runSplitSum(t, "layer_norm_grad_beta "+what, Geom{2, 64}, Geom{2, 64}, dy, got, rows, d, 1, s, acc)
				checkClose(t, "layer_norm_grad_beta "+what, got, wantB, d)
				checkTail(t, "layer_norm_grad_beta "+what, got, d)
			}
		}
	}
}

// ---- pooling ----

func TestMaxPool2D(t *testing.T) {
	r := newRand(6)
	type poolCase struct{ n, c, h, w, k, s, capN int }
	for _, pc := range []poolCase{
		{1, 1, 5, 5, 2, 2, 2}, {3, 3, 5, 9, 2, 2, 4}, {7, 1, 9, 5, 3, 2, 7}, {3, 3, 9, 9, 2, 1, 3},
		{2, 3, 9, 5, 3, 3, 3}, {2, 2, 5, 9, 2, 3, 2}, {1, 3, 9, 9, 3, 1, 2}, {3, 1, 2, 6, 2, 2, 3},
	} {
		oh, ow := (pc.h-pc.k)/pc.s+1, (pc.w-pc.k)/pc.s+1
		planes, capPlanes := pc.n*pc.c, pc.capN*pc.c
		xLen, yLen := planes*pc.h*pc.w, planes*oh*ow
		for _, special := range []bool{false, true} {
			name := fmt.Sprintf("%+v special=%v", pc, special)
			// Small integers make ties; special adds NaNs and -Inf.
			x := nans(capPlanes * pc.h * pc.w)
			for i := range xLen {
				x[i] = float32(r.IntN(5) - 2)
				if special {
					switch r.IntN(8) {
					case 0:
						x[i] = float32(math.NaN())
					case 1, 2:
						x[i] = float32(math.Inf(-1))
					}
				}
			}
			xs, ys := []int{pc.n, pc.c, pc.h, pc.w}, []int{pc.n, pc.c, oh, ow}
			attrs := &ops.Attrs{Kernel: pc.k, Stride: pc.s}
			wantY, wantI := nans(capPlanes*oh*ow), make([]int32, capPlanes*oh*ow)
			run(ops.MaxPool2D, attrs, nil, []*ops.Buf[float32]{fbuf(x, xs...)}, fbuf(wantY, ys...), ibuf(wantI, ys...))
			for _, geo := range geoms(yLen) {
				gotY, gotI := nans(capPlanes*oh*ow), slices.Repeat([]int32{-7}, capPlanes*oh*ow)
				MaxPool2D(geo, x, gotY, gotI, planes, pc.h, pc.w, oh, ow, pc.k, pc.s)
				checkExact(t, "maxpool2d "+name, gotY, wantY, yLen)
				checkTail(t, "maxpool2d "+name, gotY, yLen)
				if !slices.Equal(gotI[:yLen], wantI[:yLen]) {
					t.Errorf("maxpool2d %s: index %v, want %v", name, gotI[:yLen], wantI[:yLen])
				}
				for _, v := range gotI[yLen:] {
					if v != -7 {
						t.Errorf("maxpool2d %s: index written past the live part", name)
						break
					}
				}
			}
			dy := randf(r, yLen, capPlanes*oh*ow)
			want := nans(capPlanes * pc.h * pc.w)
			run(ops.MaxPool2DGrad, attrs, nil, []*ops.Buf[float32]{fbuf(dy, ys...), ibuf(wantI, ys...)}, fbuf(want, xs...))
			for _, geo := range geoms(xLen) {
				got := nans(capPlanes * pc.h * pc.w)
				MaxPool2DGrad(geo, dy, wantI, got, planes, pc.h, pc.w, oh, ow, pc.k, pc.s)
				checkExact(t, "maxpool2d_grad "+name, got, want, xLen)
				checkTail(t, "maxpool2d_grad "+name, got, xLen)
			}
		}
	}
}

// TestAvgPool2D: average pooling and its gradient against ops bit for bit
// (the forward sums in float in the CPU's order; the gradient gathers each
// element's windows in the order the CPU scatters them): padding 0 to
// k/2, strides below, at and above the kernel (gaps), overlapping windows,
// the default stride (0), an empty batch, odd geometries.
func TestAvgPool2D(t *testing.T) {
	r := newRand(19)
	type poolCase struct{ n, c, h, w, k, s, p, capN int }
	for _, pc := range []poolCase{
		{1, 1, 5, 5, 2, 0, 0, 2}, {3, 3, 5, 9, 2, 2, 1, 4}, {7, 1, 9, 5, 3, 2, 1, 7}, {3, 3, 9, 9, 3, 1, 1, 3},
		{2, 3, 9, 5, 3, 3, 0, 3}, {2, 2, 5, 9, 2, 3, 0, 2}, {1, 3, 9, 9, 5, 2, 2, 2}, {3, 1, 2, 6, 2, 2, 1, 3},
		{0, 3, 5, 5, 3, 2, 1, 2},
	} {
		s := pc.s
		if s == 0 {
			s = pc.k
		}
		oh, ow := (pc.h+2*pc.p-pc.k)/s+1, (pc.w+2*pc.p-pc.k)/s+1
		planes, capPlanes := pc.n*pc.c, pc.capN*pc.c
		xLen, yLen := planes*pc.h*pc.w, planes*oh*ow
		name := fmt.Sprintf("%+v", pc)
		x := randf(r, xLen, capPlanes*pc.h*pc.w)
		xs, ys := []int{pc.n, pc.c, pc.h, pc.w}, []int{pc.n, pc.c, oh, ow}
		attrs := &ops.Attrs{Kernel: pc.k, Stride: pc.s, Padding: pc.p}
		want := nans(capPlanes * oh * ow)
		run(ops.AvgPool2D, attrs, nil, []*ops.Buf[float32]{fbuf(x, xs...)}, fbuf(want, ys...))
		for _, geo := range geoms(yLen) {
			got := nans(capPlanes * oh * ow)
			AvgPool2D(geo, x, got, planes, pc.h, pc.w, oh, ow, pc.k, s, pc.p)
			checkExact(t, "avgpool2d "+name, got, want, yLen)
			checkTail(t, "avgpool2d "+name, got, yLen)
		}
		dy := randf(r, yLen, capPlanes*oh*ow)
		want = nans(capPlanes * pc.h * pc.w)
		run(ops.AvgPool2DGrad, attrs, nil, []*ops.Buf[float32]{fbuf(dy, ys...)}, fbuf(want, xs...))
		for _, geo := range geoms(xLen) {
			got := nans(capPlanes * pc.h * pc.w)
			AvgPool2DGrad(geo, dy, got, planes, pc.h, pc.w, oh, ow, pc.k, s, pc.p)
			checkExact(t, "avgpool2d_grad "+name, got, want, xLen)
			checkTail(t, "avgpool2d_grad "+name, got, xLen)
		}
	}
}

// TestGlobalAvgPool2D: the mean of each plane (summed in double in order)
// and its gradient against ops, bit for bit, an empty batch included.
func TestGlobalAvgPool2D(t *testing.T) {
	r := newRand(20)
	for _, n := range []int{0, 1, 3, 7} {
		for _, hw := range [][2]int{{1, 1}, {5, 9}, {7, 7}, {33, 31}} {
			c, capN := 3, n+2
			planes, size := n*c, hw[0]*hw[1]
			name := fmt.Sprintf("n=%d c=%d %dx%d", n, c, hw[0], hw[1])
			xs, ys := []int{n, c, hw[0], hw[1]}, []int{n, c, 1, 1}
			x := randf(r, planes*size, capN*c*size)
			want := nans(capN * c)
			run(ops.GlobalAvgPool2D, nil, nil, []*ops.Buf[float32]{fbuf(x, xs...)}, fbuf(want, ys...))
			for _, geo := range geoms(planes) {
				got := nans(capN * c)
				GlobalAvgPool2D(geo, x, got, planes, size)
				checkExact(t, "global_avgpool2d "+name, got, want, planes)
				checkTail(t, "global_avgpool2d "+name, got, planes)
			}
			dy := randf(r, planes, capN*c)
			want = nans(capN * c * size)
			run(ops.GlobalAvgPool2DGrad, nil, nil, []*ops.Buf[float32]{fbuf(dy, ys...)}, fbuf(want, xs...))
			for _, geo := range geoms(planes * size) {
				got := nans(capN * c * size)
				GlobalAvgPool2DGrad(geo, dy, got, planes, size)
				checkExact(t, "global_avgpool2d_grad "+name, got, want, planes*size)
				checkTail(t, "global_avgpool2d_grad "+name, got, planes*size)
			}
		}
	}
}

// ---- softmax family and losses ----

func TestSoftmax(t *testing.T) {
	r := newRand(7)
	for _, n := range []int{1, 3, 7, 300} {
		for _, c := range []int{1, 3, 10} {
			name := fmt.Sprintf("n=%d c=%d", n, c)
			capacity := (n + 2) * c
			x, dy := randf(r, n*c, capacity), randf(r, n*c, capacity)
			for i := range n * c {
				x[i] *= 8
			}
			for _, f := range []struct {
				name    string
				op, bop ops.Op
				fwd     func(Geom, []float32, []float32, int, int)
				bwd     func(Geom, []float32, []float32, []float32, int, int)
			}{
				{"log_softmax", ops.LogSoftmax, ops.LogSoftmaxGrad, LogSoftmax, LogSoftmaxGrad},
				{"softmax", ops.Softmax, ops.SoftmaxGrad, func(g Geom, x, y []float32, n, c int) { Softmax(g, x, y, n, c, 0) }, SoftmaxGrad},
			} {
				want := nans(capacity)
				run(f.op, nil, nil, []*ops.Buf[float32]{fbuf(x, n, c)}, fbuf(want, n, c))
				for _, geo := range geoms(n) {
					got := nans(capacity)
					f.fwd(geo, x, got, n, c)
					checkClose(t, f.name+" "+name, got, want, n*c)
					checkTail(t, f.name+" "+name, got, n*c)
				}
				inplace := slices.Clone(x)
				f.fwd(Elementwise(n), inplace, inplace, n, c)
				checkClose(t, f.name+" in place "+name, inplace, want, n*c)

				y := want
				want = nans(capacity)
				run(f.bop, nil, nil, []*ops.Buf[float32]{fbuf(dy, n, c), fbuf(y, n, c)}, fbuf(want, n, c))
				for _, geo := range geoms(n) {
					got := nans(capacity)
					f.bwd(geo, dy, y, got, n, c)
					checkClose(t, f.name+"_grad "+name, got, want, n*c)
					checkTail(t, f.name+"_grad "+name, got, n*c)
				}
				inplace = slices.Clone(dy)
				f.bwd(Elementwise(n), inplace, y, inplace, n, c)
				checkClose(t, f.name+"_grad in place "+name, inplace, want, n*c)
			}
		}
	}
}

// TestSoftmaxCausal: Softmax with Causal over scores[N, 2, T, T] against
// ops, N = 0 included, in place too.
func TestSoftmaxCausal(t *testing.T) {
	r := newRand(25)
	for _, n := range []int{0, 1, 3} {
		for _, tt := range []int{1, 4, 9} {
			shape := []int{n, 2, tt, tt}
			rows, total := n*2*tt, n*2*tt*tt
			x := randf(r, total, total+3)
			for i := range total {
				x[i] *= 6
			}
			want := nans(total + 3)
			run(ops.Softmax, &ops.Attrs{Causal: true}, nil, []*ops.Buf[float32]{fbuf(x, shape...)}, fbuf(want, shape...))
			name := fmt.Sprintf("shape=%v", shape)
			for _, geo := range geoms(rows) {
				got := nans(total + 3)
				Softmax(geo, x, got, rows, tt, tt)
				checkClose(t, "softmax causal "+name, got, want, total)
				checkTail(t, "softmax causal "+name, got, total)
			}
			inplace := slices.Clone(x)
			Softmax(Elementwise(rows), inplace, inplace, rows, tt, tt)
			checkClose(t, "softmax causal in place "+name, inplace, want, total)
		}
	}
}

// TestLosses: NLL and cross entropy (label smoothing 0, 0.1 and 1) and
// their gradients against ops, accumulate on and off, up to 600 rows,
// without an ignored target and with ignore_index -100 (some targets set
// to it) or 1 (a class: every target 1 skipped).
func TestLosses(t *testing.T) {
	r := newRand(8)
	const scale = 1.0 / 7
	ignores := []struct {
		has   bool
		index int
	}{{false, 0}, {true, -100}, {true, 1}}
	for _, n := range []int{1, 3, 7, 600} {
		for _, c := range []int{1, 3, 10} {
			for _, ig := range ignores {
				name := fmt.Sprintf("n=%d c=%d ignore=%v", n, c, ig)
				capN := n + 3
				logits := randf(r, n*c, capN*c)
				for i := range n * c {
					logits[i] *= 5
				}
				logp := nans(capN * c)
				run(ops.LogSoftmax, nil, nil, []*ops.Buf[float32]{fbuf(logits, n, c)}, fbuf(logp, n, c))
				target := slices.Repeat([]int32{-7}, capN)
				for i := range n {
					target[i] = int32(r.IntN(c))
					if ig.index == -100 && r.IntN(3) == 0 {
						target[i] = -100
					}
				}
				// The kernels take the loss scale as a float; CrossEntropy
				// keeps two values a row in Work (ops.Workspace).
				ctx := &ops.Ctx[float32]{LossScale: f32(scale), Step: 1, Work: make([]float32, 2*capN)}
				dloss := []float32{0.7}

				for _, acc := range []bool{false, true} {
					aname := fmt.Sprintf("%s accumulate=%v", name, acc)
					attrs := &ops.Attrs{Accumulate: acc, HasIgnore: ig.has, IgnoreIndex: ig.index}
					want, got := []float32{0.25}, []float32{0.25}
					run(ops.NLLLoss, attrs, ctx, []*ops.Buf[float32]{fbuf(logp, n, c), ibuf(target, n)}, fbuf(want, 1))
					NLLLoss(OneBlock, logp, target, got, n, c, scale, b2i(acc), b2i(ig.has), ig.index)
					checkClose(t, "nll_loss "+aname, got, want, 1)
					again := []float32{0.25}
					NLLLoss(OneBlock, logp, target, again, n, c, scale, b2i(acc), b2i(ig.has), ig.index)
					checkExact(t, "nll_loss deterministic "+aname, again, got, 1)

					for _, eps := range []float64{0, f32(0.1), 1} {
						ename := fmt.Sprintf("%s smoothing=%v", aname, eps)
						attrs := &ops.Attrs{Accumulate: acc, LabelSmoothing: eps, HasIgnore: ig.has, IgnoreIndex: ig.index}
						want, got = []float32{0.25}, []float32{0.25}
						wantP, gotP := nans(capN*c), nans(capN*c)
						run(ops.CrossEntropy, attrs, ctx, []*ops.Buf[float32]{fbuf(logits, n, c), ibuf(target, n)}, fbuf(want, 1), fbuf(wantP, n, c))
						CrossEntropy(OneBlock, logits, target, got, gotP, n, c, float32(eps), scale, b2i(acc), b2i(ig.has), ig.index)
						checkClose(t, "cross_entropy loss "+ename, got, want, 1)
						checkClose(t, "cross_entropy probs "+ename, gotP, wantP, n*c)
						checkTail(t, "cross_entropy probs "+ename, gotP, n*c)
					}
				}

				attrs := &ops.Attrs{HasIgnore: ig.has, IgnoreIndex: ig.index}
				want, got := nans(capN*c), nans(capN*c)
				run(ops.NLLLossGrad, attrs, ctx, []*ops.Buf[float32]{fbuf(dloss, 1), ibuf(target, n)}, fbuf(want, n, c))
				NLLLossGrad(Elementwise(n*c), dloss, target, got, n, c, scale, b2i(ig.has), ig.index)
				checkExact(t, "nll_loss_grad "+name, got, want, n*c)
				checkTail(t, "nll_loss_grad "+name, got, n*c)

				probs := nans(capN * c)
				run(ops.CrossEntropy, attrs, ctx, []*ops.Buf[float32]{fbuf(logits, n, c), ibuf(target, n)}, fbuf([]float32{0}, 1), fbuf(probs, n, c))
				for _, eps := range []float64{0, f32(0.1), 1} {
					ename := fmt.Sprintf("%s smoothing=%v", name, eps)
					attrs := &ops.Attrs{LabelSmoothing: eps, HasIgnore: ig.has, IgnoreIndex: ig.index}
					want, got = nans(capN*c), nans(capN*c)
					run(ops.CrossEntropyGrad, attrs, ctx, []*ops.Buf[float32]{fbuf(dloss, 1), fbuf(probs, n, c), ibuf(target, n)}, fbuf(want, n, c))
					CrossEntropyGrad(Geom{2, 32}, dloss, probs, target, got, n, c, float32(eps), scale, b2i(ig.has), ig.index)
					checkExact(t, "cross_entropy_grad "+ename, got, want, n*c)
					checkTail(t, "cross_entropy_grad "+ename, got, n*c)
				}
			}
		}
	}

	// A target out of range makes the loss NaN; an empty batch gives 0.
	logp := []float32{-1, -2, -3}
	loss := []float32{5}
	NLLLoss(OneBlock, logp, []int32{3}, loss, 1, 3, 1, 0, 0, 0)
	if !isNaN(loss[0]) {
		t.Errorf("nll_loss with target 3 of 3 classes = %v, want NaN", loss[0])
	}
	probs := nans(3)
	for _, eps := range []float32{0, 0.1} {
		CrossEntropy(OneBlock, logp, []int32{-1}, loss, probs, 1, 3, eps, 1, 0, 1, -100)
		if !isNaN(loss[0]) {
			t.Errorf("cross_entropy (smoothing %v) with target -1 = %v, want NaN", eps, loss[0])
		}
	}
	NLLLoss(OneBlock, logp, []int32{0}, loss, 0, 3, 1, 0, 0, 0)
	if loss[0] != 0 {
		t.Errorf("nll_loss of an empty batch = %v, want 0", loss[0])
	}
	loss[0] = 2
	CrossEntropy(OneBlock, logp, []int32{0}, loss, probs, 0, 3, 0.1, 1, 1, 0, 0)
	if loss[0] != 2 {
		t.Errorf("cross_entropy of an empty batch accumulated into 2 = %v, want 2", loss[0])
	}
}

// TestMSELoss: the loss (accumulate on and off) and its gradient against
// ops, for samples of one and of many elements (D), a batch large enough
// for every thread of the block, and an empty batch.
func TestMSELoss(t *testing.T) {
	r := newRand(17)
	const scale = 1.0 / 7
	for _, n := range []int{0, 1, 3, 7, 600} {
		for _, shape := range [][]int{{1}, {3}, {2, 5, 3}} {
			d := 1
			for _, v := range shape {
				d *= v
			}
			full := append([]int{n}, shape...)
			name := fmt.Sprintf("n=%d sample=%v", n, shape)
			capacity := (n + 2) * d
			pred, target := randf(r, n*d, capacity), randf(r, n*d, capacity)
			ctx := &ops.Ctx[float32]{LossScale: f32(scale), Step: 1} // the kernels take it as a float
			for _, acc := range []bool{false, true} {
				aname := fmt.Sprintf("%s accumulate=%v", name, acc)
				want, got := []float32{0.25}, []float32{0.25}
				run(ops.MSELoss, &ops.Attrs{Accumulate: acc}, ctx, []*ops.Buf[float32]{fbuf(pred, full...), fbuf(target, full...)}, fbuf(want, 1))
				MSELoss(OneBlock, pred, target, got, n, d, scale, b2i(acc))
				checkClose(t, "mse_loss "+aname, got, want, 1)
				again := []float32{0.25}
				MSELoss(OneBlock, pred, target, again, n, d, scale, b2i(acc))
				checkExact(t, "mse_loss deterministic "+aname, again, got, 1)
			}
			dloss := []float32{0.7}
			want, got := nans(capacity), nans(capacity)
			run(ops.MSELossGrad, nil, ctx, []*ops.Buf[float32]{fbuf(dloss, 1), fbuf(pred, full...), fbuf(target, full...)}, fbuf(want, full...))
			for _, g := range geoms(n * d) {
				got = nans(capacity)
				MSELossGrad(g, dloss, pred, target, got, n, d, scale)
				checkExact(t, "mse_loss_grad "+name, got, want, n*d)
				checkTail(t, "mse_loss_grad "+name, got, n*d)
			}
			inplace := slices.Clone(pred)
			MSELossGrad(Elementwise(n*d), dloss, inplace, target, inplace, n, d, scale)
			checkExact(t, "mse_loss_grad in place "+name, inplace, want, n*d)
		}
	}
}

// ---- optimizers ----

// f32 is v rounded to float32 and back: ops rounds hyper-parameters to T, the
// kernels take them as float.
func f32(v float64) float64 { return float64(float32(v)) }

func TestSGDStep(t *testing.T) {
	r := newRand(9)
	const n = 1001
	for _, a := range []ops.Attrs{
		{LR: 0.5},
		{LR: 0.5, WeightDecay: 0.1},
		{LR: 0.3, Momentum: 0.9},
		{LR: 0.3, Momentum: 0.5, Dampening: 0.1, WeightDecay: 0.01},
		{LR: 0.2, Momentum: 0.9, Nesterov: true, WeightDecay: 5e-4},
		{LR: 0.2, Momentum: 0.9, Nesterov: true},
	} {
		a.LR, a.Momentum, a.Dampening, a.WeightDecay = f32(a.LR), f32(a.Momentum), f32(a.Dampening), f32(a.WeightDecay)
		name := fmt.Sprintf("%+v", a)
		p := randf(r, n, n)
		wantP, gotP := slices.Clone(p), slices.Clone(p)
		wantB, gotB := nans(n), nans(n)
		var buf []float32 // none without momentum: a null pointer
		if a.Momentum != 0 {
			buf = gotB
		}
		for step := 1; step <= 4; step++ {
			g := randf(r, n, n)
			ctx := &ops.Ctx[float32]{LossScale: 1, Step: step}
			run(ops.SGDStep, &a, ctx, []*ops.Buf[float32]{fbuf(wantP, n), fbuf(g, n), fbuf(wantB, n)})
			SGDStep(Elementwise(n), gotP, g, buf, n, float32(a.LR), float32(a.Momentum), float32(a.Dampening), float32(a.WeightDecay), b2i(a.Nesterov), step, []float32{0})
			checkClose(t, fmt.Sprintf("sgd param step %d %s", step, name), gotP, wantP, n)
			if a.Momentum != 0 {
				checkClose(t, fmt.Sprintf("sgd momentum buffer step %d %s", step, name), gotB, wantB, n)
			}
		}
	}
}

// TestUpdateHalted: with the halt flag set (backend.Deferrer's verdict on
// the device: any value but 0) the update phase's kernels leave every byte
// as it was; with it clear they write (TestSGDStep, TestAdamStep and
// TestClipGradNorm check their values with a clear flag, the vector tests
// with a null one).
func TestUpdateHalted(t *testing.T) {
	r := newRand(21)
	const n = 1001
	for _, k := range []struct {
		name string
		run  func(a [][]float32, halt []float32)
	}{
		{"sgd", func(a [][]float32, h []float32) {
			SGDStep(Elementwise(n), a[0], a[1], a[2], n, 0.1, 0.9, 0.1, 0.01, 1, 2, h)
		}},
		{"adam", func(a [][]float32, h []float32) {
			AdamStep(Elementwise(n), a[0], a[1], a[2], a[3], n, 0.1, 0.9, 0.999, 1e-8, 0.01, 3, 0, h)
		}},
		{"adamw", func(a [][]float32, h []float32) {
			AdamStep(Geom{3, 64}, a[0], a[1], a[2], a[3], n, 0.1, 0.9, 0.999, 1e-8, 0.01, 3, 1, h)
		}},
		{"clip", func(a [][]float32, h []float32) {
			ClipGradNorm(Geom{4, 256}, a[0], []float64{1e6, 2e6, 3e6}, n, 3, 0.5, h)
		}},
	} {
		for _, halt := range []float32{1, float32(math.NaN()), -2, 0} {
			a := make([][]float32, 4)
			for i := range a {
				a[i] = randf(r, n, n)
			}
			for j := range a[3] { // v must not be negative
				a[3][j] *= a[3][j]
			}
			was := make([][]float32, len(a))
			for i := range a {
				was[i] = slices.Clone(a[i])
			}
			k.run(a, []float32{halt})
			changed := false
			for i := range a {
				for j := range a[i] {
					changed = changed || math.Float32bits(a[i][j]) != math.Float32bits(was[i][j])
				}
			}
			if changed != (halt == 0) {
				t.Errorf("%s, halt flag %v: memory changed %v", k.name, halt, changed)
			}
		}
	}
}

// TestStepVerdict: gorun_step_verdict sets the halt flag when the
// gradients' sum or the loss is NaN or ±Inf, or (sticky) when it was set;
// else it clears it.
func TestStepVerdict(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, c := range []struct {
		sum, loss, was float32
		sticky         int
		want           float32
	}{
		{1, 2, 0, 0, 0},
		{1, 2, 1, 0, 0},
		{1, 2, 1, 1, 1},
		{1, 2, 0, 1, 0},
		{nan, 2, 0, 0, 1},
		{1, -inf, 0, 0, 1},
		{inf, 2, 0, 1, 1},
		{1, nan, 1, 0, 1},
		{-3e38, 0, 0, 0, 0},
	} {
		for _, g := range []Geom{OneBlock, {1, 1}, {2, 32}} {
			v := []float32{c.sum, c.loss, c.was, 42}
			StepVerdict(g, v, c.sticky)
			if math.Float32bits(v[2]) != math.Float32bits(c.want) || v[3] != 42 ||
				math.Float32bits(v[0]) != math.Float32bits(c.sum) || math.Float32bits(v[1]) != math.Float32bits(c.loss) {
				t.Errorf("verdict %+v geom %v: %v, want flag %v and the rest unchanged", c, g, v, c.want)
			}
		}
	}
}

func TestAdamStep(t *testing.T) {
	r := newRand(10)
	const n = 1001
	for _, w := range []bool{false, true} {
		op := ops.AdamStep
		if w {
			op = ops.AdamWStep
		}
		for _, a := range []ops.Attrs{
			{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
			{LR: 0.05, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.01},
			{LR: 0.05, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5},
		} {
			a.LR, a.Beta1, a.Beta2, a.Eps, a.WeightDecay = f32(a.LR), f32(a.Beta1), f32(a.Beta2), f32(a.Eps), f32(a.WeightDecay)
			name := fmt.Sprintf("%v %+v", op, a)
			p := randf(r, n, n)
			wantP, gotP := slices.Clone(p), slices.Clone(p)
			wantM, gotM := make([]float32, n), make([]float32, n)
			wantV, gotV := make([]float32, n), make([]float32, n)
			for step := 1; step <= 5; step++ {
				g := randf(r, n, n)
				ctx := &ops.Ctx[float32]{LossScale: 1, Step: step}
				run(op, &a, ctx, []*ops.Buf[float32]{fbuf(wantP, n), fbuf(g, n), fbuf(wantM, n), fbuf(wantV, n)})
				AdamStep(Geom{3, 64}, gotP, g, gotM, gotV, n, float32(a.LR), float32(a.Beta1), float32(a.Beta2), float32(a.Eps), float32(a.WeightDecay), step, b2i(w), []float32{0})
				checkClose(t, fmt.Sprintf("param step %d %s", step, name), gotP, wantP, n)
				checkClose(t, fmt.Sprintf("m step %d %s", step, name), gotM, wantM, n)
				checkClose(t, fmt.Sprintf("v step %d %s", step, name), gotV, wantV, n)
			}
		}
	}
}

// ---- data and evaluation ----

// TestConcatNarrow: Concat as two gorun_copy_slice launches and Narrow as
// one, against ops, bit for bit, on [N, A, …] with trailing dimensions and
// without, N = 0 included.
func TestConcatNarrow(t *testing.T) {
	r := newRand(22)
	for _, n := range []int{0, 1, 3, 7} {
		for _, inner := range [][]int{nil, {5}, {2, 3}} {
			in := 1
			for _, v := range inner {
				in *= v
			}
			const A, B = 3, 4
			capN := n + 2
			as := append([]int{n, A}, inner...)
			bs := append([]int{n, B}, inner...)
			zs := append([]int{n, A + B}, inner...)
			name := fmt.Sprintf("n=%d inner=%v", n, inner)
			la, lb := A*in, B*in
			x, y := randf(r, n*la, capN*la), randf(r, n*lb, capN*lb)
			want, got := nans(capN*(la+lb)), nans(capN*(la+lb))
			run(ops.Concat, nil, nil, []*ops.Buf[float32]{fbuf(x, as...), fbuf(y, bs...)}, fbuf(want, zs...))
			CopySlice(Elementwise(n*la), x, got, n, la, la, 0, la+lb, 0)
			CopySlice(Geom{2, 32}, y, got, n, lb, lb, 0, la+lb, la)
			checkExact(t, "concat "+name, got, want, n*(la+lb))
			checkTail(t, "concat "+name, got, n*(la+lb))

			for _, sl := range [][2]int{{0, A}, {A, B}, {1, 2}, {A + B - 1, 1}} {
				off, l := sl[0], sl[1]
				ys := append([]int{n, l}, inner...)
				want, got := nans(capN*l*in), nans(capN*l*in)
				src := randf(r, n*(la+lb), capN*(la+lb))
				run(ops.Narrow, &ops.Attrs{Offset: off}, nil, []*ops.Buf[float32]{fbuf(src, zs...)}, fbuf(want, ys...))
				CopySlice(geoms(n * l * in)[0], src, got, n, l*in, la+lb, off*in, l*in, 0)
				checkExact(t, fmt.Sprintf("narrow %s offset %d length %d", name, off, l), got, want, n*l*in)
				checkTail(t, "narrow "+name, got, n*l*in)
			}
		}
	}
}

// TestNarrowGradPositions: NarrowGrad as the CUDA device runs it (dx
// cleared, then gorun_copy_slice) and Positions, against ops.
func TestNarrowGradPositions(t *testing.T) {
	r := newRand(26)
	for _, n := range []int{0, 1, 3} {
		const S, inner = 7, 3
		for _, sl := range [][2]int{{0, S}, {2, 3}, {S - 1, 1}} {
			off, l := sl[0], sl[1]
			name := fmt.Sprintf("n=%d offset=%d length=%d", n, off, l)
			dy := randf(r, n*l*inner, (n+1)*l*inner)
			want := nans((n + 1) * S * inner)
			run(ops.NarrowGrad, &ops.Attrs{Offset: off}, nil, []*ops.Buf[float32]{fbuf(dy, n, l, inner)}, fbuf(want, n, S, inner))
			got := nans((n + 1) * S * inner)
			clear(got[:n*S*inner])
			CopySlice(Geom{2, 32}, dy, got, n, l*inner, l*inner, 0, S*inner, off*inner)
			checkExact(t, "narrow_grad "+name, got, want, n*S*inner)
			checkTail(t, "narrow_grad "+name, got, n*S*inner)
		}
		for _, tt := range []int{1, 5} {
			want := make([]int32, (n+1)*tt)
			run(ops.Positions, nil, nil, []*ops.Buf[float32]{fbuf(nil, n, tt, 4)}, ibuf(want, n, tt))
			got := slices.Repeat([]int32{-7}, (n+1)*tt)
			Positions(Geom{2, 3}, got, n, tt)
			if !slices.Equal(got[:n*tt], want[:n*tt]) || slices.ContainsFunc(got[n*tt:], func(v int32) bool { return v != -7 }) {
				t.Errorf("positions n=%d t=%d: %v, want %v", n, tt, got, want[:n*tt])
			}
		}
	}
}

// TestClipGradNorm: the sum of squares in chunks (gorun_bn_partial in
// GORUN_BN_SUMS mode over [1, 1, n]) and gorun_clip_grad_norm against
// ops.ClipGradNorm, clipping and not, one chunk and several, odd grids
// (every block adds the partials itself), n = 0, and a NaN gradient.
func TestClipGradNorm(t *testing.T) {
	r := newRand(27)
	for _, n := range []int{0, 1, 1000, 30011} {
		for _, maxNorm := range []float64{f32(0.5), 1e6} {
			for _, s := range []int{1, 4} {
				for _, bad := range []bool{false, true} {
					if bad && n == 0 {
						continue
					}
					name := fmt.Sprintf("n=%d max_norm=%v s=%d nan=%v", n, maxNorm, s, bad)
					x := randf(r, n, n+1)
					if bad {
						x[n/2] = float32(math.NaN())
					}
					want := slices.Clone(x)
					run(ops.ClipGradNorm, &ops.Attrs{MaxNorm: maxNorm}, nil, []*ops.Buf[float32]{fbuf(want, n)})
					for _, geo := range []Geom{{3, 64}, {1, 256}} {
						got := slices.Clone(x)
						part := make([]float64, 2*s+1)
						for i := range part {
							part[i] = math.NaN()
						}
						BNPartial(Geom{2, 64}, got, nil, nil, part, 1, 1, n, s, (n+s-1)/s, BNSums)
						if !math.IsNaN(part[2*s]) {
							t.Errorf("clip_grad_norm %s: a partial past the end written", name)
						}
						ClipGradNorm(geo, got, part[s:], n, s, float32(maxNorm), []float32{0})
						checkClose(t, fmt.Sprintf("clip_grad_norm %s geom=%v", name, geo), got, want, n)
						checkTail(t, "clip_grad_norm "+name, got, n)
					}
				}
			}
		}
	}
}

// TestPermute: gorun_permute against ops.Permute for every permutation
// that keeps the batch first of ranks 2 to 4, a rank-6 one, and N = 0.
func TestPermute(t *testing.T) {
	r := newRand(23)
	perms := [][]int{{0, 1}, {0, 2, 1}, {0, 1, 2}, {0, 2, 1, 3}, {0, 3, 1, 2}, {0, 2, 3, 1}, {0, 3, 2, 1}, {0, 1, 3, 2}, {0, 5, 3, 1, 4, 2}}
	dimsOf := []int{3, 4, 2, 5, 3, 2}
	for _, n := range []int{0, 1, 3} {
		for _, p := range perms {
			rk := len(p)
			shape := append([]int{n}, dimsOf[1:rk]...)
			total := 1
			for _, v := range shape {
				total *= v
			}
			var perm [ops.MaxPermRank]int8
			yshape := make([]int, rk)
			for i, v := range p {
				perm[i] = int8(v)
				yshape[i] = shape[v]
			}
			name := fmt.Sprintf("shape=%v perm=%v", shape, p)
			x := randf(r, total, total+4)
			want := nans(total + 4)
			run(ops.Permute, &ops.Attrs{Perm: perm}, nil, []*ops.Buf[float32]{fbuf(x, shape...)}, fbuf(want, yshape...))
			// y's dimensions and their strides in x, padded in front.
			xs := make([]int, rk)
			s := 1
			for i := rk - 1; i >= 0; i-- {
				xs[i] = s
				s *= shape[i]
			}
			var dims, strides [6]int
			for i := range 6 - rk {
				dims[i] = 1
			}
			for i, v := range p {
				dims[6-rk+i], strides[6-rk+i] = shape[v], xs[v]
			}
			for _, geo := range geoms(total) {
				got := nans(total + 4)
				Permute(geo, x, got, total, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
					strides[0], strides[1], strides[2], strides[3], strides[4], strides[5])
				checkExact(t, "permute "+name, got, want, total)
				checkTail(t, "permute "+name, got, total)
			}
		}
	}
}

// TestEmbedding: the lookup (ids out of range give zeros) and the weight
// gradient (in input order: the CPU's bits; out-of-range ids add nothing;
// accumulate on and off; buckets of one row, several and all) against
// ops, repeated ids included, N = 0 too.
func TestEmbedding(t *testing.T) {
	r := newRand(24)
	for _, n := range []int{0, 1, 7, 300} {
		for _, vd := range [][2]int{{1, 1}, {5, 3}, {50, 8}} {
			v, d := vd[0], vd[1]
			name := fmt.Sprintf("n=%d v=%d d=%d", n, v, d)
			ids := slices.Repeat([]int32{-7}, n+2)
			for i := range n {
				ids[i] = int32(r.IntN(v+2) - 1) // -1 and v: out of range
			}
			w := randf(r, v*d, v*d)
			want, got := nans((n+2)*d), nans((n+2)*d)
			run(ops.Embedding, nil, nil, []*ops.Buf[float32]{ibuf(ids, n), fbuf(w, v, d)}, fbuf(want, n, d))
			Embedding(Geom{2, 32}, ids, w, got, n, v, d)
			checkExact(t, "embedding "+name, got, want, n*d)
			checkTail(t, "embedding "+name, got, n*d)

			dy := randf(r, n*d, (n+2)*d)
			for _, acc := range []bool{false, true} {
				init := randf(r, v*d, v*d)
				want := slices.Clone(init)
				run(ops.EmbeddingGradWeight, &ops.Attrs{Accumulate: acc}, nil, []*ops.Buf[float32]{fbuf(dy, n, d), ibuf(ids, n)}, fbuf(want, v, d))
				for _, per := range []int{1, 3, v} {
					buckets := (v + per - 1) / per
					for _, geo := range []Geom{Elementwise(buckets * d), {1, 7}} {
						got := append(slices.Clone(init), float32(math.NaN()))
						EmbeddingGrad(geo, ids, dy, got, n, v, d, per, b2i(acc))
						checkExact(t, fmt.Sprintf("embedding_grad_weight %s accumulate=%v rows_per=%d geom=%v", name, acc, per, geo), got, want, v*d)
						checkTail(t, "embedding_grad_weight "+name, got, v*d)
					}
				}
			}
		}
	}
}

func TestGatherRows(t *testing.T) {
	r := newRand(11)
	const srcRows, cols = 10, 7
	src := randf(r, srcRows*cols, srcRows*cols)
	isrc := make([]int32, srcRows)
	for i := range isrc {
		isrc[i] = int32(r.IntN(1000))
	}
	for _, rows := range []int{1, 5, 23} {
		idx := make([]int32, rows)
		for i := range idx {
			idx[i] = int32(r.IntN(srcRows))
		}
		for _, geo := range geoms(rows * cols) {
			dst := nans(rows*cols + 3)
			GatherRows(geo, src, idx, dst, rows, cols)
			for i, j := range idx {
				checkExact(t, fmt.Sprintf("gather_rows row %d", i), dst[i*cols:], src[int(j)*cols:], cols)
			}
			checkTail(t, "gather_rows", dst, rows*cols)
			idst := slices.Repeat([]int32{-7}, rows+1)
			GatherRowsInt(geo, isrc, idx, idst, rows, 1)
			for i, j := range idx {
				if idst[i] != isrc[j] {
					t.Fatalf("gather_rows_int row %d = %d, want %d", i, idst[i], isrc[j])
				}
			}
			if idst[rows] != -7 {
				t.Errorf("gather_rows_int wrote past the live rows")
			}
		}
	}
}

func TestCountCorrect(t *testing.T) {
	r := newRand(12)
	for _, n := range []int{0, 1, 7, 700} {
		for _, c := range []int{1, 3, 10} {
			x := make([]float32, max(n*c, 1))
			for i := range n * c {
				x[i] = float32(r.IntN(4)) // ties: the first maximum wins
			}
			target := make([]int32, max(n, 1))
			want := 0
			for i := range n {
				target[i] = int32(r.IntN(c))
				row, best := x[i*c:(i+1)*c], 0
				for j := 1; j < c; j++ {
					if row[j] > row[best] {
						best = j
					}
				}
				if int32(best) == target[i] {
					want++
				}
			}
			count := []int32{-1}
			CountCorrect(OneBlock, x, target, count, n, c, 0)
			if int(count[0]) != want {
				t.Errorf("count_correct n=%d c=%d = %d, want %d", n, c, count[0], want)
			}
			count[0] = 5
			CountCorrect(OneBlock, x, target, count, n, c, 1)
			if int(count[0]) != want+5 {
				t.Errorf("count_correct accumulate n=%d c=%d = %d, want %d", n, c, count[0], want+5)
			}
		}
	}
}

func TestSum(t *testing.T) {
	r := newRand(13)
	for _, n := range []int{0, 1, 7, 1000, 100003} {
		x := randf(r, n, n+1)
		var want float64
		for _, v := range x[:n] {
			want += float64(v)
		}
		got := []float32{-1}
		Sum(OneBlock, x, got, n, 0)
		checkClose(t, fmt.Sprintf("sum n=%d", n), got, []float32{float32(want)}, 1)
		got[0] = 1.5
		Sum(OneBlock, x, got, n, 1)
		checkClose(t, fmt.Sprintf("sum accumulate n=%d", n), got, []float32{float32(want + 1.5)}, 1)
	}
}
