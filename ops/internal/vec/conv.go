package vec

import (
	"math"
	"unsafe"
)

// ConvGeom is the geometry of a convolution with no groups: x[N,C,H,W],
// w[O,C,KH,KW], y[N,O,OH,OW], stride S (0 means 1), OH = (H+2P-KH)/S+1,
// OW = (W+2P-KW)/S+1.
type ConvGeom struct {
	N, C, O, H, W int
	KH, KW, P     int
	OH, OW        int
	S             int
}

// stride is S, 1 when unset.
func (g *ConvGeom) stride() int { return max(g.S, 1) }

// ConvMaxKW is the widest kernel the direct convolutions take.
const ConvMaxKW = 16

func (g *ConvGeom) check() {
	s := g.stride()
	if g.KW > ConvMaxKW || g.P < 0 || g.C < 1 || g.S < 0 || g.H+2*g.P < g.KH || g.W+2*g.P < g.KW ||
		g.OH != (g.H+2*g.P-g.KH)/s+1 || g.OW != (g.W+2*g.P-g.KW)/s+1 {
		panic("vec: bad convolution geometry")
	}
}

func (g *ConvGeom) lens() (nx, nw, ny int) {
	return g.N * g.C * g.H * g.W, g.O * g.C * g.KH * g.KW, g.N * g.O * g.OH * g.OW
}

// ConvFast reports which passes of g this process runs through vector
// bodies that beat lowering (im2col and a matrix multiply); the others run
// plain loops, far slower than lowering on more than one input channel, or
// bodies that lowering beats.
//
// With AVX-512 (Level 2): the forward at
// any geometry with a stride up to 16; the weight gradient for kernels 3 or 5
// wide and output planes from 8 to 128 columns, and for kernels 3 wide on
// narrower planes with output channels by 32s (vectors over the channels;
// other narrow planes run an AVX-512 body too, but slower than lowering);
// the input gradient for
// kernels 3 or 5 wide, output planes up to 8 columns and input planes up to
// 16, and for "same" convolutions (output plane the input's) through the
// forward body; with a stride from 2 to 16 and a kernel at least the
// stride in both dimensions, the input gradient by phases (each a stride-1
// convolution of dy run by the forward body); for 1×1 kernels without
// padding with a stride (input channels by 8s), the input gradient as one
// matrix product a sample scattered into dx. Forward passes of 1×1 kernels
// without padding (output channels by 8s) run as a matrix product a sample
// over the pixels they read.
//
// With AVX2 and FMA alone (Level 1): the 3×3 convolutions that
// ConvForward and ConvGradWeight run by Winograd, all three passes (the
// input gradient as the forward); the forward with vectors over the output
// channels (output planes under 16 columns, output channels by 32s, any
// stride up to 16), and so the input gradient of such "same" convolutions;
// and for convolutions of depth (the terms of each output's sum: C·KH·KW,
// or O·KH·KW for the input gradient) up to 512, where lowering's matrix
// multiply has not caught up, the forward at stride 1 of kernels wider than
// one column, the weight gradient of kernels 3 or 5 wide at stride 1 by
// columns or over flattened planes and of kernels 3 wide over the output
// channels (planes under 16 columns, output channels by 32s, any stride up
// to 16; not the sums of 16 output channels by chunks: see ConvGradWeight),
// the input gradient of kernels 3 or 5 wide with output planes up to 8
// columns and input planes up to 16, and of "same" convolutions through the
// forward body.
func ConvFast(g *ConvGeom) (fwd, wgrad, dgrad bool) {
	g.check()
	r := convFast(level, g)
	return r&1 != 0, r&2 != 0, r&4 != 0
}

