package engine

import (
	"fmt"
	"math"

	"gorun/engine/spec"
)

// LearningRate is the learning rate of optimizer step step (1-based) of a
// run of total optimizer steps, perEpoch of them in an epoch: the
// optimizer's lr under the Spec's schedule, as PyTorch's lr_scheduler
// gives it when scheduler.step() follows every optimizer.step().
func (p *Plan) LearningRate(step, total, perEpoch int) float64 {
	return scheduledLR(p.Spec.Schedule, p.Spec.Optimizer.LR, step-1, total, max(perEpoch, 1))
}

// scheduledLR is the rate after i scheduler steps of a schedule over
// total steps starting from base.
func scheduledLR(s *spec.Schedule, base float64, i, total, perEpoch int) float64 {
	if s == nil {
		return base
	}
	switch s.Kind {
	case "step":
		// StepLR stepped per epoch: ×gamma every Every epochs.
		return base * math.Pow(s.Gamma, float64(i/perEpoch/max(s.Every, 1)))
	case "cosine":
		tmax := total
		if s.Steps > 0 {
			tmax = s.Steps
		}
		// CosineAnnealingLR's closed form.
		return s.MinLR + (base-s.MinLR)*(1+math.Cos(math.Pi*float64(i)/float64(max(tmax, 1))))/2
	case "warmup":
		if i < s.Steps {
			return base * (s.StartFactor + (1-s.StartFactor)*float64(i)/float64(s.Steps))
		}
		return scheduledLR(s.Then, base, i-s.Steps, total-s.Steps, perEpoch)
	case "onecycle":
		initial := s.MaxLR / s.DivFactor
		final := initial / s.FinalDivFactor
		end1 := s.PctStart*float64(total) - 1
		end2 := float64(total) - 1
		anneal := func(from, to, pct float64) float64 { return to + (from-to)/2*(1+math.Cos(math.Pi*pct)) }
		if float64(i) <= end1 {
			return anneal(initial, s.MaxLR, float64(i)/end1)
		}
		return anneal(s.MaxLR, final, (float64(i)-end1)/(end2-end1))
	}
	panic(fmt.Sprintf("engine: unknown schedule %q", s.Kind))
}

// CheckSchedule refuses a schedule that cannot run over total steps.
func CheckSchedule(s *spec.Schedule, total int) error {
	for ; s != nil; s = s.Then {
		switch s.Kind {
		case "step", "cosine":
		case "warmup":
			if s.Then != nil && s.Then.Kind != "step" && s.Steps >= total {
				return fmt.Errorf("%s: sched.linear_warmup: %d warm-up steps leave none of the run's %d optimizer steps to the schedule after it", s.Pos, s.Steps, total)
			}
			total -= s.Steps
		case "onecycle":
			if s.PctStart*float64(total) < 2 || total < 3 {
				return fmt.Errorf("%s: sched.onecycle: pct_start %g of %d optimizer steps leaves no warm-up phase", s.Pos, s.PctStart, total)
			}
		default:
			return fmt.Errorf("%s: unknown schedule %q", s.Pos, s.Kind)
		}
	}
	return nil
}
