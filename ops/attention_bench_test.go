package ops

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAttention times one forward and backward pass of causal
// attention, fused (Attention, AttentionGrad) and unfused (the kernels
// the unfused path runs for the heads' core: batch_matmul, scale,
// softmax, batch_matmul, and their gradients, on q, k and v already split
// by heads; the unfused path's permutes, narrows and their gradients are
// timed apart), alternating in one run, and reports unfused_over_fused:
// the unfused core's time over the fused (above 1: the fused op is
// faster), and unfused_plan_over_fused: the same with everything else the
// unfused plan runs for the heads (the permute to heads, the narrows of q,
// k and v, the join's permute, their gradients and the adds of the three
// narrow gradients). "gpt" is the GPT example's shape (batch 32 on one
// device, T 64, 4 heads of 32); "long" a longer sequence (T 512).
//
//	go test -run '^$' -bench Attention -benchtime 20x ./ops
func BenchmarkAttention(b *testing.B) {
	for _, tc := range []struct {
		name        string
		n, t, h, dh int
		causal      bool
	}{
		{"gpt", 32, 64, 4, 32, true},
		{"long", 2, 512, 4, 32, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(9, 10))
			rnd := func(shape ...int) *Buf[float32] { return normalBuf[float32](r, shape) }
			n, t, h, dh := tc.n, tc.t, tc.h, tc.dh
			a := &Attrs{Causal: tc.causal}
			qkv, do := rnd(n, t, 3, h, dh), rnd(n, t, h*dh)
			o, lse, dqkv := rnd(n, t, h*dh), rnd(n, h, t), rnd(n, t, 3, h, dh)
			bh := n * h
			q, k, v, dob := rnd(bh, t, dh), rnd(bh, t, dh), rnd(bh, t, dh), rnd(bh, t, dh)
			s, p, dp, ds := rnd(bh, t, t), rnd(bh, t, t), rnd(bh, t, t), rnd(bh, t, t)
			ob, dq, dk, dv := rnd(bh, t, dh), rnd(bh, t, dh), rnd(bh, t, dh), rnd(bh, t, dh)
			ws := max(Workspace(Attention, a, [][]int{qkv.Shape}, [][]int{o.Shape, lse.Shape}),
				Workspace(AttentionGrad, a, [][]int{do.Shape, qkv.Shape, o.Shape, lse.Shape}, [][]int{qkv.Shape}))
			c := &Ctx[float32]{Work: make([]float32, ws)}
			kk := Kernels32
			sc := &Attrs{Alpha: 1 / math.Sqrt(float64(dh))}
			fused := func() {
				kk[Attention](c, a, []*Buf[float32]{qkv}, []*Buf[float32]{o, lse})
				kk[AttentionGrad](c, a, []*Buf[float32]{do, qkv, o, lse}, []*Buf[float32]{dqkv})
			}
			unfused := func() {
				kk[BatchMatMul](c, &Attrs{TransB: true}, []*Buf[float32]{q, k}, []*Buf[float32]{s})
				kk[Scale](c, sc, []*Buf[float32]{s}, []*Buf[float32]{s})
				kk[Softmax](c, a, []*Buf[float32]{s}, []*Buf[float32]{p})
				kk[BatchMatMul](c, &Attrs{}, []*Buf[float32]{p, v}, []*Buf[float32]{ob})
				kk[BatchMatMul](c, &Attrs{TransB: true}, []*Buf[float32]{dob, v}, []*Buf[float32]{dp})
				kk[BatchMatMul](c, &Attrs{TransA: true}, []*Buf[float32]{p, dob}, []*Buf[float32]{dv})
				kk[SoftmaxGrad](c, a, []*Buf[float32]{dp, p}, []*Buf[float32]{ds})
				kk[Scale](c, sc, []*Buf[float32]{ds}, []*Buf[float32]{ds})
				kk[BatchMatMul](c, &Attrs{}, []*Buf[float32]{ds, k}, []*Buf[float32]{dq})
				kk[BatchMatMul](c, &Attrs{TransA: true}, []*Buf[float32]{ds, q}, []*Buf[float32]{dk})
			}
			// The rest of what the unfused plan runs for the heads: the
			// permute to heads, the three narrows, the join's permute, and
			// their gradients (narrow_grad, the adds of the three, the
			// permutes back).
			heads, part, dheads := rnd(n, 3, h, t, dh), rnd(n, 1, h, t, dh), rnd(n, 3, h, t, dh)
			tmp, ojoin := rnd(n, 3, h, t, dh), rnd(n, t, h, dh)
			toHeads := &Attrs{Perm: [MaxPermRank]int8{0, 2, 3, 1, 4, 5}}
			fromHeads := &Attrs{Perm: [MaxPermRank]int8{0, 3, 1, 2, 4, 5}}
			join := &Attrs{Perm: [MaxPermRank]int8{0, 2, 1, 3, 4, 5}}
			ob4 := &Buf[float32]{Data: ob.Data, Shape: []int{n, h, t, dh}}
			rest := func() {
				kk[Permute](c, toHeads, []*Buf[float32]{qkv}, []*Buf[float32]{heads})
				for i := range 3 {
					kk[Narrow](c, &Attrs{Offset: i, Length: 1}, []*Buf[float32]{heads}, []*Buf[float32]{part})
				}
				kk[Permute](c, join, []*Buf[float32]{ob4}, []*Buf[float32]{ojoin})
				kk[Permute](c, join, []*Buf[float32]{ojoin}, []*Buf[float32]{ob4})
				kk[NarrowGrad](c, &Attrs{Offset: 0}, []*Buf[float32]{part}, []*Buf[float32]{dheads})
				for i := 1; i < 3; i++ {
					kk[NarrowGrad](c, &Attrs{Offset: i}, []*Buf[float32]{part}, []*Buf[float32]{tmp})
					kk[Add](c, &Attrs{}, []*Buf[float32]{dheads, tmp}, []*Buf[float32]{dheads})
				}
				kk[Permute](c, fromHeads, []*Buf[float32]{dheads}, []*Buf[float32]{dqkv})
			}
			fused()
			unfused()
			rest()
			var tf, tu, tr time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first, so the machine's drift falls
				// on both.
				t0 := time.Now()
				if i%2 == 0 {
					fused()
					tf += time.Since(t0)
					t0 = time.Now()
					unfused()
					tu += time.Since(t0)
					t0 = time.Now()
					rest()
					tr += time.Since(t0)
				} else {
					unfused()
					tu += time.Since(t0)
					t0 = time.Now()
					rest()
					tr += time.Since(t0)
					t0 = time.Now()
					fused()
					tf += time.Since(t0)
				}
			}
			b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N)/1e3, "fused_µs/op")
			b.ReportMetric(float64(tu.Nanoseconds())/float64(b.N)/1e3, "unfused_µs/op")
			b.ReportMetric(float64(tu)/float64(tf), "unfused_over_fused")
			b.ReportMetric(float64(tu+tr)/float64(tf), "unfused_plan_over_fused")
		})
	}
}