// ConvForward sets y[n,o,oy,ox] = b[o] + Σ_{c,ki,kj} w[o,c,ki,kj]·x[n,c,
// S·oy+ki-P, S·ox+kj-P] (zero outside the plane; no bias when b is nil),
// adding the taps with fused multiply-adds in the order c, ki, kj. "Same"
// 3×3 convolutions with stride 1 on planes of 12 to 32 columns, 16 or more
// input channels and output channels by 8s go by Winograd's F(2×2, 3×3) in
// the C levels (2.25 times
// fewer multiplies, a few more roundings; conv.c's wino_ok says the order),
// which the Go loops match within rounding.
func ConvForward(g *ConvGeom, x, w, b, y []float32) {
	g.check()
	nx, nw, ny := g.lens()
	if ny == 0 {
		return
	}
	_, _, _ = x[nx-1], w[nw-1], y[ny-1]
	if b != nil {
		_ = b[g.O-1]
	}
	convForward(level, g, x, w, b, y)
}

// ConvGradWeight sets dw[o,c,ki,kj] to Σ_{n,oy,ox} dy[n,o,oy,ox]·x[n,c,
// S·oy+ki-P, S·ox+kj-P], or adds it with accumulate: sixteen partial sums
// per tap, samples, rows and columns in order, combined pairwise as
// BiasGrad's plane sums. Output column ox goes into partial ox mod 16, or
// mod 8 when a row's last sixteen columns would be at most half used; output
// pixel oy·OW + ox into partial (oy·OW + ox) mod 16 for stride 1, kernels 3
// wide, output channels by 8s and planes from 9 to 128 columns not a
// multiple of 16, and for 1×1 kernels without padding with channels by 4s
// and planes of 8 pixels or more. For output planes narrower than 16 columns
// with output channels by 32s and kernels 3 wide, and for 16 output channels
// from 16 or more input channels with 3×3 kernels on output planes up to 32
// columns, one sum per tap in that order (the C bodies run those with
// vectors over the output channels; the Go loops keep the partials, within
// rounding). The C levels take the same 3×3 convolutions that ConvForward
// runs by Winograd, with input and output channels by 16s, by Winograd too
// (sums over the transformed tiles of each sample, conv.c's winow_ok), which
// the Go loops match within rounding.
func ConvGradWeight(g *ConvGeom, dy, x, dw []float32, accumulate bool) {
	g.check()
	nx, nw, ny := g.lens()
	if ny == 0 {
		if !accumulate {
			clear(dw[:nw])
		}
		return
	}
	_, _, _ = x[nx-1], dw[nw-1], dy[ny-1]
	convGradWeight(level, g, dy, x, dw, accumulate)
}

// ConvGradInput sets dx[n,c,iy,ix] to Σ_{kj} Σ_{o,ki} w[o,c,ki,kj]·dy[n,o,
// iy+P-ki, ix+P-kj] (terms outside dy left out): the inner sums with fused
// multiply-adds over o then ki, the outer over kj in order; for a "same"
// convolution (output plane the input's) that the AVX-512 body for narrow
// planes does not take, as ConvForward of dy with w transposed and flipped
// (the Go loops allocate that copy; the ops package calls this only where
// ConvFast says AVX-512). With a stride S above 1 the terms are those with
// (iy+P-ki)/S and (ix+P-kj)/S whole and inside dy, added from zero over o,
// then ki downwards, then kj downwards.
func ConvGradInput(g *ConvGeom, dy, w, dx []float32) {
	g.check()
	nx, nw, ny := g.lens()
	if nx == 0 {
		return
	}
	if ny == 0 {
		clear(dx[:nx])
		return
	}
	_, _, _ = dx[nx-1], w[nw-1], dy[ny-1]
	convGradInput(level, g, dy, w, dx)
}

// fma32 is float32's fused multiply-add through float64 (exact product, two
// roundings: rarely one unit off a true fmaf).
func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

func convForwardGo(g *ConvGeom, x, w, b, y []float32) {
	plane, hw, taps, s := g.OH*g.OW, g.H*g.W, g.C*g.KH*g.KW, g.stride()
	for n := range g.N {
		for o := range g.O {
			wo := w[o*taps:][:taps]
			yo := y[(n*g.O+o)*plane:][:plane]
			for oy := range g.OH {
				for ox := range g.OW {
					var acc float32
					if b != nil {
						acc = b[o]
					}
					for c := range g.C {
						xc := x[(n*g.C+c)*hw:][:hw]
						for ki := range g.KH {
							iy := oy*s + ki - g.P
							if iy < 0 || iy >= g.H {
								continue
							}
							for kj := range g.KW {
								if ix := ox*s + kj - g.P; ix >= 0 && ix < g.W {
									acc = fma32(wo[(c*g.KH+ki)*g.KW+kj], xc[iy*g.W+ix], acc)
								}
							}
						}
					}
					yo[oy*g.OW+ox] = acc
				}
			}
		}
	}
}

