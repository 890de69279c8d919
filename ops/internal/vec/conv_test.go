package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var convGeoms = []ConvGeom{
	{N: 3, C: 1, O: 10, H: 28, W: 28, KH: 5, KW: 5, P: 0},  // the MNIST Net's conv1
	{N: 9, C: 10, O: 20, H: 12, W: 12, KH: 5, KW: 5, P: 0}, // its conv2: eight-lane bodies, two sample chunks
	{N: 2, C: 1, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1},  // resnet_fashion.star's stem
	{N: 2, C: 16, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1}, // its first stage
	{N: 2, C: 13, O: 7, H: 7, W: 7, KH: 3, KW: 3, P: 1},    // channels past every group
	{N: 2, C: 3, O: 16, H: 7, W: 7, KH: 3, KW: 3, P: 1},    // eight channels a group, eight lanes
	{N: 3, C: 2, O: 8, H: 8, W: 8, KH: 3, KW: 3, P: 1},     // padded copies, one full block a row
	{N: 2, C: 2, O: 5, H: 5, W: 24, KH: 5, KW: 5, P: 2},    // eight lanes for 24 columns, padding
	{N: 3, C: 3, O: 9, H: 6, W: 9, KH: 5, KW: 5, P: 2},     // padding on every side, O by 4s
	{N: 2, C: 5, O: 10, H: 5, W: 10, KH: 3, KW: 3, P: 0},   // dy eight wide, no padding
	{N: 2, C: 3, O: 6, H: 4, W: 10, KH: 5, KW: 5, P: 1},    // dy eight wide, padding
	{N: 2, C: 2, O: 3, H: 7, W: 37, KH: 3, KW: 5, P: 2},
	{N: 1, C: 1, O: 2, H: 2, W: 3, KH: 5, KW: 5, P: 3}, // windows mostly padding
	{N: 2, C: 2, O: 1, H: 17, W: 33, KH: 1, KW: 1, P: 0},
	{N: 2, C: 4, O: 6, H: 9, W: 20, KH: 2, KW: 4, P: 1}, // kernels the fast bodies leave to the plain ones
	// the AVX2 bodies' tails (level 1): eight lanes, sixteen registers
	{N: 1, C: 3, O: 10, H: 9, W: 15, KH: 3, KW: 3, P: 0}, // 13 columns unpadded: masked loads at the row's end, an odd row count
	{N: 2, C: 3, O: 5, H: 10, W: 34, KH: 5, KW: 5, P: 0}, // 30 columns: sixteen partials as two passes of eight lanes, the second's last block partial
	{N: 18, C: 2, O: 3, H: 9, W: 14, KH: 5, KW: 5, P: 1}, // 12 columns padded, two sample chunks, partials 8–15 from a partial block
	{N: 2, C: 2, O: 6, H: 5, W: 16, KH: 3, KW: 3, P: 1},  // 16 columns: both passes whole
	{N: 2, C: 3, O: 4, H: 6, W: 9, KH: 5, KW: 5, P: 1},   // input gradient: dy 7 wide (masked), dx 9 (one lane in the upper half)
	{N: 0, C: 3, O: 4, H: 5, W: 5, KH: 3, KW: 3, P: 1},
	// strides: phase-split copies, input gradients by phases
	{N: 2, C: 16, O: 32, H: 28, W: 28, KH: 3, KW: 3, P: 1, S: 2}, // resnet_fashion.star's second stage
	{N: 2, C: 32, O: 64, H: 14, W: 14, KH: 3, KW: 3, P: 1, S: 2}, // its third: seven columns, eight lanes
	{N: 2, C: 16, O: 32, H: 28, W: 28, KH: 1, KW: 1, P: 0, S: 2}, // its downsample: phases without taps
	{N: 17, C: 3, O: 12, H: 17, W: 35, KH: 5, KW: 5, P: 2, S: 2}, // two sample chunks, odd planes
	{N: 2, C: 4, O: 10, H: 16, W: 16, KH: 3, KW: 3, P: 1, S: 2},  // eight columns, five channels a group
	{N: 2, C: 5, O: 7, H: 11, W: 13, KH: 3, KW: 3, P: 0, S: 3},
	{N: 2, C: 2, O: 3, H: 9, W: 9, KH: 2, KW: 4, P: 1, S: 2},
	{N: 1, C: 3, O: 4, H: 10, W: 10, KH: 1, KW: 1, P: 1, S: 3}, // the kernel narrower than the stride, padding
	{N: 0, C: 3, O: 4, H: 6, W: 6, KH: 3, KW: 3, P: 1, S: 2},
	// input gradients of 3×3, stride 2, padding 1 over 16s of channels (dgrad_s2)
	{N: 2, C: 48, O: 5, H: 9, W: 13, KH: 3, KW: 3, P: 1, S: 2}, // odd planes, three channel groups, blocks past the row
	{N: 3, C: 16, O: 64, H: 3, W: 2, KH: 3, KW: 3, P: 1, S: 2}, // planes narrower than a block; forward over o, transposed
	// weight gradients over the output channels (planes under 8 columns)
	{N: 17, C: 5, O: 32, H: 7, W: 7, KH: 3, KW: 3, P: 1},         // two sample chunks, two blocks of 16
	{N: 2, C: 32, O: 64, H: 14, W: 14, KH: 1, KW: 1, P: 0, S: 2}, // resnet_fashion.star's last downsample (lowered)
	{N: 3, C: 4, O: 64, H: 5, W: 6, KH: 3, KW: 3, P: 0},          // no padding
	{N: 9, C: 16, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1},       // 16 output channels (wgrado16): resnet_fashion.star's first stage, three chunks
	{N: 3, C: 17, O: 16, H: 9, W: 11, KH: 3, KW: 3, P: 1, S: 2},  // 16 output channels, stride 2, odd planes
	{N: 2, C: 32, O: 16, H: 5, W: 7, KH: 3, KW: 3, P: 1},         // input gradient of a same convolution over 32 channels (dgrad_same, not the scatter body)
	{N: 2, C: 3, O: 32, H: 9, W: 11, KH: 3, KW: 3, P: 2, S: 3},   // wide padding, stride 3
	// 1×1 kernels as a matrix product per sample
	{N: 3, C: 5, O: 8, H: 7, W: 9, KH: 1, KW: 1, P: 0},          // stride 1: x read in place, 63-pixel planes
	{N: 3, C: 8, O: 16, H: 11, W: 13, KH: 1, KW: 1, P: 0, S: 3}, // stride 3: gathered; the input gradient scattered
	{N: 2, C: 16, O: 8, H: 6, W: 6, KH: 1, KW: 1, P: 0, S: 2},   // 9-pixel output planes
	{N: 2, C: 40, O: 24, H: 8, W: 8, KH: 1, KW: 1, P: 0, S: 2},  // two vectors a tile (32 channels or more)
	// Winograd F(2×2, 3×3): same 3×3 convolutions, 12 to 32 columns, 16 or more input channels, output channels by 8s
	{N: 20, C: 16, O: 8, H: 13, W: 15, KH: 3, KW: 3, P: 1}, // odd planes (tiles past the edge), three chunks
	{N: 2, C: 17, O: 24, H: 5, W: 32, KH: 3, KW: 3, P: 1},  // a full vector of 16 tiles a row, three blocks of 8 channels
	{N: 1, C: 40, O: 8, H: 2, W: 12, KH: 3, KW: 3, P: 1},   // one tile row, long channel sums
	{N: 3, C: 16, O: 16, H: 13, W: 15, KH: 3, KW: 3, P: 1}, // weight gradient by Winograd: dy tiles past odd planes
	{N: 2, C: 32, O: 48, H: 12, W: 32, KH: 3, KW: 3, P: 1}, // weight gradient by Winograd: 8 output channels × 32 input a block
	{N: 0, C: 16, O: 16, H: 14, W: 14, KH: 3, KW: 3, P: 1}, // an empty batch on a Winograd geometry
	// weight gradients over flattened planes (partial p mod 16)
	{N: 2, C: 32, O: 32, H: 14, W: 14, KH: 3, KW: 3, P: 1}, // resnet_fashion.star's 14-column stage
	{N: 19, C: 3, O: 8, H: 11, W: 11, KH: 3, KW: 3, P: 0},  // no padding, a 9×9 plane (last vector one lane), two chunks
	{N: 2, C: 2, O: 16, H: 7, W: 24, KH: 5, KW: 3, P: 2},   // kernels 5 tall, 24 columns (eight-lane partials before)
}

