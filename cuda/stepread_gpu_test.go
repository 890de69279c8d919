//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"gorun/engine/backend"
)

// TestReadStep: ReadStep's loss is the loss buffer's value and its
// finiteness Finite's, on a long gradient buffer (the split sum's chunks)
// with and without a NaN or an infinity, at either end and inside.
func TestReadStep(t *testing.T) {
	needGPU(t)
	b := newProg()
	loss, grads := b.f("loss", false, 1), b.f("grads", false, 100003)
	pr := loadPair(t, b, backend.Options{}, 13)
	gpu := pr.gpu.(*Device)
	read := func(want bool, what string) {
		t.Helper()
		l, ok, err := gpu.ReadStep(loss, grads)
		if err != nil {
			t.Fatal(err)
		}
		wantLoss := download(t, gpu, loss, 1)[0]
		fin, err := gpu.Finite(grads)
		if err != nil {
			t.Fatal(err)
		}
		if ok != want || fin != want || l != wantLoss {
			t.Errorf("ReadStep(%s) = %v, %v; want %v, %v (Finite says %v)", what, l, ok, wantLoss, want, fin)
		}
	}
	read(true, "random values")
	if err := gpu.UploadF32(loss, 0, []float32{float32(math.NaN())}); err != nil {
		t.Fatal(err)
	}
	if l, _, err := gpu.ReadStep(loss, grads); err != nil || !math.IsNaN(float64(l)) {
		t.Errorf("ReadStep of a NaN loss: %v, %v", l, err)
	}
	if err := gpu.UploadF32(loss, 0, []float32{2.5}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, 50001, 100002} {
			keep := download(t, gpu, grads, grads.Elems())[at]
			if err := gpu.UploadF32(grads, at, []float32{bad}); err != nil {
				t.Fatal(err)
			}
			read(false, fmt.Sprintf("%v at %d", bad, at))
			if err := gpu.UploadF32(grads, at, []float32{keep}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read(true, "random values again")
	jsonLine(map[string]any{"check": "read_step", "ok": !t.Failed()})
}
