package script

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"

	"go.starlark.net/starlark"

	"gorun/datasets/torchrand"
	"gorun/engine/spec"
)

// newPartition wraps a Starlark partition strategy as a Go function. Each
// call runs on a fresh thread with the loader's step limit and no load(),
// print or file access.
func newPartition(l *loader, fn starlark.Callable) *spec.Partition {
	p := &spec.Partition{Name: fn.Name()}
	if f, ok := fn.(*starlark.Function); ok {
		p.Pos = spec.Pos(f.Position().String())
		p.Name = fmt.Sprintf("%s (%s)", f.Name(), f.Position())
	}
	maxSteps := l.opts.maxSteps
	p.Fn = func(pc spec.PartitionContext) ([][]int, bool, error) {
		thread := &starlark.Thread{Name: "partition " + fn.Name()}
		thread.SetMaxExecutionSteps(maxSteps)
		ctx := &partitionCtx{pc: pc}
		v, err := starlark.Call(thread, fn, starlark.Tuple{ctx}, nil)
		if err != nil {
			return nil, false, err
		}
		return shardsOf(p.Name, v)
	}
	return p
}

// shardsOf converts what a strategy returned: a list with one list of
// indices per rank, or a dict {"shards": that list, "pad": True} for a
// strategy whose shards repeat indices on purpose.
func shardsOf(name string, v starlark.Value) ([][]int, bool, error) {
	pad := false
	if d, ok := v.(*starlark.Dict); ok {
		s, found, _ := d.Get(starlark.String("shards"))
		if !found {
			return nil, false, fmt.Errorf("partition %s returned a dict without \"shards\"", name)
		}
		if pv, found, _ := d.Get(starlark.String("pad")); found {
			pad = bool(pv.Truth())
		}
		v = s
	}
	outer, ok := v.(starlark.Indexable)
	if !ok {
		return nil, false, fmt.Errorf("partition %s returned %s, want a list with one list of indices per rank", name, v.Type())
	}
	shards := make([][]int, outer.Len())
	for r := range shards {
		inner, ok := outer.Index(r).(starlark.Indexable)
		if !ok {
			return nil, false, fmt.Errorf("partition %s: rank %d's shard is %s, want a list of indices", name, r, outer.Index(r).Type())
		}
		s := make([]int, inner.Len())
		for i := range s {
			if err := starlark.AsInt(inner.Index(i), &s[i]); err != nil {
				return nil, false, fmt.Errorf("partition %s: rank %d, position %d: index is %s, want int", name, r, i, inner.Index(i).String())
			}
		}
		shards[r] = s
	}
	return shards, pad, nil
}

// partitionCtx is the value a strategy receives. Its labels field is built
// only when the strategy reads it.
type partitionCtx struct {
	pc     spec.PartitionContext
	labels *starlark.List
}

var _ starlark.HasAttrs = (*partitionCtx)(nil)

func (c *partitionCtx) String() string {
	return fmt.Sprintf("partition_context(size=%d, world=%d, epoch=%d, seed=%d)", c.pc.Size, c.pc.World, c.pc.Epoch, c.pc.Seed)
}
func (c *partitionCtx) Type() string          { return "partition_context" }
func (c *partitionCtx) Freeze()               {}
func (c *partitionCtx) Truth() starlark.Bool  { return starlark.True }
func (c *partitionCtx) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable: partition_context") }

func (c *partitionCtx) AttrNames() []string {
	return []string{"epoch", "labels", "seed", "size", "weights", "world"}
}