func convFill(g ConvGeom) ConvGeom {
	s := g.stride()
	g.OH, g.OW = (g.H+2*g.P-g.KH)/s+1, (g.W+2*g.P-g.KW)/s+1
	return g
}

// convRef is the convolution in float64, and each output's sum of the
// magnitudes of its terms (what float32 rounding scales with).
func convRef(g *ConvGeom, x, w, b []float32) (y, mag []float64) {
	y, mag = make([]float64, g.N*g.O*g.OH*g.OW), make([]float64, g.N*g.O*g.OH*g.OW)
	for n := range g.N {
		for o := range g.O {
			for oy := range g.OH {
				for ox := range g.OW {
					s, m := 0.0, 0.0
					if b != nil {
						s, m = float64(b[o]), math.Abs(float64(b[o]))
					}
					for c := range g.C {
						for ki := range g.KH {
							for kj := range g.KW {
								iy, ix := oy*g.stride()+ki-g.P, ox*g.stride()+kj-g.P
								if iy >= 0 && iy < g.H && ix >= 0 && ix < g.W {
									t := float64(w[((o*g.C+c)*g.KH+ki)*g.KW+kj]) * float64(x[((n*g.C+c)*g.H+iy)*g.W+ix])
									s, m = s+t, m+math.Abs(t)
								}
							}
						}
					}
					y[((n*g.O+o)*g.OH+oy)*g.OW+ox] = s
					mag[((n*g.O+o)*g.OH+oy)*g.OW+ox] = m
				}
			}
		}
	}
	return y, mag
}

