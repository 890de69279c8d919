package runner

import (
	"gorun/datasets"
	"gorun/safetensors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
)

// Run-time checks of hostile input (issue 29): what the compiler cannot
// see, refused before it reaches a kernel.

// gptPlan compiles gptScript over a text of its 11 characters.
func gptPlan(t *testing.T) *engine.Plan {
	t.Helper()
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijk", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	return compile(t, loadSpec(t, strings.Replace(gptScript, "TEXT", text, 1)), 1)
}

// TestTokenIdsOutsideTheVocabulary: ids the compiler could not see — a
// prompt's, or data whose vocabulary grew after compiling — are refused
// before an embedding looks them up, naming the id and where it is.
func TestTokenIdsOutsideTheVocabulary(t *testing.T) {
	p := gptPlan(t)
	_, err := Generate(p, filepath.Join(t.TempDir(), "none.safetensors"), []int32{3, 11}, SampleOptions{Tokens: 1})
	if want := "prompt token 2 has the id 11, outside the model's vocabulary of 11 ids (0 … 10)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a prompt id past the vocabulary: %v, want %q", err, want)
	}
	x := make([]int32, 2*6)
	for i := range x {
		x[i] = int32(i)
	}
	_, err = Run(p, RunOptions{Train: &tokenSet{x: x, y: x, t: 6, v: 12}})
	if want := "tokens has a vocabulary of 12 token ids, but the plan was compiled for 11"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("data with a larger vocabulary: %v, want %q", err, want)
	}
}

// TestLastBatchOfOneRefused: a last batch that leaves a device one sample
// for a batchnorm1d is refused before the first step, naming the layer,
// the batch and the rank (PyTorch raises at that batch, an epoch in).
func TestLastBatchOfOneRefused(t *testing.T) {
	src := `
train(
    model = nn.sequential(nn.flatten(), nn.linear(4, 8, name = "fc"), nn.batchnorm1d(8, name = "bn"), nn.relu(),
                          nn.linear(8, 2, name = "out")),
    loss = "cross_entropy",
    data = data.synthetic(size = 64, shape = [1, 2, 2], classes = 2),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
)
`
	p := compile(t, loadSpec(t, src), 2)
	ds, err := datasets.Synthetic("train", 18, []int{1, 2, 2}, 2, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var steps int
	_, err = Run(p, RunOptions{Train: ds, OnStep: func(StepMetrics) { steps++ }})
	want := `batchnorm1d "bn": epoch 1, batch 3 of 3: rank 0 feeds 1 sample (the batch's 2 shared out as 1 + 1)`
	if err == nil || !strings.Contains(err.Error(), want) || steps != 0 {
		t.Errorf("a last batch of 1 + 1: %v after %d steps, want %q before any", err, steps, want)
	}
}

// labelScript trains a linear layer on DATA's class labels.
const labelScript = `
train(
    model = nn.sequential(nn.flatten(), nn.linear(2, 2, name = "fc")),
    loss = "cross_entropy",
    data = data.tensors("DATA", x = "x", y = "y", classes = 2),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.9),
    batch_size = 4,
    shuffle = False,
    seed = 3,
)
`

// labelData writes samples x [n, 2] with labels y to a safetensors file.
func labelData(t *testing.T, x []float32, y []int64) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "data.safetensors")
	if err := safetensors.WriteFile(file, []safetensors.Tensor{safetensors.F32("x", []int{len(y), 2}, x),
		safetensors.I64("y", []int{len(y)}, y)}, nil); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestIgnoreIndexOnClassLabels: class labels equal to ignore_index are
