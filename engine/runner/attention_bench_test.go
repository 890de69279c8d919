package runner

import (
	"os"
	"strings"
	"testing"
)

// BenchmarkGPTAttention trains the GPT example (scripts/examples/
// gpt_text.star: 4 blocks, T 64, d_model 128, 4 heads, batch 32 on one
// device, AdamW) with the fused attention (the default) and with
// nn.multihead_attention(..., fused = False), alternating in rounds in one
// run, and reports fused_over_unfused: the fused plan's samples/s over the
// unfused one's (above 1: fusion pays). One iteration is one optimizer
// step of each; it needs Debian's fortunes package, as the example does.
//
//	go test -run '^$' -bench GPTAttention -benchtime 60x ./engine/runner
func BenchmarkGPTAttention(b *testing.B) {
	src, err := os.ReadFile("../../scripts/examples/gpt_text.star")
	if err != nil {
		b.Fatal(err)
	}
	const arg = "causal = True,"
	if !strings.Contains(string(src), arg) {
		b.Fatalf("gpt_text.star no longer says %q", arg)
	}
	script := func(fused string) string {
		return strings.Replace(string(src), arg, arg+" fused = "+fused+",", 1)
	}
	fused := newSpeedRun(b, script("True"), 1, 32, "epochs=1000")
	unfused := newSpeedRun(b, script("False"), 1, 32, "epochs=1000")
	b.ResetTimer()
	var perRound []float64
	for i := range pairRounds {
		n := max(b.N/pairRounds, 1)
		if i%2 == 0 {
			f := fused.round(n)
			perRound = append(perRound, f/unfused.round(n))
		} else {
			u := unfused.round(n)
			perRound = append(perRound, fused.round(n)/u)
		}
	}
	b.ReportMetric(fused.samplesPerS(), "fused_samples/s")
	b.ReportMetric(unfused.samplesPerS(), "unfused_samples/s")
	b.ReportMetric(fused.samplesPerS()/unfused.samplesPerS(), "fused_over_unfused")
	b.ReportMetric(median(perRound), "fused_over_unfused_median")
}
