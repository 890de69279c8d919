package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIm2colRandomGeometry checks im2col against its definition, and
// col2im against im2col (as its adjoint: ⟨im2col(x), c⟩ = ⟨x, col2im(c)⟩),
// over many random geometries: strides 1 to 3, padding 0 to 2, kernels
// wider or narrower than the stride, outputs one wide.
func TestIm2colRandomGeometry(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 300; trial++ {
		g := convGeom{n: 1 + r.IntN(3), c: 1 + r.IntN(3), kh: 1 + r.IntN(4), kw: 1 + r.IntN(4), s: 1 + r.IntN(3), p: r.IntN(3)}
		g.h = max(1, g.kh-2*g.p) + r.IntN(6)
		g.w = max(1, g.kw-2*g.p) + r.IntN(6)
		g.oh = (g.h+2*g.p-g.kh)/g.s + 1
		g.ow = (g.w+2*g.p-g.kw)/g.s + 1
		x := make([]float64, g.n*g.c*g.h*g.w)
		for i := range x {
			x[i] = r.Float64()
		}
		col := make([]float64, g.k()*g.l())
		fillNaN(col)
		im2col(&g, x, col)
		for ci := 0; ci < g.c; ci++ {
			for ki := 0; ki < g.kh; ki++ {
				for kj := 0; kj < g.kw; kj++ {
					row := ((ci*g.kh+ki)*g.kw + kj) * g.l()
					for n := 0; n < g.n; n++ {
						for oy := 0; oy < g.oh; oy++ {
							for ox := 0; ox < g.ow; ox++ {
								iy, ix := oy*g.s-g.p+ki, ox*g.s-g.p+kj
								want := 0.0
								if iy >= 0 && iy < g.h && ix >= 0 && ix < g.w {
									want = x[((n*g.c+ci)*g.h+iy)*g.w+ix]
								}
								if got := col[row+(n*g.oh+oy)*g.ow+ox]; got != want {
									t.Fatalf("%+v: col[c=%d ki=%d kj=%d n=%d oy=%d ox=%d] = %v, want %v", g, ci, ki, kj, n, oy, ox, got, want)
								}
							}
						}
					}
				}
			}
		}
		c := make([]float64, len(col))
		var lhs float64
		for i := range c {
			c[i] = r.Float64()
			lhs += c[i] * col[i]
		}
		dx := make([]float64, len(x))
		col2im(&g, c, dx)
		var rhs float64
		for i := range x {
			rhs += x[i] * dx[i]
		}
		if math.Abs(lhs-rhs) > 1e-9*math.Abs(lhs) {
			t.Fatalf("%+v: ⟨im2col(x), c⟩ = %v, ⟨x, col2im(c)⟩ = %v", g, lhs, rhs)
		}
	}
}

// TestChunkedAndDirectConvMatchFloat64 runs the float32 convolution kernels
// (chunked im2col, and vec's direct kernels) against the float64 ones
// (whole-batch Go loops, no chunks) on random geometries: one to three
// input channels with kernels 3 and 5 (the direct paths at stride 1, the
// input gradient's for planes up to 8 columns wide and for same
// convolutions) and others, padding, strides, groups, bias or none,
// accumulate, batches that leave a short last chunk.
func TestChunkedAndDirectConvMatchFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	defer func(b int) { colBudget = b }(colBudget)
	colBudget = 300 // small chunks: several per batch, a short last one
	for trial := 0; trial < 120; trial++ {
		c, groups := []int{1, 1, 2, 3}[trial%4], 1
		if c == 2 && trial%3 == 0 {
			groups = 2
		}
		k := []int{3, 5, 1, 2}[trial/4%4]
		a := &Attrs{Padding: r.IntN(3), Stride: 1 + r.IntN(2)*(trial%2), Groups: groups}
		if a.Padding >= k {
			a.Padding = k - 1
		}
		n, o := 1+r.IntN(5), groups*(1+r.IntN(11))
		h, w := k+r.IntN(9), k+r.IntN(20)
		xs, ws := []int{n, c * groups, h, w}, []int{o, c, k, k}
		g := geomFwd(a, xs, ws)
		ys := []int{n, o, g.oh, g.ow}
		bias := trial%5 != 0
		mk32 := func(shape []int) *Buf[float32] {
			b := &Buf[float32]{Shape: shape, Data: make([]float32, prod(shape))}
			for i := range b.Data {
				b.Data[i] = float32(r.NormFloat64())
			}
			return b
		}
		to64 := func(b *Buf[float32]) *Buf[float64] {
			d := make([]float64, len(b.Data))
			for i, v := range b.Data {
				d[i] = float64(v)
			}
			return &Buf[float64]{Shape: b.Shape, Data: d}
		}
		x, wt, bb, dy := mk32(xs), mk32(ws), mk32(ws[:1]), mk32(ys)
		work := max(Workspace(Conv2D, a, [][]int{xs, ws, ws[:1]}, [][]int{ys}),
			Workspace(Conv2DGradInput, a, [][]int{ys, ws}, [][]int{xs}),
			Workspace(Conv2DGradWeight, a, [][]int{ys, xs}, [][]int{ws}))
		c32, c64 := &Ctx[float32]{Work: make([]float32, work)}, &Ctx[float64]{Work: make([]float64, work)}
		in32, in64 := []*Buf[float32]{x, wt}, []*Buf[float64]{to64(x), to64(wt)}
		if bias {
			in32, in64 = append(in32, bb), append(in64, to64(bb))
		}
		y32, y64 := mk32(ys), to64(mk32(ys))
		Kernels32[Conv2D](c32, a, in32, []*Buf[float32]{y32})
		Kernels64[Conv2D](c64, a, in64, []*Buf[float64]{y64})
		dx32, dx64 := mk32(xs), to64(mk32(xs))
		Kernels32[Conv2DGradInput](c32, a, []*Buf[float32]{dy, wt}, []*Buf[float32]{dx32})
		Kernels64[Conv2DGradInput](c64, a, []*Buf[float64]{to64(dy), to64(wt)}, []*Buf[float64]{dx64})
		acc := &Attrs{Padding: a.Padding, Stride: a.Stride, Groups: a.Groups, Accumulate: trial%3 == 1}
		dw32 := mk32(ws)
		dw64 := to64(dw32)
		Kernels32[Conv2DGradWeight](c32, acc, []*Buf[float32]{dy, x}, []*Buf[float32]{dw32})
		Kernels64[Conv2DGradWeight](c64, acc, []*Buf[float64]{to64(dy), to64(x)}, []*Buf[float64]{dw64})
		for _, cmp := range []struct {
			name string
			got  []float32
			want []float64
		}{{"y", y32.Data, y64.Data}, {"dx", dx32.Data, dx64.Data}, {"dw", dw32.Data, dw64.Data}} {
			for i, wv := range cmp.want {
				if math.Abs(float64(cmp.got[i])-wv) > 1e-4*(1+math.Abs(wv)) {
					t.Fatalf("trial %d x%v w%v %+v: %s[%d] = %v, float64 %v", trial, xs, ws, *acc, cmp.name, i, cmp.got[i], wv)
				}
			}
		}
	}
}
