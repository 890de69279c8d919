package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// attnCase is a gradient check of Attention on qkv of the given shape
// [N,T,3,H,dh], with buffers for capN samples.
func attnCase(name string, causal bool, qkv []int, capN int) gradCase {
	return gradCase{name: name, op: Attention, attrs: Attrs{Causal: causal}, in: [][]int{qkv}, capN: capN,
		bwd: []bwdStep{{op: AttentionGrad, args: []ref{dyOf(0), inOf(0), outOf(0), outOf(1)}, wrt: 0}}}
}

// attnHeadsCase is a gradient check of AttentionHeads on q, k and v of the
// given shape (dq only: TestAttentionHeadsGradients checks dk and dv).
func attnHeadsCase(name string, causal bool, alpha float64, shape []int, capN int) gradCase {
	return gradCase{name: name, op: AttentionHeads, attrs: Attrs{Causal: causal, Alpha: alpha}, in: [][]int{shape, shape, shape}, capN: capN,
		bwd: []bwdStep{{op: AttentionHeadsGrad, args: []ref{dyOf(0), inOf(0), inOf(1), inOf(2), outOf(0), outOf(1)}, wrt: 0}}}
}

// The attention checks join the table of gradient checks (TestGradCheck,
// TestKernelsDoNotAllocate, …): odd sizes, T = 1, and T past one CPU tile
// (attnTile) and not a multiple of it.
func init() {
	gradCases = append(gradCases,
		attnCase("attention/causal", true, []int{2, 5, 3, 3, 4}, 3),
		attnCase("attention/full", false, []int{3, 4, 3, 2, 3}, 0),
		attnCase("attention/causal-T1", true, []int{3, 1, 3, 1, 2}, 4),
		attnCase("attention/full-T1", false, []int{1, 1, 3, 3, 2}, 0),
		attnCase("attention/causal-two-tiles", true, []int{1, attnTile + 5, 3, 1, 2}, 2),
		attnCase("attention/full-two-tiles", false, []int{1, attnTile + 3, 3, 1, 1}, 0),
		attnHeadsCase("attention_heads/causal-4d", true, 0.5, []int{2, 3, 5, 4}, 3),
		attnHeadsCase("attention_heads/full-3d", false, 1, []int{3, 4, 3}, 0),
		attnHeadsCase("attention_heads/causal-two-tiles", true, 0.7, []int{1, attnTile + 6, 2}, 2),
	)
}

// attnGolden is one case of testdata/attention_golden.json.
type attnGolden struct {
	Name         string
	Shape        []int
	Causal       bool
	O, Lse, Dqkv *goldenTensor
}

// attnInputs fills qkv and do as testdata/gen_attention_golden.py does:
// qkv[i] = 1.5·sin(1.3·i + 0.5), do[i] = cos(0.7·i + 0.2).
func attnInputs[T Float](shape []int) (qkv, do *Buf[T]) {
	qkv = zeroBuf[T](shape)
	for i := range qkv.Data {
		qkv.Data[i] = T(1.5 * math.Sin(1.3*float64(i)+0.5))
	}
	do = zeroBuf[T]([]int{shape[0], shape[1], shape[3] * shape[4]})
	for i := range do.Data {
		do.Data[i] = T(math.Cos(0.7*float64(i) + 0.2))
	}
	return qkv, do
}

// TestAttentionMatchesPyTorch compares Attention and AttentionGrad with
// PyTorch 1.13's explicit softmax(q·kᵀ/√dh + mask)·v and its autograd
// (testdata/gen_attention_golden.py), causal and not, on odd sizes, T =
// 1, T past one tile, head dimensions 24 and 64.
func TestAttentionMatchesPyTorch(t *testing.T) {
	var g struct {
		Torch string
		Cases []attnGolden
	}
	loadJSON(t, "attention_golden.json", &g)
	if len(g.Cases) == 0 {
		t.Fatal("attention_golden.json has no cases")
	}
	for _, gc := range g.Cases {
		t.Run(gc.Name+"/float64", func(t *testing.T) { runAttnGolden(t, &gc, Kernels64, 1e-12) })
		t.Run(gc.Name+"/float32", func(t *testing.T) { runAttnGolden(t, &gc, Kernels32, 2e-5) })
	}
}

