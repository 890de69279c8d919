package engine

import (
	"fmt"

	"gorun/datasets"
	"gorun/datasets/torchrand"
	"gorun/engine/spec"
)

// Shards computes the epoch's shards and the policy for unequal shards.
// With the script's partition strategy, shards are checked and the
// Spec's policy (uneven) applies. By default, the epoch's order is
// torch.randperm(n) seeded with seed+epoch (or 0..n-1 without shuffle),
// each step's global batch is the next batch_size samples of that order,
// and rank r takes its share (SplitBatch, by the cluster's weights) of it, in rank order: N devices
// then see exactly the samples one device would, step for step, whatever
// N, and the last, partial batch is shared out the same way (a rank left
// without samples feeds none and adds nothing to the gradient).
func (p *Plan) Shards(epoch int, ds datasets.Dataset) ([][]int, string, error) {
	s := p.Spec
	world := p.World
	if s.Partition == nil {
		return batchShards(ds.Len(), s.BatchSize, p.Cluster.Weights, world, s.Seed+int64(epoch), s.Shuffle), "zero", nil
	}
	ctx := spec.PartitionContext{Size: ds.Len(), World: world, Epoch: epoch, Seed: s.Seed,
		Labels: ds.Labels(), Weights: p.Cluster.Weights}
	shards, pad, err := s.Partition.Fn(ctx)
	if err != nil {
		return nil, "", err // the strategy's errors name it
	}
	if err := checkShards(s.Partition.Name, shards, world, ds.Len(), pad); err != nil {
		return nil, "", err
	}
	return shards, s.Uneven, nil
}

