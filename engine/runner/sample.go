package runner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
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
// Plan for one device, batch 1, whose input is a window of T token ids)
// whose parameters are in the safetensors file params: at every step it
// runs the model in evaluation mode on the last T tokens (the prompt
// placed at the window's start while shorter) and draws the next token
// from the logits at the last position, on a device of the Plan's
// backend (which must be registered: cmd/gorun samples on the cpu one).
// It returns the added tokens, or none when o.Emit takes them.
func Generate(p *engine.Plan, params string, prompt []int32, o SampleOptions) ([]int32, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if !p.Tokens {
		return nil, fmt.Errorf("the model does not read token windows (data.text): nothing to sample")
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("an empty prompt: give at least one token")
	}
	for i, id := range prompt {
		// The embedding would look up a row of zeros (PyTorch: "index
		// out of range in self").
		if id < 0 || int(id) >= p.Classes {
			return nil, fmt.Errorf("prompt token %d has the id %d, outside the model's vocabulary of %d ids (0 … %d)", i+1, id, p.Classes, p.Classes-1)
		}
	}
	f, err := safetensors.ReadFile(params)
	if err != nil {
		return nil, err
	}
	be, err := backend.Get(p.Cluster.Backend)
	if err != nil {
		return nil, err
	}
	dev, err := be.Open(0, backend.Options{Settings: p.Cluster.BackendSettings()})
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	prog := p.Devices[0]
	if err := dev.Load(prog); err != nil {
		return nil, err
	}
	d := &worker{rank: 0, prog: prog, dev: dev}
	rs := &runState{plan: p, workers: []*worker{d}}
	if err := rs.setParams(d, params, f, ""); err != nil {
		return nil, err
	}
	t := p.Sample[0]
	v := p.Classes
	window := &windowSet{t: t, v: v, x: make([]int32, t), y: make([]int32, t)}
	logits := make([]float32, prog.Output.Elems())
	rng := rand.New(rand.NewPCG(o.Seed, 0x5a3))
	// seq holds the window's tokens (all the added ones too without Emit),
	// keeping at most 2T when Emit takes them.
	seq := append(make([]int32, 0, max(len(prompt), 2*t)), prompt...)
	var added []int32
	probs := make([]float64, v)
	for range o.Tokens {
		if o.Interrupt != nil && o.Interrupt.Load() {
			break
		}
		if o.Emit != nil && len(seq) >= 2*t {
			seq = append(seq[:0], seq[len(seq)-t:]...)
		}
		ctx := seq[max(0, len(seq)-t):]
		clear(window.x)
		copy(window.x, ctx)
		data, err := dev.LoadData(window)
		if err != nil {
			return nil, err
		}
		dev.SetBatch(1)
		if err := dev.Gather(data, []int{0}, prog.Input, prog.Target); err != nil {
			return nil, err
		}
		d.rc.LossScale = 1
		if err := d.evalBatch(true); err != nil {
			return nil, err
		}
		if err := dev.DownloadF32(prog.Output, 0, logits[:t*v]); err != nil {
			return nil, err
		}
		row := logits[(len(ctx)-1)*v : len(ctx)*v]
		tok := pick(row, probs, o.Temperature, rng)
		seq = append(seq, tok)
		if o.Emit == nil {
			added = append(added, tok)
			continue
		}
		if err := o.Emit(tok); err != nil {
			return nil, err
		}
	}
	return added, nil
}

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

// windowSet is one token window, for Generate's forward passes.
type windowSet struct {
	t, v int
	x, y []int32
}

func (w *windowSet) Name() string                         { return "prompt" }
func (w *windowSet) Len() int                             { return 1 }
func (w *windowSet) SampleShape() []int                   { return []int{w.t} }
func (w *windowSet) NumClasses() int                      { return w.v }
func (w *windowSet) Labels() []int32                      { return nil }
func (w *windowSet) Vocab() datasets.Vocab                { return datasets.Vocab{} }
func (w *windowSet) Fill(_ []int, x []float32, _ []int32) { panic("windowSet: Fill") }
func (w *windowSet) FillTokens(_ []int, x, y []int32) {
	copy(x, w.x)
	copy(y, w.y)
}
