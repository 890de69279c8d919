package cuda

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"gorun/ops"
)

// ltMatmulRef is a reference cublasLtMatmul of c with the epilogue BIAS
// or DEFAULT, β = 0: D[i, j] = Σ op(A)[i, l]·op(B)[l, j] (+ bias[i]),
// reading each matrix through its layout (column-major, element (r, s) at
// r + s·LD) and failing on a layout too small for the product.
func ltMatmulRef(t *testing.T, c ltCall, a, b, bias []float32) []float32 {
	t.Helper()
	m, n := c.C.Rows, c.C.Cols
	k := c.A.Cols
	if c.TransA {
		k = c.A.Rows
	}
	opA := func(i, l int) float32 {
		if c.TransA {
			return a[l+i*c.A.LD]
		}
		return a[i+l*c.A.LD]
	}
	opB := func(l, j int) float32 {
		if c.TransB {
			return b[j+l*c.B.LD]
		}
		return b[l+j*c.B.LD]
	}
	if c.A.LD < c.A.Rows || c.B.LD < c.B.Rows || c.C.LD < m || (c.TransB && c.B.Cols != k) || (!c.TransB && c.B.Rows != k) {
		t.Fatalf("inconsistent layouts %+v", c)
	}
	d := make([]float32, c.C.LD*n)
	for j := range n {
		for i := range m {
			var s float32
			for l := range k {
				s += opA(i, l) * opB(l, j)
			}
			if c.Epilogue == ltEpilogueBias {
				s += bias[i]
			}
			d[i+j*c.C.LD] = s
		}
	}
	return d
}

// TestLtLinearCall: ops.Linear with a bias as one cuBLASLt matmul — the
// layouts and the BIAS epilogue that linearBiasCall builds, run by a
// reference column-major matmul over the row-major operands (w first: the
// operands are swapped), give ops.Linear's y for odd sizes; the bias is
// C's rows (the output features). Batched and empty products stay with
// cuBLAS.
func TestLtLinearCall(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 1))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 4, 9}, {2, 33, 1}} {
		n, in, o := sz[0], sz[1], sz[2]
		c, ok := linearBiasCall(n, in, o, 64, ltCompute32F)
		if !ok || c.Epilogue != ltEpilogueBias || !c.SwapOperands || c.C.Rows != o || c.C.Cols != n || c.Align != 64 {
			t.Fatalf("n=%d i=%d o=%d: %+v, %v", n, in, o, c, ok)
		}
		x, w, bias := randFloats(r, n*in), randFloats(r, o*in), randFloats(r, o)
		got := ltMatmulRef(t, c, w, x, bias) // the call's A is the row-major B (w)
		want := make([]float32, n*o)
		ops.Kernels32[ops.Linear](&ops.Ctx[float32]{LossScale: 1}, &ops.Attrs{},
			[]*ops.Buf[float32]{{Data: x, Shape: []int{n, in}}, {Data: w, Shape: []int{o, in}}, {Data: bias, Shape: []int{o}}},
			[]*ops.Buf[float32]{{Data: want, Shape: []int{n, o}}})
		for e := range want {
			if d := got[e] - want[e]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("n=%d i=%d o=%d: y[%d] = %v, ops.Linear %v", n, in, o, e, got[e], want[e])
			}
		}
	}
	if _, ok := linearBiasCall(0, 3, 4, 256, ltCompute32F); ok {
		t.Error("an empty batch goes to cuBLASLt")
	}
	if _, ok := ltCallFor(rowMajorGemmBatched(false, false, 2, 2, 2, 2, 2, 2, 3, 4, 4, 4), ltEpilogueDefault); ok {
		t.Error("a batched product goes to cuBLASLt")
	}
}

// TestLtAlignment: the heuristic is told the alignment the operands have,
// never more than cuBLASLt's default 256 bytes; an absent bias counts for
// nothing.
func TestLtAlignment(t *testing.T) {
	for _, c := range []struct {
		ptrs []uintptr
		want int
	}{
		{[]uintptr{0x7f0000000000, 0x7f0000001000}, 256},
		{[]uintptr{0x7f0000000000, 0x7f0000000040, 0}, 64},
		{[]uintptr{0x7f0000000100, 0x7f0000000104}, 4},
		{[]uintptr{0x7f0000000010}, 16},
		{nil, 256},
	} {
		if got := ltAlignment(c.ptrs...); got != c.want {
			t.Errorf("ltAlignment(%#x) = %d, want %d", c.ptrs, got, c.want)
		}
	}
}

// TestLtCompute: the cuBLASLt matmul computes as the cuBLAS call it
// replaces: a mixed-precision step's compute type, TF32 under [cuda] tf32,
// else plain float32.
func TestLtCompute(t *testing.T) {
	if ltCompute(0, false) != 68 || ltCompute(0, true) != 77 || ltCompute(75, true) != 75 || ltCompute(74, false) != 74 {
		t.Errorf("ltCompute: %d %d %d %d", ltCompute(0, false), ltCompute(0, true), ltCompute(75, true), ltCompute(74, false))
	}
}

// TestLtNotes: a fallback reason is said once per device, on one line.
func TestLtNotes(t *testing.T) {
	var b bytes.Buffer
	n := &ltNotes{w: &b}
	n.fallback("cuda:0", "cannot load cuBLASLt")
	n.fallback("cuda:0", "cannot load cuBLASLt")
	n.fallback("cuda:0", "no cuBLASLt algorithm for 3×5·5×7 with a bias")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "gorun: cuda:0: cannot load cuBLASLt; linear layers run cuBLAS SGEMM") {
		t.Errorf("notes:\n%s", b.String())
	}
}

func randFloats(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(2*r.Float64() - 1)
	}
	return s
}
