package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// device runs one Program. Everything it touches per step was allocated at
// compile time.
type device struct {
	prog *Program
	comm communicator // nil with one device
	step int          // optimizer steps taken
	// shareState is set when every rank holds optimizer state (all but a
	// parameter server), so resuming broadcasts it too.
	shareState bool
	commTime   time.Duration // time in collectives during the current step
	scalar     [2]float32    // for sum2

	// With overlap, gradient collectives go to a goroutine of their own
	// (async) so backward goes on while they run; pending counts those not
	// yet waited for, and the optimizer waits for them all.
	async   chan *Step
	results chan asyncResult
	pending int

	progress    *progress // where this rank's run stands
	interrupted bool      // the ranks agreed to stop (RunOptions.Interrupt)
}

type asyncResult struct {
	err error
	dt  time.Duration
}

// startAsync starts the device's collective goroutine.
func (d *device) startAsync() {
	d.async = make(chan *Step, len(d.prog.Steps))
	d.results = make(chan asyncResult, len(d.prog.Steps))
	go func() {
		for st := range d.async {
			t0 := time.Now()
			err := d.collective(st)
			d.results <- asyncResult{err, time.Since(t0)}
		}
	}()
}

// stopAsync ends the collective goroutine.
func (d *device) stopAsync() {
	if d.async != nil {
		close(d.async)
	}
}

// wait waits for every collective in flight and returns the first error.
func (d *device) wait() error {
	var first error
	for ; d.pending > 0; d.pending-- {
		r := <-d.results
		d.commTime += r.dt
		if r.err != nil && first == nil {
			first = r.err
		}
	}
	return first
}

// runStep runs one micro-batch of the training Program: forward and
// backward; with last set, also the collectives and the optimizer update.
// first tells whether gradients are written (true) or accumulated.
func (d *device) runStep(first, last bool) error {
	for _, st := range d.prog.Steps {
		if !last && (st.Phase == PhaseSync || st.Phase == PhaseUpdate) {
			continue
		}
		if st.Phase == PhaseUpdate && d.pending > 0 {
			if err := d.wait(); err != nil {
				return err
			}
		}
		if st.Phase == PhaseSync && d.async != nil {
			d.async <- st
			d.pending++
			continue
		}
		if st.acc {
			st.Attrs.Accumulate = !first
		}
		if err := d.exec(st); err != nil {
			d.wait()
			return err
		}
	}
	return d.wait()
}

// exec runs one step.
func (d *device) exec(st *Step) error {
	switch st.Kind {
	case KernelStep:
		st.kernel(&d.prog.ctx, &st.Attrs, st.kin, st.kout)
	case CopyStep:
		copy(st.Out[0].Data[:st.Out[0].Len()], st.In[0].Data[:st.In[0].Len()])
	case CollectiveStep:
		t0 := time.Now()
		err := d.collective(st)
		d.commTime += time.Since(t0)
		return err
	}
	return nil
}

// evalStep runs the forward pass without dropout.
func (d *device) evalStep() {
	for _, st := range d.prog.Eval {
		d.exec(st) // no collectives in evaluation: it cannot fail
	}
}

// InitParams fills every parameter as PyTorch's default initialisation
// does: weights from U(-1/√fan_in, 1/√fan_in) (kaiming_uniform_ with
// a=√5) and biases from the same range, drawn from an RNG seeded with seed.
// Every device then receives rank 0's values.
func (p *Plan) InitParams(seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	root := p.Devices[0]
	for i, prm := range p.Graph.Params {
		bound := 1 / math.Sqrt(float64(prm.FanIn))
		data := root.Params[i].Data
		for j := range data {
			data[j] = float32((rng.Float64()*2 - 1) * bound)
		}
	}
}

// zeroState clears gradients and optimizer state on every device.
func (p *Plan) zeroState() {
	for _, prog := range p.Devices {
		clear(prog.GradArena.Data)
		for _, st := range prog.State {
			for _, b := range st {
				clear(b.Data)
			}
		}
	}
}

// SetParam copies values into parameter name on rank 0 (they reach the
// other ranks with the first broadcast).
func (p *Plan) SetParam(name string, shape []int, values []float32) error {
	for i, prm := range p.Graph.Params {
		if prm.Name != name {
			continue
		}
		if !slices.Equal(shape, prm.Value.Shape) {
			return fmt.Errorf("parameter %s: shape %v, the model has %v", name, shape, prm.Value.Shape)
		}
		copy(p.Devices[0].Params[i].Data, values)
		return nil
	}
	return fmt.Errorf("the model has no parameter %s", name)
}
