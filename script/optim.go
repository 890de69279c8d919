package script

import (
	"fmt"
	"math"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

var sgdMaker = &configMaker{
	name:   "optim.sgd",
	params: []string{"lr", "momentum?", "dampening?", "weight_decay?", "nesterov?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var lr, momentum, dampening, wd number
		var nesterov bool
		if err := unpack(name, kwargs, "lr", &lr, "momentum?", &momentum, "dampening?", &dampening,
			"weight_decay?", &wd, "nesterov?", &nesterov); err != nil {
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
			WeightDecay: float64(wd), Nesterov: nesterov, Pos: position(thread)}, nil
	},
}

var adamMaker = &configMaker{
	name:   "optim.adam",
	params: []string{"lr?", "betas?", "eps?", "weight_decay?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		lr := number(0.001)
		eps := number(1e-8)
		var wd number
		betas := starlark.Value(starlark.Tuple{starlark.Float(0.9), starlark.Float(0.999)})
		if err := unpack(name, kwargs, "lr?", &lr, "betas?", &betas, "eps?", &eps, "weight_decay?", &wd); err != nil {
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
		return spec.Optimizer{Kind: "adam", LR: float64(lr), Beta1: pair[0], Beta2: pair[1], Eps: float64(eps),
			WeightDecay: float64(wd), Pos: position(thread)}, nil
	},
}

var optimModule = &starlarkstruct.Module{
	Name: "optim",
	Members: starlark.StringDict{
		"sgd":  sgdMaker.builtin(),
		"adam": adamMaker.builtin(),
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
