package gemm

import (
	"math/rand"
	"testing"
	"time"
)

// netShapes are the float32 GEMMs one training step of
// scripts/examples/mnist.star issues per device at a per-device batch of 64
// (see ops/conv.go and ops/linear.go): convolutions are im2col over the
// whole batch, W[O×K]·col[K×L] with K = C·KH·KW and L = N·OH·OW. conv1's
// input gradient is never computed (its input is the data). fc1 and fc2
// forward accumulate onto the bias (beta 1).
var netShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
	beta           float32
}{
	{"conv1_fwd", false, false, 10, 36864, 25, 0},
	{"conv1_wgrad", false, true, 10, 25, 36864, 0},
	{"conv2_fwd", false, false, 20, 4096, 250, 0},
	{"conv2_igrad", true, false, 250, 4096, 20, 0},
	{"conv2_wgrad", false, true, 20, 250, 4096, 0},
	{"fc1_fwd", false, true, 64, 50, 320, 1},
	{"fc1_dx", false, false, 64, 320, 50, 0},
	{"fc1_dw", true, false, 50, 320, 64, 0},
	{"fc2_fwd", false, true, 64, 10, 50, 1},
	{"fc2_dx", false, false, 64, 50, 10, 0},
	{"fc2_dw", true, false, 10, 50, 64, 0},
	// Since convolutions lower a chunk of samples at a time (ops/conv.go
	// convChunk), their GEMMs are narrower: the MNIST Net's at the chunk,
	// then resnet_fashion.star's 3×3 layers per chunk (layer1: 16
	// channels on 28×28, one sample; layer3: 64 channels on 7×7, six
	// samples) and the GPT example's projections (32×64 tokens, d 128).
	{"conv1_fwd_chunk", false, false, 10, 9 * 576, 25, 0},
	{"conv2_fwd_chunk", false, false, 20, 8 * 64, 250, 0},
	{"conv2_igrad_chunk", true, false, 250, 8 * 64, 20, 0},
	{"conv2_wgrad_chunk", false, true, 20, 250, 8 * 64, 1},
	{"res_l1_fwd", false, false, 16, 784, 144, 0},
	{"res_l1_igrad", true, false, 144, 784, 16, 0},
	{"res_l1_wgrad", false, true, 16, 144, 784, 1},
	{"res_l3_fwd", false, false, 64, 294, 576, 0},
	{"res_l3_igrad", true, false, 576, 294, 64, 0},
	{"res_l3_wgrad", false, true, 64, 576, 294, 1},
	{"gpt_qkv_fwd", false, true, 2048, 384, 128, 1},
	{"gpt_mlp_fwd", false, true, 2048, 512, 128, 1},
	{"gpt_mlp_dx", false, false, 2048, 128, 512, 0},
	{"gpt_mlp_dw", true, false, 512, 128, 2048, 0},
	{"gpt_attn_scores", false, true, 64, 64, 32, 0},
	{"gpt_attn_av", false, false, 64, 32, 64, 0},
	{"gpt_attn_dv", true, false, 64, 32, 64, 0},
	{"gpt_attn_dscores", false, true, 64, 64, 32, 0},
	{"512cube_NN", false, false, 512, 512, 512, 0},
	{"512cube_TN", true, false, 512, 512, 512, 0},
	{"512cube_NT", false, true, 512, 512, 512, 0},
}

type sgemmFunc = func(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int)

// BenchmarkSGEMMShapes measures, for each of the Net's GEMM shapes and for
// 512³, the hand-written kernel (hand: sgemmHand), OpenBLAS (blas, with
// -tags openblas), the entry point the ops call (gemm: Gemm, which
// dispatches between them) and the core's FMA peak (peak: fmaPeak),
// interleaved in chunks of about 1 MFLOP each inside every iteration, so
// that all of them see the same machine load. It reports GFLOP/s for each
// and the ratios; ns/op is one chunk of each.
//
//	go test -tags openblas -run '^$' -bench SGEMMShapes -count 3 ./ops/internal/gemm
func BenchmarkSGEMMShapes(b *testing.B) {
	if haveOpenBLAS {
		b.Logf("OpenBLAS: %s", openBLASInfo())
	}
	b.Logf("C kernel level %d (2 AVX-512, 1 AVX2+FMA, 0 portable, -1 none)", cpuLevel)
	for _, s := range netShapes {
		b.Run(s.name, func(b *testing.B) { benchVersus(b, s.transA, s.transB, s.m, s.n, s.k, s.beta) })
	}
}

// benchVersus is one row of BenchmarkSGEMMShapes.
func benchVersus(b *testing.B, transA, transB bool, m, n, k int, beta float32) {
	rng := rand.New(rand.NewSource(7))
	p := newProblem(rng, transA, transB, m, n, k, float32(1), beta, 0)
	c := append([]float32(nil), p.c...)
	flops := 2 * float64(m) * float64(n) * float64(k)
	reps := max(1, int(1e6/flops))
	peakIters := max(1, int(float64(reps)*flops/768))
	chunk := func(f sgemmFunc) time.Duration {
		t0 := time.Now()
		for range reps {
			f(transA, transB, m, n, k, 1, p.a, p.lda, p.b, p.ldb, beta, c, p.ldc)
		}
		return time.Since(t0)
	}
	var tHand, tBLAS, tGemm, tPeak time.Duration
	var peakFlops float64
	var sink float32
	for b.Loop() {
		tHand += chunk(sgemmHand)
		tGemm += chunk(Gemm[float32])
		if haveOpenBLAS {
			tBLAS += chunk(sgemmOpenBLAS)
		}
		t0 := time.Now()
		f, x := fmaPeak(peakIters)
		tPeak += time.Since(t0)
		peakFlops += f
		sink += x
	}
	if sink == 1.5 { // keep the peak loop's result alive
		b.Log(sink)
	}
	done := flops * float64(reps) * float64(b.N)
	hand := done / tHand.Seconds() / 1e9
	b.ReportMetric(hand, "hand_GFLOP/s")
	b.ReportMetric(done/tGemm.Seconds()/1e9, "gemm_GFLOP/s")
	peak := 0.0
	if peakFlops > 0 {
		peak = peakFlops / tPeak.Seconds() / 1e9
		b.ReportMetric(peak, "peak_GFLOP/s")
		b.ReportMetric(hand/peak, "hand/peak")
	}
	if haveOpenBLAS {
		blas := done / tBLAS.Seconds() / 1e9
		b.ReportMetric(blas, "blas_GFLOP/s")
		b.ReportMetric(blas/hand, "blas/hand")
		if peak > 0 {
			b.ReportMetric(blas/peak, "blas/peak")
		}
	}
}