func (c *partitionCtx) Attr(name string) (starlark.Value, error) {
	switch name {
	case "size":
		return starlark.MakeInt(c.pc.Size), nil
	case "world":
		return starlark.MakeInt(c.pc.World), nil
	case "epoch":
		return starlark.MakeInt(c.pc.Epoch), nil
	case "seed":
		return starlark.MakeInt64(c.pc.Seed), nil
	case "weights":
		if c.pc.Weights == nil {
			return starlark.None, nil
		}
		l := make([]starlark.Value, len(c.pc.Weights))
		for i, w := range c.pc.Weights {
			l[i] = starlark.Float(w)
		}
		return starlark.NewList(l), nil
	case "labels":
		if c.pc.Labels == nil {
			return nil, fmt.Errorf("partition_context.labels: this dataset has no labels")
		}
		if c.labels == nil {
			l := make([]starlark.Value, len(c.pc.Labels))
			for i, y := range c.pc.Labels {
				l[i] = starlark.MakeInt(int(y))
			}
			c.labels = starlark.NewList(l)
			c.labels.Freeze()
		}
		return c.labels, nil
	}
	return nil, nil
}

// shuffleBuiltin implements shuffle(n, seed, rng = "torch"): a random
// permutation of 0..n-1, computed in Go.
//   - rng = "torch": torch.randperm(n) for a torch.Generator seeded with
//     seed (what DistributedSampler draws; PyTorch keeps the seed's low 32
//     bits);
//   - rng = "python": list(range(n)) after random.Random(seed).shuffle in
//     CPython 3 (what the distributed tutorial's DataPartitioner draws);
//     any int seed, as Python takes it.
func shuffleBuiltin(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var n int
	var seed starlark.Int
	rng := "torch"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "n", &n, "seed", &seed, "rng?", &rng); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: n must be ≥ 0, got %d", b.Name(), n)
	}
	switch rng {
	case "torch":
		// Two's complement low 64 bits, as torch.Generator.manual_seed
		// takes a negative seed.
		low := new(big.Int).And(seed.BigInt(), new(big.Int).SetUint64(math.MaxUint64))
		return intList(torchrand.RandPerm(n, low.Uint64())), nil
	case "python":
		return intList(torchrand.PyShuffle(n, seed.BigInt())), nil
	}
	return nil, fmt.Errorf("%s: rng must be \"torch\" or \"python\", got %q", b.Name(), rng)
}

// argsortBuiltin implements argsort(values): the indices that sort values
// (ints or floats), stable (equal values keep their order).
func argsortBuiltin(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var seq starlark.Indexable
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "values", &seq); err != nil {
		return nil, err
	}
	n := seq.Len()
	idx := make([]int, n)
	if ints, ok := int64s(seq); ok {
		// Sorting (value, position) pairs is stable and faster than
		// sort.SliceStable; ints are compared exactly.
		type pair struct{ v, i int64 }
		ps := make([]pair, n)
		for i, v := range ints {
			ps[i] = pair{v, int64(i)}
		}
		slices.SortFunc(ps, func(a, c pair) int {
			if r := cmp.Compare(a.v, c.v); r != 0 {
				return r
			}
			return cmp.Compare(a.i, c.i)
		})
		for i, p := range ps {
			idx[i] = int(p.i)
		}
		return intList(idx), nil
	}
	type pair struct {
		v float64
		i int
	}
	ps := make([]pair, n)
	for i := range ps {
		f, ok := starlark.AsFloat(seq.Index(i))
		if !ok {
			return nil, fmt.Errorf("%s: element %d is %s, want a number", b.Name(), i, seq.Index(i).Type())
		}
		ps[i] = pair{f, i}
	}
	slices.SortFunc(ps, func(a, c pair) int {
		if r := cmp.Compare(a.v, c.v); r != 0 { // NaN sorts first
			return r
		}
		return cmp.Compare(a.i, c.i)
	})
	for i, p := range ps {
		idx[i] = p.i
	}
	return intList(idx), nil
}

// int64s returns seq's elements when every one is an int that fits in an
// int64.
func int64s(seq starlark.Indexable) ([]int64, bool) {
	xs := make([]int64, seq.Len())
	for i := range xs {
		v, ok := seq.Index(i).(starlark.Int)
		if !ok {
			return nil, false
		}
		if xs[i], ok = v.Int64(); !ok {
			return nil, false
		}
	}
	return xs, true
}

func intList(xs []int) *starlark.List {
	l := make([]starlark.Value, len(xs))
	for i, x := range xs {
		l[i] = starlark.MakeInt(x)
	}
	return starlark.NewList(l)
}
