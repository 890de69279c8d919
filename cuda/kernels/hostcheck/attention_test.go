//go:build cgo

package hostcheck

import (
	"fmt"
	"math"
	"testing"

	"gorun/ops"
)

// attentionBlocks is kernels.h's ATTENTION(m) for the attention kernels:
// one block of GORUN_ATT_THREADS threads per tile of GORUN_ATT_TILE rows of
// each sample and head.
func attentionBlocks(n, t, h int) Geom {
	return Geom{max(1, n*h*((t+AttTile-1)/AttTile)), AttThreads}
}

// TestAttention runs the fused attention kernels (gorun_attention,
// gorun_attention_grad_q, gorun_attention_grad_kv: the scalar tiling of
// FlashAttention-2; the bf16 tensor-core kernels' tiling, gorun_attention_bf16
// and gorun_attention_bf16_grad_q/_kv, their products done here by scalar
// loops on the same bf16 values, within bf16's precision, and within float32
// rounding of ops.Attention and ops.AttentionGrad with Precision BF16,
// which define them) against ops.Attention and ops.AttentionGrad on odd
// sizes: T not a multiple of the tile (and T = 1), head dimensions 3, 5,
// 24, 64 and the largest (GORUN_ATT_DMAX), N·H odd, causal and not, a live
// batch smaller than the buffers (NaN tails stay untouched), one block per
// tile and a smaller grid (the blocks' grid stride).
func TestAttention(t *testing.T) {
	if AttDmax != ops.AttentionMaxHeadDim {
		t.Fatalf("GORUN_ATT_DMAX %d, ops.AttentionMaxHeadDim %d: they must agree", AttDmax, ops.AttentionMaxHeadDim)
	}
	r := newRand(26)
	for _, c := range []struct {
		n, capN, t, h, dh int
		causal            bool
	}{
		{1, 2, 1, 1, 3, true},
		{3, 3, 1, 1, 5, false},
		{3, 4, 37, 1, 24, true},
		{1, 1, 20, 5, 24, false},
		{1, 2, 67, 3, 64, true},
		{1, 1, 33, 3, 5, true},
		{1, 1, 17, 1, ops.AttentionMaxHeadDim, true},
		{1, 1, 18, 1, ops.AttentionMaxHeadDim, false},
	} {
		name := fmt.Sprintf("N=%d T=%d H=%d dh=%d causal=%v", c.n, c.t, c.h, c.dh, c.causal)
		a := &ops.Attrs{Causal: c.causal}
		shape := []int{c.n, c.t, 3, c.h, c.dh}
		oShape, lseShape := []int{c.n, c.t, c.h * c.dh}, []int{c.n, c.h, c.t}
		live, cap3 := c.n*c.t*3*c.h*c.dh, c.capN*c.t*3*c.h*c.dh
		oLive, oCap := c.n*c.t*c.h*c.dh, c.capN*c.t*c.h*c.dh
		lLive, lCap := c.n*c.h*c.t, c.capN*c.h*c.t
		qkv, dout := randf(r, live, cap3), randf(r, oLive, oCap)
		for i := range live {
			qkv[i] *= 2 // scores of a few units: a softmax far from uniform
		}

		cpu := &ops.Ctx[float32]{LossScale: 1, Step: 1}
		cpu.Work = make([]float32, max(ops.Workspace(ops.Attention, a, [][]int{shape}, [][]int{oShape, lseShape}),
			ops.Workspace(ops.AttentionGrad, a, [][]int{oShape, shape, oShape, lseShape}, [][]int{shape})))
		wantO, wantL := nans(oCap), nans(lCap)
		run(ops.Attention, a, cpu, []*ops.Buf[float32]{fbuf(qkv, shape...)}, fbuf(wantO, oShape...), fbuf(wantL, lseShape...))
		wantD := nans(cap3)
		run(ops.AttentionGrad, a, cpu, []*ops.Buf[float32]{fbuf(dout, oShape...), fbuf(qkv, shape...), fbuf(wantO, oShape...), fbuf(wantL, lseShape...)},
			fbuf(wantD, shape...))

		// The bf16 fused attention as ops defines it (ops/attention_bf16.go),
		// its backward from the fp32 op's o and lse as the kernels' below.
		ab := &ops.Attrs{Causal: c.causal, Precision: ops.BF16}
		bfO, bfL, bfD := nans(oCap), nans(lCap), nans(cap3)
		run(ops.Attention, ab, cpu, []*ops.Buf[float32]{fbuf(qkv, shape...)}, fbuf(bfO, oShape...), fbuf(bfL, lseShape...))
		run(ops.AttentionGrad, ab, cpu, []*ops.Buf[float32]{fbuf(dout, oShape...), fbuf(qkv, shape...), fbuf(wantO, oShape...), fbuf(wantL, lseShape...)},
			fbuf(bfD, shape...))

		scale := float32(1 / math.Sqrt(float64(c.dh)))
		for _, geo := range []Geom{attentionBlocks(c.n, c.t, c.h), {2, AttThreads}} {
			what := fmt.Sprintf("%s geom=%v", name, geo)
			o, lse := nans(oCap), nans(lCap)
			Attention(geo, qkv, o, lse, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			checkAttn(t, "attention o "+what, o, wantO, oLive)
			checkTail(t, "attention o "+what, o, oLive)
			checkAttn(t, "attention lse "+what, lse, wantL, lLive)
			checkTail(t, "attention lse "+what, lse, lLive)

			// The bf16 tensor-core kernel's tiling (scalar products of
			// bf16-rounded q, k, v and p here): within bf16's precision
			// (8 bits) of the fp32 op.
			ob, lseb := nans(oCap), nans(lCap)
			AttentionBf16(geo, qkv, ob, lseb, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			checkBF16(t, "attention_bf16 o "+what, ob, wantO, oLive)
			checkTail(t, "attention_bf16 o "+what, ob, oLive)
			checkBF16(t, "attention_bf16 lse "+what, lseb, wantL, lLive)
			checkTail(t, "attention_bf16 lse "+what, lseb, lLive)

			db := nans(cap3)
			AttentionBf16GradQ(geo, dout, qkv, wantO, wantL, db, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			AttentionBf16GradKv(geo, dout, qkv, wantO, wantL, db, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			checkBF16(t, "attention_bf16_grad dqkv "+what, db, wantD, live)
			checkTail(t, "attention_bf16_grad dqkv "+what, db, live)

			// And against the op they implement, ops.Attention and
			// ops.AttentionGrad with Precision BF16 (the same bf16
			// operands, fp32 sums in the same order): within float32
			// rounding.
			checkNear(t, "attention_bf16 o vs ops bf16 "+what, ob, bfO, oLive)
			checkNear(t, "attention_bf16 lse vs ops bf16 "+what, lseb, bfL, lLive)
			checkNear(t, "attention_bf16_grad dqkv vs ops bf16 "+what, db, bfD, live)

			// The backward from the CPU's o and lse, both kernels into
			// one dqkv: q's part from the first, k's and v's from the
			// second.
			d := nans(cap3)
			AttentionGradQ(geo, dout, qkv, wantO, wantL, d, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			AttentionGradKv(geo, dout, qkv, wantO, wantL, d, c.n, c.t, c.h, c.dh, b2i(c.causal), scale)
			checkAttn(t, "attention dqkv "+what, d, wantD, live)
			checkTail(t, "attention dqkv "+what, d, live)
		}
	}
}

// checkAttn is checkClose (|got − want| ≤ 1e-5·max(|want|, 1)) that also
// logs the largest error: the kernels' dot products and tile sums run in
// another order than the CPU's GEMMs, and dq, dk and dv sum over tiles of
// 16 rows rather than 64.
func checkAttn(t *testing.T, what string, got, want []float32, n int) {
	t.Helper()
	worst := 0.0
	for i := range n {
		g, w := float64(got[i]), float64(want[i])
		e := math.Abs(g-w) / math.Max(math.Abs(w), 1)
		if !(e <= 1e-5) {
			t.Errorf("%s: element %d = %v, want %v (of %d)", what, i, g, w, n)
			return
		}
		worst = max(worst, e)
	}
	t.Logf("%s: largest error %.2g", what, worst)
}

// checkNear compares the bf16 kernels with the op they implement:
// |got − want| ≤ 1e-4·max(|want|, 1). The same bf16 operands and the same
// order of float32 sums (on these cases, with glibc's expf, they agree bit
// for bit); expf against Go's exp may differ in the last bit, which now
// and then moves a probability to the neighbouring bfloat16.
func checkNear(t *testing.T, what string, got, want []float32, n int) {
	t.Helper()
	worst := 0.0
	for i := range n {
		g, w := float64(got[i]), float64(want[i])
		e := math.Abs(g-w) / math.Max(math.Abs(w), 1)
		if !(e <= 1e-4) {
			t.Errorf("%s: element %d = %v, want %v (of %d)", what, i, g, w, n)
			return
		}
		worst = max(worst, e)
	}
	t.Logf("%s: largest error %.2g", what, worst)
}

// checkBF16 compares the first n elements within bf16's precision:
// |got − want| ≤ 2e-2·max(|want|, 1) (q, k, v and the probabilities are
// rounded to 8 significant bits), and fails when got equals want
// everywhere (the rounding did not happen), unless n is tiny.
func checkBF16(t *testing.T, what string, got, want []float32, n int) {
	t.Helper()
	worst := 0.0
	for i := range n {
		g, w := float64(got[i]), float64(want[i])
		e := math.Abs(g-w) / math.Max(math.Abs(w), 1)
		if !(e <= 2e-2) {
			t.Errorf("%s: element %d = %v, want %v (of %d)", what, i, g, w, n)
			return
		}
		worst = max(worst, e)
	}
	if worst == 0 && n > 8 {
		t.Errorf("%s: the same bits as fp32 in all %d elements: no bf16 rounding", what, n)
	}
	t.Logf("%s: largest error %.2g", what, worst)
}
