package engine

import (
	"bytes"
	"strings"
	"testing"

	"gorun/cuda/cudatarget"
	"gorun/engine/target"
	"gorun/ops"
	"gorun/script"
)

// cudaLikeTarget is the cuda Target as a gorun built with -tags cuda
// registers it (cuda.Backend.Target): cudatarget's description with the
// CUDA op table's Supports, every op but the CPU-only fusions cuda's
// optable.go declines. The engine's tests cannot import package cuda
// (its build tag and its GPU); cuda's TestPlanBF16Attention (a GPU test)
// compiles the same plan with the real table.
func cudaLikeTarget() *target.Target {
	t := cudatarget.Target()
	cpuOnly := map[ops.Op]bool{ops.Conv2DPool: true, ops.Conv2DPoolGrad: true, ops.AttentionHeads: true, ops.AttentionHeadsGrad: true}
	t.Supports = func(op ops.Op) bool { return op != ops.Invalid && !cpuOnly[op] }
	return t
}

// TestBF16AttentionFusedOnCUDA compiles the GPT example
// (scripts/examples/gpt_text.star) with --set precision=bf16 for a cuda
// cluster: each block's attention is one fused attention step and its
// gradient, with Attrs.Precision bf16, printed by `gorun plan` with
// compute bf16, its output cast to bf16 as autocast casts
// scaled_dot_product_attention's; no batched products or softmax of the
// T×T weights. The same script for the cpu cluster still builds
// attention from its parts under bf16 (PyTorch 1.13's CPU autocast), and
// fp16 on cuda too (the tensor-core kernels are bf16 only).
func TestBF16AttentionFusedOnCUDA(t *testing.T) {
	target.Register(cudaLikeTarget())
	t.Cleanup(func() { target.Register(cudatarget.Target()) })
	load := func(prec string) *Plan {
		t.Helper()
		ov, err := script.ParseOverride("precision=" + prec)
		if err != nil {
			t.Fatal(err)
		}
		s, err := script.Load("../scripts/examples/gpt_text.star", script.WithOverrides(ov))
		if err != nil {
			t.Skipf("the GPT example does not load here (it needs Debian's fortunes): %v", err)
		}
		c := DefaultCluster()
		c.Backend = "cuda"
		p, err := Compile(s, c)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	count := func(p *Plan, op ops.Op) (n, bf16 int) {
		for _, st := range p.Devices[0].Steps {
			if st.Kind == KernelStep && st.Op == op {
				n++
				if st.Attrs.Precision == ops.BF16 && StepDtype(st) == "bf16" {
					bf16++
				}
			}
		}
		return n, bf16
	}
	p := load("bf16")
	for _, op := range []ops.Op{ops.Attention, ops.AttentionGrad} {
		if n, bf16 := count(p, op); n != 4 || bf16 != 4 {
			t.Errorf("cuda bf16 plan: %d %s steps, %d of them bf16; want 4 (one a block), all bf16", n, op, bf16)
		}
	}
	if n, _ := count(p, ops.Softmax); n != 0 {
		t.Errorf("cuda bf16 plan has %d softmax steps: attention built from its parts", n)
	}
	// The attention's output is cast to bf16 (in place: no buffer).
	casts := 0
	for _, n := range p.Graph.Forward {
		if n.Op == ops.Round && n.In[0].Producer != nil && n.In[0].Producer.Op == ops.Attention {
			casts++
		}
	}
	if casts != 4 {
		t.Errorf("%d casts of the fused attention's output, want 4", casts)
	}
	var b bytes.Buffer
	if err := p.Describe(&b); err != nil {
		t.Fatal(err)
	}
	out := spaces.ReplaceAllString(b.String(), " ")
	for _, w := range []string{
		`forward attention [32 64 3 4 32] [32 64 128] [32 4 64] multihead_attention "h.0.attn" (../scripts/examples/gpt_text.star:25:17) compute bf16`,
		"mixed precision bf16",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("cuda bf16 plan lacks %q:\n%s", w, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " attention [") || strings.Contains(line, " attention_grad [") {
			if !strings.HasSuffix(strings.TrimSpace(line), "compute bf16") {
				t.Errorf("fused attention step not bf16: %s", line)
			}
		}
	}

	if n, _ := count(load("fp16"), ops.Attention); n != 0 {
		t.Errorf("cuda fp16 plan fuses attention %d times: the kernels are bf16 only", n)
	}
	if n, _ := count(load("fp32"), ops.Attention); n != 4 {
		t.Errorf("cuda fp32 plan: %d fused attention steps, want 4", n)
	}
	target.Register(cudatarget.Target())
	s, err := script.Load("../scripts/examples/gpt_text.star", script.WithOverrides(mustOverride(t, "precision=bf16")))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := Compile(s, DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := count(cp, ops.Attention); n != 0 {
		t.Errorf("cpu bf16 plan fuses attention %d times: PyTorch 1.13's CPU autocast casts between the products", n)
	}
}

func mustOverride(t *testing.T, s string) script.Override {
	t.Helper()
	o, err := script.ParseOverride(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
