package script

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"gorun/engine/spec"
	"gorun/ops"
)

// trace records what a script does with tensors: every layer application,
// in call order. One trace serves a whole Load (the main script and the
// files it loads), so a block function defined in a loaded file and called
// from the main script adds to the same model.
type trace struct {
	nodes   []spec.Apply
	tensors int // tensor ids handed out; 0 is the input
	// scope is the stack of nn.module names being called.
	scope []string
	// named counts the layers declared in each scope without name=, by
	// kind, for their default names.
	named map[string]int
	// layers holds what the script knows of each declared layer.
	layers map[*spec.Layer]*layerInfo
	order  []*spec.Layer // declaration order
	// thread is the thread evaluating the script now (for the position
	// of a tensor operator, which the interpreter does not pass).
	thread *starlark.Thread
}

// layerInfo is where a layer sits in the module tree: the nn.module scope
// it was declared in and its default name, or its enclosing sequential.
type layerInfo struct {
	scope  string
	auto   string // default name when it has no name= and no sequential
	parent *spec.Layer
	index  int // within parent
}

func newTrace() *trace {
	return &trace{tensors: 1, named: map[string]int{}, layers: map[*spec.Layer]*layerInfo{}}
}

func traceOf(thread *starlark.Thread) (*trace, error) {
	st := stateOf(thread)
	if st == nil || st.loader == nil {
		return nil, fmt.Errorf("tensors are only available while a script is loading")
	}
	if st.loader.trace == nil {
		st.loader.trace = newTrace()
	}
	st.loader.trace.thread = thread
	return st.loader.trace, nil
}

// Tensor is a symbolic tensor: the input, or the output of a layer applied
// to tensors. Its shape is known only when the engine compiles the model.
type Tensor struct {
	tr  *trace
	id  int
	pos spec.Pos // where it was made
	// what made it, for messages: "data.input()", "nn.conv2d(...)".
	what string
}

var (
	_ starlark.Value     = (*Tensor)(nil)
	_ starlark.HasBinary = (*Tensor)(nil)
	_ starlark.HasAttrs  = (*Tensor)(nil)
)

// String names the tensor by what made it.
func (t *Tensor) String() string { return fmt.Sprintf("<tensor %d: %s at %s>", t.id, t.what, t.pos) }

// Type is "tensor".
func (t *Tensor) Type() string { return "tensor" }

// Freeze does nothing: a Tensor is immutable.
func (t *Tensor) Freeze() {}

// Truth is True.
func (t *Tensor) Truth() starlark.Bool { return starlark.True }

// Hash fails: tensors are not hashable.
func (t *Tensor) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable type: tensor") }

// Binary implements +, - and * between tensors of the same shape.
func (t *Tensor) Binary(op syntax.Token, y starlark.Value, side starlark.Side) (starlark.Value, error) {
	o, ok := y.(*Tensor)
	if !ok {
		return nil, nil // the interpreter reports the unsupported operands
	}
	kind := map[syntax.Token]spec.LayerKind{syntax.PLUS: spec.AddOp, syntax.MINUS: spec.SubOp, syntax.STAR: spec.MulOp}[op]
	if kind == "" {
		return nil, nil
	}
	a, b := t, o
	if side == starlark.Right {
		a, b = o, t
	}
	th := t.tr.thread
	var pos spec.Pos
	if th != nil && th.CallStackDepth() > 0 {
		pos = spec.Pos(th.CallFrame(0).Pos.String()) // an operator has no frame of its own
	}
	return t.tr.apply(pos, &spec.Layer{Kind: kind, Pos: pos}, []*Tensor{a, b}, string(kind))
}

var tensorMethods = map[string]*starlark.Builtin{
	"reshape":   starlark.NewBuiltin("reshape", tensorReshape),
	"flatten":   starlark.NewBuiltin("flatten", tensorFlatten),
	"mean":      starlark.NewBuiltin("mean", tensorMean),
	"transpose": starlark.NewBuiltin("transpose", tensorTranspose),
}

