//go:build cuda

package backend_test

// A -tags cuda build tests the cuda backend's devices too (package cuda
// registers them; opening none needs no GPU).
import _ "gorun/cuda"
