package engine

import (
	"fmt"
	"strconv"

	"gorun/engine/spec"
	"gorun/ops"
)

// Value is one tensor of the graph: an input, a parameter, an activation,
// a gradient or an optimizer state. Shapes are for the planned maximum
// batch; Batched values have the batch as their first dimension.
type Value struct {
	ID      int
	Name    string // "conv1.weight", "conv1", "grad conv1", …
	Shape   []int
	Batched bool
	Int     bool // holds indices (targets, pooling positions), not floats
	// Param is set on parameters; Grad is a parameter's gradient.
	Param    *Param
	Producer *Node
	// needsGrad is true when the loss depends on a parameter through it.
	needsGrad bool
	grad      *Value
}

// Elems is the number of elements at the maximum batch.
func (v *Value) Elems() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// Param is a trainable parameter, named as PyTorch's state_dict names it.
type Param struct {
	Name  string // "conv1.weight"
	Value *Value
	Grad  *Value
	// FanIn is the fan-in PyTorch's default initialisation uses.
	FanIn int
	// Bias marks biases (initialised like PyTorch's biases).
	Bias  bool
	Layer *spec.Layer
}

// Node is one op applied to values.
type Node struct {
	Op    ops.Op
	Attrs ops.Attrs
	In    []*Value // nil for an absent optional input
	Out   []*Value
	Layer string   // the layer this node computes (or differentiates)
	Pos   spec.Pos // where that layer was declared
}

// Graph is the model's training graph: forward, loss and backward.
type Graph struct {
	Values   []*Value
	Input    *Value // [N, sample shape...]
	Target   *Value // [N] class indices
	Output   *Value // the model's output, before the loss
	Loss     *Value // [1]
	LossSeed *Value // [1], holds 1: d loss / d loss
	Params   []*Param
	Forward  []*Node // model layers, then the loss
	Backward []*Node
}

// CompileError is a problem found while compiling a script's model: it
// names the layer and where the script declared it.
type CompileError struct {
	Pos   spec.Pos
	Layer string
	Err   error
}

