// Package vec owns gorun's vectorised float32 CPU kernels: the
// memory-bound ops (ReLU and its gradient, add, sums and bias gradients,
// 2×2 max pooling, GELU's tanh form and its gradient, batch and layer
// normalisation) and direct convolutions (forward, weight and input
// gradients without im2col; ConvFast says which geometries run vector
// bodies that beat lowering). Each is C with AVX-512 intrinsics, an AVX2
// body (intrinsics for the convolutions and the sums, else the plain loop
// compiled for AVX2) and a plain-C body, the level chosen once per process
// by what the CPU has
// (Level); without cgo, or with the purego tag, the Go loops of this
// package run instead. Levels
// agree bit for bit (elementwise results use the same float32 operations in
// the same order; sums use a fixed order of partial sums that the Go loops
// reproduce, or, for float64 sums, agree within rounding), and the tests
// compare every level with the Go loops. One cgo call covers a whole op,
// never a row: its ~40 ns is the whole cost of reaching C. The package
// exists because no packaged library offers these with PyTorch's semantics
// (max pooling's first maximum and NaN rule with int32 plane indices,
// GELU's tanh form, batch norm split where SyncBatchNorm all-reduces) and
// an allocation-free interface over the executor's arena.
package vec

import "math"

// ReLU sets y[i] = x[i] < 0 ? 0 : x[i] (NaN and -0 pass through). y may be
// x; len(y) ≥ len(x).
func ReLU(y, x []float32) {
	if len(x) == 0 {
		return
	}
	_ = y[len(x)-1]
	relu(level, y, x)
}

// ReLUGrad sets dx[i] = y[i] > 0 ? dy[i] : 0 for i < len(dy). dx may be dy.
func ReLUGrad(dx, dy, y []float32) { ReLUGradAdd(dx, dy, nil, y) }

// ReLUGradAdd is ReLUGrad of dy + dy2 (a value's two gradients, summed
// as Add rounds them) when dy2 is not nil. dx may be dy or dy2.
func ReLUGradAdd(dx, dy, dy2, y []float32) {
	if len(dy) == 0 {
		return
	}
	_, _ = dx[len(dy)-1], y[len(dy)-1]
	if dy2 != nil {
		_ = dy2[len(dy)-1]
	}
	reluGrad(level, dx, dy, dy2, y)
}

// Add sets z[i] = x[i] + y[i] for i < len(x). z may be x or y.
func Add(z, x, y []float32) {
	if len(x) == 0 {
		return
	}
	_, _ = z[len(x)-1], y[len(x)-1]
	add(level, z, x, y)
}

// BiasGrad sets db[j] to the sum of dy[:, j, :] for dy[n, o, plane] (adds
// it with accumulate): each plane summed in float32 in a fixed order —
// sixteen partial sums (element i into partial i mod 16, as a sixteen-lane
// vector adds) combined pairwise (p_i += p_{i+8}, then p_i += p_{i+4}, …) —
// the planes added in float64 in sample order. Every level gives the same
// bits. One call for the whole gradient.
func BiasGrad(dy []float32, n, o, plane int, db []float32, accumulate bool) {
	if o == 0 {
		return
	}
	_ = db[o-1]
	if n*plane > 0 {
		_ = dy[n*o*plane-1]
	}
	biasGrad(level, dy, n, o, plane, db, accumulate)
}

func biasGradGo(dy []float32, n, o, plane int, db []float32, accumulate bool) {
	for j := range o {
		var s float64
		for i := range n {
			s += float64(sumGo(dy[(i*o+j)*plane:][:plane]))
		}
		if accumulate {
			db[j] += float32(s)
		} else {
			db[j] = float32(s)
		}
	}
}

// MaxPool2x2 pools planes planes of x (each h×w) with a 2×2 window and
// stride 2 into y (each oh×ow, oh ≤ h/2, ow ≤ w/2), writing into idx the
// index within its plane of each chosen element: the first maximum of the
// window in row-major order, or its last NaN.
func MaxPool2x2(x, y []float32, idx []int32, planes, h, w, oh, ow int) {
	if planes*oh*ow == 0 {
		return
	}
	if 2*oh > h || 2*ow > w {
		panic("vec: MaxPool2x2 output larger than the input allows")
	}
	_, _, _ = x[planes*h*w-1], y[planes*oh*ow-1], idx[planes*oh*ow-1]
	maxPool2x2(level, x, y, idx, planes, h, w, oh, ow)
}

// ScalePlanes sets y[p·hw + i] = x[p·hw + i]·s[p] for each of the len(s)
// planes of hw elements (Dropout2D's mask and its gradient): one multiply
// an element at every level. y may be x.
func ScalePlanes(y, x, s []float32, hw int) {
	if len(s)*hw == 0 {
		return
	}
	_, _ = y[len(s)*hw-1], x[len(s)*hw-1]
	scalePlanes(level, y, x, s, hw)
}

// scalePlanesGo is ScalePlanes' Go loop.
func scalePlanesGo(y, x, s []float32, hw int) {
	for p, m := range s {
		yp := y[p*hw:][:hw]
		for i, v := range x[p*hw:][:hw] {
			yp[i] = v * m
		}
	}
}

