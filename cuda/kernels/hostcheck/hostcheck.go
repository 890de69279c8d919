//go:build cgo

package hostcheck

/*
#cgo CXXFLAGS: -std=c++17 -O2 -I${SRCDIR}/..
#cgo LDFLAGS: -lstdc++ -lm -lpthread
#include "hostcheck.h"
*/
import "C"

import "unsafe"

// The launchers, one per kernel of kernels.h (ReLU, Unary, …, Sum), the op
// codes and Codes are generated into gen_hostcheck.go, with their C side in
// gen_hostcheck.h and gen_hostcheck.cc (go generate ./cuda/kernels). This
// file holds what they share.

// Geom is a launch geometry: Grid blocks of Block threads, one-dimensional.
type Geom struct{ Grid, Block int }

// Elementwise returns kernels.h's ELEMENTWISE(n) geometry: blocks of 256
// threads, ceil(n/256) of them (at least one).
func Elementwise(n int) Geom { return Geom{max(1, (n+255)/256), 256} }

// OneBlock is kernels.h's ONE_BLOCK geometry: one block of 256 threads.
var OneBlock = Geom{1, 256}

// BlockPer returns kernels.h's BLOCK_PER(m) geometry: m blocks of 256
// threads.
func BlockPer(m int) Geom { return Geom{max(1, m), 256} }

// fp, dp and ip pass a slice as a device pointer: its first element, or
// a null pointer for an empty slice.
func fp(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func dp(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&s[0]))
}

func ip(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(&s[0]))
}

// ConvGeom is the geometry arguments shared by gorun_im2col and
// gorun_col2im, in their order. CX, the channels of a sample of x, may be
// left 0 for C (an ungrouped convolution).
type ConvGeom struct {
	N, C, CX, H, W, KH, KW, OH, OW, Stride, Pad int
}

func (c ConvGeom) cx() int {
	if c.CX == 0 {
		return c.C
	}
	return c.CX
}

// Im2col launches gorun_im2col with c's geometry.
func (c ConvGeom) Im2col(g Geom, x, col []float32) {
	Im2col(g, x, col, c.N, c.C, c.cx(), c.H, c.W, c.KH, c.KW, c.OH, c.OW, c.Stride, c.Pad)
}

// Col2im launches gorun_col2im with c's geometry.
func (c ConvGeom) Col2im(g Geom, col, dx []float32) {
	Col2im(g, col, dx, c.N, c.C, c.cx(), c.H, c.W, c.KH, c.KW, c.OH, c.OW, c.Stride, c.Pad)
}

// SourcesSHA256 returns the SHA-256 of the kernel sources this package was
// compiled from, as cuda/kernels/stamp.sh wrote it into sources.h.
func SourcesSHA256() string { return C.GoString(C.hc_sources_sha256()) }
