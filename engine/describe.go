package engine

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"gorun/engine/spec"
	"gorun/engine/target"
	"gorun/ops"
)

// Describe writes the Plan as a reader checks it: the run's settings, the
// parameters, and each device's steps with their op, shapes and layer,
// where every collective sits and the bytes it moves, and the memory each
// device needs.
func (p *Plan) Describe(w io.Writer) error {
	s := p.Spec
	ew := &errWriter{w: w}
	ew.printf("plan for %s\n", s.Script)
	for _, l := range s.Loads {
		ew.printf("  load %s\n", l)
	}
	ew.printf("  devices %d (%s, %s), global batch %d split %v, accumulate %d, epochs %d, seed %d\n",
		p.World, p.Cluster.Backend, p.Cluster.Transport, s.BatchSize, p.LocalBatch, s.Accumulate, s.Epochs, s.Seed)
	ew.printf("  settings: %s\n", p.Cluster.settingsLine())
	if procs := p.Cluster.ProcessCount(); procs > 1 && target.TransportOwner(p.Cluster.Transport) != nil {
		ew.printf("  processes %d × %d devices; this plan shows process %d (ranks %d–%d): collectives run in one %s communicator over every device of every process, one rank a device\n",
			procs, p.Cluster.Devices, p.Process, p.Devices[0].Rank, p.Devices[len(p.Devices)-1].Rank, p.Cluster.Transport)
	} else if procs > 1 {
		ew.printf("  processes %d × %d devices; this plan shows process %d (ranks %d–%d): collectives reduce in memory inside a process, then once across processes (%s)\n",
			procs, p.Cluster.Devices, p.Process, p.Devices[0].Rank, p.Devices[len(p.Devices)-1].Rank, p.Cluster.Transport)
	}
	ew.printf("  loss %s, optimizer %s (lr %g, weight_decay %g%s), schedule %s, sync %s\n", s.Loss, s.Optimizer.Kind, s.Optimizer.LR,
		s.Optimizer.WeightDecay, groupsString(s.Optimizer.Groups), describeSchedule(s.Schedule), p.Sync.Describe(p))
	if s.Partition != nil {
		ew.printf("  partition %s, unequal shards: %s\n", s.Partition.Name, s.Uneven)
	} else {
		ew.printf("  partition: default (each step's global batch from one shuffled order, shared out by rank; shuffle=%v)\n", s.Shuffle)
	}
	ew.printf("\nparameters: %d tensors, %d values (%s)\n", len(p.Graph.Params), p.NumParam, humanBytes(int64(p.NumParam)*4))
	tw := tabwriter.NewWriter(ew, 2, 4, 2, ' ', 0)
	for _, prm := range p.Graph.Params {
		fmt.Fprintf(tw, "  %s\t%v\t%d\n", prm.Name, prm.Value.Shape, prm.Value.Elems())
	}
	tw.Flush()
	if len(p.Graph.Stats) > 0 {
		ew.printf("\nrunning statistics (saved, not trained; %s): %d tensors\n", statsSharing(p), len(p.Graph.Stats))
		for _, st := range p.Graph.Stats {
			fmt.Fprintf(tw, "  %s\t%v\t%d\n", st.Name, st.Value.Shape, st.Value.Elems())
		}
		tw.Flush()
	}
	p.describePrecision(ew)
	if p.World > 1 {
		ew.printf("\ngradient buckets (%s, %g MB):\n", p.Sync.Kind(), bucketMB(p))
		at := map[string]int{}
		for i, st := range p.Devices[0].Steps {
			if st.Kind == CollectiveStep {
				at[st.Collective.Tag] = i + 1
			}
		}
		for i, b := range p.Buckets {
			last := p.Graph.Backward[b.AfterOps]
			ew.printf("  bucket %d: %d values (%s), step %d, once %s of %s is done: %s\n", i, b.Elems,
				humanBytes(int64(b.Elems)*4), at[fmt.Sprintf("bucket %d", i)], last.Op, last.Layer, paramNames(b))
		}
	}
	if p.Sharding != nil {
		p.describeSharding(ew)
	}
	for _, prog := range p.Devices {
		ew.printf("\ndevice %d (rank %d, %s): batch %d, memory %s in one arena (buffers %s, scratch %s)\n", prog.Rank, prog.Rank,
			p.Cluster.Backend, p.LocalBatch[prog.Rank], humanBytes(prog.MemoryBytes()),
			humanBytes(prog.MemoryBytes()-int64(prog.WorkElems())*4), humanBytes(int64(prog.WorkElems())*4))
		tw := tabwriter.NewWriter(ew, 2, 4, 2, ' ', 0)
		dtype := func(string) string { return "" }
		if s.Precision != ops.FP32 {
			dtype = func(d string) string { return "\t" + d } // mixed precision: a dtype column
		}
		fmt.Fprintf(tw, "  #\tphase\top\tinputs\toutputs\tlayer\tstream%s\n", dtype("dtype"))
		var moved int64
		for i, st := range prog.Steps {
			switch st.Kind {
			case CollectiveStep:
				c := st.Collective
				extra := ""
				if st.Every > 0 {
					extra = fmt.Sprintf(", every %d steps", st.Every)
				}
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s [%d:%d]\t%s/step%s\t%s\t%s%s\n", i+1, st.Phase, c, c.Buffer.Name,
					c.Offset, c.Offset+c.Elems, humanBytes(c.Bytes), extra, st.Layer, Stream(p, st), dtype("fp32"))
				if st.Every == 0 {
					moved += c.Bytes
				}
			default:
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s%s\n", i+1, st.Phase, st.OpName(), shapes(st.In), shapes(st.Out), layerAt(st), Stream(p, st), dtype(StepDtype(st)))
			}
		}
		tw.Flush()
		if procs := p.Cluster.ProcessCount(); procs > 1 && target.TransportOwner(p.Cluster.Transport) != nil {
			ew.printf("  collectives move %s per step (payload per rank) in one %s communicator over the %d devices of the %d processes\n",
				humanBytes(moved), p.Cluster.Transport, p.World, procs)
		} else if procs > 1 {
			ew.printf("  collectives move %s per step at each level: in memory among the %d devices of each process (payload per rank), then %s across the %d processes (%s, from each process's first device)\n",
				humanBytes(moved), p.Cluster.Devices, humanBytes(moved), procs, p.Cluster.Transport)
		} else if p.World > 1 {
			ew.printf("  collectives move %s per step (payload per rank)\n", humanBytes(moved))
		}
	}
	return ew.err
}

