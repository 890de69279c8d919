package engine

import (
	"fmt"

	"gorun/ops"
)

// gradRule emits the backward nodes of one forward node. dOut holds the
// gradients of the node's outputs (nil where an output has none); the rule
// returns the gradients of its inputs (nil where an input needs none). The
// builder's grad method creates nodes and their output values.
type gradRule func(b *builder, n *Node, dOut []*Value) []*Value

// gradRules is the gradient of every differentiable forward op, keyed by
// the op enum. An op without a rule cannot appear on a path from a
// parameter to the loss.
var gradRules = [ops.NumOps]gradRule{
	ops.Conv2D: affineRule(ops.Conv2DGradInput, ops.Conv2DGradWeight, ops.Conv2DGradBias),
	ops.Linear: affineRule(ops.LinearGradInput, ops.LinearGradWeight, ops.LinearGradBias),
	ops.ReLU: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.ReLUGrad, n.In[0], d[0], n.Out[0])}
	},
	ops.Conv2DPool: convPoolRule,
	ops.MaxPool2D: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.MaxPool2DGrad, n.In[0], d[0], n.Out[1])}
	},
	ops.Dropout: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.DropoutGrad, n.In[0], d[0], n.Out[1])}
	},
	ops.Dropout2D: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.Dropout2DGrad, n.In[0], d[0], n.Out[1])}
	},
	ops.Flatten: func(b *builder, n *Node, d []*Value) []*Value {
		// The gradient of a view is a view of the gradient.
		return []*Value{b.grad(n, ops.Flatten, n.In[0], d[0])}
	},
	ops.LogSoftmax: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.LogSoftmaxGrad, n.In[0], d[0], n.Out[0])}
	},
	ops.Softmax: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.SoftmaxGrad, n.In[0], d[0], n.Out[0])}
	},
	ops.NLLLoss: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.NLLLossGrad, n.In[0], d[0], n.In[1]), nil}
	},
	ops.CrossEntropy: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.CrossEntropyGrad, n.In[0], d[0], n.Out[1], n.In[1]), nil}
	},
	ops.MSELoss: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.MSELossGrad, n.In[0], d[0], n.In[0], n.In[1]), nil}
	},
	ops.Sigmoid: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.SigmoidGrad, n.In[0], d[0], n.Out[0])}
	},
	ops.Tanh: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.TanhGrad, n.In[0], d[0], n.Out[0])}
	},
	ops.LeakyReLU: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.LeakyReLUGrad, n.In[0], d[0], n.In[0])}
	},
	ops.AvgPool2D: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.AvgPool2DGrad, n.In[0], d[0])}
	},
	ops.GlobalAvgPool2D: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.GlobalAvgPool2DGrad, n.In[0], d[0])}
	},
	ops.Add: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{d[0], d[0]}
	},
	ops.Sub: func(b *builder, n *Node, d []*Value) []*Value {
		out := []*Value{d[0], nil}
		if n.In[1].needsGrad {
			out[1] = b.gradWith(n, ops.Scale, ops.Attrs{Alpha: -1}, n.In[1], d[0])
		}
		return out
	},
	ops.Mul: func(b *builder, n *Node, d []*Value) []*Value {
		out := make([]*Value, 2)
		if n.In[0].needsGrad {
			out[0] = b.grad(n, ops.Mul, n.In[0], d[0], n.In[1])
		}
		if n.In[1].needsGrad {
			out[1] = b.grad(n, ops.Mul, n.In[1], d[0], n.In[0])
		}
		return out
	},
	ops.BatchNormNorm: batchNormRule,
	ops.Embedding: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{nil, b.grad(n, ops.EmbeddingGradWeight, n.In[1], d[0], n.In[0])}
	},
	ops.LayerNorm: func(b *builder, n *Node, d []*Value) []*Value {
		x, gamma, beta, save := n.In[0], n.In[1], n.In[2], n.Out[1]
		out := make([]*Value, 3)
		if x.needsGrad {
			out[0] = b.grad(n, ops.LayerNormGradInput, x, d[0], x, save, gamma)
		}
		if gamma != nil && gamma.needsGrad {
			out[1] = b.grad(n, ops.LayerNormGradGamma, gamma, d[0], x, save)
		}
		if beta != nil && beta.needsGrad {
			out[2] = b.grad(n, ops.LayerNormGradBeta, beta, d[0])
		}
		return out
	},
	ops.GELU: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.GELUGrad, n.In[0], d[0], n.In[0])}
	},
	ops.Scale: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.grad(n, ops.Scale, n.In[0], d[0])}
	},
	ops.Permute: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.gradWith(n, ops.Permute, ops.Attrs{Perm: ops.InversePerm(n.Attrs.Perm, len(n.In[0].Shape))}, n.In[0], d[0])}
	},
	ops.Narrow: func(b *builder, n *Node, d []*Value) []*Value {
		return []*Value{b.gradWith(n, ops.NarrowGrad, ops.Attrs{Offset: n.Attrs.Offset}, n.In[0], d[0])}
	},
	ops.BatchMatMul: func(b *builder, n *Node, d []*Value) []*Value {
		a, c, dc := n.In[0], n.In[1], d[0]
		ta, tb := n.Attrs.TransA, n.Attrs.TransB
		out := make([]*Value, 2)
		mm := func(primal, x, y *Value, transA, transB bool) *Value {
			return b.gradWith(n, ops.BatchMatMul, ops.Attrs{TransA: transA, TransB: transB}, primal, x, y)
		}
		// PyTorch's rule for each transposition (ops.BatchMatMul's doc).
		if a.needsGrad {
			switch {
			case !ta && !tb:
				out[0] = mm(a, dc, c, false, true)
			case !ta && tb:
				out[0] = mm(a, dc, c, false, false)
			case ta && !tb:
				out[0] = mm(a, c, dc, false, true)
			default:
				out[0] = mm(a, c, dc, true, true)
			}
		}
		if c.needsGrad {
			switch {
			case !ta && !tb:
				out[1] = mm(c, a, dc, true, false)
			case !ta && tb:
				out[1] = mm(c, dc, a, true, false)
			case ta && !tb:
				out[1] = mm(c, a, dc, false, false)
			default:
				out[1] = mm(c, dc, a, true, true)
			}
		}
		return out
	},
	ops.Concat: func(b *builder, n *Node, d []*Value) []*Value {
		a, c := n.In[0], n.In[1]
		out := make([]*Value, 2)
		if a.needsGrad {
			out[0] = b.gradWith(n, ops.Narrow, ops.Attrs{Offset: 0}, a, d[0])
		}
		if c.needsGrad {
			out[1] = b.gradWith(n, ops.Narrow, ops.Attrs{Offset: a.Shape[1]}, c, d[0])
		}
		return out
	},
}

