package engine

import (
	"fmt"
	"path"
	"strings"

	"gorun/engine/spec"
)

// checkParams refuses a training run that cannot change anything, or an
// optimizer setting that applies to nothing: a model without trainable
// parameters, and an optim.group pattern that matches no parameter (or
// only parameters an earlier group takes: the first group that matches a
// parameter applies).
func checkParams(g *Graph, s *spec.Spec) error {
	if len(g.Params) == 0 {
		return fmt.Errorf("%s: train: the model has no trainable parameters (its layers: %s): training would change nothing",
			s.Pos, modelLayers(&s.Model))
	}
	var names []string
	for _, p := range g.Params {
		names = append(names, p.Name)
	}
	groups := s.Optimizer.Groups
	for i, grp := range groups {
		for _, m := range grp.Match {
			var matched, taken []string
			for _, name := range names {
				if ok, _ := path.Match(m, name); ok {
					matched = append(matched, name)
					if paramGroup(groups[:i], name) == nil {
						taken = append(taken, name)
					}
				}
			}
			switch {
			case len(matched) == 0:
				return fmt.Errorf("%s: optim.group: pattern %q matches no parameter of the model%s; its parameters are %s",
					grp.Pos, m, aliasNote(g, m), nameList(names))
			case len(taken) == 0:
				first := paramGroup(groups[:i], matched[0])
				return fmt.Errorf("%s: optim.group: pattern %q matches only parameters an earlier group takes (%s, by the group at %s): the first group that matches a parameter applies",
					grp.Pos, m, nameList(matched), first.Pos)
			}
		}
	}
	return nil
}

// aliasNote says when pattern m matches another name of a parameter (a
// tied weight's), which groups do not go by.
func aliasNote(g *Graph, m string) string {
	for _, p := range g.Params {
		for _, a := range p.Aliases {
			if ok, _ := path.Match(m, a); ok {
				return fmt.Sprintf(" (%s is %s, tied: groups go by that name)", a, p.Name)
			}
		}
	}
	return ""
}

// nameList lists names for a message: the first 6, then how many in all.
func nameList(names []string) string {
	const most = 6
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, … (%d in all)", strings.Join(names[:most], ", "), len(names))
}

// modelLayers lists a model's layers (their labels, each once, in order)
// for a message.
func modelLayers(m *spec.Model) string {
	var out []string
	seen := map[string]bool{}
	var walk func(l *spec.Layer)
	walk = func(l *spec.Layer) {
		if l.Kind == spec.Sequential {
			for _, c := range l.Layers {
				walk(c)
			}
			return
		}
		if label := l.Label(); !seen[label] {
			seen[label] = true
			out = append(out, label)
		}
	}
	for _, a := range m.Nodes {
		walk(a.Layer)
	}
	if len(out) == 0 {
		return "none"
	}
	return nameList(out)
}