func convGradWeightGo(g *ConvGeom, dy, x, dw []float32, accumulate bool) {
	for t := range g.O * g.C * g.KH * g.KW {
		var p [16]float32
		addTapGo(g, dy, x, t, &p)
		if s := combine16Go(&p); accumulate {
			dw[t] += s
		} else {
			dw[t] = s
		}
	}
}

// addTapGo adds tap t's products over g's samples into its sixteen partial
// sums p: output column ox into partial ox mod 16, or mod 8 when the last
// 16-column block is at most half full, or pixel oy·OW + ox mod 16 where
// flatWeightGrad says; samples, rows and columns in order.
func addTapGo(g *ConvGeom, dy, x []float32, t int, p *[16]float32) {
	plane, hw, s := g.OH*g.OW, g.H*g.W, g.stride()
	o, c, ki, kj := t/(g.C*g.KH*g.KW), t/(g.KH*g.KW)%g.C, t/g.KW%g.KH, t%g.KW
	lm := 15
	if g.OW%16 != 0 && g.OW%16 <= 8 {
		lm = 7
	}
	flat := g.flatWeightGrad()
	for n := range g.N {
		dyo := dy[(n*g.O+o)*plane:][:plane]
		xc := x[(n*g.C+c)*hw:][:hw]
		for oy := range g.OH {
			iy := oy*s + ki - g.P
			if iy < 0 || iy >= g.H {
				continue
			}
			for ox := range g.OW {
				if ix := ox*s + kj - g.P; ix >= 0 && ix < g.W {
					l := ox & lm
					if flat {
						l = (oy*g.OW + ox) & 15
					}
					p[l] = fma32(dyo[oy*g.OW+ox], xc[iy*g.W+ix], p[l])
				}
			}
		}
	}
}

// combine16Go adds the sixteen partial sums pairwise: p_i += p_{i+8}, then
// p_i += p_{i+4}, …; it returns p_0.
func combine16Go(p *[16]float32) float32 {
	for w := 8; w >= 1; w /= 2 {
		for i := range w {
			p[i] = p[i] + p[i+w]
		}
	}
	return p[0]
}

// flatWeightGrad reports whether ConvGradWeight adds output pixel p =
// oy·OW + ox into partial p mod 16 rather than by column (the C functions
// wgrad_flat and wgrad_pw): stride 1, kernels 3 wide, output planes from 9
// to 128 columns not a multiple of 16, output channels by 8s; or 1×1
// kernels without padding, strides up to 16, input and output channels by
// 4s, output planes of at least 8 pixels.
func (g *ConvGeom) flatWeightGrad() bool {
	pointwise := g.KH == 1 && g.KW == 1 && g.P == 0 && g.stride() <= 16 && g.O%4 == 0 && g.C%4 == 0 && g.OH*g.OW >= 8
	return g.stride() == 1 && g.KW == 3 && g.OW > 8 && g.OW <= 128 && g.OW%16 != 0 && g.O%8 == 0 || pointwise
}

// gradInputSame reports whether ConvGradInput computes g's input gradient
// as the forward convolution of dy with the weights transposed and flipped
// (a "same" convolution that the AVX-512 input-gradient body does not
// take; the C function dgrad_same).
func (g *ConvGeom) gradInputSame() bool {
	byO := g.KW == 3 && g.W < 8 && g.C%32 == 0 && g.OH == g.H && g.OW == g.W
	scatter := (g.KW == 3 || g.KW == 5) && g.OW <= 8 && g.W <= 16 && !byO
	return g.stride() == 1 && !scatter && g.OH == g.H && g.OW == g.W
}