func runAttnGolden[T Float](t *testing.T, g *attnGolden, k map[Op]Kernel[T], tol float64) {
	a := &Attrs{Causal: g.Causal}
	out, err := Infer(Attention, a, [][]int{g.Shape})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out[0], g.O.Shape) || !slices.Equal(out[1], g.Lse.Shape) {
		t.Fatalf("Infer gives %v, PyTorch's o and lse are %v and %v", out, g.O.Shape, g.Lse.Shape)
	}
	c := &Ctx[T]{LossScale: 1, Step: 1}
	qkv, do := attnInputs[T](g.Shape)
	o, lse := zeroBuf[T](out[0]), zeroBuf[T](out[1])
	call(k, c, Attention, a, []*Buf[T]{qkv}, []*Buf[T]{o, lse})
	expectClose(t, "o", o, g.O, tol)
	expectClose(t, "lse", lse, g.Lse, tol)
	dqkv := zeroBuf[T](g.Shape)
	call(k, c, AttentionGrad, a, []*Buf[T]{do, qkv, o, lse}, []*Buf[T]{dqkv})
	expectClose(t, "dqkv", dqkv, g.Dqkv, tol)
}

// TestAttentionMatchesUnfused runs the fused op and the ops the unfused
// path builds (batch_matmul, scale, softmax, batch_matmul and their
// gradients) on the same float32 inputs, forward and backward, at the
// engine's GPT example's size and at odd ones: the same bits when T fits
// one tile, within 2e-5 beyond.
func TestAttentionMatchesUnfused(t *testing.T) {
	for _, tc := range []struct {
		causal bool
		shape  []int
	}{
		{true, []int{2, 64, 3, 4, 32}},
		{true, []int{1, 70, 3, 3, 24}},
		{false, []int{3, 9, 3, 1, 5}},
	} {
		r := rand.New(rand.NewPCG(3, 5))
		n, tt, h, dh := tc.shape[0], tc.shape[1], tc.shape[3], tc.shape[4]
		qkv := zeroBuf[float32](tc.shape)
		for i := range qkv.Data {
			qkv.Data[i] = float32(2*r.Float64() - 1)
		}
		do := zeroBuf[float32]([]int{n, tt, h * dh})
		for i := range do.Data {
			do.Data[i] = float32(2*r.Float64() - 1)
		}
		a := &Attrs{Causal: tc.causal}
		c := &Ctx[float32]{LossScale: 1, Step: 1}
		o, lse := zeroBuf[float32]([]int{n, tt, h * dh}), zeroBuf[float32]([]int{n, h, tt})
		call(Kernels32, c, Attention, a, []*Buf[float32]{qkv}, []*Buf[float32]{o, lse})
		dqkv := zeroBuf[float32](tc.shape)
		call(Kernels32, c, AttentionGrad, a, []*Buf[float32]{do, qkv, o, lse}, []*Buf[float32]{dqkv})

		// The unfused path on [N·H, T, dh] matrices.
		part := func(src []float32, i, hd, which, ld int) func(r, j int) *float32 {
			return func(r, j int) *float32 { return &src[(i*tt+r)*ld+which*h*dh+hd*dh+j] }
		}
		bh := n * h
		q, k, v := zeroBuf[float32]([]int{bh, tt, dh}), zeroBuf[float32]([]int{bh, tt, dh}), zeroBuf[float32]([]int{bh, tt, dh})
		dob := zeroBuf[float32]([]int{bh, tt, dh})
		for i := range n {
			for hd := range h {
				for rr := range tt {
					for j := range dh {
						at := ((i*h+hd)*tt+rr)*dh + j
						q.Data[at] = *part(qkv.Data, i, hd, 0, 3*h*dh)(rr, j)
						k.Data[at] = *part(qkv.Data, i, hd, 1, 3*h*dh)(rr, j)
						v.Data[at] = *part(qkv.Data, i, hd, 2, 3*h*dh)(rr, j)
						dob.Data[at] = *part(do.Data, i, hd, 0, h*dh)(rr, j)
					}
				}
			}
		}
		s := zeroBuf[float32]([]int{bh, tt, tt})
		call(Kernels32, c, BatchMatMul, &Attrs{TransB: true}, []*Buf[float32]{q, k}, []*Buf[float32]{s})
		call(Kernels32, c, Scale, &Attrs{Alpha: 1 / math.Sqrt(float64(dh))}, []*Buf[float32]{s}, []*Buf[float32]{s})
		p := zeroBuf[float32]([]int{bh, tt, tt})
		call(Kernels32, c, Softmax, a, []*Buf[float32]{s}, []*Buf[float32]{p})
		ob := zeroBuf[float32]([]int{bh, tt, dh})
		call(Kernels32, c, BatchMatMul, &Attrs{}, []*Buf[float32]{p, v}, []*Buf[float32]{ob})
		dp, dv := zeroBuf[float32]([]int{bh, tt, tt}), zeroBuf[float32]([]int{bh, tt, dh})
		call(Kernels32, c, BatchMatMul, &Attrs{TransB: true}, []*Buf[float32]{dob, v}, []*Buf[float32]{dp})
		call(Kernels32, c, BatchMatMul, &Attrs{TransA: true}, []*Buf[float32]{p, dob}, []*Buf[float32]{dv})
		ds := zeroBuf[float32]([]int{bh, tt, tt})
		call(Kernels32, c, SoftmaxGrad, a, []*Buf[float32]{dp, p}, []*Buf[float32]{ds})
		call(Kernels32, c, Scale, &Attrs{Alpha: 1 / math.Sqrt(float64(dh))}, []*Buf[float32]{ds}, []*Buf[float32]{ds})
		dq, dk := zeroBuf[float32]([]int{bh, tt, dh}), zeroBuf[float32]([]int{bh, tt, dh})
		call(Kernels32, c, BatchMatMul, &Attrs{}, []*Buf[float32]{ds, k}, []*Buf[float32]{dq})
		call(Kernels32, c, BatchMatMul, &Attrs{TransA: true}, []*Buf[float32]{ds, q}, []*Buf[float32]{dk})

		worst := [4]float64{}
		for i := range n {
			for hd := range h {
				for rr := range tt {
					for j := range dh {
						at := ((i*h+hd)*tt+rr)*dh + j
						for w, pair := range [4][2]float32{
							{*part(o.Data, i, hd, 0, h*dh)(rr, j), ob.Data[at]},
							{*part(dqkv.Data, i, hd, 0, 3*h*dh)(rr, j), dq.Data[at]},
							{*part(dqkv.Data, i, hd, 1, 3*h*dh)(rr, j), dk.Data[at]},
							{*part(dqkv.Data, i, hd, 2, 3*h*dh)(rr, j), dv.Data[at]},
						} {
							worst[w] = max(worst[w], math.Abs(float64(pair[0]-pair[1])))
						}
					}
				}
			}
		}
		t.Logf("causal %v %v: max |fused − unfused| o %.2g dq %.2g dk %.2g dv %.2g", tc.causal, tc.shape, worst[0], worst[1], worst[2], worst[3])
		for w, name := range []string{"o", "dq", "dk", "dv"} {
			if tt <= attnTile && worst[w] != 0 {
				t.Errorf("causal %v %v: %s differs from the unfused path by %g: want the same bits in one tile", tc.causal, tc.shape, name, worst[w])
			}
			if !(worst[w] <= 2e-5) {
				t.Errorf("causal %v %v: %s differs from the unfused path by %g", tc.causal, tc.shape, name, worst[w])
			}
		}
	}
}

