package script

import (
	"fmt"
	"math"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

// Layer is a declared layer as a Starlark value (nn.conv2d(...) and friends).
type Layer struct {
	L spec.Layer
}

var _ starlark.Value = (*Layer)(nil)

// String renders the layer as the call that would declare it.
func (l *Layer) String() string {
	var b strings.Builder
	writeLayer(&b, &l.L)
	return b.String()
}

func writeLayer(b *strings.Builder, l *spec.Layer) {
	fmt.Fprintf(b, "nn.%s(", l.Kind)
	var args []string
	switch l.Kind {
	case spec.Sequential:
		for i := range l.Layers {
			var c strings.Builder
			writeLayer(&c, &l.Layers[i])
			args = append(args, c.String())
		}
	case spec.Conv2D:
		args = append(args, fmt.Sprint(l.In), fmt.Sprint(l.Out), fmt.Sprintf("kernel=%d", l.Kernel))
		if l.Stride != 1 {
			args = append(args, fmt.Sprintf("stride=%d", l.Stride))
		}
		if l.Padding != 0 {
			args = append(args, fmt.Sprintf("padding=%d", l.Padding))
		}
		if !l.Bias {
			args = append(args, "bias=False")
		}
	case spec.Linear:
		args = append(args, fmt.Sprint(l.In), fmt.Sprint(l.Out))
		if !l.Bias {
			args = append(args, "bias=False")
		}
	case spec.MaxPool2D:
		args = append(args, fmt.Sprint(l.Kernel))
		if l.Stride != l.Kernel {
			args = append(args, fmt.Sprintf("stride=%d", l.Stride))
		}
	case spec.Dropout, spec.Dropout2D:
		args = append(args, fmt.Sprint(l.P))
	}
	if l.Name != "" {
		args = append(args, fmt.Sprintf("name=%q", l.Name))
	}
	b.WriteString(strings.Join(args, ", "))
	b.WriteString(")")
}

// Type is "layer".
func (l *Layer) Type() string { return "layer" }

// Freeze does nothing: a Layer is immutable.
func (l *Layer) Freeze() {}

// Truth is True.
func (l *Layer) Truth() starlark.Bool { return starlark.True }

// Hash fails: layers are not hashable.
func (l *Layer) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable type: layer") }

var nnModule = &starlarkstruct.Module{
	Name: "nn",
	Members: starlark.StringDict{
		"sequential":  starlark.NewBuiltin("nn.sequential", nnSequential),
		"conv2d":      starlark.NewBuiltin("nn.conv2d", nnConv2D),
		"linear":      starlark.NewBuiltin("nn.linear", nnLinear),
		"relu":        starlark.NewBuiltin("nn.relu", simpleLayer(spec.ReLU)),
		"maxpool2d":   starlark.NewBuiltin("nn.maxpool2d", nnMaxPool2D),
		"dropout":     starlark.NewBuiltin("nn.dropout", dropoutLayer(spec.Dropout)),
		"dropout2d":   starlark.NewBuiltin("nn.dropout2d", dropoutLayer(spec.Dropout2D)),
		"flatten":     starlark.NewBuiltin("nn.flatten", simpleLayer(spec.Flatten)),
		"log_softmax": starlark.NewBuiltin("nn.log_softmax", simpleLayer(spec.LogSoftmax)),
		"softmax":     starlark.NewBuiltin("nn.softmax", simpleLayer(spec.Softmax)),
	},
}

// layerName unpacks name=: None or a non-empty string without dots.
type layerName string

func (n *layerName) Unpack(v starlark.Value) error {
	if v == starlark.None {
		return nil
	}
	s, ok := starlark.AsString(v)
	if !ok {
		return fmt.Errorf("got %s, want string or None", v.Type())
	}
	if s == "" || strings.ContainsAny(s, ". \t\n") {
		return fmt.Errorf("%q is not a valid layer name (non-empty, no dots or spaces)", s)
	}
	*n = layerName(s)
	return nil
}

func positive(b *starlark.Builtin, name string, v int) error {
	if v <= 0 {
		return fmt.Errorf("%s: %s must be positive, got %d", b.Name(), name, v)
	}
	return nil
}

func nnSequential(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name layerName
	for _, kv := range kwargs {
		if k := string(kv[0].(starlark.String)); k != "name" {
			return nil, fmt.Errorf("%s: unexpected keyword argument %q", b.Name(), k)
		}
		if err := name.Unpack(kv[1]); err != nil {
			return nil, fmt.Errorf("%s: for parameter name: %v", b.Name(), err)
		}
	}
	seq := spec.Layer{Kind: spec.Sequential, Name: string(name), Pos: position(thread)}
	for i, a := range args {
		switch v := a.(type) {
		case *Layer:
			seq.Layers = append(seq.Layers, v.L)
		case *starlark.List:
			// nn.sequential([a, b, c]) is accepted too.
			if len(args) != 1 {
				return nil, fmt.Errorf("%s: argument %d is a list; pass layers, or one list of layers", b.Name(), i+1)
			}
			for j := 0; j < v.Len(); j++ {
				l, ok := v.Index(j).(*Layer)
				if !ok {
					return nil, fmt.Errorf("%s: list element %d is %s, want layer", b.Name(), j, v.Index(j).Type())
				}
				seq.Layers = append(seq.Layers, l.L)
			}
		default:
			return nil, fmt.Errorf("%s: argument %d is %s, want layer", b.Name(), i+1, a.Type())
		}
	}
	if len(seq.Layers) == 0 {
		return nil, fmt.Errorf("%s: needs at least one layer", b.Name())
	}
	return &Layer{L: seq}, nil
}

func nnConv2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var in, out, kernel int
	stride, padding, bias := 1, 0, true
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"in_channels", &in, "out_channels", &out, "kernel", &kernel,
		"stride?", &stride, "padding?", &padding, "bias?", &bias, "name?", &name); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		n string
		v int
	}{{"in_channels", in}, {"out_channels", out}, {"kernel", kernel}, {"stride", stride}} {
		if err := positive(b, c.n, c.v); err != nil {
			return nil, err
		}
	}
	if padding < 0 {
		return nil, fmt.Errorf("%s: padding must be ≥ 0, got %d", b.Name(), padding)
	}
	return &Layer{L: spec.Layer{Kind: spec.Conv2D, Name: string(name), Pos: position(thread),
		In: in, Out: out, Kernel: kernel, Stride: stride, Padding: padding, Bias: bias}}, nil
}

