package runner

import (
	"gorun/datasets"
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
