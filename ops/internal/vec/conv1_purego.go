//go:build !cgo || !amd64 || purego

package vec

func conv1Forward(_ int, g *Conv1Geom, x, w, b, y []float32) { conv1ForwardGo(g, x, w, b, y) }
func conv1GradWeight(_ int, g *Conv1Geom, dy, x, dw []float32, accumulate bool) {
	conv1GradWeightGo(g, dy, x, dw, accumulate)
}
