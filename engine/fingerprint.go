package engine

import (
	"fmt"
	"gorun/engine/spec"
	"hash/fnv"
)

// PlanStep is one entry of a Plan's fingerprint: what must be the same on
// every process of a run, in a form a person can read.
type PlanStep struct {
	Label string // "settings", "forward step 3", "bucket 0", …
	Text  string // what it is
}

// Hash is the entry's 64-bit FNV-1a hash.
func (e PlanStep) Hash() uint64 {
	h := fnv.New64a()
	h.Write([]byte(e.Label))
	h.Write([]byte{0})
	h.Write([]byte(e.Text))
	return h.Sum64()
}

// Fingerprint lists what every process of a run must agree on before the
// first collective: the run's settings, the model's forward and backward
// steps with their shapes and attributes, and the gradient buckets. Two
// processes that compiled another script, or the same one with another
// --set, differ in some entry; the runner names the first.
func (p *Plan) Fingerprint() []PlanStep {
	s := p.Spec
	o, sy := s.Optimizer, s.Sync
	d := s.Data
	out := []PlanStep{
		{"world", fmt.Sprintf("%d ranks (%d processes × %d devices), backend %s, transport %s, weights %v",
			p.World, p.Cluster.ProcessCount(), p.Cluster.Devices, p.Cluster.Backend, p.Cluster.Transport, p.Cluster.Weights)},
		{"train settings", fmt.Sprintf("batch_size %d, seed %d, shuffle %v, accumulate %d, uneven %s, loss %s, on_nonfinite %q",
			s.BatchSize, s.Seed, s.Shuffle, s.Accumulate, s.Uneven, s.Loss, s.OnNonFinite)},
		{"run length", fmt.Sprintf("epochs %d, max_steps %d", s.Epochs, s.MaxSteps)},
		{"clip_grad_norm", fmt.Sprint(s.ClipGradNorm)},
		{"ignore_index", ignoreString(s.IgnoreIndex)},
		{"optimizer", fmt.Sprintf("%s lr %g momentum %g dampening %g weight_decay %g nesterov %v betas (%g, %g) eps %g%s",
			o.Kind, o.LR, o.Momentum, o.Dampening, o.WeightDecay, o.Nesterov, o.Beta1, o.Beta2, o.Eps, groupsString(o.Groups))},
		{"schedule", scheduleString(s.Schedule)},
		{"sync", fmt.Sprintf("%s op %s bucket_mb %g overlap %v root %d every %d broadcast_buffers %v", sy.Kind, sy.Op, sy.BucketMB, sy.Overlap, sy.Root, sy.Every, sy.BroadcastBuffers)},
		{"data", fmt.Sprintf("%s split %s limit %d normalize %v size %d shape %v classes %d noise %g seed %d file %q x %q y %q transforms %+v seq_len %d vocab %s test_fraction %g",
			d.Kind, d.Split, d.Limit, d.Normalize, d.Size, d.Shape, d.Classes, d.Noise, d.Seed, d.File, d.X, d.Y, d.Transforms, d.SeqLen, d.Vocab, d.TestFraction)},
	}
	if s.Partition != nil {
		out = append(out, PlanStep{"partition", s.Partition.Name})
	}
	shapes := func(vs []*Value) []string {
		var out []string
		for _, v := range vs {
			if v == nil {
				out = append(out, "-")
			} else {
				out = append(out, fmt.Sprint(v.Shape))
			}
		}
		return out
	}
	for i, n := range p.Graph.Forward {
		out = append(out, PlanStep{fmt.Sprintf("forward step %d", i+1),
			fmt.Sprintf("%s %s %v → %v %+v", n.Op, n.Layer, shapes(n.In), shapes(n.Out), n.Attrs)})
	}
	for i, n := range p.Graph.Backward {
		out = append(out, PlanStep{fmt.Sprintf("backward step %d", i+1),
			fmt.Sprintf("%s %s %v → %v %+v", n.Op, n.Layer, shapes(n.In), shapes(n.Out), n.Attrs)})
	}
	for i, b := range p.Buckets {
		out = append(out, PlanStep{fmt.Sprintf("bucket %d", i), fmt.Sprintf("%d values at %d, after backward step %d", b.Elems, b.Offset, b.AfterOps+1)})
	}
	return out
}

// ResumeKey is the part of the fingerprint a resumed run must share with
// the run that wrote its checkpoint: all but the world (checked on its
// own) and the run's length (a resumed run may go on for more epochs). Its
// steps and buckets are those of the graph without the backend's own
// fusions (GraphOptions: how a CPU plan groups conv1, its pooling and
// ReLU), which change how the steps are grouped, not what the model
// computes: a checkpoint resumes on another backend, and those written
// before such a fusion existed still resume.
func (p *Plan) ResumeKey() []PlanStep {
	q := p
	if p.graphOpts.Supports != nil {
		g, err := BuildGraph(&p.Spec.Model, p.loss, p.MaxBatch, p.Sample, GraphOptions{NoFusion: p.graphOpts.NoFusion})
		if err != nil {
			panic(fmt.Sprintf("the plan's graph without the backend's fusions: %v", err)) // it compiled with them
		}
		c := *p
		c.Graph, c.Buckets = g, planBuckets(g, p.Spec, p.Cluster)
		q = &c
	}
	var out []PlanStep
	for _, e := range q.Fingerprint() {
		if e.Label != "world" && e.Label != "run length" {
			out = append(out, e)
		}
	}
	return out
}

// scheduleString describes a learning-rate schedule (and what follows it).
func scheduleString(sc *spec.Schedule) string {
	if sc == nil {
		return "none"
	}
	out := fmt.Sprintf("%s every %d gamma %g min_lr %g steps %d start_factor %g max_lr %g pct_start %g div %g final_div %g",
		sc.Kind, sc.Every, sc.Gamma, sc.MinLR, sc.Steps, sc.StartFactor, sc.MaxLR, sc.PctStart, sc.DivFactor, sc.FinalDivFactor)
	if sc.Then != nil {
		out += ", then " + scheduleString(sc.Then)
	}
	return out
}

// groupsString describes an optimizer's parameter groups.
func groupsString(gs []spec.ParamGroup) string {
	out := ""
	for _, g := range gs {
		out += fmt.Sprintf(", group %q", g.Match)
		if g.WeightDecay != nil {
			out += fmt.Sprintf(" weight_decay %g", *g.WeightDecay)
		}
		if g.LR != nil {
			out += fmt.Sprintf(" lr %g", *g.LR)
		}
	}
	return out
}

func ignoreString(ig *int) string {
	if ig == nil {
		return "none"
	}
	return fmt.Sprint(*ig)
}