// TestAttentionMemoryIsLinear holds the CPU kernels' scratch to O(T): no
// T×T matrix at any sequence length.
func TestAttentionMemoryIsLinear(t *testing.T) {
	for _, tt := range []int{1, 63, 64, 65, 1024, 8192} {
		shape := []int{2, tt, 3, 4, 32}
		out, err := Infer(Attention, &Attrs{Causal: true}, [][]int{shape})
		if err != nil {
			t.Fatal(err)
		}
		fw := Workspace(Attention, &Attrs{}, [][]int{shape}, out)
		bw := Workspace(AttentionGrad, &Attrs{}, [][]int{out[0], shape, out[0], out[1]}, [][]int{shape})
		if limit := 2*attnTile*tt + 2*attnTile; fw > limit || bw > limit {
			t.Errorf("T = %d: workspace %d forward, %d backward elements, want at most %d (2·%d·T + %d)", tt, fw, bw, limit, attnTile, 2*attnTile)
		}
	}
}

// TestAttentionShapeErrors checks that a qkv that is not [N T 3 H dh] is
// refused with a message saying what is expected.
func TestAttentionShapeErrors(t *testing.T) {
	for _, s := range [][]int{{2, 5, 12}, {2, 5, 2, 3, 4}, {2, 0, 3, 1, 4}, {2, 5, 3, 0, 4}, {2, 5, 3, 1, AttentionMaxHeadDim + 1}} {
		_, err := Infer(Attention, &Attrs{}, [][]int{s})
		if err == nil {
			t.Errorf("qkv %v: no error", s)
			continue
		}
		t.Logf("qkv %v: %v", s, err)
	}
}

