package script

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
	"gorun/ops"
)

// Layer is a declared layer as a Starlark value (nn.conv2d(...) and
// friends). Calling it on tensors applies it: conv(x). A layer applied
// twice shares its parameters.
type Layer struct {
	L *spec.Layer
}

var (
	_ starlark.Value    = (*Layer)(nil)
	_ starlark.Callable = (*Layer)(nil)
)

// String renders the layer as the call that would declare it.
func (l *Layer) String() string {
	var b strings.Builder
	writeLayer(&b, l.L)
	return b.String()
}

// Name is the layer's kind, as calls name it in messages.
func (l *Layer) Name() string { return "nn." + string(l.L.Kind) }

// CallInternal applies the layer to its tensor argument: y = layer(x).
func (l *Layer) CallInternal(thread *starlark.Thread, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("%s: applying a layer takes tensors only, got keyword %s", l.Name(), kwargs[0][0])
	}
	if len(args) != 1 {
		return nil, fmt.Errorf("%s: applying a layer takes one tensor, got %d arguments", l.Name(), len(args))
	}
	x, ok := args[0].(*Tensor)
	if !ok {
		return nil, fmt.Errorf("%s: got %s, want a tensor (such as data.input())", l.Name(), args[0].Type())
	}
	return x.tr.apply(position(thread), l.L, []*Tensor{x}, l.Name()+"(...)")
}

// newLayer makes a declared layer, noting the nn.module scope it was
// declared in and its default name.
func newLayer(thread *starlark.Thread, l spec.Layer) (*Layer, error) {
	tr, err := traceOf(thread)
	if err != nil {
		return nil, err
	}
	sl := &spec.Layer{}
	*sl = l
	info := &layerInfo{scope: strings.Join(tr.scope, ".")}
	if l.Name == "" {
		key := info.scope + "\x00" + string(l.Kind)
		info.auto = fmt.Sprintf("%s_%d", l.Kind, tr.named[key])
		tr.named[key]++
	}
	tr.layers[sl] = info
	tr.order = append(tr.order, sl)
	return &Layer{L: sl}, nil
}