// batchNormRule differentiates BatchNormNorm (in x, stats, gamma, beta and,
// fused, a residual; out y, save): fused with a ReLU, dy first goes through
// ReLU's gradient, which is also the residual's; the per-channel sums of dy
// and dy·(x−mean) give the weight and bias gradients; under SyncBatchNorm
// (the stats node's AllReduce) a copy of those sums is summed over every
// device first for the input gradient, as torch.nn.SyncBatchNorm does.
func batchNormRule(b *builder, n *Node, d []*Value) []*Value {
	x, gamma, beta, save := n.In[0], n.In[2], n.In[3], n.Out[1]
	dy := d[0]
	c := x.Shape[1]
	out := make([]*Value, len(n.In))
	if n.Attrs.ReLU { // fused (fuse): ReLU's gradient first, the residual's too
		y := n.Out[0]
		dz := b.value("grad "+y.Name+" (before relu)", y.Shape, y.Batched)
		dz.Producer = &Node{Op: ops.ReLUGrad, In: []*Value{dy, y}, Out: []*Value{dz}, Layer: n.Layer, Pos: n.Pos}
		b.g.Backward = append(b.g.Backward, dz.Producer)
		dy = dz
		if len(n.In) > 4 {
			out[4] = dz
		}
	}
	gstats := b.aux(n, ops.BatchNormGradStats, n.Attrs, "grad stats "+n.Out[0].Name, []int{2, c}, dy, x, save)
	if gamma != nil && gamma.needsGrad {
		out[2] = b.grad(n, ops.BatchNormGradGamma, gamma, gstats, save)
	}
	if beta != nil && beta.needsGrad {
		out[3] = b.grad(n, ops.BatchNormGradBeta, beta, gstats)
	}
	if x.needsGrad {
		global := gstats
		if stats := n.In[1].Producer; stats != nil && stats.AllReduce {
			global = b.aux(n, ops.Scale, ops.Attrs{Alpha: 1}, "grad stats (all devices) "+n.Out[0].Name, []int{2, c}, gstats)
			global.Producer.AllReduce = true
		}
		out[0] = b.grad(n, ops.BatchNormGradInput, x, dy, x, save, global, gamma)
	}
	return out
}

