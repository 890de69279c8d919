package ops

import "gorun/ops/internal/vec"

// Arithmetic: elementwise sums, differences and products of two tensors of
// one shape, and scaling by a constant. Their gradients are themselves
// Scale (dy, or -dy with Alpha -1, or Alpha·dy) and Mul (dy·b, dy·a). Every
// kernel may write its output over input 0 (ReuseInput).

const (
	// Add: in a, b (same shape); out a + b. Also sums the gradients of a
	// value used twice.
	Add Op = "add"

	// Sub: in a, b (same shape); out a - b.
	Sub Op = "sub"

	// Mul: in a, b (same shape); out a·b, elementwise.
	Mul Op = "mul"

	// Scale: in x; out Alpha·x. Attrs: Alpha.
	Scale Op = "scale"
)

var arithmeticOps = []*Def{
	{
		Op: Add, In: []Input{{Name: "input"}, {Name: "input"}}, Out: []Output{{Name: "sum"}}, ReuseInput: true,
		Shape: sameShapes(Add),
		Grad: func(b GradBuilder) []Value {
			return []Value{b.OutGrad(0), b.OutGrad(0)}
		},
		Kernel32: add[float32], Kernel64: add[float64],
	},
	{
		Op: Sub, In: []Input{{Name: "input"}, {Name: "input"}}, Out: []Output{{Name: "difference"}}, ReuseInput: true,
		Shape: sameShapes(Sub),
		Grad: func(b GradBuilder) []Value {
			dy := b.OutGrad(0)
			out := []Value{dy, nil}
			if y := b.In(1); b.NeedsGrad(y) {
				out[1] = b.Grad(Scale, Attrs{Alpha: -1}, y, dy)
			}
			return out
		},
		Kernel32: sub[float32], Kernel64: sub[float64],
	},
	{
		Op: Mul, In: []Input{{Name: "input"}, {Name: "input"}}, Out: []Output{{Name: "product"}}, ReuseInput: true,
		Shape: sameShapes(Mul),
		Grad: func(b GradBuilder) []Value {
			x, y, dy := b.In(0), b.In(1), b.OutGrad(0)
			out := make([]Value, 2)
			if b.NeedsGrad(x) {
				out[0] = b.Grad(Mul, b.Attrs(), x, dy, y)
			}
			if b.NeedsGrad(y) {
				out[1] = b.Grad(Mul, b.Attrs(), y, dy, x)
			}
			return out
		},
		Kernel32: mul[float32], Kernel64: mul[float64],
	},
	{
		Op: Scale, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, ReuseInput: true,
		Shape: sameShape, Grad: gradOfDy(Scale),
		Kernel32: scale[float32], Kernel64: scale[float64],
	},
}

// add: in a, b (same shape); out a + b. The output may alias an input.
func add[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := in[1].Data[:len(x)]
	z := out[0].Data[:len(x)]
	if is32[T]() {
		vec.Add(view[float32](z), view[float32](x), view[float32](y))
		return
	}
	for i, v := range x {
		z[i] = v + y[i]
	}
}

// sub: in a, b (same shape); out a - b. The output may alias an input.
func sub[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := in[1].Data[:len(x)]
	z := out[0].Data[:len(x)]
	for i, v := range x {
		z[i] = v - y[i]
	}
}

// mul: in a, b (same shape); out a·b. The output may alias an input.
func mul[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := in[1].Data[:len(x)]
	z := out[0].Data[:len(x)]
	for i, v := range x {
		z[i] = v * y[i]
	}
}

// scale: in x; out Alpha·x. The output may alias the input.
func scale[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	al := T(a.Alpha)
	for i, v := range x {
		y[i] = al * v
	}
}
