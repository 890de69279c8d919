package engine

import (
	"fmt"
	"hash/fnv"
	"path/filepath"
	"reflect"
	"strings"

	"gorun/engine/spec"
	"gorun/ops"
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
// steps by meaning (StepKey: op, dtypes and shapes, the attributes set)
// with the layer each computes, and the gradient buckets. Two processes
// that compiled another script, or the same one with another --set,
// differ in some entry; the runner names the first.
func (p *Plan) Fingerprint() []PlanStep {
	out, _ := p.fingerprint(func(n *Node) (string, error) { return StepKey(n) + " in " + n.Layer, nil }, nil)
	return out
}

// fingerprint is Fingerprint with the graph's nodes written by step; when
// nodes is not nil, it gets the node of each step entry by its label.
func (p *Plan) fingerprint(step func(n *Node) (string, error), nodes map[string]*Node) ([]PlanStep, error) {
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
		{"sync", fmt.Sprintf("%s op %s bucket_mb %g overlap %v root %d every %d broadcast_buffers %v%s", sy.Kind, sy.Op, sy.BucketMB, sy.Overlap, sy.Root, sy.Every, sy.BroadcastBuffers, stageString(sy))},
		// Data files by name: where the script and its data lie (their
		// folder) may change between a run and its resume.
		{"data", fmt.Sprintf("%s split %s limit %d normalize %v size %d shape %v classes %d noise %g seed %d file %q x %q y %q transforms %+v seq_len %d vocab %s test_fraction %g",
			d.Kind, d.Split, d.Limit, d.Normalize, d.Size, d.Shape, d.Classes, d.Noise, d.Seed, baseName(d.File), baseName(d.X), baseName(d.Y), d.Transforms, d.SeqLen, d.Vocab, d.TestFraction)},
	}
	if d.Kind == "images" || d.Kind == "csv" {
		// Added only for these kinds: the fingerprints of other data stay
		// as earlier gorun versions wrote them.
		out[len(out)-1].Text += fmt.Sprintf(" size %v channels %d mean %v std %v columns %q y %q regression %v standardize %v test_file %q",
			d.ImageSize, d.Channels, d.ChannelMean, d.ChannelStd, d.Columns, d.Y, d.Regression, d.Standardize, baseName(d.TestFile))
	}
	if s.Partition != nil {
		out = append(out, PlanStep{"partition", s.Partition.Name})
	}
	for i, n := range p.Graph.Forward {
		text, err := step(n)
		if err != nil {
			return nil, fmt.Errorf("forward step %d: %w", i+1, err)
		}
		out = append(out, PlanStep{fmt.Sprintf("forward step %d", i+1), text})
		if nodes != nil {
			nodes[out[len(out)-1].Label] = n
		}
	}
	for i, n := range p.Graph.Backward {
		text, err := step(n)
		if err != nil {
			return nil, fmt.Errorf("backward step %d: %w", i+1, err)
		}
		out = append(out, PlanStep{fmt.Sprintf("backward step %d", i+1), text})
		if nodes != nil {
			nodes[out[len(out)-1].Label] = n
		}
	}
	for i, b := range p.Buckets {
		out = append(out, PlanStep{fmt.Sprintf("bucket %d", i), fmt.Sprintf("%d values at %d, after backward step %d", b.Elems, b.Offset, b.AfterOps+1)})
	}
	return out, nil
}

// StepKey writes what a graph node computes, by meaning: its op, the
// dtype and shape of each input and output ("-" for an absent optional
// input), and the attributes (ops.Attrs) set to other than their field's
// zero value, by field name in the field order:
//
//	conv2d f32[32 1 28 28] f32[8 1 5 5] f32[8] → f32[32 8 24 24] {Stride:1 Groups:1}
//
// An attribute field added to ops.Attrs leaves every key of the nodes
// that do not set it as it was, so checkpoints keep resuming. Array
// attributes are written without their trailing zero elements (Perm's
// unused places), floats in their shortest exact form.
func StepKey(n *Node) string {
	return fmt.Sprintf("%s %s → %s %s", n.Op, valuesKey(n.In), valuesKey(n.Out), attrsKey(reflect.ValueOf(n.Attrs)))
}