// convPoolRule differentiates Conv2DPool (in x, w and a bias; out y and
// the pooling's index) as the ops it fuses: ReLU's gradient first (with
// Attrs.ReLU), max pooling's into the convolution's output, then the
// convolution's (affineRule), so that the gradient is the unfused plan's
// bit for bit. Where x needs no gradient and ops.ConvPoolGradFusable
// allows, one Conv2DPoolGrad step does all of it for the weight and the
// bias, the same bits again.
func convPoolRule(b *builder, n *Node, d []*Value) []*Value {
	y, idx := n.Out[0], n.Out[1]
	dy := d[0]
	x, w, bias := n.In[0], n.In[1], n.In[2]
	if !x.needsGrad && ops.ConvPoolGradFusable(&n.Attrs, x.Shape, w.Shape) {
		// One step for both parameters' gradients, the convolution's
		// output gradient built a chunk of samples at a time.
		var yIn *Value
		if n.Attrs.ReLU {
			yIn = y
		}
		node := &Node{Op: ops.Conv2DPoolGrad, Attrs: n.Attrs, In: []*Value{dy, idx, yIn, x}, Layer: n.Layer, Pos: n.Pos}
		out := make([]*Value, 3)
		for i, p := range []*Value{w, bias} {
			if p == nil {
				continue
			}
			out[i+1] = b.value("grad "+p.Name, p.Shape, p.Batched)
			out[i+1].Producer = node
			node.Out = append(node.Out, out[i+1])
		}
		b.g.Backward = append(b.g.Backward, node)
		return out
	}
	if n.Attrs.ReLU {
		dz := b.value("grad "+y.Name+" (before relu)", y.Shape, y.Batched)
		dz.Producer = &Node{Op: ops.ReLUGrad, In: []*Value{dy, y}, Out: []*Value{dz}, Layer: n.Layer, Pos: n.Pos}
		b.g.Backward = append(b.g.Backward, dz.Producer)
		dy = dz
	}
	conv := *n // the convolution alone
	conv.Attrs.ReLU = false
	shapes, err := ops.Infer(ops.Conv2D, &conv.Attrs, [][]int{n.In[0].Shape, n.In[1].Shape})
	if err != nil {
		panic(fmt.Sprintf("conv2d+maxpool2d %s: its convolution's shape: %v", n.Layer, err)) // Infer passed for the fused op
	}
	dc := b.value("grad "+y.Name+" (before maxpool)", shapes[0], y.Batched)
	dc.Producer = &Node{Op: ops.MaxPool2DGrad, Attrs: ops.Attrs{Kernel: 2, Stride: 2}, In: []*Value{dy, idx}, Out: []*Value{dc}, Layer: n.Layer, Pos: n.Pos}
	b.g.Backward = append(b.g.Backward, dc.Producer)
	return affineRule(ops.Conv2DGradInput, ops.Conv2DGradWeight, ops.Conv2DGradBias)(b, &conv, []*Value{dc})
}

// affineRule is the gradient of an op y = f(x, w) + b linear in x and in w
// (conv2d, linear): dx from dy and w (only when x needs it), dw from dy and
// x, db from dy.
func affineRule(dx, dw, db ops.Op) gradRule {
	return func(b *builder, n *Node, d []*Value) []*Value {
		x, w, bias := n.In[0], n.In[1], n.In[2]
		out := make([]*Value, 3)
		if x.needsGrad {
			out[0] = b.grad(n, dx, x, d[0], w)
		}
		out[1] = b.grad(n, dw, w, d[0], x)
		if bias != nil {
			out[2] = b.grad(n, db, bias, d[0])
		}
		return out
	}
}

// grad adds a backward node computing the gradient of primal from the
// given inputs, and returns that gradient. A parameter's gradient becomes
// its Param.Grad.
func (b *builder) grad(fwd *Node, op ops.Op, primal *Value, in ...*Value) *Value {
	name := "grad " + primal.Name
	v := b.value(name, primal.Shape, primal.Batched)
	node := &Node{Op: op, Attrs: fwd.Attrs, In: in, Out: []*Value{v}, Layer: fwd.Layer, Pos: fwd.Pos}
	v.Producer = node
	b.g.Backward = append(b.g.Backward, node)
	return v
}

// gradWith is grad with attributes of its own instead of the forward
// node's.
func (b *builder) gradWith(fwd *Node, op ops.Op, a ops.Attrs, primal *Value, in ...*Value) *Value {
	v := b.grad(fwd, op, primal, in...)
	v.Producer.Attrs = a
	return v
}

// aux adds a backward node whose output is an intermediate of the
// gradient (not the gradient of a value), of the given shape.
func (b *builder) aux(fwd *Node, op ops.Op, a ops.Attrs, name string, shape []int, in ...*Value) *Value {
	v := b.value(name, shape, false)
	node := &Node{Op: op, Attrs: a, In: in, Out: []*Value{v}, Layer: fwd.Layer, Pos: fwd.Pos}
	v.Producer = node
	b.g.Backward = append(b.g.Backward, node)
	return v
}

// differentiate walks the forward nodes in reverse, applying each op's
// gradient rule, and sums the gradients of values used more than once.
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
		rule := gradRules[n.Op]
		if rule == nil {
			return &CompileError{Pos: n.Pos, Layer: n.Layer, Err: fmt.Errorf("%s has no gradient rule", n.Op)}
		}
		for j, d := range rule(b, n, dOut) {
			x := n.In[j]
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
