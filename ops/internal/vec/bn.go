package vec

// Batch-normalisation kernels. Each takes a float32 tensor seen as
// [n, ch, l] (channel j of sample i is the row of l elements at
// (i·ch+j)·l) and does the nc channels j0 .. j0+nc-1, one C call for all of
// them; per-channel slices (outputs and parameters) hold nc values, index c
// for channel j0+c. The sums are float64 sums of the float32 elements, in
// an order fixed by n, l and the level (so they may differ from the Go
// loops by rounding, never between runs); the elementwise kernels compute
// every element with the same float32 operations at every level, so they
// are bit-identical to the Go loops.

// checkBN panics unless channels j0 .. j0+nc-1 lie in an [n, ch, l] tensor
// and each of the slices holds at least nc values.
func checkBN(n, ch, l, j0, nc int, per ...int) {
	if n < 0 || l < 0 || j0 < 0 || nc < 0 || j0+nc > ch {
		panic("vec: batch-norm channels out of range")
	}
	for _, p := range per {
		if p < nc {
			panic("vec: batch-norm per-channel slice shorter than the channels")
		}
	}
}

// BNSums sets s1[c] = Σx and s2[c] = Σx² over channel j0+c of every sample
// of x [n, ch, l], for c < nc, summing in float64.
func BNSums(s1, s2 []float64, x []float32, n, ch, l, j0, nc int) {
	checkBN(n, ch, l, j0, nc, len(s1), len(s2))
	if nc == 0 {
		return
	}
	if n*l > 0 {
		_ = x[n*ch*l-1]
	}
	bnSums(level, s1, s2, x, n, ch, l, j0, nc)
}

// BNGradSums sets s0[c] = Σdy and s1[c] = Σdy·(x-mean[c]) over channel
// j0+c of every sample of dy and x [n, ch, l], for c < nc, summing in
// float64; x-mean[c] is a float32 difference.
func BNGradSums(s0, s1 []float64, dy, x, mean []float32, n, ch, l, j0, nc int) {
	checkBN(n, ch, l, j0, nc, len(s0), len(s1), len(mean))
	if nc == 0 {
		return
	}
	if n*l > 0 {
		_, _ = dy[n*ch*l-1], x[n*ch*l-1]
	}
	bnGradSums(level, s0, s1, dy, x, mean, n, ch, l, j0, nc)
}

// BNApply sets y = (x-mean[c])·scale[c] + shift[c] over channel j0+c of
// every sample of x and y [n, ch, l], for c < nc, in float32. y may be x.
func BNApply(y, x, mean, scale, shift []float32, n, ch, l, j0, nc int) {
	BNApplyAdd(y, x, nil, false, mean, scale, shift, n, ch, l, j0, nc)
}

// BNApplyAdd is BNApply followed, when res is not nil, by y + res
// (elementwise, res shaped as x) and then, with relu, by ReLU (v < 0 → 0;
// NaN stays): batch norm, a residual add and a ReLU in one pass, each
// element rounded as the three rounded one after another. y may be x or
// res.
func BNApplyAdd(y, x, res []float32, relu bool, mean, scale, shift []float32, n, ch, l, j0, nc int) {
	checkBN(n, ch, l, j0, nc, len(mean), len(scale), len(shift))
	if nc == 0 || n*l == 0 {
		return
	}
	_, _ = y[n*ch*l-1], x[n*ch*l-1]
	if res != nil {
		_ = res[n*ch*l-1]
	}
	bnApply(level, y, x, res, relu, mean, scale, shift, n, ch, l, j0, nc)
}

// BNGradInput sets dx = k[c]·(dy - sub[c] - (x-mean[c])·slope[c]) over
// channel j0+c of every sample of dx, dy and x [n, ch, l], for c < nc, in
// float32 (the subtractions left to right). dx may be dy.
func BNGradInput(dx, dy, x, mean, k, sub, slope []float32, n, ch, l, j0, nc int) {
	checkBN(n, ch, l, j0, nc, len(mean), len(k), len(sub), len(slope))
	if nc == 0 || n*l == 0 {
		return
	}
	_, _, _ = dx[n*ch*l-1], dy[n*ch*l-1], x[n*ch*l-1]
	bnGradInput(level, dx, dy, x, mean, k, sub, slope, n, ch, l, j0, nc)
}

// The Go loops below are the references the C bodies are tested against,
// and the kernels of a build without cgo. The explicit float32 conversions
// keep the compiler from fusing a multiply and an add.

func bnSumsGo(s1, s2 []float64, x []float32, n, ch, l, j0, nc int) {
	for c := range nc {
		var a, b float64
		for i := range n {
			for _, v := range x[(i*ch+j0+c)*l:][:l] {
				f := float64(v)
				a += f
				b += f * f
			}
		}
		s1[c], s2[c] = a, b
	}
}

func bnGradSumsGo(s0, s1 []float64, dy, x, mean []float32, n, ch, l, j0, nc int) {
	for c := range nc {
		m := mean[c]
		var a, b float64
		for i := range n {
			o := (i*ch + j0 + c) * l
			xr := x[o:][:l]
			for k, d := range dy[o:][:l] {
				a += float64(d)
				b += float64(d) * float64(xr[k]-m)
			}
		}
		s0[c], s1[c] = a, b
	}
}

func bnApplyGo(y, x, res []float32, relu bool, mean, scale, shift []float32, n, ch, l, j0, nc int) {
	for i := range n {
		for c := range nc {
			m, s, h := mean[c], scale[c], shift[c]
			o := (i*ch + j0 + c) * l
			yr := y[o:][:l]
			var rr []float32
			if res != nil {
				rr = res[o:][:l]
			}
			for k, v := range x[o:][:l] {
				t := float32((v-m)*s) + h
				if rr != nil {
					t += rr[k]
				}
				if relu && t < 0 {
					t = 0
				}
				yr[k] = t
			}
		}
	}
}

func bnGradInputGo(dx, dy, x, mean, k, sub, slope []float32, n, ch, l, j0, nc int) {
	for i := range n {
		for c := range nc {
			m, g, b, s := mean[c], k[c], sub[c], slope[c]
			o := (i*ch + j0 + c) * l
			xr, dr := x[o:][:l], dx[o:][:l]
			for q, d := range dy[o:][:l] {
				dr[q] = g * (d - b - float32((xr[q]-m)*s))
			}
		}
	}
}
