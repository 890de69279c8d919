//go:build cuda

package backend_test

// Importing the cuda backend registers it, so that in a -tags cuda build
// (make cuda-check) TestEveryBackendHasEveryOp checks its ops too. It
// needs no GPU: the backend registers without one.
import _ "gorun/cuda"