// tensorTranspose is x.transpose(d1, d2): two dimensions other than the
// batch swapped (negative dimensions count from the end).
func tensorTranspose(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	var d1, d2 int
	if err := starlark.UnpackPositionalArgs("transpose", args, kwargs, 2, &d1, &d2); err != nil {
		return nil, err
	}
	if d1 == 0 || d2 == 0 {
		return nil, fmt.Errorf("transpose: the batch (dimension 0) stays first; got (%d, %d)", d1, d2)
	}
	return t.tr.apply(position(thread), &spec.Layer{Kind: spec.TransposeOp, Dims: []int{d1, d2}, Pos: position(thread)}, []*Tensor{t}, "transpose")
}

// Attr returns the tensor's methods, bound to it.
func (t *Tensor) Attr(name string) (starlark.Value, error) {
	if m, ok := tensorMethods[name]; ok {
		return m.BindReceiver(t), nil
	}
	return nil, nil
}

// AttrNames lists the tensor's methods.
func (t *Tensor) AttrNames() []string {
	names := make([]string, 0, len(tensorMethods))
	for n := range tensorMethods {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// tensorReshape is x.reshape(d1, d2, ...): the sample shape, batch kept
// first (x.reshape(-1, 16, 7, 7) and x.reshape(16, 7, 7) mean the same;
// one other dimension may be -1).
func tensorReshape(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("reshape: takes dimensions only, got keyword %s", kwargs[0][0])
	}
	if len(args) == 1 {
		if seq, ok := args[0].(starlark.Tuple); ok {
			args = seq
		} else if l, ok := args[0].(*starlark.List); ok {
			args = nil
			for i := 0; i < l.Len(); i++ {
				args = append(args, l.Index(i))
			}
		}
	}
	var dims []int
	for i, a := range args {
		var d int
		if err := starlark.AsInt(a, &d); err != nil {
			return nil, fmt.Errorf("reshape: dimension %d: got %s, want int", i+1, a.Type())
		}
		if d == 0 || d < -1 {
			return nil, fmt.Errorf("reshape: dimension %d is %d; want a positive size or -1", i+1, d)
		}
		dims = append(dims, d)
	}
	if len(dims) == 0 {
		return nil, fmt.Errorf("reshape: give the new shape, for example x.reshape(-1, 16 * 7 * 7)")
	}
	if dims[0] == -1 && len(dims) > 1 {
		dims = dims[1:] // the batch
	}
	if n := slices.Index(dims, -1); n >= 0 && slices.Contains(dims[n+1:], -1) {
		return nil, fmt.Errorf("reshape: only one dimension may be -1, got %v", dims)
	}
	return t.tr.apply(position(thread), &spec.Layer{Kind: spec.ReshapeOp, Dims: dims, Pos: position(thread)}, []*Tensor{t}, "reshape")
}

// tensorFlatten is x.flatten(): [N, ...] → [N, prod(...)], as nn.flatten().
func tensorFlatten(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	start := 1
	if err := starlark.UnpackArgs("flatten", args, kwargs, "start_dim?", &start); err != nil {
		return nil, err
	}
	if start != 1 {
		return nil, fmt.Errorf("flatten: only start_dim = 1 (keep the batch) is supported, got %d", start)
	}
	return t.tr.apply(position(thread), &spec.Layer{Kind: spec.Flatten, Op: ops.Flatten, Pos: position(thread)}, []*Tensor{t}, "flatten")
}

// tensorMean is x.mean(dim): the mean over one dimension (not the batch),
// which disappears. x.mean((2, 3)) averages a feature map's planes.
func tensorMean(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*Tensor)
	var dim starlark.Value
	if err := starlark.UnpackPositionalArgs("mean", args, kwargs, 1, &dim); err != nil {
		return nil, err
	}
	var dims []int
	switch d := dim.(type) {
	case starlark.Tuple:
		for _, v := range d {
			var x int
			if err := starlark.AsInt(v, &x); err != nil {
				return nil, fmt.Errorf("mean: dims: got %s, want int", v.Type())
			}
			dims = append(dims, x)
		}
	default:
		var x int
		if err := starlark.AsInt(dim, &x); err != nil {
			return nil, fmt.Errorf("mean: dim: got %s, want int or a tuple of ints", dim.Type())
		}
		dims = []int{x}
	}
	// The one mean the engine plans today is over the trailing plane
	// dimensions of [N, C, H, W], as adaptive_avgpool2d(1) then flatten.
	if len(dims) != 2 || dims[0] != 2 || dims[1] != 3 {
		return nil, fmt.Errorf("mean: only x.mean((2, 3)) over a [N, C, H, W] tensor's planes is supported, got %v", dims)
	}
	return t.tr.apply(position(thread), &spec.Layer{Kind: spec.MeanOp, Dims: dims, Pos: position(thread)}, []*Tensor{t}, "mean")
}

