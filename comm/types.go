package comm

import (
	"fmt"
	"strings"
	"time"
)

// ReduceOp is how a reduction combines the ranks' elements.
type ReduceOp uint8

// The reduction ops. The zero value is Sum.
const (
	// Sum adds the elements (reduce_add).
	Sum ReduceOp = iota
	// Mean is Sum followed by a division of each element by float32(n),
	// n the world size (see the package doc for the exact rounding).
	Mean
	// Max keeps the largest element; a NaN anywhere gives NaN.
	Max
	// Min keeps the smallest element; a NaN anywhere gives NaN.
	Min
	numReduceOps
)

// String returns the op's name as ParseReduceOp reads it: "sum", "mean",
// "max" or "min".
func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

// valid reports whether op is one of the defined ops.
func (op ReduceOp) valid() bool { return op < numReduceOps }

// ParseReduceOp reads an op name: "sum", "mean", "max" or "min" (case is
// ignored).
func ParseReduceOp(s string) (ReduceOp, error) {
	for op := range numReduceOps {
		if strings.EqualFold(s, op.String()) {
			return op, nil
		}
	}
	return 0, fmt.Errorf("comm: unknown reduce op %q, want one of sum, mean, max, min", s)
}

// MarshalText implements encoding.TextMarshaler (for TOML and JSON).
func (op ReduceOp) MarshalText() ([]byte, error) {
	if !op.valid() {
		return nil, fmt.Errorf("comm: invalid %v", op)
	}
	return []byte(op.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseReduceOp.
func (op *ReduceOp) UnmarshalText(b []byte) error {
	v, err := ParseReduceOp(string(b))
	if err != nil {
		return err
	}
	*op = v
	return nil
}

// Algorithm is how a collective moves data between the ranks.
type Algorithm uint8

// The algorithms. The zero value is Auto.
const (
	// Auto picks Direct, Tree or Ring for each call by the size of the
	// buffer and the world size: see Resolve.
	Auto Algorithm = iota
	// Ring passes chunks around the ring 0→1→…→n−1→0: all-reduce is a
	// reduce-scatter followed by an all-gather, each n−1 steps that move
	// 1/n of the buffer; every rank moves about 2(n−1)/n of the buffer,
	// which is optimal, at the cost of 2(n−1) synchronisations. Broadcast is
	// a pipelined chain from the root. For large buffers.
	Ring
	// Tree uses binomial trees: reductions go up a tree to a root
	// (⌈log₂n⌉ rounds), results come down a tree from it. Fewer
	// synchronisations than Ring, more data through the ranks near the
	// root. For medium buffers.
	Tree
	// Direct has every rank read what it needs straight from every other
	// rank in one round: for all-reduce each rank reduces all n buffers
	// itself, in rank order. n times the reads of Ring, but one round.
	// For tiny buffers.
	Direct
	numAlgorithms
)

// String returns the algorithm's name as ParseAlgorithm reads it: "auto",
// "ring", "tree" or "direct".
func (a Algorithm) String() string {
	switch a {
	case Auto:
		return "auto"
	case Ring:
		return "ring"
	case Tree:
		return "tree"
	case Direct:
		return "direct"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads an algorithm name: "auto", "ring", "tree" or
// "direct" (case is ignored).
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := range numAlgorithms {
		if strings.EqualFold(s, a.String()) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("comm: unknown algorithm %q, want one of auto, ring, tree, direct", s)
}

// MarshalText implements encoding.TextMarshaler (for TOML and JSON).
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("comm: invalid %v", a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseAlgorithm.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// The thresholds of Auto, in bytes of the per-rank buffer (4 bytes a
// float). They come from BenchmarkAllReduceSmall on a 2-core machine; see
// Resolve.
const (
	// AutoDirectMaxBytes is the largest buffer Auto sends Direct.
	AutoDirectMaxBytes = 256
	// AutoTreeMaxBytes is the largest buffer Auto sends Tree; larger ones
	// go Ring.
	AutoTreeMaxBytes = 4 << 10
)

// Resolve returns the algorithm a collective over n ranks on a buffer of
// count float32s uses: a itself unless a is Auto. Auto's rule:
//
//   - count·4 ≤ AutoDirectMaxBytes (256 B, 64 floats): Direct — one round of
//     synchronisation; its n-fold reads cost nothing at this size (losses,
//     metrics, barriers);
//   - count·4 ≤ AutoTreeMaxBytes (4 KiB): Tree — 2⌈log₂n⌉ rounds instead
//     of Ring's 2(n−1); on a quiet 2-core machine Ring was already ahead
//     from 4 KiB with 2 ranks and from 16 KiB with 4
//     (BenchmarkAllReduceSmall: 16 KiB, 2 ranks: Ring 3.6 µs, Tree 6.0 µs);
//   - larger: Ring — the least data through each rank, all ranks busy.
//
// A group of one rank does no communication whatever the choice. count is
// the length of the largest buffer each rank passes: buf for Broadcast,
// Reduce and AllReduce, recv for AllGather, send for ReduceScatter, 0 for
// Barrier. The
// rule depends only on (n, count) — today only on count — so every rank
// resolves a call the same way, and the engine can print the choice in the
// Plan.
func (a Algorithm) Resolve(n, count int) Algorithm {
	if a != Auto {
		return a
	}
	switch bytes := 4 * count; {
	case bytes <= AutoDirectMaxBytes:
		return Direct
	case bytes <= AutoTreeMaxBytes:
		return Tree
	default:
		return Ring
	}
}

// DefaultTimeout is the Timeout used when Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Options configure a group.
type Options struct {
	// Algorithm is the algorithm of every collective; Auto (the zero value)
	// picks one per call, see Algorithm.Resolve.
	Algorithm Algorithm
	// Timeout is the longest any collective waits, counted from the call;
	// zero means DefaultTimeout (60s). Past it the collective fails with
	// ErrTimeout, and so does the group.
	Timeout time.Duration
}

// withDefaults checks o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Algorithm >= numAlgorithms {
		return o, fmt.Errorf("comm: invalid %v", o.Algorithm)
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("comm: negative timeout %v", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

// Tag names one collective call in error messages, e.g.
// Tag{Name: "allreduce bucket 2", Step: 17}. Every rank must pass the same
// tag to the same call: a different Name or Step is a mismatch.
type Tag struct {
	Name string // what the call is for, e.g. "bucket 2" or "params"
	Step int    // the training step (or any counter the caller keeps)
}