func convGradInputGo(g *ConvGeom, dy, w, dx []float32) {
	if g.stride() > 1 {
		convGradInputStridedGo(g, dy, w, dx)
		return
	}
	if g.gradInputSame() {
		k := g.KH * g.KW
		wt := make([]float32, g.O*g.C*k)
		for o := range g.O {
			for c := range g.C {
				for t := range k {
					wt[(c*g.O+o)*k+k-1-t] = w[(o*g.C+c)*k+t]
				}
			}
		}
		gt := *g
		gt.C, gt.O, gt.H, gt.W, gt.OH, gt.OW = g.O, g.C, g.OH, g.OW, g.H, g.W
		convForwardGo(&gt, dy, wt, nil, dx)
		return
	}
	plane, hw := g.OH*g.OW, g.H*g.W
	for n := range g.N {
		for c := range g.C {
			for iy := range g.H {
				for ix := range g.W {
					var total float32
					for kj := range g.KW {
						ox := ix + g.P - kj
						if ox < 0 || ox >= g.OW {
							continue
						}
						var s float32
						for o := range g.O {
							for ki := range g.KH {
								oy := iy + g.P - ki
								if oy < 0 || oy >= g.OH {
									continue
								}
								s = fma32(w[((o*g.C+c)*g.KH+ki)*g.KW+kj], dy[(n*g.O+o)*plane+oy*g.OW+ox], s)
							}
						}
						total += s
					}
					dx[(n*g.C+c)*hw+iy*g.W+ix] = total
				}
			}
		}
	}
}

// convGradInputStridedGo is ConvGradInput's order for strides above 1 (the
// C function conv_dgrad_sc).
func convGradInputStridedGo(g *ConvGeom, dy, w, dx []float32) {
	plane, hw, s := g.OH*g.OW, g.H*g.W, g.stride()
	for n := range g.N {
		for c := range g.C {
			for iy := range g.H {
				for ix := range g.W {
					var acc float32
					for o := range g.O {
						for ki := g.KH - 1; ki >= 0; ki-- {
							ry := iy + g.P - ki
							if ry < 0 || ry%s != 0 || ry/s >= g.OH {
								continue
							}
							for kj := g.KW - 1; kj >= 0; kj-- {
								rx := ix + g.P - kj
								if rx < 0 || rx%s != 0 || rx/s >= g.OW {
									continue
								}
								acc = fma32(w[((o*g.C+c)*g.KH+ki)*g.KW+kj], dy[(n*g.O+o)*plane+ry/s*g.OW+rx/s], acc)
							}
						}
					}
					dx[(n*g.C+c)*hw+iy*g.W+ix] = acc
				}
			}
		}
	}
}

// ConvPoolChunk is how many samples ConvPoolGrad builds the convolution's
// output gradient for at a time (the C functions' CP_NB).
const ConvPoolChunk = 16

// ConvPoolGradOK reports whether ConvPoolGrad takes g: one input channel,
// stride 1, and a weight gradient that ConvGradWeight adds by column into
// sixteen partials at every level (not by output channel: 3-wide kernels
// on planes under 16 columns with output channels by 32s; not over
// flattened planes: 3-wide kernels on planes of 9 to 128 columns not a
// multiple of 16 with output channels by 8s). It reads the geometry only,
// so that every machine fuses the same plans.
func ConvPoolGradOK(g *ConvGeom) bool {
	if g.C != 1 || g.stride() != 1 || g.KW > ConvMaxKW || g.OH < 2 || g.OW < 2 {
		return false
	}
	byO := g.OW < 16 && g.O%32 == 0 && g.KW == 3
	return !byO && !g.flatWeightGrad()
}

// ConvPoolGradWork is the scratch ConvPoolGrad needs, in float32 elements:
// ConvPoolChunk samples of the convolution's output gradient, 8 planes
// after them (which the AVX-512 bodies' masked loads touch), ConvPoolChunk
// samples of the pooled output's gradient, then (for the Go loops) the
// weight gradient's partial sums and the bias's float64 sums.
func ConvPoolGradWork(g *ConvGeom) int {
	taps := g.O * g.C * g.KH * g.KW
	return (ConvPoolChunk*g.O+8)*g.OH*g.OW + ConvPoolChunk*g.O*(g.OH/2)*(g.OW/2) + 16*taps + 2*g.O + 2
}

