package engine

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"gorun/ops"
)

// TestPrecisionPlan compiles the MNIST Net in each precision: bf16 holds
// torch.autocast's casts (conv1's input, weight and bias; its output),
// none after ReLU or max pooling (they keep bfloat16 values), none for
// the loss; every parameter stays float32; the plan prints each step's
// dtype and what the casts cost; fp16 unscales the gradients first in the
// update phase; the resume key is the fp32 plan's (a bf16 checkpoint
// resumes as fp32), the fingerprint is not.
func TestPrecisionPlan(t *testing.T) {
	fp32 := compile(t, loadSpec(t, mnistScript), 1)
	bf16 := compile(t, loadSpec(t, mnistScript, `precision="bf16"`), 1)
	fp16 := compile(t, loadSpec(t, mnistScript, `precision="fp16"`), 1)
	var casts []string
	for _, n := range bf16.Graph.Forward {
		if n.Op == ops.Round {
			casts = append(casts, n.In[0].Name)
		}
		if n.Op == ops.Round && n.Attrs.Precision != ops.BF16 {
			t.Errorf("cast of %s to %v", n.In[0].Name, n.Attrs.Precision)
		}
	}
	want := []string{"input", "conv1.weight", "conv1.bias", "conv1", "conv2.weight", "conv2.bias", "conv2", "4",
		"fc1.weight", "fc1.bias", "fc1", "10", "fc2.weight", "fc2.bias", "fc2", "12"}
	if !slices.Equal(casts, want) {
		t.Errorf("bf16 casts the values\n %v\nwant\n %v", casts, want)
	}
	for _, prm := range bf16.Graph.Params {
		if prm.Value.LowPrecision || prm.Grad.LowPrecision {
			t.Errorf("%s or its gradient is held in low precision", prm.Name)
		}
	}
	if bf16.Graph.Loss.Producer.Op != ops.NLLLoss || bf16.Graph.Loss.LowPrecision {
		t.Errorf("the loss is %v, low precision %v", bf16.Graph.Loss.Producer.Op, bf16.Graph.Loss.LowPrecision)
	}
	for _, n := range fp32.Graph.Forward {
		if n.Op == ops.Round {
			t.Errorf("fp32 plan casts %s", n.In[0].Name)
		}
	}

	var b bytes.Buffer
	if err := bf16.Describe(&b); err != nil {
		t.Fatal(err)
	}
	out := spaces.ReplaceAllString(b.String(), " ")
	for _, w := range []string{
		"mixed precision bf16 (torch.autocast's lists",
		"the casts save no memory",
		"device 0: 31 cast steps (16 forward, 15 backward), whose buffers take",
		"in fp32 (+",
		`round_bf16 [64 1 28 28] [64 1 28 28] conv2d "conv1"`,
		`conv2d [64 1 28 28] [10 1 5 5] [10] [64 10 24 24] conv2d "conv1" (/t/train.star:3:14) compute bf16`,
		`nll_loss [64 10] [64]i [1] loss "nll" (/t/train.star:17:6) compute fp32`,
		"compute fp32→bf16",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("bf16 plan lacks %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	if err := fp32.Describe(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "mixed precision") || strings.Contains(b.String(), "dtype") {
		t.Errorf("fp32 plan speaks of precision:\n%s", b.String())
	}

	var update []ops.Op
	for _, st := range fp16.Devices[0].Steps {
		if st.Phase == PhaseUpdate {
			update = append(update, st.Op)
		}
	}
	if len(update) == 0 || update[0] != ops.GradUnscale || slices.Contains(update[1:], ops.GradUnscale) {
		t.Errorf("fp16 update steps %v: want grad_unscale first, once", update)
	}
	for _, p := range []*Plan{fp32, bf16} {
		for _, st := range p.Devices[0].Steps {
			if st.Op == ops.GradUnscale {
				t.Errorf("%v plan unscales", p.Spec.Precision)
			}
		}
	}

	key := fp32.ResumeKey()
	for _, p := range []*Plan{bf16, fp16} {
		if !slices.Equal(p.ResumeKey(), key) {
			t.Errorf("%v: resume key differs from fp32's", p.Spec.Precision)
		}
		if err := p.CheckResumeKey(ResumeKeyFormat, key); err != nil {
			t.Errorf("%v resuming an fp32 checkpoint: %v", p.Spec.Precision, err)
		}
		if slices.Equal(p.Fingerprint(), fp32.Fingerprint()) {
			t.Errorf("%v: fingerprint is fp32's", p.Spec.Precision)
		}
	}

	// With micro-batches, every step that sums over them (a parameter's
	// gradient: under bf16 the cast's gradient, a Round) accumulates.
	acc := compile(t, loadSpec(t, mnistScript, `precision="bf16"`, "accumulate=2"), 1)
	rounds := 0
	for _, st := range acc.Devices[0].Steps {
		if st.Acc && !ops.Lookup(st.Op).Accumulates {
			t.Errorf("step %d (%s of %s) sums micro-batches, but its op does not accumulate", st.ID, st.Op, st.Layer)
		}
		if st.Acc && st.Op == ops.Round {
			rounds++
		}
	}
	if rounds != 8 {
		t.Errorf("%d parameter gradients from a cast's gradient, want the 8 parameters'", rounds)
	}
}
