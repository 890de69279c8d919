package comm

// The local kernels the algorithms and transports share. Each walks its
// slices once, front to back; dst may be a or b (element-wise aliasing).
// They are plain Go loops (the compiler does not vectorise them): about one
// element per cycle, which the collectives' memory traffic mostly hides.

// reduceInto sets dst[i] = op(a[i], b[i]); Mean reduces as Sum. The three
// slices must have the same length.
func reduceInto(dst, a, b []float32, op ReduceOp) {
	switch op {
	case Max:
		maxInto(dst, a, b)
	case Min:
		minInto(dst, a, b)
	default:
		addInto(dst, a, b)
	}
}

// addInto is the plain loop: the compiler drops the bounds checks, and
// unrolling by hand measured slower.
func addInto(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// maxInto uses the built-in max: NaN wins, and max(-0, +0) is +0.
func maxInto(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	for i := range dst {
		dst[i] = max(a[i], b[i])
	}
}

// minInto uses the built-in min: NaN wins, and min(-0, +0) is -0.
func minInto(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	for i := range dst {
		dst[i] = min(a[i], b[i])
	}
}

// divide turns sums into means: buf[i] /= float32(n). For n a power of two
// it multiplies by 1/n, which is exact and so rounds identically.
func divide(buf []float32, n int) {
	if n == 1 {
		return
	}
	if n&(n-1) == 0 {
		inv := 1 / float32(n)
		for i := range buf {
			buf[i] *= inv
		}
		return
	}
	d := float32(n)
	for i := range buf {
		buf[i] /= d
	}
}

// copyUnlessSame copies src into dst unless they are the same memory (an
// in-place call), where a peer may be reading it.
func copyUnlessSame(dst, src []float32) {
	if !same(dst, src) {
		copy(dst, src)
	}
}
