//go:build !cgo || !amd64 || purego

package vec

func geluTanh(_ int, y, x []float32)          { geluTanhGo(y, x) }
func geluTanhGrad(_ int, dx, dy, x []float32) { geluTanhGradGo(dx, dy, x) }
