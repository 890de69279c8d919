// Package gemm is gorun's dense matrix multiply, the hot loop under
// convolution (im2col + GEMM) and linear layers. It is row-major,
// single-threaded (one device is one core), safe for concurrent use and
// never allocates per call.
//
// float32 runs a packed, register-blocked C kernel (AVX-512, AVX2+FMA or
// portable, chosen at run time) on amd64 with cgo, and a pure-Go loop
// otherwise (CGO_ENABLED=0, other architectures, or the purego build tag).
// Problems of at most 512 multiply-adds (8×8×8) also take the Go loop, which
// beats the fixed cost of the C path there. float64, used by gradient checks,
// always runs the pure-Go loop. Results depend only on the inputs and shapes
// (and, for float32, the instruction set), never on timing: equal inputs
// give bit-identical outputs.
//
// # The hand-written kernel against OpenBLAS
//
// BenchmarkSGEMMShapes measures the hand-written path, OpenBLAS (Debian's
// libopenblas-dev 0.3.21, its Cooperlake AVX-512 kernels, one thread) and
// one core's FMA peak in one run, on the MNIST Net's GEMMs at a per-device
// batch of 64 and on 512³. On this machine (AMD EPYC Zen 4, 2 cores, peak
// 112–116 GFLOP/s per core: its AVX-512 FMAs are 2×256 bits wide, so AVX2
// reaches the same peak), medians of 3 runs, GFLOP/s hand vs OpenBLAS:
//
//	shape (m×n×k, op)        hand  OpenBLAS
//	conv1 fwd   10×36864×25 NN     93     53
//	conv1 wgrad 10×25×36864 NT     87     22
//	conv2 fwd   20×4096×250 NN    102     70
//	conv2 igrad 250×4096×20 TN     95     73
//	conv2 wgrad 20×250×4096 NT     87     40
//	fc1 fwd/dx/dw (64×50×320)   84–95  81–89
//	fc2 fwd/dx/dw (64×10×50)    30–43  42–88
//	512³ NN/TN/NT              96–105 99–103
//
// The hand-written kernel wins the convolutions, which are 97% of the Net's
// GEMM flops, by 1.3–4×; it ties OpenBLAS on fc1 and 512³. OpenBLAS wins
// small problems, up to about 2¹⁸ multiply-adds (fc2, 64³, fc1 at batch
// ≤ 16, the convolutions at batch 1), by 1.3–2×. Over one step's eleven
// GEMMs that is 1.79 ms hand-written, 3.46 ms OpenBLAS alone, and 2.6 µs
// (0.15%) saved by sending the small ones to OpenBLAS. So the hand-written
// kernel stays, and the default build does not link OpenBLAS; built with
// -tags openblas (cgo, amd64, libopenblas-dev installed), Gemm sends the
// problems of more than 512 and at most blasMaxWork = 2¹⁸ multiply-adds to
// OpenBLAS, with its own threads off (one device is one core), which is
// bit-reproducible too. Reproduce with
//
//	go test -tags openblas -run '^$' -bench SGEMMShapes -count 3 ./ops/internal/gemm
package gemm

import "fmt"

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb
// and ldc are the row strides of A, B and C as stored. When beta is 0, C is
// not read (NaNs in C do not propagate). It panics if a dimension is
// negative, a stride is too small, or a slice is too short.
func Gemm[T float32 | float64](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	check("A", ar, ac, len(a), lda)
	check("B", br, bc, len(b), ldb)
	check("C", m, n, len(c), ldc)
	switch cc := any(c).(type) {
	case []float32:
		sgemm(transA, transB, m, n, k, float32(alpha), any(a).([]float32), lda, any(b).([]float32), ldb, float32(beta), cc, ldc)
	default:
		goGemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// check panics unless a rows×cols matrix with row stride ld fits in n elements.
func check(name string, rows, cols, n, ld int) {
	if ld < cols {
		panic(fmt.Sprintf("gemm: ld%s=%d < %d columns", name, ld, cols))
	}
	if need := (rows-1)*ld + cols; n < need {
		panic(fmt.Sprintf("gemm: len(%s)=%d < %d needed for %d×%d with stride %d", name, n, need, rows, cols, ld))
	}
}

// scale sets C = beta·C, or C = 0 when beta is 0.
func scale[T float32 | float64](m, n int, beta T, c []T, ldc int) {
	check("C", m, n, len(c), ldc)
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			for j := range ci {
				ci[j] *= beta
			}
		}
	}
}