// ConvPoolGrad sets dw (and db, unless nil) to the weight and bias
// gradients of convolution g (ConvPoolGradOK) whose output [N,O,OH,OW] was
// max-pooled 2×2 with stride 2 into [N,O,OH/2,OW/2] (idx as MaxPool2x2's)
// and, when y is not nil, clamped by a ReLU whose output is y: dy is the
// gradient of that last output. The results are bit for bit ConvGradWeight's
// and BiasGrad's of the dense gradient MaxPool2x2Grad(ReLUGrad(dy, y)), which
// it builds ConvPoolChunk samples at a time in work (ConvPoolGradWork)
// instead of whole: the weight gradient's partial sums and the bias's
// float64 sums carry from one chunk to the next. accumulate adds to dw and
// db.
func ConvPoolGrad(g *ConvGeom, dy []float32, idx []int32, y, x, dw, db []float32, accumulate bool, work []float32) {
	g.check()
	if !ConvPoolGradOK(g) {
		panic("vec: ConvPoolGrad of a geometry ConvPoolGradOK refuses")
	}
	nx, nw, _ := g.lens()
	np := g.N * g.O * (g.OH / 2) * (g.OW / 2)
	_ = dw[nw-1]
	if db != nil {
		_ = db[g.O-1]
	}
	_ = work[ConvPoolGradWork(g)-1]
	if g.N == 0 {
		if !accumulate {
			clear(dw[:nw])
			if db != nil {
				clear(db[:g.O])
			}
		}
		return
	}
	_, _, _ = dy[np-1], idx[np-1], x[nx-1]
	if y != nil {
		_ = y[np-1]
	}
	convPoolGrad(level, g, dy, idx, y, x, dw, db, accumulate, work)
}

// convPoolGradGo is ConvPoolGrad's Go loops: convGradWeightGo's partials
// and biasGradGo's float64 sums kept in work across the chunks.
func convPoolGradGo(g *ConvGeom, dy []float32, idx []int32, y, x, dw, db []float32, accumulate bool, work []float32) {
	ph, pw := g.OH/2, g.OW/2
	pooled, plane, hw := g.O*ph*pw, g.OH*g.OW, g.H*g.W
	taps := g.O * g.C * g.KH * g.KW
	dc := work[:ConvPoolChunk*g.O*plane]
	dz := work[(ConvPoolChunk*g.O+8)*plane:][:ConvPoolChunk*pooled]
	rest := work[(ConvPoolChunk*g.O+8)*plane+len(dz):]
	part := rest[:16*taps]
	clear(part)
	bw := rest[len(part):][:2*g.O+2]
	off := 0
	if uintptr(unsafe.Pointer(&bw[0]))%8 != 0 {
		off = 1
	}
	bsum := unsafe.Slice((*float64)(unsafe.Pointer(&bw[off])), g.O)
	clear(bsum)
	for n0 := 0; n0 < g.N; n0 += ConvPoolChunk {
		cs := min(ConvPoolChunk, g.N-n0)
		dp := dy[n0*pooled:][:cs*pooled]
		if y != nil {
			reluGradGo(dz, dp, nil, y[n0*pooled:][:cs*pooled])
			dp = dz[:cs*pooled]
		}
		maxPool2x2GradGo(dp, idx[n0*pooled:][:cs*pooled], dc, cs*g.O, g.OH, g.OW, ph, pw)
		gc := *g
		gc.N = cs
		for t := range taps {
			addTapGo(&gc, dc, x[n0*hw:], t, (*[16]float32)(part[t*16:]))
		}
		if db != nil {
			for j := range g.O {
				for n := range cs {
					bsum[j] += float64(sumGo(dc[(n*g.O+j)*plane:][:plane]))
				}
			}
		}
	}
	for t := range taps {
		if s := combine16Go((*[16]float32)(part[t*16:])); accumulate {
			dw[t] += s
		} else {
			dw[t] = s
		}
	}
	if db != nil {
		for j := range g.O {
			if accumulate {
				db[j] += float32(bsum[j])
			} else {
				db[j] = float32(bsum[j])
			}
		}
	}
}
