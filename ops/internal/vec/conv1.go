package vec

import "math"

// Conv1Geom is the geometry of a convolution of a single-channel input with
// stride 1: x[N,1,H,W], w[O,1,KH,KW], y[N,O,OH,OW], OH = H+2P-KH+1,
// OW = W+2P-KW+1.
type Conv1Geom struct {
	N, O, H, W int
	KH, KW, P  int
	OH, OW     int
}

// Conv1MaxKW is the widest kernel Conv1Forward and Conv1GradWeight take.
const Conv1MaxKW = 16

func (g *Conv1Geom) check(x, w, y []float32) bool {
	if g.KW > Conv1MaxKW || g.P < 0 || g.OH != g.H+2*g.P-g.KH+1 || g.OW != g.W+2*g.P-g.KW+1 {
		panic("vec: bad single-channel convolution geometry")
	}
	if g.N*g.O*g.OH*g.OW == 0 {
		return false
	}
	_, _, _ = x[g.N*g.H*g.W-1], w[g.O*g.KH*g.KW-1], y[g.N*g.O*g.OH*g.OW-1]
	return true
}

// Conv1Forward sets y[n,o,oy,ox] = b[o] + Σ_{ki,kj} w[o,ki,kj]·x[n,oy+ki-P,
// ox+kj-P] (zero outside the plane; no bias when b is nil), adding the
// taps with fused multiply-adds in the order ki, kj.
func Conv1Forward(g *Conv1Geom, x, w, b, y []float32) {
	if !g.check(x, w, y) {
		return
	}
	if b != nil {
		_ = b[g.O-1]
	}
	conv1Forward(level, g, x, w, b, y)
}

// Conv1GradWeight sets dw[o,ki,kj] to Σ_{n,oy,ox} dy[n,o,oy,ox]·x[n,oy+ki-P,
// ox+kj-P], or adds it with accumulate: sixteen partial sums per tap
// (output column ox into partial ox mod 16; samples, rows and 16-column
// blocks in order) combined pairwise as BiasGrad's plane sums.
func Conv1GradWeight(g *Conv1Geom, dy, x, dw []float32, accumulate bool) {
	if g.N*g.O*g.OH*g.OW == 0 {
		if !accumulate {
			clear(dw[:g.O*g.KH*g.KW])
		}
		return
	}
	g.check(x, dw, dy)
	conv1GradWeight(level, g, dy, x, dw, accumulate)
}

// fma32 is float32's fused multiply-add through float64 (exact product, two
// roundings: rarely one unit off a true fmaf).
func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

func conv1ForwardGo(g *Conv1Geom, x, w, b, y []float32) {
	plane := g.OH * g.OW
	for n := range g.N {
		xn := x[n*g.H*g.W:][:g.H*g.W]
		for o := range g.O {
			wo := w[o*g.KH*g.KW:][:g.KH*g.KW]
			yo := y[(n*g.O+o)*plane:][:plane]
			for oy := range g.OH {
				for ox := range g.OW {
					var acc float32
					if b != nil {
						acc = b[o]
					}
					for ki := range g.KH {
						iy := oy + ki - g.P
						if iy < 0 || iy >= g.H {
							continue
						}
						for kj := range g.KW {
							if ix := ox + kj - g.P; ix >= 0 && ix < g.W {
								acc = fma32(wo[ki*g.KW+kj], xn[iy*g.W+ix], acc)
							}
						}
					}
					yo[oy*g.OW+ox] = acc
				}
			}
		}
	}
}

func conv1GradWeightGo(g *Conv1Geom, dy, x, dw []float32, accumulate bool) {
	plane := g.OH * g.OW
	taps := g.O * g.KH * g.KW
	for t := range taps {
		o, ki, kj := t/(g.KH*g.KW), t/g.KW%g.KH, t%g.KW
		var p [16]float32
		for n := range g.N {
			dyo := dy[(n*g.O+o)*plane:][:plane]
			xn := x[n*g.H*g.W:][:g.H*g.W]
			for oy := range g.OH {
				iy := oy + ki - g.P
				if iy < 0 || iy >= g.H {
					continue
				}
				for ox := range g.OW {
					if ix := ox + kj - g.P; ix >= 0 && ix < g.W {
						p[ox&15] = fma32(dyo[oy*g.OW+ox], xn[iy*g.W+ix], p[ox&15])
					}
				}
			}
		}
		for w := 8; w >= 1; w /= 2 {
			for i := range w {
				p[i] = p[i] + p[i+w]
			}
		}
		if accumulate {
			dw[t] += p[0]
		} else {
			dw[t] = p[0]
		}
	}
}