// MaxPool2x2Grad is MaxPool2x2's gradient: it sets dx (planes planes of
// h×w) from dy and idx (each oh×ow, idx as MaxPool2x2 wrote it, inside its
// window): the chosen element of each window gets dy + 0 (a -0 becomes +0,
// as 0 + dy does), the window's other elements and those no window covers
// get 0. The C levels write each element of dx once (no clearing pass, no
// scatter); every level gives what clearing dx and adding each dy at its
// index gives.
func MaxPool2x2Grad(dy []float32, idx []int32, dx []float32, planes, h, w, oh, ow int) {
	if planes*h*w == 0 {
		return
	}
	if 2*oh > h || 2*ow > w {
		panic("vec: MaxPool2x2Grad output larger than the input allows")
	}
	_ = dx[planes*h*w-1]
	if planes*oh*ow > 0 {
		_, _ = dy[planes*oh*ow-1], idx[planes*oh*ow-1]
	}
	maxPool2x2Grad(level, dy, idx, dx, planes, h, w, oh, ow)
}

// maxPool2x2GradGo is MaxPool2x2Grad's Go loop: clearing dx and adding
// each dy at its index, which Go compiles to faster code than a pass that
// writes each window (a branch or a select per element).
func maxPool2x2GradGo(dy []float32, idx []int32, dx []float32, planes, h, w, oh, ow int) {
	clear(dx[:planes*h*w])
	for p := range planes {
		dp := dx[p*h*w:][:h*w]
		ip := idx[p*oh*ow:][:oh*ow]
		for j, g := range dy[p*oh*ow:][:oh*ow] {
			dp[ip[j]] += g
		}
	}
}

// Level is the kernel level this process uses: 2 AVX-512, 1 AVX2, 0 plain
// C, -1 Go (no cgo).
func Level() int { return level }

func sumGo(x []float32) float32 {
	var p [16]float32
	for i, v := range x {
		p[i&15] += v
	}
	for w := 8; w >= 1; w /= 2 {
		for i := range w {
			p[i] = p[i] + p[i+w]
		}
	}
	return p[0]
}

func reluGo(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		y[i] = v
	}
}

func reluGradGo(dx, dy, dy2, y []float32) {
	dx, y = dx[:len(dy)], y[:len(dy)]
	for i, g := range dy {
		if dy2 != nil {
			g += dy2[i]
		}
		if !(y[i] > 0) {
			g = 0
		}
		dx[i] = g
	}
}

func addGo(z, x, y []float32) {
	z, y = z[:len(x)], y[:len(x)]
	for i, v := range x {
		z[i] = v + y[i]
	}
}

// maxPool2x2Go is MaxPool2x2's Go loop.
func maxPool2x2Go(x, y []float32, idx []int32, planes, h, w, oh, ow int) {
	for p := range planes {
		maxPool2x2Plane(x[p*h*w:][:h*w], y[p*oh*ow:][:oh*ow], idx[p*oh*ow:][:oh*ow], w, oh, ow)
	}
}

// maxPool2x2Plane is MaxPool2x2's Go loop on one plane of width w, without
// data-dependent branches:
// the maximum of a window is unpredictable, and mispredicted branches made
// the plain version twice as slow. Values are compared as integers (their
// bits mapped to an order-preserving key, with -0 = +0) and chosen with
// conditional moves; a window holding a NaN takes the plain path.
func maxPool2x2Plane(xp, yp []float32, ip []int32, w, oh, ow int) {
	w32 := int32(w)
	for oy := 0; oy < oh; oy++ {
		r0 := xp[2*oy*w:][:2*ow]
		r1 := xp[(2*oy+1)*w:][:2*ow]
		yr := yp[oy*ow:][:ow]
		ir := ip[oy*ow:][:ow]
		base := int32(2 * oy * w)
		for ox := range yr {
			j := 2 * ox
			b0, b1 := math.Float32bits(r0[j]), math.Float32bits(r0[j+1])
			b2, b3 := math.Float32bits(r1[j]), math.Float32bits(r1[j+1])
			// 0x7f800000 - |b| is negative exactly for NaNs.
			if (0x7f800000-int32(b0&0x7fffffff))|(0x7f800000-int32(b1&0x7fffffff))|
				(0x7f800000-int32(b2&0x7fffffff))|(0x7f800000-int32(b3&0x7fffffff)) < 0 {
				m, best := r0[j], base+int32(j)
				if v := r0[j+1]; v > m || v != v {
					m, best = v, base+int32(j)+1
				}
				if v := r1[j]; v > m || v != v {
					m, best = v, base+w32+int32(j)
				}
				if v := r1[j+1]; v > m || v != v {
					m, best = v, base+w32+int32(j)+1
				}
				yr[ox], ir[ox] = m, best
				continue
			}
			// Each if below compiles to conditional moves.
			bk, bb, off := key32(b0), b0, int32(0)
			k := key32(b1)
			if k > bk {
				off = 1
			}
			if k > bk {
				bb = b1
			}
			bk = max(bk, k)
			k = key32(b2)
			if k > bk {
				off = w32
			}
			if k > bk {
				bb = b2
			}
			bk = max(bk, k)
			k = key32(b3)
			if k > bk {
				off = w32 + 1
			}
			if k > bk {
				bb = b3
			}
			yr[ox] = math.Float32frombits(bb)
			ir[ox] = base + int32(j) + off
		}
	}
}

// key32 maps the bits of a float32 other than NaN to an integer in the same
// order, with -0 and +0 equal.
func key32(b uint32) int64 {
	s := int64(int32(b) >> 31)
	return (int64(b&0x7fffffff) ^ s) - s
}
