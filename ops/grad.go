package ops

// Value stands for one value of the graph being differentiated: an input
// or output of the forward node, the gradient of one, or a value a rule
// added. A rule passes it back to the GradBuilder that gave it and
// compares it with nil (an absent input, an output no gradient reaches),
// nothing else.
type Value any

// GradBuilder is the forward node a gradient rule differentiates, as the
// rule sees it, and the way the rule adds backward nodes. The engine's
// graph builder implements it; every node a rule adds computes part of the
// forward node's layer, and the nodes run in the order the rule adds them.
type GradBuilder interface {
	// Attrs returns the forward node's attributes.
	Attrs() Attrs
	// In returns the node's input i: nil when it is absent, or when i is
	// past the inputs the node was given.
	In(i int) Value
	// Out returns the node's output i.
	Out(i int) Value
	// OutGrad returns the gradient of output i: nil when none reaches it.
	OutGrad(i int) Value
	// NeedsGrad reports whether v needs a gradient: the loss depends on a
	// parameter through it. It is false for nil.
	NeedsGrad(v Value) bool
	// Shape, Name and Batched return v's shape (at the planned batch), its
	// name, and whether its first dimension is the batch.
	Shape(v Value) []int
	Name(v Value) string
	Batched(v Value) bool

	// Grad adds a backward node op(in...) with attributes a whose one
	// output is wrt's gradient (named "grad " and wrt's name, with wrt's
	// shape and batch), and returns that gradient.
	Grad(op Op, a Attrs, wrt Value, in ...Value) Value
	// Grads adds one backward node op(in...) with attributes a whose
	// outputs are the gradients of wrt's values that are not nil, in
	// order, and returns them, nil where wrt is nil.
	Grads(op Op, a Attrs, wrt []Value, in ...Value) []Value
	// Temp adds a backward node op(in...) with attributes a whose output
	// is an intermediate of the gradient, not the gradient of a value:
	// named name, of the given shape, batched or not. It returns the
	// intermediate.
	Temp(op Op, a Attrs, name string, shape []int, batched bool, in ...Value) Value

	// AllReduced reports whether the node that computes v sums it over
	// every device right after it runs (SyncBatchNorm's statistics).
	AllReduced(v Value) bool
	// AllReduce makes the node that computes v, one the rule added, sum v
	// over every device right after it runs.
	AllReduce(v Value)
}

// GradRule adds the backward nodes of one forward node through b and
// returns the gradients of the node's inputs, in order: nil where an input
// gets none or is absent (the slice may end early; past the inputs the
// node was given, it holds only nils). A rule need not differentiate with
// respect to inputs that need no gradient (NeedsGrad). The engine sums the
// gradients of a value used twice.
type GradRule func(b GradBuilder) []Value

// gradWithOut is the rule of an op whose input 0 alone has a gradient,
// computed by op from dy and the forward node's output i, with the
// forward node's attributes: ReLU's (its output), dropout's (its mask),
// max pooling's (its index).
func gradWithOut(op Op, i int) GradRule {
	return func(b GradBuilder) []Value {
		return []Value{b.Grad(op, b.Attrs(), b.In(0), b.OutGrad(0), b.Out(i))}
	}
}

// gradWithIn is the rule of an op whose input 0 alone has a gradient,
// computed by op from dy and that input, with the forward node's
// attributes: LeakyReLU's, GELU's.
func gradWithIn(op Op) GradRule {
	return func(b GradBuilder) []Value {
		return []Value{b.Grad(op, b.Attrs(), b.In(0), b.OutGrad(0), b.In(0))}
	}
}

// gradOfDy is the rule of an op whose input 0 alone has a gradient,
// computed by op from dy alone: average pooling's, Scale's.
func gradOfDy(op Op) GradRule {
	return func(b GradBuilder) []Value {
		return []Value{b.Grad(op, b.Attrs(), b.In(0), b.OutGrad(0))}
	}
}

// affineGrad is the gradient rule of an op y = f(x, w) + bias linear in x
// and in w (Conv2D, Linear): dx from dy and w (only when x needs it), dw
// from dy and x, and the bias's gradient (when there is a bias) from dy.
func affineGrad(dx, dw, db Op) GradRule {
	return func(b GradBuilder) []Value {
		return affineGrads(b, b.Attrs(), b.OutGrad(0), dx, dw, db)
	}
}

// affineGrads adds affineGrad's nodes with attributes a for the gradient
// dy of the forward node's output.
func affineGrads(b GradBuilder, a Attrs, dy Value, dx, dw, db Op) []Value {
	x, w, bias := b.In(0), b.In(1), b.In(2)
	out := make([]Value, 3)
	if b.NeedsGrad(x) {
		out[0] = b.Grad(dx, a, x, dy, w)
	}
	out[1] = b.Grad(dw, a, w, dy, x)
	if bias != nil {
		out[2] = b.Grad(db, a, bias, dy)
	}
	return out
}