// splitQKV copies packed qkv[N,T,3,H,dh] into q, k, v [N,H,T,dh] (or
// back, with back set: dq, dk, dv into dqkv).
func splitQKV[T Float](qkv []T, q, k, v []T, shape []int, back bool) {
	n, t, h, dh := shape[0], shape[1], shape[3], shape[4]
	for i := range n {
		for r := range t {
			for part, x := range [][]T{q, k, v} {
				for hd := range h {
					for j := range dh {
						p := (((i*t+r)*3+part)*h+hd)*dh + j
						u := ((i*h+hd)*t+r)*dh + j
						if back {
							qkv[p] = x[u]
						} else {
							x[u] = qkv[p]
						}
					}
				}
			}
		}
	}
}

// TestAttentionHeadsMatchesPyTorch runs AttentionHeads (q, k and v apart,
// [N,H,T,dh], scale 1/√dh) on testdata/attention_golden.json's cases and
// compares its o, lse and dq, dk, dv with PyTorch's.
func TestAttentionHeadsMatchesPyTorch(t *testing.T) {
	var g struct {
		Torch string
		Cases []attnGolden
	}
	loadJSON(t, "attention_golden.json", &g)
	for _, gc := range g.Cases {
		t.Run(gc.Name+"/float64", func(t *testing.T) { runAttnHeadsGolden(t, &gc, Kernels64, 1e-12) })
		t.Run(gc.Name+"/float32", func(t *testing.T) { runAttnHeadsGolden(t, &gc, Kernels32, 2e-5) })
	}
}

