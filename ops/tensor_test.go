package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestConcatNarrowForward(t *testing.T) {
	a := buf64([]int{2, 1, 2}, 1, 2, 3, 4)
	b := buf64([]int{2, 2, 2}, 5, 6, 7, 8, 9, 10, 11, 12)
	y := buf64([]int{2, 3, 2})
	run64(Concat, nil, nil, []*Buf[float64]{a, b}, []*Buf[float64]{y})
	expectData(t, "concat", y.Data, 1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12)
	n := buf64([]int{2, 2, 2})
	run64(Narrow, &Attrs{Offset: 1}, nil, []*Buf[float64]{y}, []*Buf[float64]{n})
	expectData(t, "narrow", n.Data, 5, 6, 7, 8, 9, 10, 11, 12)
	n1 := buf64([]int{2, 1, 2})
	run64(Narrow, &Attrs{Offset: 2}, nil, []*Buf[float64]{y}, []*Buf[float64]{n1})
	expectData(t, "narrow offset 2", n1.Data, 7, 8, 11, 12)
}

func TestEmbeddingForward(t *testing.T) {
	w := buf64([]int{3, 2}, 1, 2, 3, 4, 5, 6)
	// Ids outside [0, 3) give zero rows and no gradient; nothing past the
	// weight is read or written.
	ids := idx64([]int{2, 2}, 2, -1, 3, 0)
	y := buf64([]int{2, 2, 2}, 9, 9, 9, 9, 9, 9, 9, 9)
	run64(Embedding, nil, nil, []*Buf[float64]{ids, w}, []*Buf[float64]{y})
	expectData(t, "embedding", y.Data, 5, 6, 0, 0, 0, 0, 1, 2)
	dw := buf64([]int{3, 2}, 9, 9, 9, 9, 9, 9)
	dy := buf64([]int{2, 2, 2}, 1, 2, 3, 4, 5, 6, 7, 8)
	run64(EmbeddingGradWeight, &Attrs{}, nil, []*Buf[float64]{dy, ids}, []*Buf[float64]{dw})
	expectData(t, "embedding_grad_weight", dw.Data, 7, 8, 0, 0, 1, 2)
	// Repeated ids add up; Accumulate adds into the gradient.
	ids2 := idx64([]int{3}, 1, 1, 0)
	dy2 := buf64([]int{3, 2}, 1, 1, 2, 2, 4, 4)
	run64(EmbeddingGradWeight, &Attrs{Accumulate: true}, nil, []*Buf[float64]{dy2, ids2}, []*Buf[float64]{dw})
	expectData(t, "embedding_grad_weight accumulated", dw.Data, 11, 12, 3, 3, 1, 2)
}

// TestBatchMatMulFloat32 runs float32 BatchMatMul on matrices large enough
// for the packed GEMM, on a live batch smaller than the buffers, against
// float64.
func TestBatchMatMulFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ ta, tb bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		a := &Attrs{TransA: tc.ta, TransB: tc.tb}
		m, k, n := 17, 23, 19
		as, bs := []int{2, 3, m, k}, []int{2, 3, k, n}
		if tc.ta {
			as[2], as[3] = k, m
		}
		if tc.tb {
			bs[2], bs[3] = n, k
		}
		out, err := Infer(BatchMatMul, a, [][]int{as, bs})
		if err != nil {
			t.Fatal(err)
		}
		mk := func(s []int) (*Buf[float32], *Buf[float64]) {
			// Storage for a batch of 3; the live batch is 2.
			n := 3 * prod(s[1:])
			b32, b64 := &Buf[float32]{Shape: clone(s), Data: make([]float32, n)}, &Buf[float64]{Shape: clone(s), Data: make([]float64, n)}
			for i := range n {
				v := float32(2*r.Float64() - 1)
				b32.Data[i], b64.Data[i] = v, float64(v)
			}
			return b32, b64
		}
		x32, x64 := mk(as)
		y32, y64 := mk(bs)
		z32, z64 := mk(out[0])
		tail := slices.Clone(z32.Data[prod(out[0]):])
		Kernels32[BatchMatMul](&Ctx[float32]{}, a, []*Buf[float32]{x32, y32}, []*Buf[float32]{z32})
		Kernels64[BatchMatMul](&Ctx[float64]{}, a, []*Buf[float64]{x64, y64}, []*Buf[float64]{z64})
		for i := range prod(out[0]) {
			if d := math.Abs(float64(z32.Data[i]) - z64.Data[i]); d > 1e-5*(1+math.Abs(z64.Data[i])) {
				t.Fatalf("trans %v %v: c[%d] = %v, float64 %v", tc.ta, tc.tb, i, z32.Data[i], z64.Data[i])
			}
		}
		if !slices.Equal(tail, z32.Data[prod(out[0]):]) {
			t.Errorf("trans %v %v: wrote past the live batch", tc.ta, tc.tb)
		}
	}
}

func TestPermuteForward(t *testing.T) {
	// [1,2,3] → [1,3,2]: a transpose of each sample's 2×3 matrix.
	x := buf64([]int{1, 2, 3}, 1, 2, 3, 4, 5, 6)
	y := buf64([]int{1, 3, 2})
	run64(Permute, &Attrs{Perm: [6]int8{0, 2, 1}}, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "permute", y.Data, 1, 4, 2, 5, 3, 6)

	p := [6]int8{0, 3, 1, 4, 2}
	if got, want := InversePerm(p, 5), [6]int8{0, 2, 4, 1, 3, 5}; got != want {
		t.Errorf("InversePerm(%v, 5) = %v, want %v", p, got, want)
	}
	if got, want := InversePerm([6]int8{0, 2, 1, 3}, 4), [6]int8{0, 2, 1, 3, 4, 5}; got != want {
		t.Errorf("InversePerm of a swap = %v, want %v", got, want)
	}
}

// Attrs must stay comparable: the engine compares nodes' attributes.
var _ = map[Attrs]bool{{Perm: [MaxPermRank]int8{0, 2, 1, 3}}: true}
