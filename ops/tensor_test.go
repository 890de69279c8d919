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

	// NarrowGrad puts dy back at its offset, zeros around it, over
	// whatever the output held.
	dx := buf64([]int{2, 3, 2}, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)
	run64(NarrowGrad, &Attrs{Offset: 1}, nil, []*Buf[float64]{n1}, []*Buf[float64]{dx})
	expectData(t, "narrow_grad offset 1", dx.Data, 0, 0, 7, 8, 0, 0, 0, 0, 11, 12, 0, 0)
	run64(NarrowGrad, &Attrs{Offset: 1}, nil, []*Buf[float64]{n}, []*Buf[float64]{dx})
	expectData(t, "narrow_grad offset 1 to the end", dx.Data, 0, 0, 5, 6, 7, 8, 0, 0, 9, 10, 11, 12)
	run64(NarrowGrad, &Attrs{Offset: 0}, nil, []*Buf[float64]{a}, []*Buf[float64]{dx})
	expectData(t, "narrow_grad offset 0", dx.Data, 1, 2, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0)
	// A live batch of 1 leaves the second sample alone.
	dx1 := &Buf[float64]{Shape: []int{1, 3, 2}, Data: []float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}}
	dy1 := &Buf[float64]{Shape: []int{1, 1, 2}, Data: n1.Data}
	run64(NarrowGrad, &Attrs{Offset: 2}, nil, []*Buf[float64]{dy1}, []*Buf[float64]{dx1})
	expectData(t, "narrow_grad partial batch", dx1.Data, 0, 0, 0, 0, 7, 8, 9, 9, 9, 9, 9, 9)
}

func TestPositionsForward(t *testing.T) {
	// Float input: only its shape counts.
	x := buf64([]int{2, 3, 4})
	p := idx64([]int{2, 3}, -1, -1, -1, -1, -1, -1)
	run64(Positions, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{p})
	if want := []int32{0, 1, 2, 0, 1, 2}; !slices.Equal(p.Idx, want) {
		t.Errorf("positions = %v, want %v", p.Idx, want)
	}
	// Token ids, a live batch of 1 in storage for 2, and an empty batch:
	// nothing past the live batch is written.
	ids := &Buf[float64]{Shape: []int{1, 4}, Idx: []int32{5, 5, 5, 5, 5, 5, 5, 5}}
	p2 := &Buf[float64]{Shape: []int{1, 4}, Idx: []int32{-1, -1, -1, -1, -1, -1, -1, -1}}
	run64(Positions, nil, nil, []*Buf[float64]{ids}, []*Buf[float64]{p2})
	if want := []int32{0, 1, 2, 3, -1, -1, -1, -1}; !slices.Equal(p2.Idx, want) {
		t.Errorf("positions, partial batch = %v, want %v", p2.Idx, want)
	}
	ids.Shape[0], p2.Shape[0] = 0, 0
	clear(p2.Idx)
	run64(Positions, nil, nil, []*Buf[float64]{ids}, []*Buf[float64]{p2})
	if want := make([]int32, 8); !slices.Equal(p2.Idx, want) {
		t.Errorf("positions, empty batch = %v, want %v", p2.Idx, want)
	}
	out, err := Infer(Positions, nil, [][]int{{2, 3, 4}})
	if err != nil || !slices.EqualFunc(out, [][]int{{2, 3}}, slices.Equal) {
		t.Errorf("Infer(positions, [2 3 4]) = %v, %v; want [[2 3]]", out, err)
	}
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

// TestLinearFloat32 runs float32 Linear and its gradients (the SGEMM
// path) on [N,T,I] inputs of odd sizes, on a live batch smaller than the
// buffers, against float64.
func TestLinearFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const capN, n, tt, in, o = 3, 2, 13, 37, 29
	mk := func(batched bool, s ...int) (*Buf[float32], *Buf[float64]) {
		size := prod(s)
		if batched {
			size = capN * prod(s[1:])
		}
		b32, b64 := &Buf[float32]{Shape: s, Data: make([]float32, size)}, &Buf[float64]{Shape: clone(s), Data: make([]float64, size)}
		for i := range size {
			v := float32(2*r.Float64() - 1)
			b32.Data[i], b64.Data[i] = v, float64(v)
		}
		return b32, b64
	}
	x32, x64 := mk(true, n, tt, in)
	w32, w64 := mk(false, o, in)
	b32, b64 := mk(false, o)
	dy32, dy64 := mk(true, n, tt, o)
	y32, y64 := mk(true, n, tt, o)
	dx32, dx64 := mk(true, n, tt, in)
	dw32, dw64 := mk(false, o, in)
	db32, db64 := mk(false, o)
	for _, tc := range []struct {
		op    Op
		in32  []*Buf[float32]
		in64  []*Buf[float64]
		out32 *Buf[float32]
		out64 *Buf[float64]
		live  int
		param bool // a parameter gradient: also run with Accumulate
	}{
		{Linear, []*Buf[float32]{x32, w32, b32}, []*Buf[float64]{x64, w64, b64}, y32, y64, n * tt * o, false},
		{LinearGradInput, []*Buf[float32]{dy32, w32}, []*Buf[float64]{dy64, w64}, dx32, dx64, n * tt * in, false},
		{LinearGradWeight, []*Buf[float32]{dy32, x32}, []*Buf[float64]{dy64, x64}, dw32, dw64, o * in, true},
		{LinearGradBias, []*Buf[float32]{dy32}, []*Buf[float64]{dy64}, db32, db64, o, true},
	} {
		for _, acc := range []bool{false, true} {
			if acc && !tc.param {
				continue
			}
			a := &Attrs{Accumulate: acc}
			tail := slices.Clone(tc.out32.Data[tc.live:])
			Kernels32[tc.op](&Ctx[float32]{}, a, tc.in32, []*Buf[float32]{tc.out32})
			Kernels64[tc.op](&Ctx[float64]{}, a, tc.in64, []*Buf[float64]{tc.out64})
			for i := range tc.live {
				if d := math.Abs(float64(tc.out32.Data[i]) - tc.out64.Data[i]); d > 1e-5*(1+math.Abs(tc.out64.Data[i])) {
					t.Fatalf("%v (accumulate %v): [%d] = %v, float64 %v", tc.op, acc, i, tc.out32.Data[i], tc.out64.Data[i])
				}
			}
			if !slices.Equal(tail, tc.out32.Data[tc.live:]) {
				t.Errorf("%v: wrote past the live batch", tc.op)
			}
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
