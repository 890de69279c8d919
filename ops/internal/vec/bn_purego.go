//go:build !cgo || !amd64 || purego

package vec

func bnSums(_ int, s1, s2 []float64, x []float32, n, ch, l, j0, nc int) {
	bnSumsGo(s1, s2, x, n, ch, l, j0, nc)
}

func bnGradSums(_ int, s0, s1 []float64, dy, x, mean []float32, n, ch, l, j0, nc int) {
	bnGradSumsGo(s0, s1, dy, x, mean, n, ch, l, j0, nc)
}

func bnApply(_ int, y, x, res []float32, relu bool, mean, scale, shift []float32, n, ch, l, j0, nc int) {
	bnApplyGo(y, x, res, relu, mean, scale, shift, n, ch, l, j0, nc)
}

func bnGradInput(_ int, dx, dy, x, mean, k, sub, slope []float32, n, ch, l, j0, nc int) {
	bnGradInputGo(dx, dy, x, mean, k, sub, slope, n, ch, l, j0, nc)
}
