package ops

import (
	"fmt"
	"slices"
)

// Infer returns the output shapes of forward op for input shapes in, or an
// error that says what was expected and what came. in holds one shape per
// input, in the order of the op's doc comment; an absent optional bias is nil
// (or left off the end). The result includes every output: MaxPool2D's index,
// the dropout masks, CrossEntropy's probabilities. Loss outputs are [1].
//
// a may be nil for ops without attributes. Zero-valued strides take
// PyTorch's defaults: 1 for Conv2D, Kernel for MaxPool2D.
//
// Infer checks the shapes against the op's signature (Def.In: how many,
// which may be absent, none empty or with a dimension below 1), then runs
// its shape rule (Def.Shape).
func Infer(op Op, a *Attrs, in [][]int) ([][]int, error) {
	d := Lookup(op)
	if d == nil || d.Shape == nil {
		return nil, fmt.Errorf("%v: not a forward op, it has no shape rule", op)
	}
	if a == nil {
		a = &Attrs{}
	}
	if minIn, numIn := d.MinIn(), len(d.In); len(in) < minIn || len(in) > numIn {
		switch minIn {
		case numIn:
			return nil, fmt.Errorf("%v: got %d inputs, want %d", op, len(in), numIn)
		case numIn - 1:
			return nil, fmt.Errorf("%v: got %d inputs, want %d or %d", op, len(in), minIn, numIn)
		}
		return nil, fmt.Errorf("%v: got %d inputs, want %d to %d", op, len(in), minIn, numIn)
	}
	for i, s := range in {
		if s == nil {
			if d.mayOmit(i) {
				continue
			}
			return nil, fmt.Errorf("%v: %s is missing", op, d.In[i].Name)
		}
		if len(s) == 0 {
			return nil, fmt.Errorf("%v: %s has no dimensions", op, d.In[i].Name)
		}
		for _, n := range s {
			if n < 1 {
				return nil, fmt.Errorf("%v: %s shape %v has a dimension below 1", op, d.In[i].Name, s)
			}
		}
	}
	return d.Shape(a, in)
}

// Workspace returns how many elements of scratch (Ctx.Work) op's kernel
// needs for input shapes in and output shapes out, given at the planned
// maximum batch; a kernel run on a smaller live batch needs no more. Most
// ops need none (Def.Workspace is nil); an unknown op needs none.
//
// Conv2D, Conv2DGradInput and Conv2DGradWeight lower the whole batch into
// one matrix multiply (one per group) and need (C/G·KH·KW + O)·N·OH·OW
// elements, G the groups. Conv2DPool needs one chunk's convolution output
// and that chunk's lowering (convPoolWork); Conv2DPoolGrad a chunk's
// gradients (convPoolGradWork). CrossEntropy in float32 keeps two elements per
// row of its logits (the row's maximum and its sum of exponentials).
func Workspace(op Op, a *Attrs, in, out [][]int) int {
	d := Lookup(op)
	if d == nil || d.Workspace == nil {
		return 0
	}
	if a == nil {
		a = &Attrs{}
	}
	return d.Workspace(a, in, out)
}

// sameShape is the shape rule of an op whose one output has its input 0's
// shape (the elementwise ops).
func sameShape(a *Attrs, in [][]int) ([][]int, error) { return [][]int{clone(in[0])}, nil }

// sameShapes returns the shape rule of an elementwise op of two inputs of
// one shape, named op in errors.
func sameShapes(op Op) func(a *Attrs, in [][]int) ([][]int, error) {
	return func(a *Attrs, in [][]int) ([][]int, error) {
		if !slices.Equal(in[0], in[1]) {
			return nil, fmt.Errorf("%v: shapes %v and %v differ", op, in[0], in[1])
		}
		return [][]int{clone(in[0])}, nil
	}
}

func optShape(in [][]int, i int) []int {
	if i < len(in) {
		return in[i]
	}
	return nil
}

func clone(s []int) []int { return append([]int(nil), s...) }

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