// Stream says where a step runs on its device: "compute" for kernels and
// copies; "comm" for collectives that overlap the backward pass (a stream
// of their own on a GPU, a goroutine of their own on the CPU: the sync
// strategy's Overlap) and prefetched ones (Step.Beside); "compute" too for
// collectives that run in order with the kernels.
func Stream(p *Plan, st *Step) string {
	if st.Kind == CollectiveStep && (st.Phase == PhaseSync && p.Sync.Overlap() || st.Beside) {
		return "comm"
	}
	return "compute"
}

func layerAt(st *Step) string {
	if st.Pos == "" {
		return st.Layer
	}
	return st.Layer + " (" + string(st.Pos) + ")"
}

// bucketMB is the gradient buckets' size limit: the cluster's, else the
// script's.
func bucketMB(p *Plan) float64 {
	if p.Cluster.BucketMB > 0 {
		return p.Cluster.BucketMB
	}
	return p.Spec.Sync.BucketMB
}

func paramNames(b Bucket) string {
	var names []string
	for _, prm := range b.Params {
		names = append(names, prm.Name)
	}
	return strings.Join(names, ", ")
}

func shapes(bs []*Buffer) string {
	var parts []string
	for _, b := range bs {
		if b == nil {
			continue
		}
		s := fmt.Sprint(b.Max)
		if b.DType == Int32 {
			s += "i"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

// statsSharing says how devices share their running statistics: as the
// plan does it (a broadcast of the statistics before the forward pass,
// placed by the sync strategy: allreduce's broadcast_buffers), or not.
func statsSharing(p *Plan) string {
	if p.World == 1 {
		return "one device"
	}
	prog := p.Devices[0]
	for _, st := range prog.Steps {
		if st.Kind == CollectiveStep && st.Phase == PhaseForward && st.Collective.Kind == CollectiveBroadcast && st.Collective.Buffer == prog.StatArena {
			return "rank 0's broadcast before each forward pass"
		}
	}
	return "each device keeps its own; checkpoints hold rank 0's"
}

// describeSchedule writes a schedule as the sched.* call that made it.
func describeSchedule(sc *spec.Schedule) string {
	if sc == nil {
		return "none"
	}
	switch sc.Kind {
	case "step":
		return fmt.Sprintf("sched.step(every=%d, gamma=%g)", sc.Every, sc.Gamma)
	case "cosine":
		return fmt.Sprintf("sched.cosine(min_lr=%g)", sc.MinLR)
	case "warmup":
		out := fmt.Sprintf("sched.linear_warmup(%d, start_factor=%.4g)", sc.Steps, sc.StartFactor)
		if sc.Then != nil {
			out += " then " + describeSchedule(sc.Then)
		}
		return out
	case "onecycle":
		return fmt.Sprintf("sched.onecycle(max_lr=%g, pct_start=%g, div_factor=%g, final_div_factor=%g)", sc.MaxLR, sc.PctStart, sc.DivFactor, sc.FinalDivFactor)
	}
	return sc.Kind
}

// describeSharding writes what a sharded plan (Plan.Sharding) holds on
// each device, by kind, and what its collectives send per step, beside
// what plain allreduce would need for the same script.
func (p *Plan) describeSharding(ew *errWriter) {
	sh := p.Sharding
	ew.printf("\nsharding (stage %d): every bucket padded to a multiple of %d and split into one block per rank; a rank's shard is %d values (%s) of the %d flattened (%d of them padding)\n",
		sh.Stage, sh.World, sh.ShardElems, humanBytes(int64(sh.ShardElems)*4), sh.FlatElems, sh.FlatElems-p.NumParam)
	twin, err := p.allReduceTwin()
	if err != nil {
		ew.printf("  (plain allreduce does not compile for this script: %v)\n", err)
	}
	ew.printf("\nmemory per device, by what it holds, beside plain allreduce:\n")
	tw := tabwriter.NewWriter(ew, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  rank\tsync\tparameters\tgradients\toptimizer state\tparams+grads+state\tactivations\tscratch\ttotal\t\n")
	row := func(rank string, name string, m MemoryUse) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", rank, name, humanBytes(m.Params), humanBytes(m.Grads), humanBytes(m.State),
			humanBytes(m.Params+m.Grads+m.State), humanBytes(m.Activations), humanBytes(m.Scratch), humanBytes(m.Total()))
	}
	for i, prog := range p.Devices {
		row(fmt.Sprint(prog.Rank), fmt.Sprintf("zero stage %d", sh.Stage), prog.Memory())
		if twin != nil {
			row("", "allreduce", twin.Devices[i].Memory())
		}
	}
	tw.Flush()
	if m := p.Devices[0].Memory(); m.InFlightGrads > 0 || m.InFlightParams > 0 {
		ew.printf("  of which reused over the step: gradients of buckets being reduced %s, parameters of layers gathered %s\n",
			humanBytes(m.InFlightGrads), humanBytes(m.InFlightParams))
	}
	if p.Spec.Accumulate > 1 && sh.Stage >= 2 && sh.World > 1 {
		ew.printf("  accumulate %d: the gradients sum over micro-batches whole, as in stage 1\n", p.Spec.Accumulate)
	}
	if p.World == 1 {
		return
	}
	ew.printf("\ncollectives per step, what each device sends (ring algorithms; payloads in the steps below):\n")
	line := func(name string, prog *Program) int64 {
		t := prog.Traffic(p.World, p.Spec.Accumulate)
		var kinds []string
		for k := range t {
			kinds = append(kinds, string(k))
		}
		slices.Sort(kinds)
		var parts []string
		var all int64
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s %s", k, humanBytes(t[CollectiveKind(k)])))
			all += t[CollectiveKind(k)]
		}
		ew.printf("  %s: %s, %s in all\n", name, strings.Join(parts, ", "), humanBytes(all))
		return all
	}
	mine := line(fmt.Sprintf("rank %d, zero stage %d", p.Devices[0].Rank, sh.Stage), p.Devices[0])
	if twin != nil {
		if ar := line(fmt.Sprintf("rank %d, allreduce", twin.Devices[0].Rank), twin.Devices[0]); ar > 0 {
			ew.printf("  zero stage %d sends %.2f× what allreduce sends\n", sh.Stage, float64(mine)/float64(ar))
		}
	}
}
