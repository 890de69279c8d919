//go:build cuda

package main

// A gorun built with -tags cuda (make build-cuda) has the "cuda" backend's
// devices.
import _ "gorun/cuda"
