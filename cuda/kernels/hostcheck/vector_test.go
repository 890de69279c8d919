package hostcheck

import (
	"fmt"
	"testing"
	"unsafe"
)

// aligned16 reports whether s's first element is 16-byte aligned (the
// kernels' float4 path).
func aligned16(s []float32) bool { return uintptr(unsafe.Pointer(&s[0]))%16 == 0 }

// alignedCopy returns a copy of s starting off floats past a 16-byte
// boundary: 0 for the kernels' float4 path, 1 for their scalar one.
func alignedCopy(s []float32, off int) []float32 {
	b := make([]float32, len(s)+8)
	i := 0
	for !aligned16(b[i:]) {
		i++
	}
	i += off
	copy(b[i:], s)
	return b[i : i+len(s)]
}

// TestVectorLoads: the elementwise and optimizer kernels that read four
// floats at a time where their arrays are 16-byte aligned (common.cuh's
// gorun_map1, gorun_map2, gorun_update4) give the same bits as over the
// same arrays misaligned by one float (the scalar loop for everything),
// for n = 0, 1, 3, 4, 5, 1027 (a vector part and a tail of 0 to 3), and
// under several geometries; in place too. The other tests (TestElementwise,
// TestUnaryBinary, TestSGDStep, TestAdamStep) check the values against
// ops, mostly on Go's 16-byte aligned slices (the vector path).
func TestVectorLoads(t *testing.T) {
	r := newRand(128)
	type kernel struct {
		name string
		// run runs the kernel over arrays (all of length n) and returns
		// the ones it writes.
		run  func(g Geom, arrs [][]float32, n int) [][]float32
		arrs int
	}
	ks := []kernel{
		{"relu", func(g Geom, a [][]float32, n int) [][]float32 { ReLU(g, a[0], a[1], n); return a[1:2] }, 2},
		{"copy", func(g Geom, a [][]float32, n int) [][]float32 { Copy(g, a[0], a[1], n); return a[1:2] }, 2},
		{"scale", func(g Geom, a [][]float32, n int) [][]float32 { Scale(g, a[0], n, 0.3); return a[:1] }, 1},
		{"accumulate", func(g Geom, a [][]float32, n int) [][]float32 { Accumulate(g, a[0], a[1], n); return a[:1] }, 2},
		{"axpy", func(g Geom, a [][]float32, n int) [][]float32 { Axpy(g, a[0], a[1], n, -0.7); return a[:1] }, 2},
		{"dropout_grad", func(g Geom, a [][]float32, n int) [][]float32 { DropoutGrad(g, a[0], a[1], a[2], n); return a[2:3] }, 3},
		{"sgd", func(g Geom, a [][]float32, n int) [][]float32 {
			SGDStep(g, a[0], a[1], a[2], n, 0.1, 0.9, 0.1, 0.01, 1, 2, nil)
			return a[0:3:3]
		}, 3},
		{"sgd no momentum", func(g Geom, a [][]float32, n int) [][]float32 {
			SGDStep(g, a[0], a[1], nil, n, 0.1, 0, 0, 0.01, 0, 2, nil)
			return a[:1]
		}, 2},
		{"adamw", func(g Geom, a [][]float32, n int) [][]float32 {
			for i := range n { // v must not be negative
				a[3][i] *= a[3][i]
			}
			AdamStep(g, a[0], a[1], a[2], a[3], n, 1e-3, 0.9, 0.999, 1e-8, 0.1, 3, 1, nil)
			return [][]float32{a[0], a[2], a[3]}
		}, 4},
	}
	for op := range 7 {
		ks = append(ks, kernel{fmt.Sprintf("unary %d", op), func(g Geom, a [][]float32, n int) [][]float32 {
			Unary(g, a[0], a[1], n, op, 0.02)
			return a[1:2]
		}, 2})
		ks = append(ks, kernel{fmt.Sprintf("unary %d in place", op), func(g Geom, a [][]float32, n int) [][]float32 {
			Unary(g, a[0], a[0], n, op, 0.02)
			return a[:1]
		}, 1})
	}
	for op := range 9 {
		ks = append(ks, kernel{fmt.Sprintf("binary %d", op), func(g Geom, a [][]float32, n int) [][]float32 {
			Binary(g, a[0], a[1], a[2], n, op, 0.02)
			return a[2:3]
		}, 3})
		ks = append(ks, kernel{fmt.Sprintf("binary %d in place of b", op), func(g Geom, a [][]float32, n int) [][]float32 {
			Binary(g, a[0], a[1], a[1], n, op, 0.02)
			return a[1:2]
		}, 2})
	}
	for _, n := range []int{0, 1, 3, 4, 5, 1027} {
		for _, k := range ks {
			base := make([][]float32, k.arrs)
			for i := range base {
				base[i] = randf(r, n, n+1)[:max(n, 1)]
				for j := range n {
					base[i][j] *= 3
				}
			}
			var want [][]float32
			for gi, g := range []Geom{Elementwise(n), {1, 1}, {3, 64}} {
				for _, shift := range []bool{false, true} {
					arrs := make([][]float32, k.arrs)
					for i, b := range base {
						arrs[i] = alignedCopy(b, b2i(shift))
					}
					got := k.run(g, arrs, n)
					if gi == 0 && !shift {
						want = got
						continue
					}
					for i := range got {
						checkExact(t, fmt.Sprintf("%s n=%d grid=%d block=%d misaligned=%v array %d", k.name, n, g.Grid, g.Block, shift, i), got[i], want[i], n)
					}
				}
			}
		}
	}
}