// apply records l applied to in and returns the output tensor.
func (tr *trace) apply(pos spec.Pos, l *spec.Layer, in []*Tensor, what string) (*Tensor, error) {
	ids := make([]int, len(in))
	for i, x := range in {
		if x.tr != tr {
			return nil, fmt.Errorf("%s: tensor %s comes from another script evaluation", what, x)
		}
		ids[i] = x.id
	}
	if l.Pos == "" {
		l.Pos = pos
	}
	out := &Tensor{tr: tr, id: tr.tensors, pos: pos, what: what}
	tr.tensors++
	tr.nodes = append(tr.nodes, spec.Apply{Layer: l, In: ids, Out: out.id, Pos: pos})
	return out, nil
}

// model is the model whose output is out: the recorded applications out
// depends on, with every declared layer's path resolved. A tensor or a
// layer with parameters that the output does not use is an error naming
// it: its parameters would get no gradient.
func (tr *trace) model(out *Tensor) (spec.Model, error) {
	if out.tr != tr {
		return spec.Model{}, fmt.Errorf("tensor %s comes from another script evaluation", out)
	}
	producer := map[int]int{}
	for i, n := range tr.nodes {
		producer[n.Out] = i
	}
	used := make([]bool, len(tr.nodes))
	seenInput := false
	stack := []int{out.id}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if id == 0 {
			seenInput = true
			continue
		}
		i := producer[id]
		if used[i] {
			continue
		}
		used[i] = true
		stack = append(stack, tr.nodes[i].In...)
	}
	if out.id == 0 {
		return spec.Model{}, fmt.Errorf("the model is data.input() itself; apply layers to it")
	}
	if !seenInput {
		return spec.Model{}, fmt.Errorf("%s does not depend on data.input()", out)
	}
	m := spec.Model{Output: out.id}
	applied := map[*spec.Layer]bool{}
	var mark func(l *spec.Layer)
	mark = func(l *spec.Layer) {
		applied[l] = true
		for _, c := range l.Layers {
			mark(c)
		}
	}
	if err := tr.resolve(nil); err != nil {
		return spec.Model{}, err
	}
	for i, n := range tr.nodes {
		if !used[i] {
			return spec.Model{}, fmt.Errorf("%s: the result of %s is never used by the model's output (a value no output depends on would get no gradient)",
				n.Pos, applyName(n.Layer))
		}
		m.Nodes = append(m.Nodes, n)
		mark(n.Layer)
	}
	for _, l := range tr.order {
		if !applied[l] && hasParams(l) {
			return spec.Model{}, fmt.Errorf("%s: %s is declared but never applied to a tensor: its parameters would get no gradient", l.Pos, l.Label())
		}
	}
	return m, nil
}

// applyName is how messages name an application of l.
func applyName(l *spec.Layer) string {
	switch l.Kind {
	case spec.AddOp:
		return "+"
	case spec.SubOp:
		return "-"
	case spec.MulOp:
		return "*"
	case spec.ReshapeOp, spec.MeanOp:
		return "." + string(l.Kind) + "(...)"
	case spec.CatOp:
		return "nn.cat"
	}
	return l.Label()
}