// goGemm is the pure-Go Gemm, for float64 and for float32 without cgo.
// Arguments are checked and m, n, k are positive.
//
// When op(B) = B it adds alpha·A[i,p]·B[p,:] to row i of C, four p at a
// time (rows of B are contiguous). When op(B) = Bᵀ, rows of B are the
// columns of op(B), so it takes dot products along p, 2×4 elements of C at
// a time.
func goGemm[T float32 | float64](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	// A[i,p] = a[i*ras + p*pas]
	ras, pas := lda, 1
	if transA {
		ras, pas = 1, lda
	}
	if !transB {
		scale(m, n, beta, c, ldc)
		for i := 0; i < m; i++ {
			ci := c[i*ldc : i*ldc+n]
			p := 0
			for ; p+4 <= k; p += 4 {
				a0 := alpha * a[i*ras+p*pas]
				a1 := alpha * a[i*ras+(p+1)*pas]
				a2 := alpha * a[i*ras+(p+2)*pas]
				a3 := alpha * a[i*ras+(p+3)*pas]
				b0 := b[p*ldb : p*ldb+n]
				b1 := b[(p+1)*ldb : (p+1)*ldb+n]
				b2 := b[(p+2)*ldb : (p+2)*ldb+n]
				b3 := b[(p+3)*ldb : (p+3)*ldb+n]
				for j := range ci {
					ci[j] += a0*b0[j] + a1*b1[j] + a2*b2[j] + a3*b3[j]
				}
			}
			for ; p < k; p++ {
				a0 := alpha * a[i*ras+p*pas]
				b0 := b[p*ldb : p*ldb+n]
				for j := range ci {
					ci[j] += a0 * b0[j]
				}
			}
		}
		return
	}
	// transB: C[i,j] = alpha·Σp A[i,p]·b[j*ldb+p] + beta·C[i,j]
	out := func(i, j int, s T) {
		x := &c[i*ldc+j]
		if beta == 0 {
			*x = alpha * s
		} else {
			*x = alpha*s + beta**x
		}
	}
	i := 0
	for ; i+2 <= m; i += 2 {
		j := 0
		for ; j+4 <= n; j += 4 {
			b0 := b[j*ldb : j*ldb+k]
			b1 := b[(j+1)*ldb : (j+1)*ldb+k]
			b2 := b[(j+2)*ldb : (j+2)*ldb+k]
			b3 := b[(j+3)*ldb : (j+3)*ldb+k]
			var s00, s01, s02, s03, s10, s11, s12, s13 T
			for p := range b0 {
				x0, x1 := a[i*ras+p*pas], a[(i+1)*ras+p*pas]
				y0, y1, y2, y3 := b0[p], b1[p], b2[p], b3[p]
				s00 += x0 * y0
				s01 += x0 * y1
				s02 += x0 * y2
				s03 += x0 * y3
				s10 += x1 * y0
				s11 += x1 * y1
				s12 += x1 * y2
				s13 += x1 * y3
			}
			out(i, j, s00)
			out(i, j+1, s01)
			out(i, j+2, s02)
			out(i, j+3, s03)
			out(i+1, j, s10)
			out(i+1, j+1, s11)
			out(i+1, j+2, s12)
			out(i+1, j+3, s13)
		}
		for ; j < n; j++ {
			bj := b[j*ldb : j*ldb+k]
			var s0, s1 T
			for p, y := range bj {
				s0 += a[i*ras+p*pas] * y
				s1 += a[(i+1)*ras+p*pas] * y
			}
			out(i, j, s0)
			out(i+1, j, s1)
		}
	}
	for ; i < m; i++ {
		for j := 0; j < n; j++ {
			bj := b[j*ldb : j*ldb+k]
			var s T
			for p, y := range bj {
				s += a[i*ras+p*pas] * y
			}
			out(i, j, s)
		}
	}
}
