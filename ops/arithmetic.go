package ops

import "gorun/ops/internal/vec"

// Arithmetic: elementwise sums, differences and products of two tensors of
// one shape, and scaling by a constant.

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