// closeMag is close32 with each element's tolerance tol·(1 + mag[i]).
func closeMag(got []float32, want, mag []float64, tol float64) (int, bool) {
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol*(1+mag[i]) {
			return i, false
		}
	}
	return 0, true
}

func close32(got []float32, want []float64, tol float64) (int, bool) {
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol*(1+math.Abs(want[i])) {
			return i, false
		}
	}
	return 0, true
}

// convGradRef is the weight and input gradients in float64: every
// product of the forward sum, credited to the tap and input element it
// read.
func convGradRef(g *ConvGeom, dy, x, w []float32) (dw, dx []float64) {
	nx, nw, _ := g.lens()
	dw, dx = make([]float64, nw), make([]float64, nx)
	for n := range g.N {
		for o := range g.O {
			for oy := range g.OH {
				for ox := range g.OW {
					d := float64(dy[((n*g.O+o)*g.OH+oy)*g.OW+ox])
					for c := range g.C {
						for ki := range g.KH {
							for kj := range g.KW {
								iy, ix := oy*g.stride()+ki-g.P, ox*g.stride()+kj-g.P
								if iy >= 0 && iy < g.H && ix >= 0 && ix < g.W {
									t, i := ((o*g.C+c)*g.KH+ki)*g.KW+kj, ((n*g.C+c)*g.H+iy)*g.W+ix
									dw[t] += d * float64(x[i])
									dx[i] += d * float64(w[t])
								}
							}
						}
					}
				}
			}
		}
	}
	return dw, dx
}

