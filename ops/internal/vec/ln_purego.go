//go:build !cgo || !amd64 || purego

package vec

func ln(_ int, y, save, x, gamma, beta []float32, rows, d int, eps float64) {
	lnGo(y, save, x, gamma, beta, rows, d, eps)
}

func lnGradInput(_ int, dx, dy, x, save, gamma []float32, rows, d int) {
	lnGradInputGo(dx, dy, x, save, gamma, rows, d)
}

func colSums(_ int, s, dy, x, save []float32, rows, cols int, accumulate bool) {
	colSumsGo(s, dy, x, save, rows, cols, accumulate)
}

func lnRowSums(_ int, grad bool, out []float64, a, x, save, gamma []float32, rows, d int) {
	lnRowSumsGo(grad, out, a, x, save, gamma, rows, d)
}
