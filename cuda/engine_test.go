//go:build cuda

package cuda

import (
	"testing"

	"gorgonia.org/tensor"
)

// TestTensorOverDeviceMemory: a tensor over device memory through the
// Engine (as the arena newArena allocates) keeps its address, shape, dtype
// and engine and is not natively accessible; the address is never
// dereferenced, so no GPU is needed.
func TestTensorOverDeviceMemory(t *testing.T) {
	eng := &Engine{}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Int32} {
		d := tensor.New(tensor.WithShape(2, 3), tensor.Of(dt), tensor.WithEngine(eng), tensor.FromMemory(0x10000, 24))
		if d.Uintptr() != 0x10000 || !d.Shape().Eq(tensor.Shape{2, 3}) || d.Dtype() != dt {
			t.Errorf("%v tensor: address %#x, shape %v, dtype %v", dt, d.Uintptr(), d.Shape(), d.Dtype())
		}
		if d.Engine() != tensor.Engine(eng) {
			t.Errorf("%v tensor: engine %T", dt, d.Engine())
		}
		if d.IsNativelyAccessible() {
			t.Errorf("%v tensor over device memory says it is natively accessible", dt)
		}
	}
	if eng.AllocAccessible() {
		t.Error("AllocAccessible is true")
	}
	if _, err := eng.Accessible(devMem{1, 4}); err == nil {
		t.Error("Accessible succeeded on device memory")
	}
}