func (e *CompileError) Error() string {
	if e.Pos != "" {
		return fmt.Sprintf("%s: %s: %v", e.Pos, e.Layer, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Layer, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

type builder struct {
	g *Graph
}

func (b *builder) value(name string, shape []int, batched bool) *Value {
	v := &Value{ID: len(b.g.Values), Name: name, Shape: shape, Batched: batched}
	b.g.Values = append(b.g.Values, v)
	return v
}

// BuildGraph infers every shape of the model for the given per-device
// maximum batch and sample shape, then differentiates the loss; lossPos is
// where the loss was chosen (the train(...) call).
func BuildGraph(model *spec.Layer, loss string, lossPos spec.Pos, batch int, sample []int, classes int) (*Graph, error) {
	g := &Graph{}
	b := &builder{g: g}
	g.Input = b.value("input", append([]int{batch}, sample...), true)
	g.Target = b.value("target", []int{batch}, true)
	g.Target.Int = true

	names := map[string]*spec.Layer{}
	out, err := b.layer(model, "", g.Input, names)
	if err != nil {
		return nil, err
	}
	g.Output = out
	if err := b.loss(loss, lossPos, classes); err != nil {
		return nil, err
	}
	if err := b.differentiate(); err != nil {
		return nil, err
	}
	return g, nil
}

// layer adds the nodes of l (named prefix) applied to x.
func (b *builder) layer(l *spec.Layer, prefix string, x *Value, names map[string]*spec.Layer) (*Value, error) {
	if l.Kind == spec.Sequential {
		for i := range l.Layers {
			c := &l.Layers[i]
			name := c.Name
			if name == "" {
				name = strconv.Itoa(i)
			}
			if prefix != "" {
				name = prefix + "." + name
			}
			if prev, dup := names[name]; dup {
				return nil, &CompileError{Pos: c.Pos, Layer: c.Label(),
					Err: fmt.Errorf("name %q is already used by the %s declared at %s", name, prev.Kind, prev.Pos)}
			}
			names[name] = c
			var err error
			if x, err = b.layer(c, name, x, names); err != nil {
				return nil, err
			}
		}
		return x, nil
	}
	node := &Node{Layer: l.Label(), Pos: l.Pos}
	if l.Name == "" && prefix != "" {
		node.Layer = fmt.Sprintf("%s %q", l.Kind, prefix)
	}
	in := []*Value{x}
	param := func(suffix string, shape []int, fanIn int, bias bool) *Value {
		v := b.value(prefix+"."+suffix, shape, false)
		p := &Param{Name: v.Name, Value: v, FanIn: fanIn, Bias: bias, Layer: l}
		v.Param = p
		v.needsGrad = true
		b.g.Params = append(b.g.Params, p)
		return v
	}
	switch l.Kind {
	case spec.Conv2D:
		node.Op = ops.Conv2D
		node.Attrs = ops.Attrs{Stride: l.Stride, Padding: l.Padding}
		fan := l.In * l.Kernel * l.Kernel
		in = append(in, param("weight", []int{l.Out, l.In, l.Kernel, l.Kernel}, fan, false), nil)
		if l.Bias {
			in[2] = param("bias", []int{l.Out}, fan, true)
		}
	case spec.Linear:
		node.Op = ops.Linear
		in = append(in, param("weight", []int{l.Out, l.In}, l.In, false), nil)
		if l.Bias {
			in[2] = param("bias", []int{l.Out}, l.In, true)
		}
	case spec.ReLU:
		node.Op = ops.ReLU
	case spec.MaxPool2D:
		node.Op = ops.MaxPool2D
		node.Attrs = ops.Attrs{Kernel: l.Kernel, Stride: l.Stride}
	case spec.Dropout:
		node.Op = ops.Dropout
		node.Attrs = ops.Attrs{P: l.P}
	case spec.Dropout2D:
		node.Op = ops.Dropout2D
		node.Attrs = ops.Attrs{P: l.P}
	case spec.Flatten:
		node.Op = ops.Flatten
	case spec.LogSoftmax:
		node.Op = ops.LogSoftmax
	case spec.Softmax:
		node.Op = ops.Softmax
	default:
		return nil, &CompileError{Pos: l.Pos, Layer: l.Label(), Err: fmt.Errorf("unknown layer kind %q", l.Kind)}
	}
	if err := b.apply(node, in, prefix); err != nil {
		return nil, err
	}
	return node.Out[0], nil
}

// apply infers the output shapes of node with inputs in and adds it to the
// forward pass.
func (b *builder) apply(node *Node, in []*Value, name string) error {
	shapes := make([][]int, len(in))
	for i, v := range in {
		if v != nil {
			shapes[i] = v.Shape
		}
	}
	out, err := ops.Infer(node.Op, &node.Attrs, shapes)
	if err != nil {
		return &CompileError{Pos: node.Pos, Layer: node.Layer, Err: err}
	}
	node.In = in
	batched := in[0].Batched
	for i, s := range out {
		vn := name
		if i > 0 {
			vn = fmt.Sprintf("%s:%d", name, i)
		}
		v := b.value(vn, s, batched)
		v.Producer = node
		for _, x := range in {
			if x != nil && x.needsGrad {
				v.needsGrad = true
			}
		}
		node.Out = append(node.Out, v)
	}
	if node.Op == ops.MaxPool2D {
		node.Out[1].Int = true
		node.Out[1].needsGrad = false
	}
	if node.Op.Info().Random || node.Op == ops.CrossEntropy {
		node.Out[1].needsGrad = false
	}
	b.g.Forward = append(b.g.Forward, node)
	return nil
}

func (b *builder) loss(loss string, pos spec.Pos, classes int) error {
	g := b.g
	out := g.Output
	node := &Node{Layer: "loss " + strconv.Quote(loss), Pos: pos}
	switch loss {
	case "nll":
		node.Op = ops.NLLLoss
	case "cross_entropy":
		node.Op = ops.CrossEntropy
	default:
		return fmt.Errorf("unknown loss %q (want \"nll\" or \"cross_entropy\")", loss)
	}
	if len(out.Shape) != 2 || out.Shape[1] != classes {
		return &CompileError{Pos: pos, Layer: node.Layer,
			Err: fmt.Errorf("the model's output has shape %v, want [N %d] (one score per class of the dataset)", out.Shape, classes)}
	}
	if err := b.apply(node, []*Value{out, g.Target}, "loss"); err != nil {
		return err
	}
	g.Loss = node.Out[0]
	g.Loss.Batched = false
	return nil
}
