package engine

import (
	"fmt"
	"strings"
)

// The batches a device feeds batch norm: PyTorch refuses training-mode
// batch statistics over exactly one value per channel ("Expected more
// than 1 value per channel when training"): the values per channel a
// device has are its samples times the values one sample gives
// (BatchNormUse.PerSample), or every device's samples under SyncBatchNorm.
// gorun refuses the same batches, all of them before the first step: a
// full batch's shares when compiling (checkBatchNorm), the last, partial
// batches and a partition strategy's shards when an epoch's schedule is
// made (CheckBatches), before any rank starts that epoch.

// bnRefusal is what PyTorch says of such a batch.
const bnRefusal = `PyTorch refuses this ("Expected more than 1 value per channel when training")`

// checkBatchNorm refuses a Plan whose full batches give a batch norm layer
// one value per channel on some device: the rank's share of batch_size
// (LocalBatch), or batch_size itself under SyncBatchNorm.
func (p *Plan) checkBatchNorm() error {
	s := p.Spec
	for _, bn := range p.Graph.BatchNorms {
		if bn.PerSample != 1 {
			continue
		}
		if bn.Sync || p.World == 1 {
			if s.BatchSize == 1 {
				return &CompileError{Pos: bn.Pos, Layer: bn.Layer, Err: fmt.Errorf(
					"batch_size 1 gives it 1 value per channel in training, and %s: use a batch_size of 2 or more", bnRefusal)}
			}
			continue
		}
		for r, n := range p.LocalBatch {
			if n == 1 {
				return &CompileError{Pos: bn.Pos, Layer: bn.Layer, Err: fmt.Errorf(
					"rank %d takes 1 sample of every batch (batch_size %d over %d devices: %s), which gives it 1 value per channel in training, and %s: use a batch_size of at least %d, or nn.%s(..., sync = True), whose statistics count every device's samples",
					r, s.BatchSize, p.World, shares(p.LocalBatch), bnRefusal, minBatch(p), bnKind(bn.Layer))}
			}
		}
	}
	return nil
}

// CheckBatches refuses an epoch's schedule in which a device would feed a
// batch norm layer one value per channel in training: a last, partial
// batch shared out so that a rank gets one sample, or a partition
// strategy's shard that leaves one. It names the layer, the epoch, the
// batch and the rank. The runner calls it on every epoch's schedule
// before any rank starts the epoch.
func (p *Plan) CheckBatches(epoch int, sc *Schedule) error {
	var uses []BatchNormUse
	for _, bn := range p.Graph.BatchNorms {
		if bn.PerSample == 1 {
			uses = append(uses, bn)
		}
	}
	if len(uses) == 0 {
		return nil
	}
	for step := 0; step < sc.Steps; step++ {
		total := sc.Count(step)
		for _, bn := range uses {
			where := fmt.Sprintf("epoch %d, batch %d of %d", epoch+1, step+1, sc.Steps)
			if bn.Sync {
				if total == 1 {
					return fmt.Errorf("%s: %s: %s: the devices feed 1 sample in all, 1 value per channel in training, and %s: %s",
						bn.Pos, bn.Layer, where, bnRefusal, p.batchHint())
				}
				continue
			}
			for r := range sc.shards {
				if len(sc.Slice(r, step)) != 1 {
					continue
				}
				who := fmt.Sprintf("rank %d feeds 1 sample (the batch's %d shared out as %s)", r, total, shares(sc.sizes(step)))
				if len(sc.shards) == 1 {
					who = "the batch holds 1 sample"
				}
				return fmt.Errorf("%s: %s: %s: %s, 1 value per channel in training, and %s: %s",
					bn.Pos, bn.Layer, where, who, bnRefusal, p.batchHint())
			}
		}
	}
	return nil
}

// CheckEvalBatches refuses an evaluation set of n samples whose batches
// would give a batch norm layer without running statistics
// (track_running_stats = False, batch statistics in evaluation too) one
// value per channel on some rank: rank r evaluates its Plan.EvalRange in
// batches of MaxBatch, and a last one of 1 sample is refused as in
// training. name is the set's, for the message.
func (p *Plan) CheckEvalBatches(name string, n int) error {
	for _, bn := range p.Graph.BatchNorms {
		if bn.PerSample != 1 || !bn.EvalBatch {
			continue
		}
		for r := range p.World {
			lo, hi := p.EvalRange(n, r)
			if (hi-lo)%p.MaxBatch == 1 {
				return fmt.Errorf("%s: %s: evaluating %s (%d samples): rank %d's last batch holds 1 sample (its %d in batches of %d), 1 value per channel for batch statistics (track_running_stats = False), and %s: choose a batch_size or an eval set size that does not leave 1, or keep running statistics",
					bn.Pos, bn.Layer, name, n, r, hi-lo, p.MaxBatch, bnRefusal)
			}
		}
	}
	return nil
}

// batchHint says how to avoid a batch that gives a device 1 sample.
func (p *Plan) batchHint() string {
	if p.Spec.Partition == nil {
		return "the data's size leaves this last batch; choose a batch_size (or a data limit) whose last batch gives every device none or at least 2 samples"
	}
	return fmt.Sprintf("partition %s leaves this batch (uneven = %q); uneven = \"drop\" feeds full batches only", p.Spec.Partition.Name, p.Spec.Uneven)
}

// sizes is every rank's sample count at micro-step s.
func (sc *Schedule) sizes(s int) []int {
	out := make([]int, len(sc.shards))
	for r := range out {
		out[r] = len(sc.Slice(r, s))
	}
	return out
}

// shares writes per-rank sample counts as "2 + 1".
func shares(n []int) string {
	parts := make([]string, len(n))
	for i, v := range n {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, " + ")
}

// minBatch is the smallest batch_size that gives every rank 2 samples or
// more under the cluster's weights.
func minBatch(p *Plan) int {
	for b := p.Spec.BatchSize + 1; ; b++ {
		ok := true
		for _, n := range SplitBatch(b, p.Cluster.Weights, p.World) {
			ok = ok && n >= 2
		}
		if ok || b > 1<<20 {
			return b
		}
	}
}

// bnKind is the script builtin of a batch norm layer's label
// ("batchnorm1d" of `batchnorm1d "bn1"`).
func bnKind(label string) string {
	kind, _, _ := strings.Cut(label, " ")
	return kind
}
