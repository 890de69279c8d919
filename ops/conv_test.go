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
