package vec

import "math"

// Layer-normalisation kernels and column sums over float32 matrices stored
// row-major, rows × d elements: one C call for the whole matrix, never one
// per row. Per-row values (a row's mean and inverse standard deviation)
// are read from and written to save, two float32 values a row. A nil
// gamma or beta is absent (gamma 1, beta 0). The float64 row sums are in
// an order fixed by d and the level (so they may differ from the Go loops
// by rounding, never between runs); the column sums add each column in
// row order at every level, as the Go loops do; the elementwise results
// use the same float32 operations at every level, so they are
// bit-identical to the Go loops given the same row values.

// checkLN panics unless the matrices hold rows·d values and the optional
// per-column slices (nil or at least d long) and save (2·rows) fit.
func checkLN(rows, d int, mats []int, opt ...[]float32) {
	if rows < 0 || d < 0 {
		panic("vec: layer-norm shape negative")
	}
	for _, n := range mats {
		if n < rows*d {
			panic("vec: layer-norm matrix shorter than rows·d")
		}
	}
	for _, p := range opt {
		if p != nil && len(p) < d {
			panic("vec: layer-norm gamma or beta shorter than d")
		}
	}
}

// LayerNorm normalises each row of x [rows, d] into y: with mean and
// variance of the row in float64 (mean = Σx/d, var = Σ(x-mean)²/d), save
// gets (float32(mean), float32(1/sqrt(var+eps))) = (m, k) and y =
// gamma·((x-m)·k) + beta in float32, or (x-m)·k when gamma and beta are
// both nil. y may be x.
func LayerNorm(y, save, x, gamma, beta []float32, rows, d int, eps float64) {
	checkLN(rows, d, []int{len(y), len(x)}, gamma, beta)
	if rows*d == 0 {
		return
	}
	_ = save[2*rows-1]
	ln(level, y, save, x, gamma, beta, rows, d, eps)
}

// LayerNormGradInput sets dx for each row of dy and x [rows, d], with (m,
// k) = save[2r], save[2r+1]: g = dy·gamma, x̂ = (x-m)·k in float32, s0 =
// Σg and s1 = Σg·x̂ in float64, and dx = k·((g - m0) - x̂·m1) in float32,
// m0 = float32(s0/d), m1 = float32(s1/d). dx may be dy.
func LayerNormGradInput(dx, dy, x, save, gamma []float32, rows, d int) {
	checkLN(rows, d, []int{len(dx), len(dy), len(x)}, gamma)
	if rows*d == 0 {
		return
	}
	_ = save[2*rows-1]
	lnGradInput(level, dx, dy, x, save, gamma, rows, d)
}

// LayerNormGradGamma sets dg[j] = float32(Σ_r dy[r,j]·x̂[r,j]) (adds it with
// accumulate) for j < d, x̂ = (x-m)·k in float32 with (m, k) = save[2r],
// save[2r+1], summed in float64 in row order.
func LayerNormGradGamma(dg, dy, x, save []float32, rows, d int, accumulate bool) {
	checkLN(rows, d, []int{len(dy), len(x)})
	if d == 0 {
		return
	}
	_ = dg[d-1]
	if rows > 0 {
		_ = save[2*rows-1]
	}
	colSums(level, dg, dy, x, save, rows, d, accumulate)
}

// ColSums sets s[j] = float32(Σ_r x[r,j]) (adds it with accumulate) for
// j < cols of x [rows, cols], summed in float64 in row order: the layer
// norm's beta gradient and the linear layer's bias gradient.
func ColSums(s, x []float32, rows, cols int, accumulate bool) {
	checkLN(rows, cols, []int{len(x)})
	if cols == 0 {
		return
	}
	_ = s[cols-1]
	colSums(level, s, x, nil, nil, rows, cols, accumulate)
}

// The Go loops below are the references the C bodies are tested against,
// and the kernels of a build without cgo. The explicit float32 conversions
// keep the compiler from fusing a multiply and an add.

func lnGo(y, save, x, gamma, beta []float32, rows, d int, eps float64) {
	for r := range rows {
		xr := x[r*d:][:d]
		mean, s2 := lnMomentsGo(xr)
		m, k := float32(mean), float32(1/math.Sqrt(s2/float64(d)+eps))
		save[2*r], save[2*r+1] = m, k
		lnApplyGo(y[r*d:][:d], xr, gamma, beta, m, k)
	}
}

// lnMomentsGo returns Σx/d and Σ(x-mean)² of a row.
func lnMomentsGo(xr []float32) (mean, s2 float64) {
	var s float64
	for _, v := range xr {
		s += float64(v)
	}
	mean = s / float64(len(xr))
	for _, v := range xr {
		e := float64(v) - mean
		s2 += e * e
	}
	return mean, s2
}

// lnApplyGo is LayerNorm's elementwise step on one row.
func lnApplyGo(yr, xr, gamma, beta []float32, m, k float32) {
	if gamma == nil && beta == nil {
		for j, v := range xr {
			yr[j] = (v - m) * k
		}
		return
	}
	for j, v := range xr {
		g, b := float32(1), float32(0)
		if gamma != nil {
			g = gamma[j]
		}
		if beta != nil {
			b = beta[j]
		}
		yr[j] = float32(g*((v-m)*k)) + b
	}
}

func lnGradInputGo(dx, dy, x, save, gamma []float32, rows, d int) {
	for r := range rows {
		xr, gr := x[r*d:][:d], dy[r*d:][:d]
		mean, is := save[2*r], save[2*r+1]
		s0, s1 := lnGradSumsGo(gr, xr, gamma, mean, is)
		lnGradApplyGo(dx[r*d:][:d], gr, xr, gamma, mean, is, float32(s0/float64(d)), float32(s1/float64(d)))
	}
}

// lnGradSumsGo returns Σg and Σg·x̂ of a row, g = dy·gamma in float64.
func lnGradSumsGo(gr, xr, gamma []float32, mean, is float32) (s0, s1 float64) {
	for j, g := range gr {
		gg := float64(g)
		if gamma != nil {
			gg *= float64(gamma[j])
		}
		s0 += gg
		s1 += gg * float64((xr[j]-mean)*is)
	}
	return s0, s1
}

// lnGradApplyGo is LayerNormGradInput's elementwise step on one row.
func lnGradApplyGo(dr, gr, xr, gamma []float32, mean, is, m0, m1 float32) {
	for j, g := range gr {
		gg := g
		if gamma != nil {
			gg = g * gamma[j]
		}
		dr[j] = is * (gg - m0 - float32(float32((xr[j]-mean)*is)*m1))
	}
}

// lnRowSumsGo is lnRowSums's Go loop.
func lnRowSumsGo(grad bool, out []float64, a, x, save, gamma []float32, rows, d int) {
	for r := range rows {
		if grad {
			out[2*r], out[2*r+1] = lnGradSumsGo(a[r*d:][:d], x[r*d:][:d], gamma, save[2*r], save[2*r+1])
		} else {
			out[2*r], out[2*r+1] = lnMomentsGo(a[r*d:][:d])
		}
	}
}

// colSumsGo is ColSums, or with x (and save) LayerNormGradGamma.
func colSumsGo(s, dy, x, save []float32, rows, cols int, accumulate bool) {
	for j := range s[:cols] {
		var t float64
		for r := range rows {
			o := r*cols + j
			if x != nil {
				t += float64(dy[o]) * float64((x[o]-save[2*r])*save[2*r+1])
			} else {
				t += float64(dy[o])
			}
		}
		if accumulate {
			s[j] += float32(t)
		} else {
			s[j] = float32(t)
		}
	}
}