// TestConv compares every level's forward pass, weight gradient and input
// gradient with float64 references, and the C levels with each other bit
// for bit.
func TestConv(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	randn := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		return s
	}
	for _, g0 := range convGeoms {
		g := convFill(g0)
		nx, nw, ny := g.lens()
		x, w, b := randn(nx), randn(nw), randn(g.O)
		dy := randn(ny)
		want, mag := convRef(&g, x, w, b)
		wantW, wantX := convGradRef(&g, dy, x, w)
		fwd, wg, dg := ConvFast(&g)
		t.Logf("%+v: AVX-512 bodies forward %v, weight gradient %v, input gradient %v", g, fwd, wg, dg)
		var first, firstW, firstX []float32
		for _, lv := range append(levels(), -1) {
			y := make([]float32, ny+1)
			y[ny] = 7
			dw := make([]float32, nw)
			dx := make([]float32, nx+1)
			for i := range dx {
				dx[i] = 9 // every element written, the one past left alone
			}
			if lv < 0 {
				convForwardGo(&g, x, w, b, y)
				convGradWeightGo(&g, dy, x, dw, false)
				convGradInputGo(&g, dy, w, dx)
			} else if ny > 0 {
				convForward(lv, &g, x, w, b, y)
				convGradWeight(lv, &g, dy, x, dw, false)
				convGradInput(lv, &g, dy, w, dx)
			}
			name := fmt.Sprintf("level %d %+v", lv, g)
			if i, ok := closeMag(y, want, mag, 1e-6); !ok || y[ny] != 7 {
				t.Errorf("%s: y[%d] = %v, want %v", name, i, y[i], want[i])
			}
			if i, ok := close32(dw, wantW, 1e-4); !ok {
				t.Errorf("%s: dw[%d] = %v, want %v", name, i, dw[i], wantW[i])
			}
			if i, ok := close32(dx, wantX, 1e-4); (!ok || dx[nx] != 9) && ny > 0 {
				t.Errorf("%s: dx[%d] = %v, want %v", name, i, dx[i], wantX[i])
			}
			if lv >= 0 { // the C levels agree bit for bit
				if first == nil {
					first, firstW, firstX = y, dw, dx
				} else if !same(first, y) || !same(firstW, dw) || !same(firstX, dx) {
					t.Errorf("%s: differs from level 0", name)
				}
			}
		}
		// accumulate adds onto what is there
		dw := make([]float32, nw)
		for i := range dw {
			dw[i] = 1
		}
		ConvGradWeight(&g, dy, x, dw, true)
		plus := make([]float64, nw)
		for i := range plus {
			plus[i] = wantW[i] + 1
		}
		if i, ok := close32(dw, plus, 1e-4); !ok {
			t.Errorf("%+v accumulate: dw[%d] = %v, want %v", g, i, dw[i], plus[i])
		}
		// the exported entry points: an empty batch clears dx and dw
		if ny == 0 {
			dx := []float32{1, 2}
			ConvGradInput(&g, dy, w, dx[:0])
			ConvGradWeight(&g, dy, x, dw, false)
			for i, v := range dw {
				if v != 0 {
					t.Errorf("%+v: empty batch left dw[%d] = %v", g, i, v)
				}
			}
		}
	}
}

// ringSample returns planes of h×w normal values whose first and last rows
// and columns hold NaN, ±Inf or -0 at every other element or so. A sum
// over a kernel column or row that reads none of them stays finite (of a
// weight gradient without padding: the taps of the kernel's inner rows and
// columns), so that a lane past a plane which multiplies one of them into
// such a sum shows.
func ringSample(r *rand.Rand, planes, h, w int) []float32 {
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1))}
	s := make([]float32, planes*h*w)
	for i := range s {
		if iy, ix := i/w%h, i%w; (iy == 0 || iy == h-1 || ix == 0 || ix == w-1) && r.IntN(2) == 0 {
			s[i] = special[r.IntN(len(special))]
		} else {
			s[i] = float32(r.NormFloat64())
		}
	}
	return s
}