func writeLayer(b *strings.Builder, l *spec.Layer) {
	fmt.Fprintf(b, "nn.%s(", l.Kind)
	var args []string
	switch l.Kind {
	case spec.Sequential:
		for _, c := range l.Layers {
			var w strings.Builder
			writeLayer(&w, c)
			args = append(args, w.String())
		}
	case spec.Conv2D:
		args = append(args, fmt.Sprint(l.In), fmt.Sprint(l.Out), fmt.Sprintf("kernel=%d", l.Kernel))
		if l.Stride != 1 {
			args = append(args, fmt.Sprintf("stride=%d", l.Stride))
		}
		if l.Padding != 0 {
			args = append(args, fmt.Sprintf("padding=%d", l.Padding))
		}
		if l.Groups > 1 {
			args = append(args, fmt.Sprintf("groups=%d", l.Groups))
		}
		if !l.Bias {
			args = append(args, "bias=False")
		}
	case spec.Linear:
		args = append(args, fmt.Sprint(l.In), fmt.Sprint(l.Out))
		if !l.Bias {
			args = append(args, "bias=False")
		}
	case spec.MaxPool2D, spec.AvgPool2D:
		args = append(args, fmt.Sprint(l.Kernel))
		if l.Stride != l.Kernel {
			args = append(args, fmt.Sprintf("stride=%d", l.Stride))
		}
		if l.Padding != 0 {
			args = append(args, fmt.Sprintf("padding=%d", l.Padding))
		}
	case spec.Dropout, spec.Dropout2D:
		args = append(args, fmt.Sprint(l.P))
	case spec.LeakyReLU:
		args = append(args, fmt.Sprint(l.Slope))
	case spec.AdaptiveAvgPool2D:
		args = append(args, "1")
	case spec.BatchNorm1D, spec.BatchNorm2D:
		args = append(args, fmt.Sprint(l.In))
		if l.Eps != 1e-5 {
			args = append(args, fmt.Sprintf("eps=%g", l.Eps))
		}
		if l.Momentum != 0.1 {
			args = append(args, fmt.Sprintf("momentum=%g", l.Momentum))
		}
		if !l.Affine {
			args = append(args, "affine=False")
		}
		if !l.TrackStats {
			args = append(args, "track_running_stats=False")
		}
		if l.Sync {
			args = append(args, "sync=True")
		}
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
		"sequential":          starlark.NewBuiltin("nn.sequential", nnSequential),
		"conv2d":              starlark.NewBuiltin("nn.conv2d", nnConv2D),
		"linear":              starlark.NewBuiltin("nn.linear", nnLinear),
		"relu":                starlark.NewBuiltin("nn.relu", opLayer(spec.ReLU, ops.ReLU)),
		"maxpool2d":           starlark.NewBuiltin("nn.maxpool2d", nnMaxPool2D),
		"dropout":             starlark.NewBuiltin("nn.dropout", dropoutLayer(spec.Dropout)),
		"dropout2d":           starlark.NewBuiltin("nn.dropout2d", dropoutLayer(spec.Dropout2D)),
		"flatten":             starlark.NewBuiltin("nn.flatten", opLayer(spec.Flatten, ops.Flatten)),
		"log_softmax":         starlark.NewBuiltin("nn.log_softmax", softmaxLayer(spec.LogSoftmax)),
		"softmax":             starlark.NewBuiltin("nn.softmax", softmaxLayer(spec.Softmax)),
		"embedding":           starlark.NewBuiltin("nn.embedding", nnEmbedding),
		"layernorm":           starlark.NewBuiltin("nn.layernorm", nnLayerNorm),
		"gelu":                starlark.NewBuiltin("nn.gelu", nnGELU),
		"silu":                starlark.NewBuiltin("nn.silu", opLayer("silu", ops.SiLU)),
		"multihead_attention": starlark.NewBuiltin("nn.multihead_attention", nnAttention),
		"matmul":              starlark.NewBuiltin("nn.matmul", nnMatMul),
		"identity":            starlark.NewBuiltin("nn.identity", opLayer(spec.Identity, ops.Invalid)),
		"sigmoid":             starlark.NewBuiltin("nn.sigmoid", opLayer(spec.Sigmoid, ops.Sigmoid)),
		"tanh":                starlark.NewBuiltin("nn.tanh", opLayer(spec.Tanh, ops.Tanh)),
		"leaky_relu":          starlark.NewBuiltin("nn.leaky_relu", nnLeakyReLU),
		"avgpool2d":           starlark.NewBuiltin("nn.avgpool2d", nnAvgPool2D),
		"adaptive_avgpool2d":  starlark.NewBuiltin("nn.adaptive_avgpool2d", nnAdaptiveAvgPool2D),
		"batchnorm1d":         starlark.NewBuiltin("nn.batchnorm1d", nnBatchNorm(spec.BatchNorm1D)),
		"batchnorm2d":         starlark.NewBuiltin("nn.batchnorm2d", nnBatchNorm(spec.BatchNorm2D)),
		"module":              starlark.NewBuiltin("nn.module", nnModuleScope),
	},
}

// initArg unpacks init=: how a layer's weight starts (spec.InitNames): a
// name, "normal(STD)", or a number.
type initArg string

func (a *initArg) Unpack(v starlark.Value) error {
	var s string
	switch x := v.(type) {
	case starlark.String:
		s = string(x)
	case starlark.Int, starlark.Float:
		f, _ := starlark.AsFloat(x)
		s = strconv.FormatFloat(f, 'g', -1, 64)
	default:
		return fmt.Errorf("got %s, want %s", v.Type(), spec.InitNames)
	}
	if err := spec.CheckInit(s); err != nil {
		return err
	}
	*a = initArg(s)
	return nil
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
	if s == "" || strings.IndexFunc(s, badNameRune) >= 0 || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return fmt.Errorf("%q is not a valid layer name (non-empty, no spaces or control characters; dots only between parts, as in \"mlp.c_fc\")", s)
	}
	*n = layerName(s)
	return nil
}

// badNameRune reports a character a layer name may not hold: spaces and
// control characters (a NUL or a newline would end up inside the
// safetensors keys and the plan's columns), and invalid UTF-8.
func badNameRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError
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
		case *Tensor:
			return nil, fmt.Errorf("%s: argument %d is a tensor; nn.sequential takes layers (apply the result to a tensor: nn.sequential(a, b)(x))", b.Name(), i+1)
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
	l, err := newLayer(thread, seq)
	if err != nil {
		return nil, err
	}
	tr, _ := traceOf(thread)
	for i, c := range l.L.Layers {
		info := tr.layers[c]
		if info.parent != nil {
			return nil, fmt.Errorf("%s: layer %d (%s) already belongs to the nn.sequential declared at %s; declare a new layer", b.Name(), i+1, c.Label(), info.parent.Pos)
		}
		info.parent, info.index = l.L, i
	}
	return l, nil
}

