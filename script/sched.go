package script

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

// The learning-rate schedules (sched.*), PyTorch's lr_scheduler classes
// stepped after every optimizer step; train(schedule = ...) takes one.

var stepSchedMaker = &configMaker{
	name:   "sched.step",
	params: []string{"every", "gamma?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var every int
		gamma := number(0.1)
		if err := unpack(name, kwargs, "every", &every, "gamma?", &gamma); err != nil {
			return nil, err
		}
		if every < 1 {
			return nil, fmt.Errorf("%s: every must be ≥ 1 epoch, got %d", name, every)
		}
		if gamma <= 0 {
			return nil, fmt.Errorf("%s: gamma must be positive, got %g", name, float64(gamma))
		}
		return spec.Schedule{Kind: "step", Every: every, Gamma: float64(gamma), Pos: position(thread)}, nil
	},
}

var cosineSchedMaker = &configMaker{
	name:   "sched.cosine",
	params: []string{"min_lr?", "steps?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var minLR number
		steps := 0
		if err := unpack(name, kwargs, "min_lr?", &minLR, "steps?", &steps); err != nil {
			return nil, err
		}
		if minLR < 0 || steps < 0 {
			return nil, fmt.Errorf("%s: min_lr and steps must be ≥ 0", name)
		}
		return spec.Schedule{Kind: "cosine", MinLR: float64(minLR), Steps: steps, Pos: position(thread)}, nil
	},
}

var warmupSchedMaker = &configMaker{
	name:   "sched.linear_warmup",
	params: []string{"steps", "then?", "start_factor?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var steps int
		start := number(1.0 / 3)
		then := starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "steps", &steps, "then?", &then, "start_factor?", &start); err != nil {
			return nil, err
		}
		if steps < 1 {
			return nil, fmt.Errorf("%s: steps must be ≥ 1, got %d", name, steps)
		}
		if start <= 0 || start > 1 {
			return nil, fmt.Errorf("%s: start_factor must be in (0, 1], got %g", name, float64(start))
		}
		s := spec.Schedule{Kind: "warmup", Steps: steps, StartFactor: float64(start), Pos: position(thread)}
		if then != starlark.None {
			c, ok := then.(*Config)
			next, ok2 := spec.Schedule{}, false
			if ok {
				next, ok2 = c.Value.(spec.Schedule)
			}
			if !ok2 {
				return nil, fmt.Errorf("%s: then: got %s, want a schedule such as sched.cosine()", name, then.Type())
			}
			if next.Kind == "onecycle" {
				return nil, fmt.Errorf("%s: then: sched.onecycle has its own warm-up", name)
			}
			s.Then = &next
		}
		return s, nil
	},
}

var onecycleSchedMaker = &configMaker{
	name:   "sched.onecycle",
	params: []string{"max_lr", "pct_start?", "div_factor?", "final_div_factor?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var maxLR number
		pct, div, final := number(0.3), number(25), number(1e4)
		if err := unpack(name, kwargs, "max_lr", &maxLR, "pct_start?", &pct, "div_factor?", &div, "final_div_factor?", &final); err != nil {
			return nil, err
		}
		if maxLR <= 0 || div <= 0 || final <= 0 {
			return nil, fmt.Errorf("%s: max_lr, div_factor and final_div_factor must be positive", name)
		}
		if pct <= 0 || pct >= 1 {
			return nil, fmt.Errorf("%s: pct_start must be in (0, 1), got %g", name, float64(pct))
		}
		return spec.Schedule{Kind: "onecycle", MaxLR: float64(maxLR), PctStart: float64(pct), DivFactor: float64(div),
			FinalDivFactor: float64(final), Pos: position(thread)}, nil
	},
}

var schedModule = &starlarkstruct.Module{
	Name: "sched",
	Members: starlark.StringDict{
		"step":          stepSchedMaker.builtin(),
		"cosine":        cosineSchedMaker.builtin(),
		"linear_warmup": warmupSchedMaker.builtin(),
		"onecycle":      onecycleSchedMaker.builtin(),
	},
}
