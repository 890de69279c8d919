package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var conv1Geoms = []Conv1Geom{
	{N: 3, O: 10, H: 28, W: 28, KH: 5, KW: 5, P: 0}, // the MNIST Net's conv1
	{N: 2, O: 16, H: 28, W: 28, KH: 3, KW: 3, P: 1}, // resnet_fashion.star's stem
	{N: 2, O: 3, H: 7, W: 37, KH: 3, KW: 5, P: 2},
	{N: 1, O: 2, H: 2, W: 3, KH: 5, KW: 5, P: 3}, // windows mostly padding
	{N: 2, O: 1, H: 17, W: 33, KH: 1, KW: 1, P: 0},
	{N: 0, O: 4, H: 5, W: 5, KH: 3, KW: 3, P: 1},
}

func conv1Fill(g Conv1Geom) Conv1Geom {
	g.OH, g.OW = g.H+2*g.P-g.KH+1, g.W+2*g.P-g.KW+1
	return g
}

// conv1Ref is the convolution in float64.
func conv1Ref(g *Conv1Geom, x, w, b []float32) []float64 {
	y := make([]float64, g.N*g.O*g.OH*g.OW)
	for n := range g.N {
		for o := range g.O {
			for oy := range g.OH {
				for ox := range g.OW {
					s := 0.0
					if b != nil {
						s = float64(b[o])
					}
					for ki := range g.KH {
						for kj := range g.KW {
							iy, ix := oy+ki-g.P, ox+kj-g.P
							if iy >= 0 && iy < g.H && ix >= 0 && ix < g.W {
								s += float64(w[(o*g.KH+ki)*g.KW+kj]) * float64(x[(n*g.H+iy)*g.W+ix])
							}
						}
					}
					y[((n*g.O+o)*g.OH+oy)*g.OW+ox] = s
				}
			}
		}
	}
	return y
}

func close32(got []float32, want []float64, tol float64) (int, bool) {
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol*(1+math.Abs(want[i])) {
			return i, false
		}
	}
	return 0, true
}

func TestConv1(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	randn := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		return s
	}
	for _, g0 := range conv1Geoms {
		g := conv1Fill(g0)
		x, w, b := randn(g.N*g.H*g.W), randn(g.O*g.KH*g.KW), randn(g.O)
		dy := randn(g.N * g.O * g.OH * g.OW)
		ny, nw := g.N*g.O*g.OH*g.OW, g.O*g.KH*g.KW
		want := conv1Ref(&g, x, w, b)
		// dw as a reference: ⟨dy, conv(x, e_tap)⟩ in float64.
		wantW := make([]float64, nw)
		for tp := range nw {
			e := make([]float32, nw)
			e[tp] = 1
			yt := conv1Ref(&g, x, e, nil)
			for i := range yt {
				wantW[tp] += yt[i] * float64(dy[i])
			}
		}
		var first, firstW []float32
		for _, lv := range append(levels(), -1) {
			y := make([]float32, ny+1)
			y[ny] = 7
			dw := make([]float32, nw)
			if lv < 0 {
				conv1ForwardGo(&g, x, w, b, y)
				conv1GradWeightGo(&g, dy, x, dw, false)
			} else {
				conv1Forward(lv, &g, x, w, b, y)
				conv1GradWeight(lv, &g, dy, x, dw, false)
			}
			name := fmt.Sprintf("level %d %+v", lv, g)
			if i, ok := close32(y, want, 1e-5); !ok || y[ny] != 7 {
				t.Errorf("%s: y[%d] = %v, want %v", name, i, y[i], want[i])
			}
			if i, ok := close32(dw, wantW, 1e-4); !ok {
				t.Errorf("%s: dw[%d] = %v, want %v", name, i, dw[i], wantW[i])
			}
			if lv >= 0 { // the C levels agree bit for bit
				if first == nil {
					first, firstW = y, dw
				} else if !same(first, y) || !same(firstW, dw) {
					t.Errorf("%s: differs from level 0", name)
				}
			}
		}
		// accumulate adds onto what is there
		dw := make([]float32, nw)
		for i := range dw {
			dw[i] = 1
		}
		Conv1GradWeight(&g, dy, x, dw, true)
		plus := make([]float64, nw)
		for i := range plus {
			plus[i] = wantW[i] + 1
		}
		if i, ok := close32(dw, plus, 1e-4); !ok {
			t.Errorf("%+v accumulate: dw[%d] = %v, want %v", g, i, dw[i], plus[i])
		}
	}
}
