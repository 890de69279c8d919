package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestConvPoolGrad checks ConvPoolGrad at every level against the unfused
// kernels of that level (ReLUGrad, MaxPool2x2Grad into the whole dense
// gradient, ConvGradWeight, BiasGrad), bit for bit: kernels 5 and 3 wide
// (sixteen and eight partial lanes), padding (the AVX-512 bodies' bordered
// copies), a kernel 7 wide (the loops of level 1 at level 2), odd planes,
// with and without the ReLU and the bias, overwriting and accumulating, on
// batches of 0, 1, 15, 16, 17 and 40 samples (one, a full and several
// chunks).
func TestConvPoolGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, base := range []ConvGeom{
		{C: 1, O: 10, H: 28, W: 28, KH: 5, KW: 5},      // the MNIST Net's conv1
		{C: 1, O: 3, H: 9, W: 8, KH: 3, KW: 3, P: 1},   // eight lanes, padding
		{C: 1, O: 4, H: 11, W: 21, KH: 5, KW: 5, P: 2}, // 21 columns, odd planes
		{C: 1, O: 5, H: 30, W: 17, KH: 7, KW: 7, P: 3}, // 7 wide: the loops
		{C: 1, O: 5, H: 20, W: 32, KH: 3, KW: 3, P: 1}, // 32 columns: sixteen lanes
		{C: 1, O: 6, H: 32, W: 32, KH: 5, KW: 5},       // 28 columns: sixteen lanes
	} {
		for _, n := range []int{0, 1, 15, 16, 17, 40} {
			g := base
			g.N = n
			g.OH, g.OW = g.H+2*g.P-g.KH+1, g.W+2*g.P-g.KW+1
			if !ConvPoolGradOK(&g) {
				t.Fatalf("%+v: not taken", g)
			}
			ph, pw := g.OH/2, g.OW/2
			np, nc := n*g.O*ph*pw, n*g.O*g.OH*g.OW
			x := sample(r, n*g.H*g.W+1)[:n*g.H*g.W]
			conv := make([]float32, nc)
			for i := range conv {
				conv[i] = float32(r.NormFloat64())
			}
			y, idx := make([]float32, np), make([]int32, np)
			maxPool2x2Go(conv, y, idx, n*g.O, g.OH, g.OW, ph, pw)
			for i := range y {
				if i%3 == 0 {
					y[i] = -y[i] // ReLU's zeros: the clamp must drop their dy
				}
				y[i] = max(y[i], 0)
			}
			dy := make([]float32, np)
			for i := range dy {
				dy[i] = float32(r.NormFloat64())
			}
			work := make([]float32, ConvPoolGradWork(&g))
			for _, lv := range append(levels(), -1) {
				for _, relu := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						var yr []float32
						dz := dy
						if relu {
							yr = y
							dz = make([]float32, np)
							reluGradGo(dz, dy, nil, y)
						}
						dc := make([]float32, nc)
						init := func(s []float32) []float32 {
							for i := range s {
								s[i] = float32(i%7) - 3
							}
							return s
						}
						wantW, wantB := init(make([]float32, g.O*g.KH*g.KW)), init(make([]float32, g.O))
						gotW, gotB := init(make([]float32, len(wantW))), init(make([]float32, len(wantB)))
						if lv < 0 {
							maxPool2x2GradGo(dz, idx, dc, n*g.O, g.OH, g.OW, ph, pw)
							convGradWeightGo(&g, dc, x, wantW, acc)
							biasGradGo(dc, n, g.O, g.OH*g.OW, wantB, acc)
							convPoolGradGo(&g, dy, idx, yr, x, gotW, gotB, acc, work)
						} else {
							if n > 0 {
								maxPool2x2Grad(lv, dz, idx, dc, n*g.O, g.OH, g.OW, ph, pw)
								convGradWeight(lv, &g, dc, x, wantW, acc)
								biasGrad(lv, dc, n, g.O, g.OH*g.OW, wantB, acc)
								convPoolGrad(lv, &g, dy, idx, yr, x, gotW, gotB, acc, work)
							}
						}
						name := fmt.Sprintf("level %d relu %v accumulate %v %+v", lv, relu, acc, g)
						sameBits(t, name+" dw", gotW, wantW)
						sameBits(t, name+" db", gotB, wantB)
					}
				}
			}
			// Through the exported function (this process's level), with
			// no bias.
			gotW := make([]float32, g.O*g.KH*g.KW)
			ConvPoolGrad(&g, dy, idx, y, x, gotW, nil, false, work)
			dz, dc, wantW := make([]float32, np), make([]float32, nc), make([]float32, len(gotW))
			ReLUGrad(dz, dy, y)
			MaxPool2x2Grad(dz, idx, dc, n*g.O, g.OH, g.OW, ph, pw)
			ConvGradWeight(&g, dc, x, wantW, false)
			sameBits(t, fmt.Sprintf("ConvPoolGrad %+v", g), gotW, wantW)
		}
	}
}

// TestConvPoolGradOK: the Go predicate is the C one, over geometries that
// each exclusion takes.
func TestConvPoolGradOK(t *testing.T) {
	for _, c := range []int{1, 2} {
		for _, s := range []int{1, 2} {
			for _, o := range []int{8, 10, 32, 64} {
				for _, k := range []int{1, 3, 5} {
					for _, hw := range []int{6, 12, 17, 26, 28, 40} {
						g := ConvGeom{N: 2, C: c, O: o, H: hw, W: hw, KH: k, KW: k, S: s}
						g.OH, g.OW = (hw-k)/s+1, (hw-k)/s+1
						if got, want := ConvPoolGradOK(&g), convPoolGradOKC(&g); got != want {
							t.Errorf("%+v: Go %v, C %v", g, got, want)
						}
					}
				}
			}
		}
	}
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: [%d] = %v, want %v", name, i, got[i], want[i])
			return
		}
	}
}
