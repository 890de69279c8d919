//go:build cuda

package model

// A program built with -tags cuda links the cuda backend in, and Load
// runs models there unless WithBackend says otherwise.
import _ "gorun/cuda"
