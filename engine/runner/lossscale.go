package runner

import (
	"math"

	"gorun/ops"
)

// GradScaler's defaults (torch.cuda.amp.GradScaler), the dynamic loss
// scaling of train(precision = "fp16").
const (
	// InitLossScale is the scale of the first step: 2¹⁶.
	InitLossScale = 65536.0
	// LossScaleGrowthInterval is how many steps in a row without inf or
	// NaN double the scale.
	LossScaleGrowthInterval = 2000
	lossScaleGrowth         = 2.0
	lossScaleBackoff        = 0.5
)

// lossScaler is one device's dynamic loss scale under fp16, GradScaler's
// rules: the loss (so every gradient) is multiplied by scale; a step
// whose loss or gradients hold inf or NaN is skipped and halves the
// scale; LossScaleGrowthInterval clean steps in a row double it (when the
// doubled scale is finite, as PyTorch's _amp_update_scale_). Every rank
// sees the same verdicts (one collective sums them), so every rank's
// scale is the same. Off (other precisions): scale 1, never changed.
type lossScaler struct {
	on    bool
	scale float64
	clean int // steps without inf or NaN since the last change
}

// newLossScaler is the scaler of precision p.
func newLossScaler(p ops.Precision) lossScaler {
	if p == ops.FP16 {
		return lossScaler{on: true, scale: InitLossScale}
	}
	return lossScaler{scale: 1}
}

// update applies one step's verdict: found reports inf or NaN.
func (s *lossScaler) update(found bool) {
	if !s.on {
		return
	}
	if found {
		s.scale *= lossScaleBackoff
		s.clean = 0
		return
	}
	s.clean++
	if s.clean == LossScaleGrowthInterval {
		if grown := float32(s.scale * lossScaleGrowth); !math.IsInf(float64(grown), 0) {
			s.scale = float64(grown)
		}
		s.clean = 0
	}
}
