package ops

import "fmt"

// Embedding: rows of a weight matrix looked up by integer ids, and the
// weight's gradient.

const (
	// Embedding: in ids[N,...] (Idx), weight[V,D]; out [N,...,D], row
	// ids[i] of weight for each id (F.embedding). Ids must lie in [0, V), a
	// precondition the engine checks: the compiler against the token
	// data's vocabulary and data.positions()' length, the runner the ids
	// it cannot see (a sampling prompt's). The kernel clamps nothing, but
	// writes zeros for an id outside and never reads or writes out of
	// bounds.
	Embedding Op = "embedding"

	// EmbeddingGradWeight: in dy[N,...,D], ids[N,...] (Idx); out dW[V,D]:
	// row v is the sum of the rows of dy whose id is v, added in input
	// order (deterministic); ids outside [0, V) add nothing.
	EmbeddingGradWeight Op = "embedding_grad_weight"
)

var embeddingOps = []*Def{
	{
		Op: Embedding, In: []Input{{Name: "ids", Int: true}, {Name: "weight"}}, Out: []Output{{Name: "y"}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			ids, w := in[0], in[1]
			if len(w) != 2 {
				return nil, fmt.Errorf("embedding: weight must be [V D], got %v", w)
			}
			return [][]int{append(clone(ids), w[1])}, nil
		},
		Grad: func(b GradBuilder) []Value {
			return []Value{nil, b.Grad(EmbeddingGradWeight, b.Attrs(), b.In(1), b.OutGrad(0), b.In(0))}
		},
		Kernel32: embedding[float32], Kernel64: embedding[float64],
	},
	{
		Op: EmbeddingGradWeight, In: []Input{{Name: "dy"}, {Name: "ids", Int: true}}, Out: []Output{{Name: "dw"}}, Accumulates: true,
		Kernel32: embeddingGradWeight[float32], Kernel64: embeddingGradWeight[float64],
	},
}

// embedding: in ids[N,...] (Idx), weight[V,D]; out [N,...,D] = weight[ids].
// An id outside [0, V) gives a row of zeros.
func embedding[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	ids, w, y := in[0], in[1], out[0]
	v, d := w.Shape[0], w.Shape[1]
	for i, id := range ids.Idx[:ids.Len()] {
		yr := y.Data[i*d:][:d]
		if id < 0 || int(id) >= v {
			clear(yr)
			continue
		}
		copy(yr, w.Data[int(id)*d:][:d])
	}
}

// embeddingGradWeight: in dy[N,...,D], ids[N,...] (Idx); out dW[V,D], the
// rows of dy added at their ids in input order. Honours Attrs.Accumulate.
func embeddingGradWeight[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, ids, dw := in[0], in[1], out[0]
	v, d := dw.Shape[0], dw.Shape[1]
	if !a.Accumulate {
		clear(dw.Data[:v*d])
	}
	for i, id := range ids.Idx[:ids.Len()] {
		if id < 0 || int(id) >= v {
			continue
		}
		wr := dw.Data[int(id)*d:][:d]
		for j, g := range dy.Data[i*d:][:d] {
			wr[j] += g
		}
	}
}
