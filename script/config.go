package script

import (
	"fmt"
	"strings"

	"go.starlark.net/starlark"
)

// Config is the Starlark value of optim.*, data.* and sync.* calls: the
// arguments it was called with (so that --set optimizer.lr=0.05 can rebuild
// it) and the Go value they describe (a spec.Optimizer, spec.Data or
// spec.Sync).
type Config struct {
	maker  *configMaker
	kwargs []starlark.Tuple // every argument, by name
	// Value is the spec value built from the arguments.
	Value any
}

var _ starlark.HasAttrs = (*Config)(nil)

// configMaker is one builtin that makes Configs.
type configMaker struct {
	name   string   // "optim.sgd"
	params []string // parameter names, in positional order; "x?" marks optional
	build  func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error)
}

func (m *configMaker) builtin() *starlark.Builtin {
	return starlark.NewBuiltin(m.name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		if len(args) > len(m.params) {
			return nil, fmt.Errorf("%s: got %d positional arguments, want at most %d", m.name, len(args), len(m.params))
		}
		all := make([]starlark.Tuple, 0, len(args)+len(kwargs))
		for i, a := range args {
			all = append(all, starlark.Tuple{starlark.String(strings.TrimSuffix(m.params[i], "?")), a})
		}
		all = append(all, kwargs...)
		return m.make(thread, all)
	})
}

func (m *configMaker) make(thread *starlark.Thread, kwargs []starlark.Tuple) (*Config, error) {
	v, err := m.build(thread, m.name, kwargs)
	if err != nil {
		return nil, err
	}
	return &Config{maker: m, kwargs: kwargs, Value: v}, nil
}

// with returns the Config rebuilt with field set to v.
func (c *Config) with(thread *starlark.Thread, field string, v starlark.Value) (*Config, error) {
	known := false
	for _, p := range c.maker.params {
		if strings.TrimSuffix(p, "?") == field {
			known = true
		}
	}
	if !known {
		return nil, fmt.Errorf("%s has no parameter %q (it has %s)", c.maker.name, field, c.paramList())
	}
	kw := make([]starlark.Tuple, 0, len(c.kwargs)+1)
	for _, t := range c.kwargs {
		if string(t[0].(starlark.String)) != field {
			kw = append(kw, t)
		}
	}
	kw = append(kw, starlark.Tuple{starlark.String(field), v})
	return c.maker.make(thread, kw)
}

func (c *Config) paramList() string {
	var names []string
	for _, p := range c.maker.params {
		names = append(names, strings.TrimSuffix(p, "?"))
	}
	return strings.Join(names, ", ")
}

// String renders the call that made the value.
func (c *Config) String() string {
	var args []string
	for _, t := range c.kwargs {
		args = append(args, fmt.Sprintf("%s=%s", t[0].(starlark.String).GoString(), t[1].String()))
	}
	return c.maker.name + "(" + strings.Join(args, ", ") + ")"
}

// Type is the builtin's name, e.g. "optim.sgd".
func (c *Config) Type() string { return c.maker.name }

// Freeze freezes the arguments.
func (c *Config) Freeze() {
	for _, t := range c.kwargs {
		t[1].Freeze()
	}
}

// Truth is True.
func (c *Config) Truth() starlark.Bool { return starlark.True }

// Hash fails: Configs are not hashable.
func (c *Config) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable type: %s", c.Type()) }

// Attr returns the argument named name, or None when it was not given.
func (c *Config) Attr(name string) (starlark.Value, error) {
	for _, t := range c.kwargs {
		if string(t[0].(starlark.String)) == name {
			return t[1], nil
		}
	}
	for _, p := range c.maker.params {
		if strings.TrimSuffix(p, "?") == name {
			return starlark.None, nil
		}
	}
	return nil, nil
}

// AttrNames lists the parameters.
func (c *Config) AttrNames() []string {
	var names []string
	for _, p := range c.maker.params {
		names = append(names, strings.TrimSuffix(p, "?"))
	}
	return names
}

// unpack reads kwargs into the pointers of pairs (name, ptr, ...) with
// starlark.UnpackArgs, which gives familiar error messages.
func unpack(name string, kwargs []starlark.Tuple, pairs ...any) error {
	return starlark.UnpackArgs(name, nil, kwargs, pairs...)
}
