package script

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/bits"
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
	maxSteps, maxMemory, ctx, abort := l.opts.maxSteps, l.opts.maxMemory, l.opts.ctx, l.opts.abort
	p.Fn = func(pc spec.PartitionContext) ([][]int, bool, error) {
		thread := &starlark.Thread{Name: "partition " + fn.Name()}
		setupThread(thread, maxSteps)
		defer watch(ctx, maxMemory, "partition "+p.Name, thread.Cancel, abort)()
		v, err := starlark.Call(thread, fn, starlark.Tuple{&partitionCtx{pc: pc}}, nil)
		if err != nil {
			return nil, false, fmt.Errorf("partition %s, epoch %d: %w", p.Name, pc.Epoch+1, err)
		}
		return shardsOf(p.Name, v)
	}
	return p
}

// partitionTakesOneArgument checks, when train() is called rather than
// when the first epoch starts, that a Starlark strategy can be called with
// the one context argument gorun passes: one parameter without a default
// (or *args), the rest with defaults.
func partitionTakesOneArgument(fn starlark.Callable) error {
	f, ok := fn.(*starlark.Function)
	if !ok {
		return nil // a builtin checks its own arguments
	}
	required := 0
	for i := 0; i < f.NumParams()-f.NumKwonlyParams(); i++ {
		if f.HasVarargs() && i == f.NumParams()-f.NumKwonlyParams()-1 {
			break // *args is not a required parameter
		}
		if f.ParamDefault(i) == nil {
			required++
		}
	}
	for i := f.NumParams() - f.NumKwonlyParams(); i < f.NumParams(); i++ {
		if f.HasKwargs() && i == f.NumParams()-1 {
			break
		}
		if f.ParamDefault(i) == nil {
			name, _ := f.Param(i)
			return fmt.Errorf("%s (%s) has a keyword-only parameter %s without a default; a strategy is called with one argument, the context (ctx.size, ctx.world, ctx.epoch, ctx.seed, ctx.labels, ctx.weights)", f.Name(), f.Position(), name)
		}
	}
	if required == 1 || (required == 0 && (f.NumParams()-f.NumKwonlyParams() > 0 || f.HasVarargs())) {
		return nil
	}
	return fmt.Errorf("%s (%s) takes %d arguments without defaults; a strategy takes one, the context (ctx.size, ctx.world, ctx.epoch, ctx.seed, ctx.labels, ctx.weights), as in def strategy(ctx)", f.Name(), f.Position(), required)
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
	if err := checkElements(b.Name(), "n", n); err != nil {
		return nil, err
	}
	if err := charge(thread, b.Name(), uint64(n)+1); err != nil {
		return nil, err
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

// argsortBuiltin implements argsort(values, *then): the indices that sort
// values (ints or floats), stable (equal values keep their order); lists
// given after it break ties in turn, as numpy.lexsort with its keys in
// reverse: argsort(labels, order) sorts by label, then by order.
func argsortBuiltin(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 && len(kwargs) == 1 && kwargs[0][0] == starlark.String("values") {
		args, kwargs = starlark.Tuple{kwargs[0][1]}, nil // argsort(values = xs)
	}
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("%s: unexpected keyword argument %s", b.Name(), kwargs[0][0])
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("%s: missing argument for values", b.Name())
	}
	keys := make([]starlark.Indexable, len(args))
	for k, a := range args {
		seq, ok := a.(starlark.Indexable)
		if !ok {
			return nil, fmt.Errorf("%s: argument %d is %s, want a list of numbers", b.Name(), k+1, a.Type())
		}
		if seq.Len() != args[0].(starlark.Indexable).Len() {
			return nil, fmt.Errorf("%s: argument %d has %d values, argument 1 has %d", b.Name(), k+1, seq.Len(), args[0].(starlark.Indexable).Len())
		}
		keys[k] = seq
	}
	if err := charge(thread, b.Name(), uint64(len(keys))*uint64(keys[0].Len())+1); err != nil {
		return nil, err
	}
	idx := make([]int, keys[0].Len())
	for i := range idx {
		idx[i] = i
	}
	// Least significant key first: each pass is stable.
	for k := len(keys) - 1; k >= 0; k-- {
		if ints, ok := int64s(keys[k]); ok {
			sortByInts(ints, idx)
			continue
		}
		floats, err := float64s(keys[k])
		if err != nil {
			return nil, fmt.Errorf("%s: argument %d: %v", b.Name(), k+1, err)
		}
		sortByFloats(floats, idx)
	}
	return intList(idx), nil
}

// sortByInts reorders idx stably by xs[idx[j]], by a least significant
// digit radix sort of xs - min(xs): one counting pass when the values span
// no more than about 2n (labels, permutations), a few 16-bit passes for
// wider ones; linear in len(idx) either way.
func sortByInts(xs []int64, idx []int) {
	n := len(idx)
	if n == 0 {
		return
	}
	lo := slices.Min(xs)
	span := uint64(slices.Max(xs)) - uint64(lo) // exact in two's complement
	width := 64 - bits.LeadingZeros64(span)     // bits of the widest key
	passes := 1
	if span > uint64(2*n+1024) {
		passes = (width + 15) / 16
		width = (width + passes - 1) / passes // bits per digit
	}
	keys := make([]uint64, len(xs))
	for i, x := range xs {
		keys[i] = uint64(x) - uint64(lo)
	}
	tmp := make([]int, n)
	count := make([]int, 1<<width+1)
	mask := uint64(1)<<width - 1
	for p := 0; p < passes; p++ {
		shift := uint(p * width)
		clear(count)
		for _, i := range idx {
			count[keys[i]>>shift&mask+1]++
		}
		for d := 1; d < len(count); d++ {
			count[d] += count[d-1]
		}
		for _, i := range idx {
			d := keys[i] >> shift & mask
			tmp[count[d]] = i
			count[d]++
		}
		idx, tmp = tmp, idx
	}
	if passes%2 == 1 {
		copy(tmp, idx) // the result is in the caller's slice
	}
}

// sortByFloats reorders idx stably by xs[idx[j]]; NaN sorts first.
func sortByFloats(xs []float64, idx []int) {
	type pair struct {
		v float64
		j int // position in idx, for stability
	}
	ps := make([]pair, len(idx))
	for j, i := range idx {
		ps[j] = pair{xs[i], j}
	}
	slices.SortFunc(ps, func(a, c pair) int {
		if r := cmp.Compare(a.v, c.v); r != 0 {
			return r
		}
		return cmp.Compare(a.j, c.j)
	})
	old := slices.Clone(idx)
	for j, p := range ps {
		idx[j] = old[p.j]
	}
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

// float64s returns seq's elements as floats.
func float64s(seq starlark.Indexable) ([]float64, error) {
	xs := make([]float64, seq.Len())
	for i := range xs {
		f, ok := starlark.AsFloat(seq.Index(i))
		if !ok {
			return nil, fmt.Errorf("element %d is %s, want a number", i, seq.Index(i).Type())
		}
		xs[i] = f
	}
	return xs, nil
}

func intList(xs []int) *starlark.List {
	l := make([]starlark.Value, len(xs))
	for i, x := range xs {
		l[i] = starlark.MakeInt(x)
	}
	return starlark.NewList(l)
}
