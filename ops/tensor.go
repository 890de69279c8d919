package ops

// Data movement: Concat and its gradient Narrow, Permute.

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

// narrow: in dy[N,S,...]; out [N,L,...] = dy[:, Offset:Offset+L, ...].
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