func nnConv2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var in, out, kernel int
	stride, padding, groups, bias := 1, 0, 1, true
	var name layerName
	var init initArg
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"in_channels", &in, "out_channels", &out, "kernel", &kernel,
		"stride?", &stride, "padding?", &padding, "groups?", &groups, "bias?", &bias, "init?", &init, "name?", &name); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		n string
		v int
	}{{"in_channels", in}, {"out_channels", out}, {"kernel", kernel}, {"stride", stride}, {"groups", groups}} {
		if err := positive(b, c.n, c.v); err != nil {
			return nil, err
		}
	}
	if padding < 0 {
		return nil, fmt.Errorf("%s: padding must be ≥ 0, got %d", b.Name(), padding)
	}
	if in%groups != 0 || out%groups != 0 {
		return nil, fmt.Errorf("%s: in_channels %d and out_channels %d must both be divisible by groups %d", b.Name(), in, out, groups)
	}
	return newLayer(thread, spec.Layer{Kind: spec.Conv2D, Name: string(name), Pos: position(thread),
		In: in, Out: out, Kernel: kernel, Stride: stride, Padding: padding, Groups: groups, Bias: bias, Init: string(init)})
}

func nnLinear(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var in, out int
	bias := true
	var name layerName
	var init initArg
	tie := starlark.Value(starlark.None)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"in_features", &in, "out_features", &out, "bias?", &bias, "init?", &init, "tie?", &tie, "name?", &name); err != nil {
		return nil, err
	}
	var tied *spec.Layer
	if tie != starlark.None {
		e, ok := tie.(*Layer)
		if !ok || e.L.Kind != spec.Embedding {
			return nil, fmt.Errorf("%s: tie: got %s, want an nn.embedding whose weight this layer shares", b.Name(), tie.Type())
		}
		if e.L.In != out || e.L.Out != in {
			return nil, fmt.Errorf("%s: tie: the embedding's weight is [%d %d], this layer's would be [%d %d]", b.Name(), e.L.In, e.L.Out, out, in)
		}
		tied = e.L
	}
	if err := positive(b, "in_features", in); err != nil {
		return nil, err
	}
	if err := positive(b, "out_features", out); err != nil {
		return nil, err
	}
	return newLayer(thread, spec.Layer{Kind: spec.Linear, Name: string(name), Pos: position(thread),
		In: in, Out: out, Bias: bias, Init: string(init), Tie: tied})
}

func nnMaxPool2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return poolLayer(thread, b, args, kwargs, spec.MaxPool2D)
}

func nnAvgPool2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	return poolLayer(thread, b, args, kwargs, spec.AvgPool2D)
}

func poolLayer(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple, kind spec.LayerKind) (starlark.Value, error) {
	var kernel, padding int
	stride := starlark.Value(starlark.None)
	var name layerName
	params := []any{"kernel", &kernel, "stride?", &stride}
	if kind == spec.AvgPool2D {
		params = append(params, "padding?", &padding)
	}
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, append(params, "name?", &name)...); err != nil {
		return nil, err
	}
	if padding < 0 || 2*padding > kernel {
		return nil, fmt.Errorf("%s: padding must be between 0 and half the kernel (%d), got %d", b.Name(), kernel/2, padding)
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
	return newLayer(thread, spec.Layer{Kind: kind, Name: string(name), Pos: position(thread), Kernel: kernel, Stride: s, Padding: padding})
}

// nnAdaptiveAvgPool2D is nn.adaptive_avgpool2d(1): each channel's mean,
// [N, C, H, W] → [N, C, 1, 1]. Other output sizes are not planned.
func nnAdaptiveAvgPool2D(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var size int
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "output_size", &size, "name?", &name); err != nil {
		return nil, err
	}
	if size != 1 {
		return nil, fmt.Errorf("%s: only output_size 1 (global average pooling) is supported, got %d", b.Name(), size)
	}
	return newLayer(thread, spec.Layer{Kind: spec.AdaptiveAvgPool2D, Op: ops.GlobalAvgPool2D, Name: string(name), Pos: position(thread)})
}

func nnLeakyReLU(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if x, rest, ok := tensorFirst(args); ok {
		l, err := nnLeakyReLU(thread, b, rest, kwargs)
		if err != nil {
			return nil, err
		}
		return l.(*Layer).CallInternal(thread, starlark.Tuple{x}, nil)
	}
	slope := number(0.01)
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "negative_slope?", &slope, "name?", &name); err != nil {
		return nil, err
	}
	return newLayer(thread, spec.Layer{Kind: spec.LeakyReLU, Name: string(name), Pos: position(thread), Slope: float64(slope)})
}

