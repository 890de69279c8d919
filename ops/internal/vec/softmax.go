package vec

// SoftmaxRows sets each row of k elements of y to the softmax of x's row,
// in float32: with m the row's maximum (NaN if the row holds one), e_j =
// exp(x_j - m) by gelu.c's exponential (0 where x_j - m < -87, NaN for a
// NaN), s = Σ e_j in sixteen partial sums (element j into partial j mod 16,
// combined pairwise), and y_j = e_j · (1/s). With causal > 0 the rows are
// those of causal×causal matrices and row r keeps columns 0..r mod causal,
// the others set to 0. ms, when not nil, receives m and s of row r at 2r
// and 2r+1. len(x) is a whole number of rows; y may be x.
func SoftmaxRows(x, y []float32, k, causal int, ms []float32) {
	if k == 0 || len(x) == 0 {
		return
	}
	rows := len(x) / k
	if rows*k != len(x) {
		panic("vec: SoftmaxRows: x is not whole rows")
	}
	_ = y[len(x)-1]
	if ms != nil {
		_ = ms[2*rows-1]
	}
	softmax(level, x, y, rows, k, causal, ms)
}

// smExpGo is softmax.c's sm_exp.
func smExpGo(d float32) float32 {
	switch {
	case d != d:
		return d
	case d < expLo:
		return 0
	case d > expHi:
		d = expHi
	}
	return expGo(d)
}

// softmaxGo is softmax.c's softmax_c, operation for operation.
func softmaxGo(x, y []float32, rows, k, causal int, ms []float32) {
	for r := range rows {
		xr, yr := x[r*k:][:k], y[r*k:][:k]
		keep := k
		if causal > 0 {
			keep = min(r%causal+1, k)
		}
		m := xr[0]
		for _, v := range xr[1:keep] {
			if v > m || v != v {
				m = v
			}
		}
		var p [16]float32
		for j, v := range xr[:keep] {
			e := smExpGo(v - m)
			yr[j] = e
			p[j&15] += e
		}
		for w := 8; w >= 1; w /= 2 {
			for i := range w {
				p[i] = p[i] + p[i+w]
			}
		}
		s := p[0]
		inv := 1 / s
		for j := range yr[:keep] {
			yr[j] = yr[j] * inv
		}
		clear(yr[keep:])
		if ms != nil {
			ms[2*r], ms[2*r+1] = m, s
		}
	}
}
