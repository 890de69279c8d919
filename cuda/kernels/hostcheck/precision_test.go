//go:build cgo

package hostcheck

import (
	"fmt"
	"math"
	"testing"

	"gorun/ops"
)

// TestUnaryRound checks gorun_unary's ROUND_BF16 and ROUND_FP16 against
// ops.Round bit for bit (any NaN matching any NaN) on values of every
// magnitude — float32's subnormals and largest values, float16's
// subnormals, underflow and overflow, ties between two neighbours — with
// NaN, ±Inf and -0, in place and out of place, under several geometries.
func TestUnaryRound(t *testing.T) {
	r := newRand(26)
	n := 4000
	x := make([]float32, n+5)
	for i := range n {
		e := r.IntN(300) - 150 // 2^-150 … 2^149: float32's whole range
		x[i] = float32(math.Ldexp(r.Float64()+0.5, e))
		if r.IntN(2) == 0 {
			x[i] = -x[i]
		}
		switch i % 7 {
		case 3: // a tie between two bfloat16s
			x[i] = math.Float32frombits(math.Float32bits(x[i])&^0xFFFF | 0x8000)
		case 5: // a tie between two float16s, within float16's range
			x[i] = float32(math.Ldexp(float64(int(r.IntN(2048))*2+1), r.IntN(30)-36))
		}
	}
	for i, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0,
		65504, 65519, 65520, -65520, math.MaxFloat32, math.Float32frombits(0x7F7F8000), 1e-45, 5.96e-8, 2.98e-8} {
		x[7*i] = v
	}
	for i := n; i < len(x); i++ {
		x[i] = float32(math.NaN())
	}
	for _, c := range []struct {
		p    ops.Precision
		code int
	}{{ops.BF16, UnaryRoundBf16}, {ops.FP16, UnaryRoundFp16}} {
		want := nans(n + 5)
		run(ops.Round, &ops.Attrs{Precision: c.p}, nil, []*ops.Buf[float32]{fbuf(x, n)}, fbuf(want, n))
		for _, g := range geoms(n) {
			what := fmt.Sprintf("round %v geom=%v", c.p, g)
			got := nans(n + 5)
			Unary(g, x, got, n, c.code, 0)
			checkExact(t, what, got, want, n)
			checkTail(t, what, got, n)
			in := append([]float32(nil), x...)
			Unary(g, in, in, n, c.code, 0)
			checkExact(t, what+" in place", in, want, n)
		}
	}
}