// nnBatchNorm declares nn.batchnorm1d / nn.batchnorm2d with PyTorch's
// arguments; sync = True makes it a SyncBatchNorm.
func nnBatchNorm(kind spec.LayerKind) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var features int
		eps, momentum := number(1e-5), number(0.1)
		affine, track, sync := true, true, false
		var name layerName
		var init initArg
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "num_features", &features, "eps?", &eps, "momentum?", &momentum,
			"affine?", &affine, "track_running_stats?", &track, "sync?", &sync, "init?", &init, "name?", &name); err != nil {
			return nil, err
		}
		if err := positive(b, "num_features", features); err != nil {
			return nil, err
		}
		if eps <= 0 {
			return nil, fmt.Errorf("%s: eps must be positive, got %g", b.Name(), float64(eps))
		}
		if momentum < 0 || momentum > 1 {
			return nil, fmt.Errorf("%s: momentum must be in [0, 1], got %g", b.Name(), float64(momentum))
		}
		return newLayer(thread, spec.Layer{Kind: kind, Name: string(name), Pos: position(thread), In: features,
			Eps: float64(eps), Momentum: float64(momentum), Affine: affine, TrackStats: track, Sync: sync, Init: string(init)})
	}
}

// nnModuleScope is nn.module(name, fn, *args, **kwargs): it calls fn with
// the remaining arguments, and the layers fn declares are named under
// name ("layer1.0" gives "layer1.0.conv1.weight"), as a PyTorch submodule
// attribute would name them.
func nnModuleScope(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) < 2 {
		return nil, fmt.Errorf("%s: want nn.module(name, fn, *args, **kwargs), got %d positional arguments", b.Name(), len(args))
	}
	name, ok := starlark.AsString(args[0])
	if !ok || name == "" || strings.ContainsAny(name, " \t\n") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%s: name: got %s, want a dotted name such as \"layer1.0\"", b.Name(), args[0].String())
	}
	fn, ok := args[1].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("%s: fn: got %s, want a function", b.Name(), args[1].Type())
	}
	tr, err := traceOf(thread)
	if err != nil {
		return nil, err
	}
	tr.scope = append(tr.scope, name)
	defer func() { tr.scope = tr.scope[:len(tr.scope)-1] }()
	return starlark.Call(thread, fn, args[2:], kwargs)
}

// tensorFirst reports whether args starts with a tensor: nn.relu(x) applies
// a new layer at once instead of declaring one.
func tensorFirst(args starlark.Tuple) (*Tensor, starlark.Tuple, bool) {
	if len(args) > 0 {
		if x, ok := args[0].(*Tensor); ok {
			return x, args[1:], true
		}
	}
	return nil, args, false
}

// opLayer is the builtin of a layer that is one op without parameters or
// attributes (nn.relu(), nn.silu(name = …), or nn.relu(x) applied at
// once): the compiler takes everything else from the op's definition, so
// adding such a layer is one line in nnModule. ops.Invalid declares a
// layer that is no op at all (nn.identity).
func opLayer(kind spec.LayerKind, op ops.Op) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		x, args, apply := tensorFirst(args)
		var name layerName
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name?", &name); err != nil {
			return nil, err
		}
		l, err := newLayer(thread, spec.Layer{Kind: kind, Op: op, Name: string(name), Pos: position(thread)})
		if err != nil || !apply {
			return l, err
		}
		return l.CallInternal(thread, starlark.Tuple{x}, nil)
	}
}

func dropoutLayer(kind spec.LayerKind) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		x, args, apply := tensorFirst(args)
		p := number(0.5)
		var name layerName
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "p?", &p, "name?", &name); err != nil {
			return nil, err
		}
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("%s: p must be in [0, 1], got %g", b.Name(), float64(p))
		}
		l, err := newLayer(thread, spec.Layer{Kind: kind, Name: string(name), Pos: position(thread), P: float64(p)})
		if err != nil || !apply {
			return l, err
		}
		return l.CallInternal(thread, starlark.Tuple{x}, nil)
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