// TestConvNonFinite compares levels 0 and 1 bit for bit (NaN with NaN) on
// inputs with NaN, ±Inf and -0 on the planes' borders (ringSample): the
// forward pass and the weight gradient of such an x, the input gradient of
// such a dy. The AVX2 bodies load zeros in the lanes past a plane, from x
// and dy both, so that whatever lies there (a NaN of the next row, say)
// adds nothing; the products of the zero-bordered copies' padding are w·0
// or dy·0, with finite weights and a finite dy there, as the plain loops'
// skipped taps. (The AVX-512 bodies multiply dy's zeros past a plane by what
// x holds there, so level 2 is not held to this.)
func TestConvNonFinite(t *testing.T) {
	if Level() < 1 {
		t.Skip("SKIP: no AVX2 here (or no cgo): level 1 does not run")
	}
	r := rand.New(rand.NewPCG(19, 20))
	randn := func(n int) []float32 { return normals(r, n, 0, 1) }
	for _, g0 := range convGeoms {
		g := convFill(g0)
		nx, nw, ny := g.lens()
		if ny == 0 {
			continue
		}
		x, dy := ringSample(r, g.N*g.C, g.H, g.W), ringSample(r, g.N*g.O, g.OH, g.OW)
		w, b, dyw := randn(nw), randn(g.O), randn(ny)
		var ys, dws, dxs [2][]float32
		for lv := range 2 {
			ys[lv], dws[lv], dxs[lv] = make([]float32, ny), make([]float32, nw), make([]float32, nx)
			convForward(lv, &g, x, w, b, ys[lv])
			convGradWeight(lv, &g, dyw, x, dws[lv], false)
			convGradInput(lv, &g, dy, w, dxs[lv])
		}
		if !same(ys[0], ys[1]) {
			t.Errorf("%+v: forward at level 1 differs from level 0", g)
		}
		if !same(dws[0], dws[1]) {
			t.Errorf("%+v: weight gradient at level 1 differs from level 0", g)
		}
		if !same(dxs[0], dxs[1]) {
			t.Errorf("%+v: input gradient at level 1 differs from level 0", g)
		}
	}
}

// TestConvFastShapes pins which passes the AVX-512 bodies (level 2) and
// the AVX2 bodies (level 1) take on the MNIST Net's conv2 (the ops
// package's direct convolutions count on them).
func TestConvFastShapes(t *testing.T) {
	if Level() < 1 {
		t.Skip("SKIP: this CPU lacks AVX2 (or no cgo): the direct convolutions run their plain bodies")
	}
	g := convFill(ConvGeom{N: 64, C: 10, O: 20, H: 12, W: 12, KH: 5, KW: 5})
	if f, w, d := ConvFast(&g); !f || !w || !d {
		t.Errorf("conv2: fast forward %v, weight gradient %v, input gradient %v; want all", f, w, d)
	}
	g = convFill(ConvGeom{N: 64, C: 10, O: 20, H: 24, W: 24, KH: 5, KW: 5})
	if _, _, d := ConvFast(&g); d {
		t.Errorf("a 20-column output plane takes the fast input gradient")
	}
}

// BenchmarkConv runs each pass through the body this process takes for it
// (ConvFast says which are AVX-512).
func BenchmarkConv(b *testing.B) {
	for _, g0 := range []ConvGeom{
		{N: 64, C: 10, O: 20, H: 12, W: 12, KH: 5, KW: 5},
		{N: 64, C: 1, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1},
		{N: 64, C: 16, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1},
		{N: 64, C: 32, O: 32, H: 14, W: 14, KH: 3, KW: 3, P: 1},
		{N: 64, C: 64, O: 64, H: 7, W: 7, KH: 3, KW: 3, P: 1},
		{N: 64, C: 16, O: 32, H: 28, W: 28, KH: 3, KW: 3, P: 1, S: 2},
		{N: 64, C: 32, O: 64, H: 14, W: 14, KH: 3, KW: 3, P: 1, S: 2},
	} {
		g := convFill(g0)
		nx, nw, ny := g.lens()
		x, w, y := make([]float32, nx), make([]float32, nw), make([]float32, ny)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i := range w {
			w[i] = float32(i%5) - 2
		}
		flop := float64(2 * g.N * g.O * g.OH * g.OW * g.C * g.KH * g.KW)
		name := fmt.Sprintf("C%d_O%d_%dx%d_k%d_s%d", g.C, g.O, g.H, g.W, g.KH, g.stride())
		run := func(pass string, fn func()) {
			b.Run(name+"/"+pass, func(b *testing.B) {
				for b.Loop() {
					fn()
				}
				b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*g.N), "µs/sample")
			})
		}
		run("forward", func() { ConvForward(&g, x, w, nil, y) })
		run("grad_weight", func() { ConvGradWeight(&g, y, x, w, false) })
		run("grad_input", func() { ConvGradInput(&g, y, w, x) })
	}
}