// skipped, the step's loss being the mean over the kept ones (as PyTorch's
// cross_entropy(ignore_index=-100)); a step whose every target is ignored
// has no loss — recorded as null and said in the log, never -0 — and
// still updates (zero gradients, momentum), as PyTorch's optimizer.step();
// a dataset whose every target is ignored is refused before training.
func TestIgnoreIndexOnClassLabels(t *testing.T) {
	x := []float32{1, 2, 9, 9, -1, 0.5, 9, 9, 3, -2, 9, 9, 0, 1, 9, 9}
	ignored := labelData(t, x, []int64{0, -100, 1, -100, 1, -100, 0, -100})
	kept := labelData(t, []float32{1, 2, -1, 0.5, 3, -2, 0, 1}, []int64{0, 1, 1, 0})
	run := func(file string, sets ...string) (string, []map[string]any) {
		t.Helper()
		out := t.TempDir()
		var log strings.Builder
		p := compile(t, loadSpec(t, strings.Replace(labelScript, "DATA", file, 1), sets...), 1)
		if _, err := Run(p, RunOptions{Out: out, Log: &log}); err != nil {
			t.Fatal(err)
		}
		var steps []map[string]any
		for _, m := range readMetrics(t, filepath.Join(out, MetricsFile)) {
			if m["kind"] == "step" {
				steps = append(steps, m)
			}
		}
		return log.String(), steps
	}
	_, withIgnored := run(ignored, "ignore_index=-100", "max_steps=1")
	_, onlyKept := run(kept, "batch_size=2", "max_steps=1")
	if a, b := withIgnored[0]["loss"].(float64), onlyKept[0]["loss"].(float64); math.Abs(a-b) > 1e-6 {
		t.Errorf("a batch of 2 kept and 2 ignored labels: loss %v, want %v (the mean over the kept two)", a, b)
	}

	// Samples 4-7 in the second batch: every target ignored.
	allIgnored := labelData(t, x, []int64{0, 1, 1, 0, -100, -100, -100, -100})
	log, steps := run(allIgnored, "ignore_index=-100", "epochs=2")
	if len(steps) != 4 || steps[1]["loss"] != nil || steps[3]["loss"] != nil || steps[0]["loss"] == nil {
		t.Errorf("steps %v: want 4, the 2nd and 4th with a null loss", steps)
	}
	if want := "epoch 1 step 2: every target of the step is the ignore_index (-100): no loss (recorded as null); the update ran with zero gradients, as PyTorch's"; !strings.Contains(log, want) {
		t.Errorf("log %q does not say %q", log, want)
	}
	if strings.Contains(log, "-0.0000") || strings.Contains(log, "NaN") {
		t.Errorf("log reports a loss of -0 or NaN:\n%s", log)
	}
	// The second epoch's first step starts from parameters the momentum
	// moved at step 2 (zero gradients, as PyTorch): its loss differs from
	// the first epoch's first.
	if steps[0]["loss"] == steps[2]["loss"] {
		t.Errorf("step 2 did not update: the losses of steps 1 and 3 are both %v", steps[0]["loss"])
	}

	none := labelData(t, x, []int64{-100, -100, -100, -100, -100, -100, -100, -100})
	p := compile(t, loadSpec(t, strings.Replace(labelScript, "DATA", none, 1), "ignore_index=-100"), 1)
	_, err := Run(p, RunOptions{})
	if want := "data.safetensors/train: every target is the ignore_index, -100: the loss has nothing to average"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("every target ignored: %v, want %q", err, want)
	}
}

// TestLegacyResumeRefusalIsShort: a legacy checkpoint (its key prints
// every field of ops.Attrs, ~900 bytes a step) refused for a changed
// layer names the layer and the attribute, not the key's text.
func TestLegacyResumeRefusalIsShort(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "legacy", "cnn"))); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "legacy", "cnn.star"))
	if err != nil {
		t.Fatal(err)
	}
	p := compile(t, loadSpec(t, strings.Replace(string(src), "nn.leaky_relu(0.1)", "nn.leaky_relu(0.2)", 1)), 2)
	_, err = Run(p, RunOptions{Resume: dir})
	want := `layer leaky_relu_0 (leaky_relu, /t/train.star:15:39): negative_slope was 0.1 in the checkpoint, is 0.2 now: resume with the script and --set that made it`
	if err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 300 {
		t.Errorf("resuming a legacy checkpoint with another leaky_relu: %v, want %q", err, want)
	}
}