func runAttnHeadsGolden[T Float](t *testing.T, g *attnGolden, k map[Op]Kernel[T], tol float64) {
	n, tt, h, dh := g.Shape[0], g.Shape[1], g.Shape[3], g.Shape[4]
	heads := []int{n, h, tt, dh}
	a := &Attrs{Causal: g.Causal, Alpha: 1 / math.Sqrt(float64(dh))}
	qkv, do := attnInputs[T](g.Shape)
	q, kk, v := zeroBuf[T](heads), zeroBuf[T](heads), zeroBuf[T](heads)
	splitQKV(qkv.Data, q.Data, kk.Data, v.Data, g.Shape, false)
	dob := zeroBuf[T](heads) // do [N,T,H·dh] as [N,H,T,dh]
	for i := range n {
		for r := range tt {
			for hd := range h {
				copy(dob.Data[((i*h+hd)*tt+r)*dh:][:dh], do.Data[(i*tt+r)*h*dh+hd*dh:][:dh])
			}
		}
	}
	c := &Ctx[T]{LossScale: 1, Step: 1}
	o, lse := zeroBuf[T](heads), zeroBuf[T]([]int{n, h, tt})
	call(k, c, AttentionHeads, a, []*Buf[T]{q, kk, v}, []*Buf[T]{o, lse})
	expectClose(t, "lse", lse, g.Lse, tol)
	ob := zeroBuf[T](g.O.Shape)
	for i := range n {
		for r := range tt {
			for hd := range h {
				copy(ob.Data[(i*tt+r)*h*dh+hd*dh:][:dh], o.Data[((i*h+hd)*tt+r)*dh:][:dh])
			}
		}
	}
	expectClose(t, "o", ob, g.O, tol)
	dq, dk, dv := zeroBuf[T](heads), zeroBuf[T](heads), zeroBuf[T](heads)
	call(k, c, AttentionHeadsGrad, a, []*Buf[T]{dob, q, kk, v, o, lse}, []*Buf[T]{dq, dk, dv})
	dqkv := zeroBuf[T](g.Shape)
	splitQKV(dqkv.Data, dq.Data, dk.Data, dv.Data, g.Shape, true)
	expectClose(t, "dqkv", dqkv, g.Dqkv, tol)
}

// TestAttentionHeadsGradients checks all three of AttentionHeadsGrad's
// outputs (the table of gradient checks sees dq only) by central
// differences of Σ do·o in float64, causal and not, one tile and two.
func TestAttentionHeadsGradients(t *testing.T) {
	for _, tc := range []struct {
		causal bool
		alpha  float64
		shape  []int
	}{
		{true, 0.5, []int{2, 2, 5, 3}},
		{false, 1.3, []int{1, 6, 4}},
		{true, 0.4, []int{1, attnTile + 3, 2}},
	} {
		r := rand.New(rand.NewPCG(8, 9))
		a := &Attrs{Causal: tc.causal, Alpha: tc.alpha}
		in := [3]*Buf[float64]{}
		for i := range in {
			in[i] = zeroBuf[float64](tc.shape)
			for j := range in[i].Data {
				in[i].Data[j] = 2*r.Float64() - 1
			}
		}
		do := zeroBuf[float64](tc.shape)
		for j := range do.Data {
			do.Data[j] = 2*r.Float64() - 1
		}
		lseShape := tc.shape[:len(tc.shape)-1]
		c := &Ctx[float64]{LossScale: 1, Step: 1}
		o, lse := zeroBuf[float64](tc.shape), zeroBuf[float64](lseShape)
		forward := func() float64 {
			call(Kernels64, c, AttentionHeads, a, in[:], []*Buf[float64]{o, lse})
			var s float64
			for j, v := range o.Data {
				s += v * do.Data[j]
			}
			return s
		}
		forward()
		grads := [3]*Buf[float64]{zeroBuf[float64](tc.shape), zeroBuf[float64](tc.shape), zeroBuf[float64](tc.shape)}
		call(Kernels64, c, AttentionHeadsGrad, a, []*Buf[float64]{do, in[0], in[1], in[2], o, lse}, grads[:])
		const h = 1e-5
		for i, name := range []string{"dq", "dk", "dv"} {
			worst := 0.0
			for j := range in[i].Data {
				orig := in[i].Data[j]
				in[i].Data[j] = orig + h
				plus := forward()
				in[i].Data[j] = orig - h
				minus := forward()
				in[i].Data[j] = orig
				num := (plus - minus) / (2 * h)
				worst = max(worst, math.Abs(num-grads[i].Data[j])/(1+math.Abs(num)))
			}
			t.Logf("causal %v %v: %s max relative error %.2g", tc.causal, tc.shape, name, worst)
			if worst > 1e-7 {
				t.Errorf("causal %v %v: %s differs from finite differences by %g", tc.causal, tc.shape, name, worst)
			}
		}
	}
}