// epochOrder is the epoch's sample order: torch.randperm(n) for a
// generator seeded with seed, or 0..n-1.
func epochOrder(n int, seed int64, shuffle bool) []int {
	if shuffle {
		return torchrand.RandPerm(n, uint64(seed))
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// batchShards cuts the epoch's order into global batches and gives rank r
// its share of each.
func batchShards(n, batch int, weights []float64, world int, seed int64, shuffle bool) [][]int {
	order := epochOrder(n, seed, shuffle)
	split := SplitBatch(batch, weights, world)
	shards := make([][]int, world)
	for lo := 0; lo < n; lo += batch {
		b := order[lo:min(lo+batch, n)]
		if len(b) < batch {
			split = SplitBatch(len(b), weights, world)
		}
		off := 0
		for r := range shards {
			shards[r] = append(shards[r], b[off:off+split[r]]...)
			off += split[r]
		}
	}
	return shards
}

// checkShards validates what a partition strategy returned.
func checkShards(name string, shards [][]int, world, n int, pad bool) error {
	if len(shards) != world {
		return fmt.Errorf("partition %s returned %d lists, want one per rank (%d)", name, len(shards), world)
	}
	owner := make([]int32, n)
	for i := range owner {
		owner[i] = -1
	}
	total := 0
	for r, sh := range shards {
		total += len(sh)
		for i, x := range sh {
			if x < 0 || x >= n {
				return fmt.Errorf("partition %s: rank %d, position %d: index %d is out of range [0, %d)", name, r, i, x, n)
			}
			if o := owner[x]; o >= 0 && !pad {
				if int(o) == r {
					return fmt.Errorf("partition %s: rank %d, position %d: index %d appears twice in rank %d's shard (return {\"shards\": ..., \"pad\": True} if repeats are intended)", name, r, i, x, r)
				}
				return fmt.Errorf("partition %s: rank %d, position %d: index %d is also in rank %d's shard (return {\"shards\": ..., \"pad\": True} if repeats are intended)", name, r, i, x, o)
			}
			owner[x] = int32(r)
		}
	}
	if total == 0 {
		return fmt.Errorf("partition %s returned no samples at all", name)
	}
	return nil
}

// Schedule is one epoch's batches: which slice of its shard each rank
// feeds at each micro-step.
type Schedule struct {
	shards [][]int
	// batch[r] is rank r's micro-batch size.
	batch []int
	// Steps is the number of micro-steps of the epoch.
	Steps int
	// policy for unequal shards: "pad", "drop" or "zero".
	policy string
	// pad[r] is rank r's shard extended by wrapping round, for "pad".
	padded [][]int
}

// NewSchedule decides the number of micro-steps of an epoch so that every
// rank runs the same number (no rank waits forever on a collective):
//   - pad: as many steps as the longest shard needs; a rank whose shard
//     would run out before the last step starts again from the beginning of
//     its shard and feeds full micro-batches to the end; the others feed
//     what they have left at the last step (as the last, partial batch of
//     a PyTorch DataLoader);
//   - drop: as many full steps as the shortest shard allows; the rest of
//     every shard is skipped this epoch;
//   - zero: as many steps as the longest shard needs; a rank that has run
//     out feeds an empty batch and contributes nothing to the gradient.
//
// The loss is always divided by the number of samples fed across all ranks
// in the step, so the gradient is exactly the mean over them.
func NewSchedule(shards [][]int, batch []int, policy string) *Schedule {
	sc := &Schedule{shards: shards, batch: batch, policy: policy}
	longest, shortest := 0, -1
	for r, sh := range shards {
		n := (len(sh) + batch[r] - 1) / batch[r]
		full := len(sh) / batch[r]
		longest = max(longest, n)
		if shortest < 0 || full < shortest {
			shortest = full
		}
	}
	sc.Steps = longest
	if policy == "drop" {
		sc.Steps = shortest
	}
	if policy == "pad" {
		sc.padded = make([][]int, len(shards))
		for r, sh := range shards {
			sc.padded[r] = sh
			if len(sh) == 0 || len(sh) > (sc.Steps-1)*batch[r] {
				continue // it has samples for every step
			}
			p := append(make([]int, 0, sc.Steps*batch[r]), sh...)
			for i := 0; len(p) < sc.Steps*batch[r]; i++ {
				p = append(p, sh[i%len(sh)])
			}
			sc.padded[r] = p
		}
	}
	return sc
}

// Slice returns rank r's sample indices for micro-step s.
func (sc *Schedule) Slice(r, s int) []int {
	sh := sc.shards[r]
	if sc.padded != nil {
		sh = sc.padded[r]
	}
	lo := s * sc.batch[r]
	hi := lo + sc.batch[r]
	if lo >= len(sh) {
		return nil
	}
	if hi > len(sh) {
		hi = len(sh)
	}
	return sh[lo:hi]
}

// Count is the number of samples all ranks feed at micro-step s.
func (sc *Schedule) Count(s int) int {
	n := 0
	for r := range sc.shards {
		n += len(sc.Slice(r, s))
	}
	return n
}

// EvalRange is rank r's part of an evaluation set of n samples under
// this plan: its share (the function EvalRange), or — when ranks keep
// parameters of their own (Sync.OwnParams: sync.none, local SGD between
// averagings) — the whole set on rank 0 and nothing elsewhere. The
// accuracy a run reports is then that of rank 0's parameters, the model it
// saves (model.safetensors, best.safetensors), not a mixture of replicas
// each scoring a part of the set.
func (p *Plan) EvalRange(n, r int) (lo, hi int) {
	if p.Sync != nil && p.Sync.OwnParams() {
		if r == 0 {
			return 0, n
		}
		return 0, 0
	}
	return EvalRange(n, p.Cluster.Weights, p.World, r)
}

// EvalRange is rank r's contiguous part of an evaluation set of n samples,
// shared as batches are: every sample is evaluated exactly once across ranks.
func EvalRange(n int, weights []float64, world, r int) (lo, hi int) {
	sizes := SplitBatch(n, weights, world)
	for i := 0; i < r; i++ {
		lo += sizes[i]
	}
	return lo, lo + sizes[r]
}
