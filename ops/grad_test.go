package ops

import (
	"math"
	"testing"
)

// TestGradCheckCoversOps fails when a forward op has no gradient check, or
// a backward op is never exercised by one.
func TestGradCheckCoversOps(t *testing.T) {
	fwd := map[Op]bool{}
	bwd := map[Op]bool{}
	for _, gc := range gradCases {
		fwd[gc.op] = true
		for _, d := range gc.derive {
			fwd[d.op] = true
		}
		for _, st := range gc.bwd {
			bwd[st.op] = true
		}
	}
	for _, op := range All() {
		d := Lookup(op)
		if d.Forward() && !fwd[op] {
			t.Errorf("forward op %v has no gradient check", op)
		}
		// Every op that is neither a forward op nor an in-place update is
		// a backward op.
		// CrossEntropyFused (loss and dx, both outputs of one backward
		// op) has its own: TestCrossEntropyFusedGradient.
		// LinearGradInputGELU (LinearGradInput then GELUGrad, both checked
		// here) and LinearGradWeightBias (LinearGradWeight then
		// LinearGradBias) have their own: TestLinearGradInputGELUMatchesUnfused,
		// TestLinearGradWeightBiasMatchesUnfused.
		if !d.Forward() && !d.InPlace && !bwd[op] && op != CrossEntropyFused && op != LinearGradInputGELU && op != LinearGradWeightBias {
			t.Errorf("backward op %v is not exercised by any gradient check", op)
		}
	}
}

// TestGradCheck compares every backward kernel with central differences of
// Σ dy ⊙ forward(x) in float64, on a live batch that is sometimes smaller
// than the buffers. It also checks that kernels write all of their live
// outputs and nothing past them, and that weight and bias gradients
// accumulate when asked.
func TestGradCheck(t *testing.T) {
	for i := range gradCases {
		gc := &gradCases[i]
		t.Run(gc.name, func(t *testing.T) {
			f := newFixture(t, gc, Kernels64)
			f.forward()
			for i, o := range f.out {
				checkWritten(t, gc.op.String()+" output "+string(rune('0'+i)), o)
			}
			analytic := make([][]float64, len(gc.bwd))
			for i, st := range gc.bwd {
				f.backward(i, &gc.attrs)
				checkWritten(t, st.op.String(), f.bout[i])
				analytic[i] = append([]float64(nil), f.bout[i].Data[:f.bout[i].Len()]...)
				if accumulates(st.op) {
					checkAccumulate(t, f, i, analytic[i])
				}
			}
			const h = 1e-5
			for i, st := range gc.bwd {
				if st.tmp != nil {
					continue // an intermediate, not a gradient
				}
				x := f.in[st.wrt].Data[:f.in[st.wrt].Len()]
				maxErr := 0.0
				for j := range x {
					orig := x[j]
					x[j] = orig + h
					f.forward()
					plus := f.objective()
					x[j] = orig - h
					f.forward()
					minus := f.objective()
					x[j] = orig
					num := (plus - minus) / (2 * h)
					err := math.Abs(num-analytic[i][j]) / (1 + math.Abs(num))
					maxErr = max(maxErr, err)
					if err > 1e-7 {
						t.Errorf("%v: d/d input %d [%d]: backward %.10g, finite difference %.10g", st.op, st.wrt, j, analytic[i][j], num)
						break
					}
				}
				t.Logf("%v: max relative error %.2g over %d elements", st.op, maxErr, len(x))
			}
		})
	}
}

// checkAccumulate reruns backward step i with Accumulate set on an output
// that already holds values, and expects their sum.
func checkAccumulate(t *testing.T, f *fixture[float64], i int, grad []float64) {
	t.Helper()
	a := f.gc.attrs
	a.Accumulate = true
	o := f.bout[i].Data[:f.bout[i].Len()]
	for j := range o {
		o[j] = float64(j) - 0.5
	}
	f.backward(i, &a)
	for j, v := range o {
		if want := float64(j) - 0.5 + grad[j]; math.Abs(v-want) > 1e-12*(1+math.Abs(want)) {
			t.Errorf("%v with Accumulate: element %d = %v, want %v", f.gc.bwd[i].op, j, v, want)
			return
		}
	}
}
