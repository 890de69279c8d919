package runner

import (
	"context"
	"fmt"
	"slices"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
	"gorun/safetensors"
)

// Evaluator runs the evaluation pass of a trained model outside training:
// the Eval steps of a one-device Plan (dropout off, batch norm on its
// running statistics), step for step what evaluation during a run
// executes, on a device of the Plan's backend (which the program must
// have registered) holding the weights of a safetensors file. Package
// model serves predictions with a pool of them; gorun sample generates
// text with one (Generate).
//
// An Evaluator is used by one goroutine at a time; several Evaluators of
// one Plan run concurrently, each on its own device and arena.
type Evaluator struct {
	plan *engine.Plan
	w    *worker
	// in and out are the elements of one sample's input and output.
	in, out int
	// batchDependent is set when a sample's output depends on the other
	// samples of its batch (BatchDependent).
	batchDependent bool
}

// NewEvaluator opens device index of p's backend, loads p's first
// Program there and sets its parameters and running statistics from f,
// the safetensors file at path (named in errors): every parameter of the
// model must be in f with its shape, and nothing else, as --init
// requires.
func NewEvaluator(p *engine.Plan, index int, path string, f *safetensors.File) (*Evaluator, error) {
	if len(p.Devices) == 0 {
		return nil, fmt.Errorf("the plan has no device")
	}
	be, err := backend.Get(p.Cluster.Backend)
	if err != nil {
		return nil, err
	}
	dev, err := be.Open(index, backend.Options{Settings: p.Cluster.BackendSettings()})
	if err != nil {
		return nil, err
	}
	prog := p.Devices[0]
	if err := dev.Load(prog); err != nil {
		dev.Close()
		return nil, err
	}
	d := &worker{rank: 0, prog: prog, dev: dev}
	d.rc.LossScale = 1
	rs := &runState{plan: p, workers: []*worker{d}}
	if err := rs.setParams(d, path, f, ""); err != nil {
		dev.Close()
		return nil, err
	}
	e := &Evaluator{plan: p, w: d, in: perSample(prog.Input), out: perSample(prog.Output)}
	for _, st := range prog.Eval {
		if st.Kind == engine.KernelStep && st.Op == ops.BatchNormStats {
			e.batchDependent = true
		}
	}
	return e, nil
}

// perSample is the number of elements of one sample of a batched buffer.
func perSample(b *engine.Buffer) int {
	if len(b.Max) == 0 || b.Max[0] == 0 {
		return 0
	}
	return b.Elems() / b.Max[0]
}

// MaxBatch is the largest batch one Forward takes: the Plan's batch.
func (e *Evaluator) MaxBatch() int { return e.plan.MaxBatch }

// InputElems and OutputElems are the elements of one sample's input and
// of its output.
func (e *Evaluator) InputElems() int  { return e.in }
func (e *Evaluator) OutputElems() int { return e.out }

// OutputShape is the shape of one sample's output.
func (e *Evaluator) OutputShape() []int { return slices.Clone(e.w.prog.Output.Max[1:]) }

// BatchDependent reports whether a sample's output depends on the other
// samples of its batch: batch norm without running statistics
// (track_running_stats = False) normalises with the batch's statistics in
// evaluation too, as in PyTorch.
func (e *Evaluator) BatchDependent() bool { return e.batchDependent }

// Forward runs the evaluation pass on n samples of float inputs x (n ×
// InputElems values, the values the model's first layer takes) and
// writes their outputs to out (n × OutputElems values).
func (e *Evaluator) Forward(n int, x, out []float32) error {
	if e.w.prog.Input.DType != engine.Float32 {
		return fmt.Errorf("the model takes token ids, not float values")
	}
	if err := e.check(n, len(x), len(out)); err != nil {
		return err
	}
	d := e.w
	d.dev.SetBatch(n)
	if err := d.dev.UploadF32(d.prog.Input, 0, x); err != nil {
		return err
	}
	return e.run(n, out)
}

