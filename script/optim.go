package script

import (
	"fmt"
	"math"
	"path"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

var sgdMaker = &configMaker{
	name:   "optim.sgd",
	params: []string{"lr", "momentum?", "dampening?", "weight_decay?", "nesterov?", "groups?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var lr, momentum, dampening, wd number
		var nesterov bool
		groups := starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "lr", &lr, "momentum?", &momentum, "dampening?", &dampening,
			"weight_decay?", &wd, "nesterov?", &nesterov, "groups?", &groups); err != nil {
			return nil, err
		}
		gs, err := paramGroups(name, groups)
		if err != nil {
			return nil, err
		}
		if lr <= 0 {
			return nil, fmt.Errorf("%s: lr must be positive, got %g", name, float64(lr))
		}
		if momentum < 0 || wd < 0 {
			return nil, fmt.Errorf("%s: momentum and weight_decay must be ≥ 0", name)
		}
		if nesterov && (momentum <= 0 || dampening != 0) {
			return nil, fmt.Errorf("%s: nesterov needs a momentum and zero dampening (as in PyTorch)", name)
		}
		return spec.Optimizer{Kind: "sgd", LR: float64(lr), Momentum: float64(momentum), Dampening: float64(dampening),
			WeightDecay: float64(wd), Nesterov: nesterov, Groups: gs, Pos: position(thread)}, nil
	},
}

var adamMaker = &configMaker{
	name:   "optim.adam",
	params: []string{"lr?", "betas?", "eps?", "weight_decay?", "groups?"},
	build:  adamBuild("adam", 0),
}

// adamwMaker is optim.adamw: torch.optim.AdamW (decoupled weight decay,
// 0.01 by default as in PyTorch).
var adamwMaker = &configMaker{
	name:   "optim.adamw",
	params: []string{"lr?", "betas?", "eps?", "weight_decay?", "groups?"},
	build:  adamBuild("adamw", 0.01),
}

func adamBuild(kind string, defaultWD float64) func(*starlark.Thread, string, []starlark.Tuple) (any, error) {
	return func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		lr := number(0.001)
		eps := number(1e-8)
		wd := number(defaultWD)
		groups := starlark.Value(starlark.None)
		betas := starlark.Value(starlark.Tuple{starlark.Float(0.9), starlark.Float(0.999)})
		if err := unpack(name, kwargs, "lr?", &lr, "betas?", &betas, "eps?", &eps, "weight_decay?", &wd, "groups?", &groups); err != nil {
			return nil, err
		}
		pair, err := floatPair(betas)
		if err != nil {
			return nil, fmt.Errorf("%s: betas: %v", name, err)
		}
		if lr <= 0 || eps <= 0 || wd < 0 {
			return nil, fmt.Errorf("%s: lr and eps must be positive and weight_decay ≥ 0", name)
		}
		for _, b := range pair {
			if b < 0 || b >= 1 {
				return nil, fmt.Errorf("%s: betas must be in [0, 1), got (%g, %g)", name, pair[0], pair[1])
			}
		}
		gs, err := paramGroups(name, groups)
		if err != nil {
			return nil, err
		}
		return spec.Optimizer{Kind: kind, LR: float64(lr), Beta1: pair[0], Beta2: pair[1], Eps: float64(eps),
			WeightDecay: float64(wd), Groups: gs, Pos: position(thread)}, nil
	}
}

// groupMaker is optim.group(match, weight_decay = None, lr = None): the
// parameters whose names match one of the glob patterns ("*.bias",
// "*ln_*") take these settings instead of the optimizer's — PyTorch's
// parameter groups, typically to exempt biases and norms from weight decay.
var groupMaker = &configMaker{
	name:   "optim.group",
	params: []string{"match", "weight_decay?", "lr?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var match starlark.Value
		wd, lr := starlark.Value(starlark.None), starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "match", &match, "weight_decay?", &wd, "lr?", &lr); err != nil {
			return nil, err
		}
		g := spec.ParamGroup{Pos: position(thread)}
		if s, ok := starlark.AsString(match); ok {
			g.Match = []string{s}
		} else if seq, ok := match.(starlark.Indexable); ok {
			for i := 0; i < seq.Len(); i++ {
				s, ok := starlark.AsString(seq.Index(i))
				if !ok {
					return nil, fmt.Errorf("%s: match: element %d is %s, want a pattern string", name, i, seq.Index(i).Type())
				}
				g.Match = append(g.Match, s)
			}
		} else {
			return nil, fmt.Errorf("%s: match: got %s, want a pattern or a list of them", name, match.Type())
		}
		for _, m := range g.Match {
			if _, err := path.Match(m, ""); err != nil {
				return nil, fmt.Errorf("%s: match: bad pattern %q: %v", name, m, err)
			}
		}
		if len(g.Match) == 0 {
			return nil, fmt.Errorf("%s: match: give at least one pattern", name)
		}
		for _, f := range []struct {
			v   starlark.Value
			dst **float64
			n   string
		}{{wd, &g.WeightDecay, "weight_decay"}, {lr, &g.LR, "lr"}} {
			if f.v == starlark.None {
				continue
			}
			x, ok := starlark.AsFloat(f.v)
			if !ok || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || (f.n == "lr" && x == 0) {
				return nil, fmt.Errorf("%s: %s: got %s, want a finite number ≥ 0 (lr > 0)", name, f.n, f.v.String())
			}
			*f.dst = &x
		}
		return g, nil
	},
}

// paramGroups unpacks an optimizer's groups = [optim.group(...), ...].
func paramGroups(name string, v starlark.Value) ([]spec.ParamGroup, error) {
	if v == starlark.None {
		return nil, nil
	}
	seq, ok := v.(starlark.Indexable)
	if !ok {
		return nil, fmt.Errorf("%s: groups: got %s, want a list of optim.group(...)", name, v.Type())
	}
	var out []spec.ParamGroup
	for i := 0; i < seq.Len(); i++ {
		c, ok := seq.Index(i).(*Config)
		if ok {
			if g, ok := c.Value.(spec.ParamGroup); ok {
				out = append(out, g)
				continue
			}
		}
		return nil, fmt.Errorf("%s: groups: element %d is %s, want optim.group(...)", name, i, seq.Index(i).Type())
	}
	return out, nil
}

var optimModule = &starlarkstruct.Module{
	Name: "optim",
	Members: starlark.StringDict{
		"sgd":   sgdMaker.builtin(),
		"adam":  adamMaker.builtin(),
		"adamw": adamwMaker.builtin(),
		"group": groupMaker.builtin(),
	},
}

// floatPair reads a 2-element tuple or list of numbers.
func floatPair(v starlark.Value) ([2]float64, error) {
	var out [2]float64
	seq, ok := v.(starlark.Indexable)
	if !ok || seq.Len() != 2 {
		return out, fmt.Errorf("got %s, want a pair of numbers", v.String())
	}
	for i := 0; i < 2; i++ {
		f, ok := starlark.AsFloat(seq.Index(i))
		if !ok {
			return out, fmt.Errorf("got %s, want a pair of numbers", v.String())
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return out, fmt.Errorf("got %s, want a pair of finite numbers", v.String())
		}
		out[i] = f
	}
	return out, nil
}
