package ops

import (
	"fmt"
	"slices"
)

// Tensor movement: Flatten (a view), Concat, Narrow and its gradient
// NarrowGrad (Narrow is also Concat's gradient), Permute; Positions.

const (
	// Flatten: in x[N,...]; out y[N,prod(...)]. Output aliases the input.
	Flatten Op = "flatten"

	// Concat: in a[N,A,...], b[N,B,...] (the same batch and trailing
	// dimensions); out [N,A+B,...], a then b along dimension 1, as
	// torch.cat((a, b), dim=1). Its gradients are Narrow of dy with
	// Offset 0 (for a) and Offset A (for b).
	Concat Op = "concat"

	// Narrow: in x[N,S,...]; out [N,L,...], the slice [Offset, Offset+L)
	// of dimension 1 (x.narrow(1, Offset, L)), rank at least 2. As a forward
	// op (splitting a tensor along dimension 1) its shape rule takes L from
	// Attrs.Length (at least 1, Offset+Length ≤ S); the kernel takes L from
	// the output's shape, so that Narrow also serves as Concat's gradient
	// with Offset alone. Its gradient is NarrowGrad with the same Offset.
	// Attrs: Offset, Length.
	Narrow Op = "narrow"

	// NarrowGrad: in dy[N,L,...]; out dx[N,S,...] (S from the output's
	// shape; Offset+L ≤ S), zero but for the slice [Offset, Offset+L) of
	// dimension 1, which is dy: Narrow's gradient (torch.narrow's
	// backward). Attrs: Offset.
	NarrowGrad Op = "narrow_grad"

	// Permute: in x of rank r ≤ 6; out y with dimension i of size
	// x.shape[Perm[i]] (x.permute(Perm[:r])), elements moved to match.
	// Perm[:r] must be a permutation of 0..r-1 that keeps the batch first
	// (Perm[0] = 0); Perm[r:] is ignored. Attrs: Perm. Its gradient is
	// Permute with InversePerm(Perm, r); [N,T,H,Dh] → [N,H,T,Dh] is Perm
	// {0, 2, 1, 3}, its own inverse.
	Permute Op = "permute"

	// Positions: in x[N,T,...] (any element type: only its live shape is
	// read, never its data); out pos[N,T] (Idx), pos[n,t] = t: the
	// position ids a GPT's position embedding looks up
	// (torch.arange(T).expand(N, T)). No gradient: the output is integer.
	Positions Op = "positions"
)

var tensorOps = []*Def{
	{
		Op: Flatten, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, Alias: true, Autocast: AutocastExact,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			if len(x) < 2 {
				return nil, fmt.Errorf("flatten: input must be [N ...] with at least 2 dimensions, got %v", x)
			}
			return [][]int{{x[0], prod(x[1:])}}, nil
		},
		// The gradient of a view is a view of the gradient.
		Grad:     gradOfDy(Flatten),
		Kernel32: flatten[float32], Kernel64: flatten[float64],
	},
	{
		Op: Concat, In: []Input{{Name: "input"}, {Name: "other"}}, Out: []Output{{Name: "y"}}, Autocast: AutocastExact,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x, y := in[0], in[1]
			if len(x) < 2 || len(y) < 2 {
				return nil, fmt.Errorf("concat: inputs must be [N C ...] with at least 2 dimensions, got %v and %v", x, y)
			}
			if len(x) != len(y) || x[0] != y[0] || !slices.Equal(x[2:], y[2:]) {
				return nil, fmt.Errorf("concat: shapes %v and %v differ outside dimension 1", x, y)
			}
			z := clone(x)
			z[1] += y[1]
			return [][]int{z}, nil
		},
		Grad: func(b GradBuilder) []Value {
			x, y, dz := b.In(0), b.In(1), b.OutGrad(0)
			out := make([]Value, 2)
			if b.NeedsGrad(x) {
				out[0] = b.Grad(Narrow, Attrs{Offset: 0}, x, dz)
			}
			if b.NeedsGrad(y) {
				out[1] = b.Grad(Narrow, Attrs{Offset: b.Shape(x)[1]}, y, dz)
			}
			return out
		},
		Kernel32: concat[float32], Kernel64: concat[float64],
	},
	{
		Op: Narrow, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, Autocast: AutocastExact,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			if len(x) < 2 {
				return nil, fmt.Errorf("narrow: input must be [N S ...] with at least 2 dimensions, got %v", x)
			}
			if a.Offset < 0 {
				return nil, fmt.Errorf("narrow: offset must not be negative, got %d", a.Offset)
			}
			if a.Length < 1 {
				return nil, fmt.Errorf("narrow: length must be at least 1, got %d", a.Length)
			}
			if a.Offset+a.Length > x[1] {
				return nil, fmt.Errorf("narrow: offset %d + length %d exceeds dimension 1 of input %v (%d)", a.Offset, a.Length, x, x[1])
			}
			y := clone(x)
			y[1] = a.Length
			return [][]int{y}, nil
		},
		Grad: func(b GradBuilder) []Value {
			return []Value{b.Grad(NarrowGrad, Attrs{Offset: b.Attrs().Offset}, b.In(0), b.OutGrad(0))}
		},
		Kernel32: narrow[float32], Kernel64: narrow[float64],
	},
	{
		Op: NarrowGrad, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "dx"}},
		Kernel32: narrowGrad[float32], Kernel64: narrowGrad[float64],
	},
	{
		Op: Permute, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}}, Autocast: AutocastExact,
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			r := len(x)
			if r > MaxPermRank {
				return nil, fmt.Errorf("permute: input has %d dimensions, at most %d are supported: %v", r, MaxPermRank, x)
			}
			perm := a.Perm[:r]
			var seen [MaxPermRank]bool
			for _, p := range perm {
				if p < 0 || int(p) >= r || seen[p] {
					return nil, fmt.Errorf("permute: perm %v is not a permutation of the %d dimensions of input %v", perm, r, x)
				}
				seen[p] = true
			}
			if perm[0] != 0 {
				return nil, fmt.Errorf("permute: perm %v moves the batch dimension; it must stay first", perm)
			}
			y := make([]int, r)
			for i, p := range perm {
				y[i] = x[p]
			}
			return [][]int{y}, nil
		},
		Grad: func(b GradBuilder) []Value {
			x := b.In(0)
			return []Value{b.Grad(Permute, Attrs{Perm: InversePerm(b.Attrs().Perm, len(b.Shape(x)))}, x, b.OutGrad(0))}
		},
		Kernel32: permute[float32], Kernel64: permute[float64],
	},
	{
		Op: Positions, In: []Input{{Name: "input"}}, Out: []Output{{Name: "pos", Int: true}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			if len(x) < 2 {
				return nil, fmt.Errorf("positions: input must be [N T ...] with at least 2 dimensions, got %v", x)
			}
			return [][]int{{x[0], x[1]}}, nil
		},
		Kernel32: positions[float32], Kernel64: positions[float64],
	},
}

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