// hasParams reports whether l (or a layer inside it) declares parameters
// or running statistics.
func hasParams(l *spec.Layer) bool {
	switch l.Kind {
	case spec.Conv2D, spec.Linear, spec.Embedding, spec.MultiheadAttention:
		return true
	case spec.LayerNorm:
		return l.Affine
	case spec.BatchNorm1D, spec.BatchNorm2D:
		return l.Affine || l.TrackStats
	}
	for _, c := range l.Layers {
		if hasParams(c) {
			return true
		}
	}
	return false
}

// resolve sets the Path of every declared layer: root (the layer given as
// train's model, if any) is "", a sequential's child is its path and its
// name or index, any other layer its nn.module scope and its name (or
// default name).
func (tr *trace) resolve(root *spec.Layer) error {
	done := map[*spec.Layer]bool{}
	var path func(l *spec.Layer) string
	path = func(l *spec.Layer) string {
		if done[l] {
			return l.Path
		}
		done[l] = true
		info := tr.layers[l]
		switch {
		case l == root && l.Kind == spec.Sequential:
			l.Path = ""
		case l == root:
			l.Path = cmp.Or(l.Name, "0")
		case info == nil:
			l.Path = l.Name
		case info.parent != nil:
			l.Path = joinPath(path(info.parent), cmp.Or(l.Name, strconv.Itoa(info.index)))
		default:
			l.Path = joinPath(info.scope, cmp.Or(l.Name, info.auto))
		}
		return l.Path
	}
	if root != nil {
		path(root)
	}
	for _, l := range tr.order {
		path(l)
	}
	return nil
}

func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func init() {
	dataModule.Members["input"] = starlark.NewBuiltin("data.input", dataInput)
	dataModule.Members["positions"] = starlark.NewBuiltin("data.positions", dataPositions)
	nnModule.Members["cat"] = starlark.NewBuiltin("nn.cat", nnCat)
}

// nnCat is nn.cat([a, b, ...], dim = 1): the tensors joined along the
// channel dimension, as torch.cat.
func nnCat(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var seq starlark.Indexable
	dim := 1
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "tensors", &seq, "dim?", &dim); err != nil {
		return nil, err
	}
	if dim != 1 {
		return nil, fmt.Errorf("%s: only dim = 1 (the channels, after the batch) is supported, got %d", b.Name(), dim)
	}
	if seq.Len() < 2 {
		return nil, fmt.Errorf("%s: want a list of at least two tensors, got %d", b.Name(), seq.Len())
	}
	ts := make([]*Tensor, seq.Len())
	for i := range ts {
		t, ok := seq.Index(i).(*Tensor)
		if !ok {
			return nil, fmt.Errorf("%s: element %d is %s, want a tensor", b.Name(), i, seq.Index(i).Type())
		}
		ts[i] = t
	}
	return ts[0].tr.apply(position(thread), &spec.Layer{Kind: spec.CatOp, Dims: []int{dim}, Pos: position(thread)}, ts, "nn.cat")
}

// dataInput is data.input(): the model's input tensor, a batch of the
// training set's samples [N, ...]. Every call returns the same tensor.
func dataInput(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 0); err != nil {
		return nil, err
	}
	tr, err := traceOf(thread)
	if err != nil {
		return nil, err
	}
	return &Tensor{tr: tr, id: 0, pos: position(thread), what: "data.input()"}, nil
}

// dataPositions is data.positions(): the position of every token of the
// input, [N, T] with row n = 0, 1, …, T−1 (what a position embedding looks
// up, as torch.arange(T)).
func dataPositions(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 0); err != nil {
		return nil, err
	}
	tr, err := traceOf(thread)
	if err != nil {
		return nil, err
	}
	in := &Tensor{tr: tr, id: 0, pos: position(thread), what: "data.input()"}
	return tr.apply(position(thread), &spec.Layer{Kind: spec.PositionsOp, Pos: position(thread)}, []*Tensor{in}, "data.positions()")
}
