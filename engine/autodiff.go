package engine

import (
	"fmt"

	"gorun/ops"
)

// differentiate walks the forward nodes in reverse, applying each op's
// gradient rule (ops.Def.Grad), and sums the gradients of values used more
// than once.
func (b *builder) differentiate() error {
	g := b.g
	g.LossSeed = b.value("loss seed", []int{1}, false)
	g.Loss.grad = g.LossSeed
	for i := len(g.Forward) - 1; i >= 0; i-- {
		n := g.Forward[i]
		dOut := make([]*Value, len(n.Out))
		any := false
		for j, o := range n.Out {
			dOut[j] = o.grad
			any = any || o.grad != nil
		}
		if !any {
			continue
		}
		def := ops.Lookup(n.Op)
		if def == nil || def.Grad == nil {
			return &CompileError{Pos: n.Pos, Layer: n.Layer, Err: fmt.Errorf("%s has no gradient rule", n.Op)}
		}
		grads := def.Grad(&gradNode{b: b, n: n, dOut: dOut})
		for j, x := range n.In {
			if j >= len(grads) {
				break
			}
			d := value(grads[j])
			if d == nil || x == nil || !x.needsGrad {
				continue
			}
			if x.grad == nil {
				x.grad = d
				continue
			}
			// A value used twice: its gradient is the sum.
			sum := b.value("grad "+x.Name, x.Shape, x.Batched)
			node := &Node{Op: ops.Add, In: []*Value{x.grad, d}, Out: []*Value{sum}, Layer: n.Layer, Pos: n.Pos}
			sum.Producer = node
			g.Backward = append(g.Backward, node)
			x.grad = sum
		}
	}
	for _, p := range g.Params {
		if p.Value.grad == nil {
			return &CompileError{Pos: p.Layer.Pos, Layer: p.Layer.Label(),
				Err: fmt.Errorf("parameter %s does not affect the loss", p.Name)}
		}
		p.Grad = p.Value.grad
	}
	return nil
}

// gradNode is forward node n as its gradient rule sees it (ops.GradBuilder),
// with dOut the gradients of its outputs. The backward nodes it adds take
// n's layer and position, and go to the end of the graph's backward pass.
type gradNode struct {
	b    *builder
	n    *Node
	dOut []*Value
}

// opsValue is v as a gradient rule sees it: nil when v is.
func opsValue(v *Value) ops.Value {
	if v == nil {
		return nil
	}
	return v
}

// value is the graph's value a gradient rule handed back: nil for nil.
func value(v ops.Value) *Value {
	if v == nil {
		return nil
	}
	return v.(*Value)
}

func values(vs []ops.Value) []*Value {
	out := make([]*Value, len(vs))
	for i, v := range vs {
		out[i] = value(v)
	}
	return out
}

func (g *gradNode) Attrs() ops.Attrs { return g.n.Attrs }

func (g *gradNode) In(i int) ops.Value {
	if i < 0 || i >= len(g.n.In) {
		return nil
	}
	return opsValue(g.n.In[i])
}

func (g *gradNode) Out(i int) ops.Value { return opsValue(g.n.Out[i]) }

func (g *gradNode) OutGrad(i int) ops.Value { return opsValue(g.dOut[i]) }

func (g *gradNode) NeedsGrad(v ops.Value) bool {
	x := value(v)
	return x != nil && x.needsGrad
}

func (g *gradNode) Shape(v ops.Value) []int { return value(v).Shape }

func (g *gradNode) Name(v ops.Value) string { return value(v).Name }

func (g *gradNode) Batched(v ops.Value) bool { return value(v).Batched }

// add appends a backward node op(in...) with attributes a and outputs out
// (values already made) to the graph.
func (g *gradNode) add(op ops.Op, a ops.Attrs, in []ops.Value, out ...*Value) {
	node := &Node{Op: op, Attrs: a, In: values(in), Out: out, Layer: g.n.Layer, Pos: g.n.Pos}
	for _, v := range out {
		v.Producer = node
	}
	g.b.g.Backward = append(g.b.g.Backward, node)
}

// Grad adds a node computing wrt's gradient, named "grad" and wrt's name,
// with wrt's shape. A parameter's gradient becomes its Param.Grad.
func (g *gradNode) Grad(op ops.Op, a ops.Attrs, wrt ops.Value, in ...ops.Value) ops.Value {
	p := value(wrt)
	v := g.b.value("grad "+p.Name, p.Shape, p.Batched)
	g.add(op, a, in, v)
	return v
}

func (g *gradNode) Grads(op ops.Op, a ops.Attrs, wrt []ops.Value, in ...ops.Value) []ops.Value {
	grads := make([]ops.Value, len(wrt))
	var out []*Value
	for i, w := range wrt {
		if p := value(w); p != nil {
			v := g.b.value("grad "+p.Name, p.Shape, p.Batched)
			grads[i] = v
			out = append(out, v)
		}
	}
	g.add(op, a, in, out...)
	return grads
}

func (g *gradNode) Temp(op ops.Op, a ops.Attrs, name string, shape []int, batched bool, in ...ops.Value) ops.Value {
	v := g.b.value(name, shape, batched)
	g.add(op, a, in, v)
	return v
}

func (g *gradNode) AllReduced(v ops.Value) bool {
	x := value(v)
	return x != nil && x.Producer != nil && x.Producer.AllReduce
}

func (g *gradNode) AllReduce(v ops.Value) { value(v).Producer.AllReduce = true }
