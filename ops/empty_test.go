package ops

import "testing"

// TestEmptyBatch runs every forward and backward kernel on a live batch of
// zero samples (a rank with nothing left to feed, train(uneven = "zero")):
// nothing may panic, weight and bias gradients are zero and losses are 0.
func TestEmptyBatch(t *testing.T) {
	for i := range gradCases {
		gc := &gradCases[i]
		t.Run(gc.name, func(t *testing.T) {
			f := newFixture(t, gc, Kernels32)
			// The buffers keep their capacity; the live batch becomes 0.
			empty := func(b *Buf[float32], batched bool) {
				if b != nil && batched {
					b.Shape[0] = 0
				}
			}
			for j, b := range f.in {
				empty(b, batchedIn(gc.op, j))
			}
			for j, b := range f.out {
				empty(b, batchedOut(gc.op, j))
			}
			empty(f.dy, batchedOut(gc.op, 0))
			for j, st := range gc.bwd {
				empty(f.bout[j], st.batched || st.tmp == nil && batchedIn(gc.op, st.wrt))
			}
			f.forward()
			if isLoss(gc.op) && f.out[0].Data[0] != 0 {
				t.Errorf("loss over no samples = %v, want 0", f.out[0].Data[0])
			}
			for j, st := range gc.bwd {
				f.backward(j, &gc.attrs)
				if st.batched || st.tmp == nil && batchedIn(gc.op, st.wrt) {
					continue
				}
				for _, v := range f.bout[j].Data[:f.bout[j].Len()] {
					if v != 0 {
						t.Errorf("%v over no samples wrote %v, want 0", st.op, v)
						break
					}
				}
			}
		})
	}
}
