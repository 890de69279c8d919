package ops

import "unsafe"

// Kernels32 holds the float32 kernel of every op (Def.Kernel32), by op: a
// view of the definitions for callers that run kernels by op. It is never
// modified; an unknown op has none.
var Kernels32 = kernelTable(func(d *Def) Kernel[float32] { return d.Kernel32 })

// Kernels64 holds the float64 kernel of every op (Def.Kernel64), by op, for
// finite-difference gradient checks. It is never modified.
var Kernels64 = kernelTable(func(d *Def) Kernel[float64] { return d.Kernel64 })

func kernelTable[T Float](kernel func(*Def) Kernel[T]) map[Op]Kernel[T] {
	m := make(map[Op]Kernel[T], len(registry))
	for op, d := range registry {
		if k := kernel(d); k != nil {
			m[op] = k
		}
	}
	return m
}

// optIn returns input i, or nil when it is absent.
func optIn[T Float](in []*Buf[T], i int) *Buf[T] {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// optData returns optIn(in, i)'s Data, or nil when the input is absent.
func optData[T Float](in []*Buf[T], i int) []T {
	if b := optIn(in, i); b != nil {
		return b.Data
	}
	return nil
}

// live returns the first b.Len() elements of b.Data.
func live[T Float](b *Buf[T]) []T { return b.Data[:b.Len()] }

// same reports whether two slices start at the same element.
func same[T Float](a, b []T) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// is32 reports whether T is float32 (the type the vectorised kernels of
// package vec take).
func is32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// view reinterprets s as a slice of E, a type of the same size (T's
// underlying type).
func view[E float32 | float64, T Float](s []T) []E {
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
