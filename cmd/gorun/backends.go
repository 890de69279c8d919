package main

// The backends this gorun offers: cpu always; cuda's description (its
// name, its [cuda] table and how to build a gorun that has it) always, so
// that cluster files naming it parse and plan, and its devices in a gorun
// built with -tags cuda (cuda.go).
import (
	_ "gorun/cuda/cudatarget"
	_ "gorun/engine/backend/cpu"
)