// softmaxLayer declares nn.softmax / nn.log_softmax(dim = -1): over any
// dimension but the batch (the last by default); nn.softmax(causal = True)
// masks the positions after each row's own, for attention scores
// [..., T, T].
func softmaxLayer(kind spec.LayerKind) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		x, args, apply := tensorFirst(args)
		dim := -1
		causal := false
		var name layerName
		params := []any{"dim?", &dim}
		if kind == spec.Softmax {
			params = append(params, "causal?", &causal)
		}
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, append(params, "name?", &name)...); err != nil {
			return nil, err
		}
		if dim == 0 {
			return nil, fmt.Errorf("%s: dim 0 is the batch; give another dimension (negative ones count from the end)", b.Name())
		}
		l, err := newLayer(thread, spec.Layer{Kind: kind, Name: string(name), Pos: position(thread), Causal: causal, Dims: []int{dim}})
		if err != nil || !apply {
			return l, err
		}
		return l.CallInternal(thread, starlark.Tuple{x}, nil)
	}
}

func nnEmbedding(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var num, dim int
	var name layerName
	var init initArg
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "num_embeddings", &num, "embedding_dim", &dim, "init?", &init, "name?", &name); err != nil {
		return nil, err
	}
	if err := positive(b, "num_embeddings", num); err != nil {
		return nil, err
	}
	if err := positive(b, "embedding_dim", dim); err != nil {
		return nil, err
	}
	return newLayer(thread, spec.Layer{Kind: spec.Embedding, Name: string(name), Pos: position(thread), In: num, Out: dim, Init: string(init)})
}

func nnLayerNorm(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var features int
	eps := number(1e-5)
	affine := true
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "normalized_shape", &features, "eps?", &eps,
		"elementwise_affine?", &affine, "name?", &name); err != nil {
		return nil, err
	}
	if err := positive(b, "normalized_shape", features); err != nil {
		return nil, err
	}
	if eps <= 0 {
		return nil, fmt.Errorf("%s: eps must be positive, got %g", b.Name(), float64(eps))
	}
	return newLayer(thread, spec.Layer{Kind: spec.LayerNorm, Name: string(name), Pos: position(thread), In: features, Eps: float64(eps), Affine: affine})
}

func nnGELU(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	x, args, apply := tensorFirst(args)
	approximate := "none"
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "approximate?", &approximate, "name?", &name); err != nil {
		return nil, err
	}
	if approximate != "none" && approximate != "tanh" {
		return nil, fmt.Errorf("%s: approximate must be \"none\" or \"tanh\", got %q", b.Name(), approximate)
	}
	l, err := newLayer(thread, spec.Layer{Kind: spec.GELU, Name: string(name), Pos: position(thread), Approximate: approximate == "tanh"})
	if err != nil || !apply {
		return l, err
	}
	return l.CallInternal(thread, starlark.Tuple{x}, nil)
}

// nnAttention declares nn.multihead_attention(embed_dim, num_heads,
// causal = True, dropout = 0.0, bias = True, fused = True): self-attention
// over [N, T, embed_dim] with PyTorch's nn.MultiheadAttention parameters.
// fused = False keeps the attention built from batched products and a
// softmax over the whole T×T weights, for checking the fused op against.
func nnAttention(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var dim, heads int
	causal, bias, fused := true, true, true
	var dropout number
	var name layerName
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "embed_dim", &dim, "num_heads", &heads, "causal?", &causal,
		"dropout?", &dropout, "bias?", &bias, "name?", &name, "fused?", &fused); err != nil {
		return nil, err
	}
	if err := positive(b, "embed_dim", dim); err != nil {
		return nil, err
	}
	if err := positive(b, "num_heads", heads); err != nil {
		return nil, err
	}
	if dim%heads != 0 {
		return nil, fmt.Errorf("%s: embed_dim %d must be divisible by num_heads %d", b.Name(), dim, heads)
	}
	if dropout < 0 || dropout >= 1 {
		return nil, fmt.Errorf("%s: dropout must be in [0, 1), got %g", b.Name(), float64(dropout))
	}
	return newLayer(thread, spec.Layer{Kind: spec.MultiheadAttention, Name: string(name), Pos: position(thread),
		In: dim, Out: dim, Heads: heads, Causal: causal, P: float64(dropout), Bias: bias, Unfused: !fused})
}

// nnMatMul is nn.matmul(a, b): batched matrix products of [N, ..., M, K]
// and [N, ..., K, P] (equal leading dimensions).
func nnMatMul(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x, y *Tensor
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 2, &x, &y); err != nil {
		return nil, err
	}
	return x.tr.apply(position(thread), &spec.Layer{Kind: spec.MatMulOp, Pos: position(thread)}, []*Tensor{x, y}, "nn.matmul")
}
