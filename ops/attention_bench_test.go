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
// by heads: the unfused path's permutes, narrows and their gradients are
// left out, in its favour), alternating in one run, and reports
// unfused_over_fused: the unfused time over the fused (above 1: the fused
// op is faster). "gpt" is the GPT example's shape (batch 32 on one
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
			fused()
			unfused()
			var tf, tu time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first, so the machine's drift falls
				// on both.
				first, second, t1, t2 := fused, unfused, &tf, &tu
				if i%2 == 1 {
					first, second, t1, t2 = unfused, fused, &tu, &tf
				}
				t0 := time.Now()
				first()
				*t1 += time.Since(t0)
				t0 = time.Now()
				second()
				*t2 += time.Since(t0)
			}
			b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N)/1e3, "fused_µs/op")
			b.ReportMetric(float64(tu.Nanoseconds())/float64(b.N)/1e3, "unfused_µs/op")
			b.ReportMetric(float64(tu)/float64(tf), "unfused_over_fused")
		})
	}
}
