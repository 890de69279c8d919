package model

import (
	"context"
	"fmt"

	"gorun/datasets"
	"gorun/engine/runner"
)

// GenerateOptions say how Generate continues a prompt.
type GenerateOptions struct {
	// Tokens is how many tokens to add (at least 1).
	Tokens int
	// Temperature divides the logits before sampling; 0 picks the most
	// likely token every time (greedy).
	Temperature float64
	// Seed seeds the sampling: the same seed, prompt and model give the
	// same text.
	Seed uint64
}

// Generate continues prompt with a sequence model trained on data.text,
// as gorun sample does: at every token it runs the evaluation pass on the
// last T tokens and draws the next from the logits at the last position.
// It encodes and decodes with the vocabulary the weights file records,
// holds one arena for the whole continuation, and returns the added text
// (ctx.Err() as soon as ctx is done).
func (m *Model) Generate(ctx context.Context, prompt string, o GenerateOptions) (string, error) {
	if m.kind != Sequence {
		return "", fmt.Errorf("model: Generate: a %s, not a sequence model of token windows (data.text)", m.kind)
	}
	if o.Tokens < 1 {
		return "", fmt.Errorf("model: Generate: Tokens %d: want at least 1", o.Tokens)
	}
	if o.Temperature < 0 {
		return "", fmt.Errorf("model: Generate: Temperature %g: want 0 (greedy) or more", o.Temperature)
	}
	vs, ok := m.file.Metadata["vocab"]
	if !ok {
		return "", fmt.Errorf("model: Generate: %s has no vocabulary in its metadata: was the model trained on data.text?", m.weights)
	}
	vocab, err := datasets.ParseVocab(vs)
	if err != nil {
		return "", fmt.Errorf("model: %s: %v", m.weights, err)
	}
	ids, err := vocab.Encode(prompt)
	if err != nil {
		return "", fmt.Errorf("model: Generate: prompt: %v", err)
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("model: Generate: an empty prompt: give at least one character")
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var added []int32
	r := &request{ctx: ctx, n: 1, task: func(e *runner.Evaluator) error {
		var err error
		added, err = e.Generate(ctx, ids, runner.SampleOptions{Tokens: o.Tokens, Temperature: o.Temperature, Seed: o.Seed})
		return err
	}}
	if err := m.b.submit(r); err != nil {
		return "", err
	}
	if err := m.b.wait(r); err != nil {
		return "", err
	}
	return vocab.Decode(added), nil
}