func nnLinear(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var in, out int
	bias := true
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"in_features", &in, "out_features", &out, "bias?", &bias, "name?", &name); err != nil {
		return nil, err
	}
	if err := positive(b, "in_features", in); err != nil {
		return nil, err
	}
	if err := positive(b, "out_features", out); err != nil {
		return nil, err
	}
	return &Layer{L: spec.Layer{Kind: spec.Linear, Name: string(name), Pos: position(thread),
		In: in, Out: out, Bias: bias}}, nil
}

func nnMaxPool2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var kernel int
	stride := starlark.Value(starlark.None)
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "kernel", &kernel, "stride?", &stride, "name?", &name); err != nil {
		return nil, err
	}
	if err := positive(b, "kernel", kernel); err != nil {
		return nil, err
	}
	s := kernel
	if stride != starlark.None {
		if err := starlark.AsInt(stride, &s); err != nil {
			return nil, fmt.Errorf("%s: for parameter stride: got %s, want int or None", b.Name(), stride.Type())
		}
		if err := positive(b, "stride", s); err != nil {
			return nil, err
		}
	}
	return &Layer{L: spec.Layer{Kind: spec.MaxPool2D, Name: string(name), Pos: position(thread), Kernel: kernel, Stride: s}}, nil
}

func simpleLayer(kind spec.LayerKind) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var name layerName
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name?", &name); err != nil {
			return nil, err
		}
		return &Layer{L: spec.Layer{Kind: kind, Name: string(name), Pos: position(thread)}}, nil
	}
}

func dropoutLayer(kind spec.LayerKind) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		p := number(0.5)
		var name layerName
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "p?", &p, "name?", &name); err != nil {
			return nil, err
		}
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("%s: p must be in [0, 1], got %g", b.Name(), float64(p))
		}
		return &Layer{L: spec.Layer{Kind: kind, Name: string(name), Pos: position(thread), P: float64(p)}}, nil
	}
}

// number unpacks an int or a float as float64; NaN and ±Inf are refused.
type number float64

func (n *number) Unpack(v starlark.Value) error {
	f, ok := starlark.AsFloat(v)
	if !ok {
		return fmt.Errorf("got %s, want number", v.Type())
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("got %s, want a finite number", v.String())
	}
	*n = number(f)
	return nil
}
