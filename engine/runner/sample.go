package runner

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"gorun/engine"
	"gorun/safetensors"
)

// MaxSampleTokens is the most tokens Generate adds in one call (gorun
// sample --tokens): a model sees only its last window, so a longer text
// is a second call whose prompt is the first one's end.
const MaxSampleTokens = 1_000_000

// SampleOptions say how Generate continues a prompt.
type SampleOptions struct {
	// Tokens is how many tokens to add: 1 to MaxSampleTokens.
	Tokens int
	// Temperature divides the logits before sampling; 0 picks the most
	// likely token every time (greedy). It must be finite.
	Temperature float64
	// Seed seeds the sampling.
	Seed uint64
	// Emit, when set, receives each token as it is drawn (gorun sample
	// prints it at once), and Generate keeps none: its memory is the
	// model's window, however many tokens it adds. An error from Emit
	// ends Generate with that error.
	Emit func(token int32) error
	// Interrupt, when set and true, ends Generate before the next token,
	// without an error (the CLI sets it on SIGINT and SIGTERM).
	Interrupt *atomic.Bool
}

// check refuses options Generate cannot honour.
func (o *SampleOptions) check() error {
	switch {
	case o.Tokens < 1 || o.Tokens > MaxSampleTokens:
		return fmt.Errorf("%d tokens to add: want 1 to %d", o.Tokens, MaxSampleTokens)
	case math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0) || o.Temperature < 0:
		return fmt.Errorf("temperature %g: want a finite number, 0 (greedy) or more", o.Temperature)
	}
	return nil
}

// Generate continues prompt (token ids) with a sequence model of p (a
// Plan for one device whose input is a window of T token ids)
// whose parameters are in the safetensors file params: at every step it
// runs the model in evaluation mode on the last T tokens (the prompt
// placed at the window's start while shorter) and draws the next token
// from the logits at the last position, on a device of the Plan's
// backend (which must be registered: cmd/gorun samples on the cpu one).
// It returns the added tokens, or none when o.Emit takes them.
func Generate(p *engine.Plan, params string, prompt []int32, o SampleOptions) ([]int32, error) {
	if err := checkGenerate(p, prompt, &o); err != nil {
		return nil, err
	}
	f, err := safetensors.ReadFile(params)
	if err != nil {
		return nil, err
	}
	e, err := NewEvaluator(p, 0, params, f)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	return e.Generate(context.Background(), prompt, o)
}

// checkGenerate refuses what Generate cannot continue: options out of
// range, a model that does not read token windows, an empty prompt, a
// token outside the vocabulary.
func checkGenerate(p *engine.Plan, prompt []int32, o *SampleOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	if !p.Tokens {
		return fmt.Errorf("the model does not read token windows (data.text): nothing to sample")
	}
	if len(prompt) == 0 {
		return fmt.Errorf("an empty prompt: give at least one token")
	}
	for i, id := range prompt {
		// The embedding would look up a row of zeros (PyTorch: "index
		// out of range in self").
		if id < 0 || int(id) >= p.Classes {
			return fmt.Errorf("prompt token %d has the id %d, outside the model's vocabulary of %d ids (0 … %d)", i+1, id, p.Classes, p.Classes-1)
		}
	}
	return nil
}

// newSampler is the random source of a Generate seeded with seed.
func newSampler(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5a3)) }

// pick draws a token from logits: the largest with temperature 0, else
// from softmax(logits / temperature).
func pick(logits []float32, probs []float64, temperature float64, rng *rand.Rand) int32 {
	best := 0
	for i, x := range logits {
		if x > logits[best] {
			best = i
		}
	}
	if temperature <= 0 {
		return int32(best)
	}
	var sum float64
	for i, x := range logits {
		probs[i] = math.Exp((float64(x) - float64(logits[best])) / temperature)
		sum += probs[i]
	}
	u := rng.Float64() * sum
	for i, pr := range probs {
		if u -= pr; u < 0 {
			return int32(i)
		}
	}
	return int32(best)
}
