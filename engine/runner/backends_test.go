package runner

// The backends the runner's tests run on. The runner imports none itself
// (cmd/gorun imports them): the cpu backend, and cuda's description for
// the plans compiled for a cuda cluster.
import (
	_ "gorun/cuda/cudatarget"
	_ "gorun/engine/backend/cpu"
)
