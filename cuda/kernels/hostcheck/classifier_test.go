package hostcheck

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"gorun/ops"
)

// TestCrossEntropyFused: the fused classifier (gorun_cross_entropy_fused
// and gorun_cross_entropy_fused_loss) against ops.CrossEntropy then
// ops.CrossEntropyGrad (the unfused plan's ops) — loss and dlogits within
// 1e-5, rows of 1, 3, 10, 300 and 1000 classes (fewer and more than a
// block's threads), 1, 3, 7 and 20 rows, label smoothing 0, 0.1 and (10 classes) 1, no
// ignore_index, -100 (some targets) and 1 (a class), accumulate on and
// off, one block for every row, three and (3 rows) one per row; dx written
// only for the live rows, the same bits on a second run, dx in place of
// the logits, a target out of range (NaN loss) and an empty batch.
func TestCrossEntropyFused(t *testing.T) {
	r := newRand(26)
	const scale = 1.0 / 7
	ignores := []struct {
		has   bool
		index int
	}{{false, 0}, {true, -100}, {true, 1}}
	for _, n := range []int{1, 3, 7, 20} {
		for _, c := range []int{1, 3, 10, 300, 1000} {
			for _, ig := range ignores {
				name := fmt.Sprintf("n=%d c=%d ignore=%v", n, c, ig)
				capN := n + 3
				logits := randf(r, n*c, capN*c)
				for i := range n * c {
					logits[i] *= 5
				}
				target := slices.Repeat([]int32{-7}, capN)
				for i := range n {
					target[i] = int32(r.IntN(c))
					if ig.index == -100 && r.IntN(3) == 0 {
						target[i] = -100
					}
				}
				ctx := &ops.Ctx[float32]{LossScale: f32(scale), Step: 1, Work: make([]float32, 2*capN)}
				dloss := []float32{0.7}
				geoms := []Geom{OneBlock, {3, 256}}
				if n == 3 {
					geoms = append(geoms, BlockPer(n))
				}
				for _, eps := range []float64{0, f32(0.1), 1} {
					if eps == 1 && c != 10 {
						continue // all smoothing: one size is enough
					}
					ename := fmt.Sprintf("%s smoothing=%v", name, eps)
					attrs := &ops.Attrs{LabelSmoothing: eps, HasIgnore: ig.has, IgnoreIndex: ig.index}
					probs, wantDx := nans(capN*c), nans(capN*c)
					run(ops.CrossEntropy, attrs, ctx, []*ops.Buf[float32]{fbuf(logits, n, c), ibuf(target, n)}, fbuf([]float32{0}, 1), fbuf(probs, n, c))
					run(ops.CrossEntropyGrad, attrs, ctx, []*ops.Buf[float32]{fbuf(dloss, 1), fbuf(probs, n, c), ibuf(target, n)}, fbuf(wantDx, n, c))
					var first []float32
					var rows []float64
					for _, g := range geoms {
						gname := fmt.Sprintf("%s grid=%d", ename, g.Grid)
						dx, rs := nans(capN*c), make([]float64, capN)
						CrossEntropyFused(g, logits, target, dloss, rs, dx, n, c, float32(eps), scale, b2i(ig.has), ig.index)
						checkClose(t, "cross_entropy_fused dx "+gname, dx, wantDx, n*c)
						checkTail(t, "cross_entropy_fused dx "+gname, dx, n*c)
						if first == nil {
							first, rows = dx, rs
						} else {
							checkExact(t, "cross_entropy_fused dx, any grid "+gname, dx, first, n*c)
						}
					}
					for _, acc := range []bool{false, true} {
						aname := fmt.Sprintf("%s accumulate=%v", ename, acc)
						attrs.Accumulate = acc
						wantL, gotL := []float32{0.25}, []float32{0.25}
						run(ops.CrossEntropy, attrs, ctx, []*ops.Buf[float32]{fbuf(logits, n, c), ibuf(target, n)}, fbuf(wantL, 1), fbuf(nans(capN*c), n, c))
						CrossEntropyFusedLoss(OneBlock, rows, gotL, n, scale, b2i(acc))
						checkClose(t, "cross_entropy_fused loss "+aname, gotL, wantL, 1)
					}
					if n == 7 {
						// In place: dx over the logits.
						inPlace := slices.Clone(logits)
						CrossEntropyFused(OneBlock, inPlace, target, dloss, make([]float64, capN), inPlace, n, c, float32(eps), scale, b2i(ig.has), ig.index)
						checkExact(t, "cross_entropy_fused in place "+ename, inPlace, first, n*c)
					}
				}
			}
		}
	}

	// A target out of range makes the loss NaN; an empty batch adds 0.
	logits := []float32{-1, -2, -3}
	dx, rows, loss := nans(3), []float64{0}, []float32{5}
	for _, eps := range []float32{0, 0.1} {
		CrossEntropyFused(OneBlock, logits, []int32{-1}, []float32{1}, rows, dx, 1, 3, eps, 1, 1, -100)
		CrossEntropyFusedLoss(OneBlock, rows, loss, 1, 1, 0)
		if !isNaN(loss[0]) {
			t.Errorf("cross_entropy_fused (smoothing %v) with target -1 = %v, want NaN", eps, loss[0])
		}
	}
	loss[0], rows[0] = 2, 0
	CrossEntropyFused(OneBlock, logits, []int32{0}, []float32{1}, rows, dx, 0, 3, 0.1, 1, 0, 0)
	CrossEntropyFusedLoss(OneBlock, rows, loss, 0, 1, 1)
	if loss[0] != 2 {
		t.Errorf("cross_entropy_fused of an empty batch accumulated into 2 = %v, want 2", loss[0])
	}
	if math.IsNaN(rows[0]) {
		t.Errorf("an empty batch wrote a row's loss")
	}
}
