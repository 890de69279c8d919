//go:build !cgo || !amd64 || purego

package vec

// level is -1: this build has no C kernels.
var level = -1

func relu(_ int, y, x []float32)               { reluGo(y, x) }
func reluGrad(_ int, dx, dy, dy2, y []float32) { reluGradGo(dx, dy, dy2, y) }
func add(_ int, z, x, y []float32)             { addGo(z, x, y) }
func maxPool2x2(_ int, x, y []float32, idx []int32, planes, h, w, oh, ow int) {
	maxPool2x2Go(x, y, idx, planes, h, w, oh, ow)
}

func scalePlanes(_ int, y, x, s []float32, hw int) { scalePlanesGo(y, x, s, hw) }

func maxPool2x2Grad(_ int, dy []float32, idx []int32, dx []float32, planes, h, w, oh, ow int) {
	maxPool2x2GradGo(dy, idx, dx, planes, h, w, oh, ow)
}

func sum(_ int, x []float32) float32 { return sumGo(x) }

func biasGrad(_ int, dy []float32, n, o, plane int, db []float32, accumulate bool) {
	biasGradGo(dy, n, o, plane, db, accumulate)
}

func sgd(_ int, a *SGDArgs, p, g, buf []float32) { sgdGo(a, p, g, buf) }
