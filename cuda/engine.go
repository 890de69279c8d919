//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"
	"gorgonia.org/tensor"
)

// Engine is the tensor.Engine of one GPU: its memory is device memory,
// allocated with cuMemAlloc in the GPU's primary context, so tensors built
// with it (tensor.WithEngine) hold device memory that Go code cannot read.
// Memset, Memclr and Memcpy run on the device, synchronously.
type Engine struct {
	ctx     cu.CUContext
	ordinal int
}

var (
	_ tensor.Engine       = (*Engine)(nil)
	_ tensor.NonStdEngine = (*Engine)(nil)
)

// devMem is device memory as a tensor.Memory.
type devMem struct {
	ptr  cu.DevicePtr
	size uintptr
}

func (m devMem) Uintptr() uintptr { return uintptr(m.ptr) }
func (m devMem) MemSize() uintptr { return m.size }

// errInaccessible is Accessible's answer: device memory cannot be read by
// Go code; copy it out with the Device's Download methods.
var errInaccessible = errors.New("cuda: device memory is not accessible from Go (download it through the device)")

// with runs f with the engine's context current on a locked OS thread.
func (e *Engine) with(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := currentCtx()
	if err := setCurrent(e.ctx); err != nil {
		return err
	}
	defer setCurrent(prev)
	return f()
}

// AllocAccessible is false: the memory lies on the GPU.
func (e *Engine) AllocAccessible() bool { return false }

// NonStdAlloc marks the engine as allocating memory of its own (gorgonia
// then never pools it).
func (e *Engine) NonStdAlloc() {}

// Alloc allocates size bytes of device memory.
func (e *Engine) Alloc(size int64) (tensor.Memory, error) {
	if size <= 0 {
		size = 4
	}
	var p cu.DevicePtr
	err := e.with(func() error {
		var err error
		p, err = cu.MemAlloc(size)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: cuMemAlloc(%d bytes): %w", e.ordinal, size, err)
	}
	return devMem{p, uintptr(size)}, nil
}

// Free frees memory that Alloc returned.
func (e *Engine) Free(mem tensor.Memory, size int64) error {
	return e.with(func() error { return cu.MemFree(cu.DevicePtr(mem.Uintptr())) })
}

// Memset fills mem with val, a float32 or an int32 (or any 4-byte value:
// uint32).
func (e *Engine) Memset(mem tensor.Memory, val interface{}) error {
	var bits uint32
	switch v := val.(type) {
	case float32:
		bits = *(*uint32)(unsafe.Pointer(&v))
	case int32:
		bits = uint32(v)
	case uint32:
		bits = v
	default:
		return fmt.Errorf("cuda: Memset with a %T (want float32, int32 or uint32)", val)
	}
	return e.with(func() error {
		if err := cu.MemsetD32(cu.DevicePtr(mem.Uintptr()), bits, int64(mem.MemSize()/4)); err != nil {
			return err
		}
		return cu.Synchronize()
	})
}

// Memclr zeroes mem.
func (e *Engine) Memclr(mem tensor.Memory) {
	_ = e.Memset(mem, uint32(0))
}

// Memcpy copies src into dst (device to device; the smaller size).
func (e *Engine) Memcpy(dst, src tensor.Memory) error {
	n := min(dst.MemSize(), src.MemSize())
	return e.with(func() error {
		if err := cu.MemcpyDtoD(cu.DevicePtr(dst.Uintptr()), cu.DevicePtr(src.Uintptr()), int64(n)); err != nil {
			return err
		}
		return cu.Synchronize()
	})
}

// Accessible fails: device memory cannot be read from Go.
func (e *Engine) Accessible(mem tensor.Memory) (tensor.Memory, error) { return nil, errInaccessible }

// WorksWith accepts row-major data, the only order gorun uses.
func (e *Engine) WorksWith(order tensor.DataOrder) bool { return order.IsRowMajor() }
