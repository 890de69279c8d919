//go:build cuda

package main

// A gorun built with -tags cuda (make build-cuda) has the "cuda" backend.
import _ "gorun/cuda"
