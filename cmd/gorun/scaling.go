package main

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"gorun/engine"
	"gorun/engine/runner"
	"gorun/engine/scaling"
)

// The one-device step that `gorun plan --predict` measures when no
// --step-time is given: measureWarmup steps to warm up, then steps until
// measureFor has passed and at least measureMin were timed (at most
// measureMax); the median of them.
const (
	measureWarmup = 3
	measureMin    = 8
	measureMax    = 500
	measureFor    = time.Second
)

// predictScaling prints the scaling prediction of plan (gorun plan
// --predict): the compute of one device's step, from --step-time or
// measured here, and the collectives timed by the cluster's [[link]]
// tables, on the cluster and on 2×, 4×, … its hosts up to 512 devices
// or more.
func predictScaling(plan *engine.Plan, f *flags, stdout io.Writer) error {
	compute, src := f.stepTime, scaling.Source("--step-time")
	if compute == 0 {
		setPhase("measuring one device's step of %s", plan.Spec.Script)
		var err error
		var n int
		if compute, n, err = measureStep(plan); err != nil {
			return fmt.Errorf("--predict: measuring one device's step (batch %d) on this machine: %w; give the step time instead with --step-time DURATION", plan.LocalBatch[0], err)
		}
		src = scaling.Source(fmt.Sprintf("measured here: median of %d steps on one %s device after %d to warm up", n, plan.Cluster.Backend, measureWarmup))
	}
	links := scaling.LinksOf(&plan.Cluster)
	topo := scaling.TopologyOf(&plan.Cluster)
	base, err := scaling.Predict(plan, topo, compute, links)
	if err != nil {
		return fmt.Errorf("--predict: %s: %w", clusterName(&plan.Cluster), err)
	}
	var factors []int
	for k := 1; ; k *= 2 {
		factors = append(factors, k)
		if topo.World()*k >= 512 {
			break
		}
	}
	scaled, err := scaling.Scale(plan, topo, compute, links, factors)
	if werr := scaling.Write(stdout, plan, links, src, base, scaled); werr != nil {
		return werr
	}
	if err != nil {
		// The cluster itself needs fewer links than more hosts do.
		fmt.Fprintf(stdout, "\n  on more hosts: not predicted: %v\n", err)
	}
	return nil
}

// measureStep runs plan's script on one device of plan's backend in this
// process, at the plan's local batch (that of rank 0), with no evaluation
// and no run folder: measureWarmup optimizer steps, then steps until
// measureFor has passed and measureMin were timed (or the data or
// measureMax end them). It returns their median time and count.
func measureStep(plan *engine.Plan) (time.Duration, int, error) {
	s := *plan.Spec
	s.BatchSize = plan.LocalBatch[0]
	s.MaxSteps = measureWarmup + measureMax
	s.Epochs = max(s.Epochs, 1000)
	s.Eval = nil
	c := plan.Cluster
	c.Devices, c.Processes, c.Nodes, c.Transport, c.Weights = 1, 1, nil, "inproc", nil
	one, err := engine.Compile(&s, c)
	if err != nil {
		return 0, 0, err
	}
	var times []time.Duration
	var began time.Time
	stop := new(atomic.Bool)
	_, err = runner.Run(one, runner.RunOptions{Interrupt: stop, OnStep: func(m runner.StepMetrics) {
		if m.Step == measureWarmup {
			began = time.Now()
		}
		if m.Step > measureWarmup && m.SamplesPerS > 0 {
			times = append(times, time.Duration(float64(m.Samples)/m.SamplesPerS*1e9))
			if len(times) >= measureMin && time.Since(began) >= measureFor {
				stop.Store(true)
			}
		}
	}})
	if err != nil {
		return 0, 0, err
	}
	if len(times) == 0 {
		return 0, 0, fmt.Errorf("the data gave fewer than %d steps", measureWarmup+1)
	}
	slices.Sort(times)
	return times[len(times)/2], len(times), nil
}