// ForwardTokens is Forward for a model of token windows: ids holds n ×
// InputElems token ids, each in [0, Plan.Classes).
func (e *Evaluator) ForwardTokens(n int, ids []int32, out []float32) error {
	if e.w.prog.Input.DType != engine.Int32 {
		return fmt.Errorf("the model takes float values, not token ids")
	}
	if err := e.check(n, len(ids), len(out)); err != nil {
		return err
	}
	d := e.w
	d.dev.SetBatch(n)
	if err := d.dev.UploadI32(d.prog.Input, 0, ids); err != nil {
		return err
	}
	return e.run(n, out)
}

func (e *Evaluator) check(n, in, out int) error {
	switch {
	case n < 1 || n > e.plan.MaxBatch:
		return fmt.Errorf("a batch of %d samples: want 1 to %d", n, e.plan.MaxBatch)
	case in != n*e.in:
		return fmt.Errorf("%d input values for %d samples of %d", in, n, e.in)
	case out != n*e.out:
		return fmt.Errorf("room for %d output values for %d samples of %d", out, n, e.out)
	}
	return nil
}

// run runs the Eval steps on the live batch of n samples (the target
// buffer holds whatever it holds: the loss is not read) and reads the
// outputs back.
func (e *Evaluator) run(n int, out []float32) error {
	d := e.w
	if err := d.evalBatch(true); err != nil {
		return err
	}
	return d.dev.DownloadF32(d.prog.Output, 0, out)
}

// Outputs runs the evaluation pass over every sample of ds in batches of
// batch samples (MaxBatch when 0; the last batch holds the rest), feeding
// each batch as evaluation during training does (the device's Gather of
// the dataset's samples), and returns the outputs, ds.Len() × OutputElems
// values in sample order. Tests compare other ways into the model
// (Forward, package model) with it.
func (e *Evaluator) Outputs(ds datasets.Dataset, batch int) ([]float32, error) {
	if batch == 0 {
		batch = e.plan.MaxBatch
	}
	if batch < 1 || batch > e.plan.MaxBatch {
		return nil, fmt.Errorf("batches of %d samples: want 1 to %d", batch, e.plan.MaxBatch)
	}
	d := e.w
	n := ds.Len()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	// A streamed dataset is decoded ahead, in sample order.
	pf, err := datasets.Prefetch(ds, all, datasets.PrefetchOptions{Window: prefetchSteps * batch})
	if err != nil {
		return nil, err
	}
	fill := ds
	if pf != nil {
		defer pf.Close()
		fill = pf.Dataset()
	}
	data, err := d.dev.LoadData(fill)
	if err != nil {
		return nil, err
	}
	if f, ok := data.(backend.Freer); ok {
		defer f.Free()
	}
	out := make([]float32, n*e.out)
	idx := make([]int, batch)
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		for j := range k {
			idx[j] = i + j
		}
		d.dev.SetBatch(k)
		if err := d.dev.Gather(data, idx[:k], d.prog.Input, d.prog.Target); err != nil {
			return nil, err
		}
		if err := dataErr(pf, ds.Name()); err != nil {
			return nil, err
		}
		if err := e.run(k, out[i*e.out:(i+k)*e.out]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Generate continues prompt (token ids) as the package's Generate does,
// on this Evaluator's device, checking ctx between tokens.
func (e *Evaluator) Generate(ctx context.Context, prompt []int32, o SampleOptions) ([]int32, error) {
	p := e.plan
	if err := checkGenerate(p, prompt, &o); err != nil {
		return nil, err
	}
	t, v := p.Sample[0], p.Classes
	window := make([]int32, t)
	logits := make([]float32, e.out)
	rng := newSampler(o.Seed)
	// seq holds the window's tokens (all the added ones too without Emit),
	// keeping at most 2T when Emit takes them.
	seq := append(make([]int32, 0, max(len(prompt), 2*t)), prompt...)
	var added []int32
	probs := make([]float64, v)
	for range o.Tokens {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if o.Interrupt != nil && o.Interrupt.Load() {
			break
		}
		if o.Emit != nil && len(seq) >= 2*t {
			seq = append(seq[:0], seq[len(seq)-t:]...)
		}
		last := seq[max(0, len(seq)-t):]
		clear(window)
		copy(window, last)
		if err := e.ForwardTokens(1, window, logits); err != nil {
			return nil, err
		}
		row := logits[(len(last)-1)*v : len(last)*v]
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

// Close frees the device.
func (e *Evaluator) Close() error { return e.w.dev.Close() }
