package runner

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/backend/cpu"
	"gorun/engine/target"
	"gorun/ops"
)

// TestBF16FusedAttentionTrains trains the GPT of TestBF16MatchesPyTorchAutocast
// (its data, weights and 20 SGD steps) with the fused bf16 attention a
// cuda plan holds (ops/attention_bf16.go), on the CPU: a "cpu" Target that
// lists the attention in FusedBF16, as cudatarget does, so the plan keeps
// it fused under precision "bf16" and the CPU backend runs its reference
// kernels. Every step loss is finite, the plan holds the fused bf16
// attention and its gradient, and the losses stay as close to the fp32
// run's as PyTorch's own CPU bf16 run is to its fp32 one (twice that, at
// most: rounding at other places is no closer by rule), while differing
// from the unfused bf16 plan's (the fused path ran).
func TestBF16FusedAttentionTrains(t *testing.T) {
	b, err := os.ReadFile("testdata/precision_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g precisionGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, init := filepath.Join(dir, "data.safetensors"), filepath.Join(dir, "init.safetensors")
	tokenWindows(t, g.GPT.Batch*g.Steps, 6, 11, data)
	src := strings.Replace(precisionGPT, "DATA", data, 1)
	train := func(prec string, fused bool) []float64 {
		t.Helper()
		tg := cpu.Backend{}.Target()
		if fused {
			tg.FusedBF16 = []ops.Op{ops.Attention, ops.AttentionGrad}
		}
		target.Register(tg)
		defer target.Register(cpu.Backend{}.Target())
		p := compile(t, loadSpec(t, src, fmt.Sprintf("precision=%q", prec)), 1)
		n := 0
		for _, st := range p.Devices[0].Steps {
			if (st.Op == ops.Attention || st.Op == ops.AttentionGrad) && st.Attrs.Precision == ops.BF16 && engine.StepDtype(st) == "bf16" {
				n++
			}
		}
		if want := map[bool]int{true: 4, false: 0}[fused && prec == "bf16"]; n != want {
			t.Fatalf("%s fused=%v: %d bf16 fused attention steps, want %d", prec, fused, n, want)
		}
		formulaParams(t, p, init)
		out := t.TempDir()
		if _, err := Run(p, RunOptions{Out: out, Init: init}); err != nil {
			t.Fatal(err)
		}
		var losses []float64
		for _, m := range readMetrics(t, filepath.Join(out, MetricsFile)) {
			if m["kind"] == "step" {
				l, ok := m["loss"].(float64)
				if !ok || math.IsNaN(l) || math.IsInf(l, 0) {
					t.Fatalf("%s fused=%v: step loss %v", prec, fused, m["loss"])
				}
				losses = append(losses, l)
			}
		}
		if len(losses) != g.Steps {
			t.Fatalf("%s fused=%v: %d step losses, want %d", prec, fused, len(losses), g.Steps)
		}
		return losses
	}
	maxDiff := func(a, b []float64) float64 {
		d := 0.0
		for i := range a {
			d = math.Max(d, math.Abs(a[i]-b[i]))
		}
		return d
	}
	fused, unfused, fp32 := train("bf16", true), train("bf16", false), train("fp32", false)
	ours, theirs := maxDiff(fused, fp32), maxDiff(g.GPT.BF16, g.GPT.FP32)
	vsUnfused := maxDiff(fused, unfused)
	t.Logf("largest step-loss difference: fused bf16 vs fp32 %.3g, vs unfused bf16 %.3g; PyTorch's CPU bf16 vs fp32 %.3g", ours, vsUnfused, theirs)
	if ours > 2*theirs {
		t.Errorf("fused bf16 differs from fp32 by %.3g, more than twice PyTorch's bf16 from its fp32 (%.3g)\n fused %v\n fp32  %v", ours, theirs, fused, fp32)
	}
	if vsUnfused == 0 {
		t.Errorf("fused bf16 trains to the unfused bf16 plan's losses exactly: the fused path did not run")
	}
}
