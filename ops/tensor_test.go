package ops

import "testing"

func TestConcatNarrowForward(t *testing.T) {
	a := buf64([]int{2, 1, 2}, 1, 2, 3, 4)
	b := buf64([]int{2, 2, 2}, 5, 6, 7, 8, 9, 10, 11, 12)
	y := buf64([]int{2, 3, 2})
	run64(Concat, nil, nil, []*Buf[float64]{a, b}, []*Buf[float64]{y})
	expectData(t, "concat", y.Data, 1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12)
	n := buf64([]int{2, 2, 2})
	run64(Narrow, &Attrs{Offset: 1}, nil, []*Buf[float64]{y}, []*Buf[float64]{n})
	expectData(t, "narrow", n.Data, 5, 6, 7, 8, 9, 10, 11, 12)
	n1 := buf64([]int{2, 1, 2})
	run64(Narrow, &Attrs{Offset: 2}, nil, []*Buf[float64]{y}, []*Buf[float64]{n1})
	expectData(t, "narrow offset 2", n1.Data, 7, 8, 11, 12)
}

func TestEmbeddingForward(t *testing.T) {
	w := buf64([]int{3, 2}, 1, 2, 3, 4, 5, 6)
	// Ids outside [0, 3) give zero rows and no gradient; nothing past the
	// weight is read or written.
	ids := idx64([]int{2, 2}, 2, -1, 3, 0)
	y := buf64([]int{2, 2, 2}, 9, 9, 9, 9, 9, 9, 9, 9)
	run64(Embedding, nil, nil, []*Buf[float64]{ids, w}, []*Buf[float64]{y})
	expectData(t, "embedding", y.Data, 5, 6, 0, 0, 0, 0, 1, 2)
	dw := buf64([]int{3, 2}, 9, 9, 9, 9, 9, 9)
	dy := buf64([]int{2, 2, 2}, 1, 2, 3, 4, 5, 6, 7, 8)
	run64(EmbeddingGradWeight, &Attrs{}, nil, []*Buf[float64]{dy, ids}, []*Buf[float64]{dw})
	expectData(t, "embedding_grad_weight", dw.Data, 7, 8, 0, 0, 1, 2)
	// Repeated ids add up; Accumulate adds into the gradient.
	ids2 := idx64([]int{3}, 1, 1, 0)
	dy2 := buf64([]int{3, 2}, 1, 1, 2, 2, 4, 4)
	run64(EmbeddingGradWeight, &Attrs{Accumulate: true}, nil, []*Buf[float64]{dy2, ids2}, []*Buf[float64]{dw})
	expectData(t, "embedding_grad_weight accumulated", dw.Data, 11, 12, 3, 3, 1, 2)
}
