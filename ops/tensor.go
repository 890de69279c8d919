package ops

// Tensor movement: Flatten (a view), Concat, Narrow and its gradient
// NarrowGrad (Narrow is also Concat's gradient), Permute; Positions.

// flatten: in x[N,...]; out y[N,prod(...)]. The engine makes y alias x, and
// then there is nothing to do; otherwise x is copied.
func flatten[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x := live(in[0])
	y := out[0].Data[:len(x)]
	if !same(x, y) {
		copy(y, x)
	}
}

// concat: in a[N,A,...], b[N,B,...]; out [N,A+B,...], per sample a's
// elements then b's.
func concat[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y, z := in[0], in[1], out[0]
	n := x.Shape[0]
	la, lb := prod(x.Shape[1:]), prod(y.Shape[1:])
	for i := 0; i < n; i++ {
		zr := z.Data[i*(la+lb):][:la+lb]
		copy(zr[:la], x.Data[i*la:][:la])
		copy(zr[la:], y.Data[i*lb:][:lb])
	}
}

// narrow: in x[N,S,...]; out [N,L,...] = x[:, Offset:Offset+L, ...], L
// from the output's shape.
func narrow[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	n := x.Shape[0]
	inner := prod(x.Shape[2:])
	ls, ll := x.Shape[1]*inner, y.Shape[1]*inner
	off := a.Offset * inner
	for i := 0; i < n; i++ {
		copy(y.Data[i*ll:][:ll], x.Data[i*ls+off:][:ll])
	}
}

// narrowGrad: in dy[N,L,...]; out dx[N,S,...], zero but for dx[:,
// Offset:Offset+L, ...] = dy (S from the output's shape).
func narrowGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, dx := in[0], out[0]
	n := dy.Shape[0]
	inner := prod(dy.Shape[2:])
	ll, ls := dy.Shape[1]*inner, dx.Shape[1]*inner
	off := a.Offset * inner
	for i := 0; i < n; i++ {
		xr := dx.Data[i*ls:][:ls]
		clear(xr[:off])
		copy(xr[off:][:ll], dy.Data[i*ll:][:ll])
		clear(xr[off+ll:])
	}
}

// positions: in x[N,T,...] (its shape only); out pos[N,T] (Idx) = t.
func positions[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, p := in[0], out[0]
	n, t := x.Shape[0], x.Shape[1]
	pd := p.Idx[:n*t]
	for i := 0; i < n; i++ {
		for j := range pd[i*t:][:t] {
			pd[i*t+j] = int32(j)
		}
	}
}

// MaxPermRank is the largest rank Permute takes.
const MaxPermRank = 6

// InversePerm returns the permutation that undoes perm's first rank
// entries (Permute's gradient); its entries from rank on are the identity.
func InversePerm(perm [MaxPermRank]int8, rank int) [MaxPermRank]int8 {
	var inv [MaxPermRank]int8
	for i := range inv {
		inv[i] = int8(i)
	}
	for i, p := range perm[:rank] {
		inv[p] = int8(i)
	}
	return inv
}

// permute: in x of rank r ≤ 6; out y[i₀,...] = x at index i permuted back
// (y's dimension d is x's dimension Perm[d]). It walks y in order, reading x
// with y's dimensions' strides in x.
func permute[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	r := len(x.Shape)
	n := x.Len()
	if n == 0 {
		return
	}
	var xs, shape, stride, idx [MaxPermRank]int
	s := 1
	for d := r - 1; d >= 0; d-- {
		xs[d] = s
		s *= x.Shape[d]
	}
	for d, p := range a.Perm[:r] {
		shape[d], stride[d] = x.Shape[p], xs[p]
	}
	last, ls := shape[r-1], stride[r-1]
	yd := y.Data[:n]
	off := 0 // x's offset of y's index idx[:r-1], 0
	for o := 0; o < n; o += last {
		src := off
		if ls == 1 { // the last dimension stays last: whole runs
			copy(yd[o:o+last], x.Data[src:src+last])
		} else {
			for j := range yd[o : o+last] {
				yd[o+j] = x.Data[src]
				src += ls
			}
		}
		for d := r - 2; d >= 0; d-- {
			idx[d]++
			off += stride[d]
			if idx[d] < shape[d] {
				break
			}
			off -= stride[d] * shape[d]
			idx[d] = 0
		}
	}
}
