package engine

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"gorun/engine/spec"
)

// TestSchedulesMatchPyTorch compares every step's learning rate under
// each sched.* with PyTorch 1.13's lr_scheduler (testdata/gen_schedules.py).
func TestSchedulesMatchPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/schedules_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Epochs   int
		PerEpoch int `json:"per_epoch"`
		Cases    map[string]struct{ LR []float64 }
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	scheds := map[string]*spec.Schedule{
		"step":          {Kind: "step", Every: 2, Gamma: 0.5},
		"cosine":        {Kind: "cosine", MinLR: 0.001},
		"warmup_cosine": {Kind: "warmup", Steps: 4, StartFactor: 0.25, Then: &spec.Schedule{Kind: "cosine"}},
		"onecycle":      {Kind: "onecycle", MaxLR: 0.5, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4},
	}
	total := g.Epochs * g.PerEpoch
	for name, s := range scheds {
		want := g.Cases[name].LR
		if len(want) != total {
			t.Fatalf("%s: golden has %d steps, want %d", name, len(want), total)
		}
		if err := CheckSchedule(s, total); err != nil {
			t.Fatal(err)
		}
		p := &Plan{Spec: &spec.Spec{Schedule: s, Optimizer: spec.Optimizer{LR: 0.1}}}
		for i, w := range want {
			if got := p.LearningRate(i+1, total, g.PerEpoch); math.Abs(got-w) > 1e-9*math.Max(w, 1e-3) {
				t.Errorf("%s step %d: lr %.12g, PyTorch %.12g", name, i+1, got, w)
			}
		}
	}
	if err := CheckSchedule(&spec.Schedule{Kind: "warmup", Steps: 20, Pos: "s.star:3:1", Then: &spec.Schedule{Kind: "cosine"}}, 15); err == nil {
		t.Error("a warm-up longer than the run, then cosine, is accepted")
	}
	if err := CheckSchedule(&spec.Schedule{Kind: "onecycle", PctStart: 0.1, Pos: "s.star:3:1"}, 15); err == nil {
		t.Error("a one-cycle schedule with a warm-up of under 2 steps is accepted")
	}
}