// valuesKey writes values as StepKey does.
func valuesKey(vs []*Value) string {
	if len(vs) == 0 {
		return "()"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		switch {
		case v == nil:
			parts[i] = "-"
		case v.Int:
			parts[i] = fmt.Sprintf("i32%v", v.Shape)
		default:
			parts[i] = fmt.Sprintf("f32%v", v.Shape)
		}
	}
	return strings.Join(parts, " ")
}

// attrsKey writes the fields of struct a that are not zero, as
// {Name:value ...}.
func attrsKey(a reflect.Value) string {
	var parts []string
	t := a.Type()
	for i := range t.NumField() {
		f := a.Field(i)
		if f.IsZero() {
			continue
		}
		parts = append(parts, t.Field(i).Name+":"+attrValue(f))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// attrValue writes one attribute: arrays and slices without their
// trailing zero elements, anything else as %v does.
func attrValue(f reflect.Value) string {
	if k := f.Kind(); k != reflect.Array && k != reflect.Slice {
		return fmt.Sprint(f)
	}
	n := f.Len()
	for n > 0 && f.Index(n-1).IsZero() {
		n--
	}
	elems := make([]string, n)
	for i := range n {
		elems[i] = fmt.Sprint(f.Index(i))
	}
	return "[" + strings.Join(elems, " ") + "]"
}

// baseName is a data file's name without its folder ("" when none).
func baseName(path string) string {
	if path == "" {
		return ""
	}
	return filepath.Base(path)
}

// ResumeKeyFormat names how ResumeKey writes the graph's steps (StepKey,
// by meaning); checkpoints record it beside the key (metadata
// "plan_format"). Checkpoints without it were written before keys by
// meaning, with every attribute of ops.Attrs printed (CheckResumeKey
// reads those too).
const ResumeKeyFormat = "meaning-1"

// ResumeKey is what a resumed run must share with the run that wrote its
// checkpoint: the fingerprint's entries but the world (checked on its
// own) and the run's length (a resumed run may go on for more epochs),
// its steps by StepKey alone (what they compute, not the layers' labels).
// Its steps and buckets are those of the graph without the backend's own
// fusions (GraphOptions: how a CPU plan groups conv1, its pooling and
// ReLU), which change how the steps are grouped, not what the model
// computes: a checkpoint resumes on another backend, and those written
// before such a fusion existed still resume. They are also those of the
// float32 graph, without mixed precision's casts: parameters and
// optimizer state are float32 in every precision (master weights), so a
// bf16 or fp16 run's checkpoint resumes as fp32 and the other way round
// (an fp16 run's loss scale is the checkpoint's metadata, not the key's).
func (p *Plan) ResumeKey() []PlanStep {
	out, _ := p.resumeKey(func(n *Node) (string, error) { return StepKey(n), nil }, nil, p.MaxBatch)
	return out
}

// resumeKey is ResumeKey with the graph's nodes written by step (and, when
// nodes is not nil, each step entry's node by its label), its shapes at a
// batch of batch samples a device.
func (p *Plan) resumeKey(step func(n *Node) (string, error), nodes map[string]*Node, batch int) ([]PlanStep, error) {
	q := p
	if p.graphOpts.Supports != nil || batch != p.MaxBatch || p.graphOpts.Precision != ops.FP32 {
		g, err := BuildGraph(&p.Spec.Model, p.loss, batch, p.Sample, GraphOptions{NoFusion: p.graphOpts.NoFusion})
		if err != nil {
			if batch != p.MaxBatch {
				return nil, fmt.Errorf("at the checkpoint's batch of %d a device: %w", batch, err)
			}
			panic(fmt.Sprintf("the plan's graph without the backend's fusions: %v", err)) // it compiled with them
		}
		c := *p
		c.Graph, c.Buckets = g, planBuckets(g, p.Spec, p.Cluster)
		q = &c
	}
	all, err := q.fingerprint(step, nodes)
	if err != nil {
		return nil, err
	}
	var out []PlanStep
	for _, e := range all {
		if e.Label != "world" && e.Label != "run length" {
			out = append(out, e)
		}
	}
	return out, nil
}

// CheckResumeKey compares the resume key a checkpoint holds (saved,
// written in format: ResumeKeyFormat, or "" for checkpoints written
// before keys by meaning) with this plan's, and names the first entry
// that differs. A checkpoint of the earlier format is compared with this
// plan's key written as that format wrote it (LegacyStepKey), its data
// files by name only.
func (p *Plan) CheckResumeKey(format string, saved []PlanStep) error {
	return p.checkResumeKey(format, saved, p.MaxBatch, false)
}

// CheckResumeKeyAcross is CheckResumeKey for a checkpoint that this plan's
// sync strategy resumes (SyncStrategy.Resumes) although it was made on
// another number of devices or under another strategy (a sharded run's,
// or allreduce's into a sharded one): the sync settings and the gradient
// buckets are not compared, and the steps are compared at the
// checkpoint's batch a device, batch (its devices' largest share).
func (p *Plan) CheckResumeKeyAcross(format string, saved []PlanStep, batch int) error {
	return p.checkResumeKey(format, saved, batch, true)
}

// CheckResumeKeyWorld is CheckResumeKey for a checkpoint of this plan's
// own unsharded strategy made on another number of devices (allreduce's,
// a parameter server's), which that strategy resumes: every entry is
// compared, the sync settings and the gradient buckets too (neither
// depends on the world), but the steps at the checkpoint's batch a
// device, batch (its devices' largest share), which is what changes with
// the world (the "world" entry is no part of a resume key).
func (p *Plan) CheckResumeKeyWorld(format string, saved []PlanStep, batch int) error {
	return p.checkResumeKey(format, saved, batch, false)
}

// acrossLabel reports whether a resume key entry is left out of
// CheckResumeKeyAcross's comparison.
func acrossLabel(label string) bool {
	return label == "sync" || strings.HasPrefix(label, "bucket ")
}

func (p *Plan) checkResumeKey(format string, saved []PlanStep, batch int, across bool) error {
	var key []PlanStep
	nodes := map[string]*Node{}
	legacy := false
	switch format {
	case ResumeKeyFormat:
		var err error
		if key, err = p.resumeKey(func(n *Node) (string, error) { return StepKey(n), nil }, nodes, batch); err != nil {
			return err
		}
	case "":
		legacy = true
		var err error
		if key, err = p.resumeKey(LegacyStepKey, nodes, batch); err != nil {
			return fmt.Errorf("the checkpoint's plan key was written before keys by meaning, with every attribute ops had then, and this run's %w: the checkpoint was made by another plan", err)
		}
		saved = append([]PlanStep(nil), saved...)
		for i, e := range saved {
			if e.Label == "data" {
				saved[i].Text = legacyDataNames(e.Text)
			}
		}
	default:
		return fmt.Errorf("the checkpoint's plan key is of format %q, which this gorun does not read (it writes %q): resume with the gorun that made it", format, ResumeKeyFormat)
	}
	const fix = "resume with the script and --set that made it"
	if across {
		drop := func(es []PlanStep) []PlanStep {
			var out []PlanStep
			for _, e := range es {
				if !acrossLabel(e.Label) {
					out = append(out, e)
				}
			}
			return out
		}
		key, saved = drop(key), drop(saved)
	}
	old := map[string]string{}
	for _, e := range saved {
		old[e.Label] = e.Text
	}
	for _, e := range key {
		was, ok := old[e.Label]
		switch {
		case !ok && nodes[e.Label] != nil:
			n := nodes[e.Label]
			return fmt.Errorf("the model has more steps than the checkpoint's: %s, %s of %s, is new (a layer was added?): %s", e.Label, n.Op, layerName(n), fix)
		case !ok:
			return fmt.Errorf("the checkpoint has no %s, this run has %s: %s", e.Label, e.Text, fix)
		case was != e.Text:
			return fmt.Errorf("%s: %s", describeChange(e.Label, was, e.Text, nodes[e.Label], legacy), fix)
		}
	}
	if len(old) != len(key) {
		have := map[string]bool{}
		for _, e := range key {
			have[e.Label] = true
		}
		for _, e := range saved {
			if !have[e.Label] {
				return fmt.Errorf("the checkpoint's model has more steps: its %s (%s) is not in this run's (a layer was removed?): %s", e.Label, firstWord(e.Text), fix)
			}
		}
		return fmt.Errorf("the checkpoint's model has %d plan entries, this run's %d: %s", len(old), len(key), fix)
	}
	return nil
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

// stageString is the sync entry's tail for a sharded strategy's settings
// ("" for the others, whose keys stay as they were).
func stageString(sy spec.Sync) string {
	if sy.Stage == 0 {
		return ""
	}
	return fmt.Sprintf(" stage %d prefetch %d", sy.Stage, sy.Prefetch)
}
