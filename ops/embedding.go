package ops

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
