//go:build !cgo || !amd64 || purego

package vec

func convFast(int, *ConvGeom) int                           { return 0 }
func convForward(_ int, g *ConvGeom, x, w, b, y []float32)  { convForwardGo(g, x, w, b, y) }
func convGradInput(_ int, g *ConvGeom, dy, w, dx []float32) { convGradInputGo(g, dy, w, dx) }
func convGradWeight(_ int, g *ConvGeom, dy, x, dw []float32, a bool) {
	convGradWeightGo(g, dy, x, dw, a)
}
func convPoolGrad(_ int, g *ConvGeom, dy []float32, idx []int32, y, x, dw, db []float32, a bool, work []float32) {
	convPoolGradGo(g, dy, idx, y, x, dw, db, a, work)
}

func convPoolGradOKC(g *ConvGeom) bool { return ConvPoolGradOK(g) }
