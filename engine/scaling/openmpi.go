package scaling

import (
	"math"
	"math/bits"
	"time"

	"gorun/comm"
	"gorun/engine"
)

// Open MPI's choice of algorithm. gorun's MPI transport calls
// MPI_Allreduce, MPI_Bcast, MPI_Reduce_scatter_block and MPI_Allgather
// (comm/mpi.go); Open MPI's coll/tuned component picks the algorithm each
// call runs by a fixed decision function of the communicator's size and
// the message's bytes (ompi/mca/coll/tuned/coll_tuned_decision_fixed.c of
// Open MPI v4.1.4, the version Debian 12 ships). The tables below are
// those functions' commutative branches (gorun reduces with sum), written
// out rule for rule; the model times the algorithm they pick, so that a
// prediction follows what mpirun really runs. On 3 processes and a
// bucket of 256 KiB or more, for example, Open MPI's all-reduce is
// Rabenseifner's, which on a number of processes that is not a power of
// two first folds the extra ranks in and at the end sends them the whole
// result: 3·n/β through one host's link where a ring moves 4/3·n/β.
//
// The numbers are the algorithms' values of Open MPI's MCA parameters
// (coll_tuned_allreduce_algorithm and its kin), so a run can force one
// (mpirun --mca coll_tuned_use_dynamic_rules 1 --mca
// coll_tuned_allreduce_algorithm 4) and compare.

// tunedRule is one row of a decision function: communicators of fewer
// than commBelow processes (0: any size left) take, for messages of
// fewer than bytesBelow bytes (0: any size left), algorithm alg.
type tunedRule struct {
	commBelow int
	sizes     []tunedSize
}

type tunedSize struct {
	bytesBelow int64
	alg        int
}

// tunedAllreduce is ompi_coll_tuned_allreduce_intra_dec_fixed (commutative
// operations), by the bytes of the whole buffer. Algorithms: 1 basic
// linear, 2 nonoverlapping, 3 recursive doubling, 4 ring, 5 segmented
// ring, 6 Rabenseifner.
var tunedAllreduce = []tunedRule{
	{4, []tunedSize{{8, 4}, {4096, 3}, {8192, 4}, {16384, 3}, {65536, 4}, {262144, 5}, {0, 6}}},
	{8, []tunedSize{{16, 4}, {8192, 3}, {0, 6}}},
	{16, []tunedSize{{8192, 3}, {0, 6}}},
	{32, []tunedSize{{64, 5}, {4096, 3}, {0, 6}}},
	{64, []tunedSize{{128, 5}, {0, 6}}},
	{128, []tunedSize{{262144, 3}, {0, 6}}},
	{256, []tunedSize{{131072, 2}, {262144, 3}, {0, 6}}},
	{512, []tunedSize{{4096, 2}, {0, 6}}},
	{2048, []tunedSize{{2048, 2}, {16384, 3}, {0, 6}}},
	{4096, []tunedSize{{2048, 2}, {4096, 5}, {16384, 3}, {0, 6}}},
	{0, []tunedSize{{2048, 2}, {16384, 5}, {32768, 3}, {0, 6}}},
}

// tunedBcast is ompi_coll_tuned_bcast_intra_dec_fixed, by the bytes of
// the buffer. Algorithms: 1 basic linear, 2 chain, 3 pipeline, 4 split
// binary tree, 5 binary tree, 6 binomial, 7 k-nomial, 8 scatter and
// all-gather, 9 scatter and ring all-gather.
var tunedBcast = []tunedRule{
	{4, []tunedSize{{32, 3}, {256, 5}, {512, 3}, {1024, 7}, {32768, 1}, {131072, 5}, {262144, 2}, {524288, 1}, {1048576, 6}, {0, 5}}},
	{8, []tunedSize{{64, 5}, {128, 6}, {2048, 5}, {8192, 6}, {1048576, 1}, {0, 2}}},
	{16, []tunedSize{{8, 7}, {64, 5}, {4096, 7}, {16384, 5}, {32768, 6}, {0, 1}}},
	{32, []tunedSize{{4096, 7}, {1048576, 6}, {0, 8}}},
	{64, []tunedSize{{2048, 6}, {0, 7}}},
	{128, []tunedSize{{0, 7}}},
	{256, []tunedSize{{2, 6}, {16384, 5}, {32768, 1}, {65536, 5}, {0, 7}}},
	{1024, []tunedSize{{16384, 7}, {32768, 4}, {0, 7}}},
	{2048, []tunedSize{{524288, 7}, {0, 8}}},
	{4096, []tunedSize{{262144, 7}, {0, 8}}},
	{0, []tunedSize{{8192, 7}, {16384, 5}, {262144, 7}, {0, 8}}},
}

// tunedReduceScatterBlock is
// ompi_coll_tuned_reduce_scatter_block_intra_dec_fixed (commutative), by
// the bytes of one rank's block. Algorithms: 1 basic linear, 2 recursive
// doubling, 3 recursive halving, 4 butterfly.
var tunedReduceScatterBlock = []tunedRule{
	{4, []tunedSize{{4, 2}, {8, 4}, {16, 3}, {128, 4}, {256, 3}, {4096, 4}, {8192, 3}, {131072, 4}, {0, 1}}},
	{8, []tunedSize{{8, 3}, {32, 2}, {256, 4}, {8192, 3}, {16384, 4}, {1048576, 3}, {0, 1}}},
	{16, []tunedSize{{4, 1}, {32, 3}, {128, 4}, {524288, 3}, {4194304, 1}, {0, 4}}},
	{32, []tunedSize{{32, 1}, {524288, 3}, {2097152, 1}, {4194304, 3}, {0, 4}}},
	{0, []tunedSize{{4, 3}, {16, 1}, {65536, 4}, {262144, 1}, {0, 4}}},
}

// tunedAllgather is ompi_coll_tuned_allgather_intra_dec_fixed, by the
// bytes of one rank's block. Algorithms: 1 linear, 2 Bruck, 3 recursive
// doubling, 4 ring, 5 neighbor exchange, 6 two processes.
var tunedAllgather = []tunedRule{
	{3, []tunedSize{{0, 6}}},
	{32, []tunedSize{{0, 3}}},
	{64, []tunedSize{{1024, 3}, {65536, 5}, {0, 4}}},
	{128, []tunedSize{{512, 3}, {65536, 5}, {0, 4}}},
	{256, []tunedSize{{512, 3}, {131072, 5}, {524288, 4}, {1048576, 5}, {0, 4}}},
	{512, []tunedSize{{32, 3}, {128, 2}, {1024, 3}, {131072, 5}, {524288, 4}, {1048576, 5}, {0, 4}}},
	{1024, []tunedSize{{64, 3}, {256, 2}, {2048, 3}, {0, 5}}},
	{2048, []tunedSize{{4, 3}, {8, 2}, {16, 3}, {32, 2}, {256, 3}, {512, 2}, {4096, 3}, {0, 5}}},
	{4096, []tunedSize{{32, 2}, {128, 3}, {512, 2}, {4096, 3}, {0, 5}}},
	{0, []tunedSize{{2, 3}, {8, 2}, {16, 3}, {512, 2}, {4096, 3}, {0, 5}}},
}

// tunedPick runs a decision table: the algorithm for p processes and a
// message of bytes.
func tunedPick(rules []tunedRule, p int, bytes int64) int {
	for _, r := range rules {
		if r.commBelow != 0 && p >= r.commBelow {
			continue
		}
		for _, s := range r.sizes {
			if s.bytesBelow == 0 || bytes < s.bytesBelow {
				return s.alg
			}
		}
	}
	return 0 // not reached: every table ends with an "any" row
}

// TunedAlgorithm is the algorithm Open MPI 4.1's coll/tuned runs for a
// collective of kind over p processes on a buffer of n bytes (the payload
// of each rank, engine.Collective.Bytes; a reduce-scatter's or
// all-gather's decision goes by one rank's block, n/p): its number (the
// value of the MCA parameter coll_tuned_<collective>_algorithm) and name.
// A reduce is not tabled here (0, "").
func TunedAlgorithm(kind engine.CollectiveKind, p int, n int64) (int, string) {
	var alg int
	switch kind {
	case engine.CollectiveAllReduce:
		alg = tunedPick(tunedAllreduce, p, n)
	case engine.CollectiveBroadcast:
		alg = tunedPick(tunedBcast, p, n)
	case engine.CollectiveReduceScatter:
		alg = tunedPick(tunedReduceScatterBlock, p, n/int64(max(1, p)))
	case engine.CollectiveAllGather:
		alg = tunedPick(tunedAllgather, p, n/int64(max(1, p)))
	default:
		return 0, ""
	}
	return alg, tunedNames[kind][alg]
}

// tunedNames are the algorithms' names by collective and number.
var tunedNames = map[engine.CollectiveKind]map[int]string{
	engine.CollectiveAllReduce: {1: "basic linear", 2: "nonoverlapping", 3: "recursive doubling", 4: "ring", 5: "segmented ring", 6: "rabenseifner"},
	engine.CollectiveBroadcast: {1: "basic linear", 2: "chain", 3: "pipeline", 4: "split binary tree", 5: "binary tree",
		6: "binomial", 7: "knomial", 8: "scatter allgather", 9: "scatter allgather ring"},
	engine.CollectiveReduceScatter: {1: "basic linear", 2: "recursive doubling", 3: "recursive halving", 4: "butterfly"},
	engine.CollectiveAllGather:     {1: "linear", 2: "bruck", 3: "recursive doubling", 4: "ring", 5: "neighbor exchange", 6: "two proc"},
}

// TunedTime is the alpha–beta time of Open MPI's algorithm alg
// (TunedAlgorithm's number) for a collective of kind over p processes
// on n bytes, every message crossing link l (α its latency, β its rate
// for the message's size, engine.Link.BandwidthAt). With p' the largest
// power of two ≤ p, r = p − p', L = log₂p', ⌈lg⌉ = ⌈log₂p⌉, h(m) one
// message of m bytes, α + m/β(m) — both ways at once (β) in the
// exchanges of rings, recursive halving and doubling, Bruck and the
// neighbour exchange, one way (β₁, the link's one_way) in linear, tree
// and chain hops, broadcasts and the folds of the r extra ranks — and
// m = n/p a block:
//
//	all-reduce  basic linear         2(p−1)·h(n)        (reduce to rank 0, broadcast back, both linear)
//	            nonoverlapping       2⌈lg⌉·h(n)         (a binomial reduce, then a broadcast)
//	            recursive doubling   L·h(n) + [r>0] 2·h(n)          (the extra ranks folded in and sent the result)
//	            ring, segmented ring 2(p−1)·h(m)
//	            rabenseifner         2·Σ_{k=1..L} h(n/2^k) + [r>0] (h(n/2) + h₁(n/2) + h₁(n))
//	broadcast   basic linear, chain,
//	            pipeline             (p−1)·h(n)         (segsize 0: not pipelined)
//	            split binary tree    ⌈lg⌉·h(n/2) + h(n/2)
//	            binary tree          min(p−1, 2⌊log₂p⌋)·h(n)
//	            binomial             ⌈lg⌉·h(n)
//	            knomial (radix 4)    min(p−1, 3⌈log₄p⌉)·h(n)
//	            scatter allgather    2⌈lg⌉·α + 2(p−1)·m/β
//	            scatter ring         ⌈lg⌉·α + (p−1)·m/β + (p−1)·h(m)
//	reduce-scatter basic linear      ⌈lg⌉·h(n) + (p−1)·h(m)   (reduce to rank 0, scatter)
//	            recursive doubling   ⌈lg⌉·α + (⌈lg⌉ − (p−1)/p)·n/β
//	            recursive halving,
//	            butterfly            L·α + (p'−1)/p'·n/β + [r>0] (h(n) + h(m))
//	all-gather  linear               (p−1)·h(m) + ⌈lg⌉·h(n)   (gather to rank 0, broadcast)
//	            bruck                ⌈lg⌉·α + (p−1)·m/β
//	            recursive doubling   L·α + (p−1)·m/β; Bruck's when p is not a power of two
//	            ring                 (p−1)·h(m)
//	            neighbor exchange    (p/2)·α + (p−1)·m/β; the ring's for odd p
//	            two proc             h(m)
//
// Messages of one step go one after the other through a rank's link.
// An exchange both ways at once counts as one message at the link's
// exchange rate (engine.Link.BandwidthAt: the probe's β is measured
// that way, up to the later of the two ranks); a message that crosses
// while nothing flows back — a linear or tree hop, a broadcast, the fold
// of the extra ranks into a power of two and their result sent back —
// at its one-way rate (engine.Link.OneWayAt).
func TunedTime(kind engine.CollectiveKind, alg, p int, n float64, l engine.Link) time.Duration {
	return TunedTimeBurst(kind, alg, p, n, l, 0)
}

// TunedTimeBurst is TunedTime on a link that holds tokens bytes of burst
// (engine.Link.Burst, refilled while the link was idle): the first
// tokens bytes each rank sends cross at once, the rest at the link's
// rates.
func TunedTimeBurst(kind engine.CollectiveKind, alg, p int, n float64, l engine.Link, tokens float64) time.Duration {
	var s float64
	for _, h := range tunedHops(kind, alg, p, n) {
		rate := l.BandwidthAt(h.size)
		if h.oneWay {
			rate = l.OneWayAt(h.size)
		}
		b := h.bytes
		if tokens > 0 {
			used := math.Min(tokens, b)
			b -= used
			tokens -= used
		}
		s += h.alphas*l.Latency.Seconds() + b/rate
	}
	return time.Duration(s * 1e9)
}

// hop is a run of messages of one step after another through a rank's
// link: alphas latencies, bytes in all, in messages of size bytes, one
// way or both ways at once. A collective is its hops in order.
type hop struct {
	alphas, bytes, size float64
	oneWay              bool
}

// hops of k messages of m bytes each.
func msgs(k, m float64, oneWay bool) hop { return hop{k, k * m, m, oneWay} }

// tunedHops are the hops of Open MPI's algorithm alg (TunedTime's table).
func tunedHops(kind engine.CollectiveKind, alg, p int, n float64) []hop {
	if p <= 1 {
		return nil
	}
	const ow, ex = true, false
	pf := float64(p)
	m := n / pf
	clg := math.Ceil(math.Log2(pf))
	L := bits.Len(uint(p)) - 1
	pp := 1 << L
	r := p - pp
	var hs []hop
	switch kind {
	case engine.CollectiveAllReduce:
		switch alg {
		case 1:
			hs = append(hs, msgs(2*(pf-1), n, ow))
		case 2:
			hs = append(hs, msgs(2*clg, n, ow))
		case 3:
			if r > 0 {
				hs = append(hs, msgs(1, n, ow))
			}
			hs = append(hs, msgs(float64(L), n, ex))
			if r > 0 {
				hs = append(hs, msgs(1, n, ow))
			}
		case 6:
			// The first 2r ranks swap halves, the odd ones send their
			// half's sum to the even ones, which join the power of two;
			// at the end the even ones send the odd ones the result.
			if r > 0 {
				hs = append(hs, msgs(1, n/2, ex), msgs(1, n/2, ow))
			}
			for k := 1; k <= L; k++ {
				hs = append(hs, msgs(1, n/float64(int(1)<<k), ex))
			}
			for k := L; k >= 1; k-- {
				hs = append(hs, msgs(1, n/float64(int(1)<<k), ex))
			}
			if r > 0 {
				hs = append(hs, msgs(1, n, ow))
			}
		default: // 4, 5
			hs = append(hs, msgs(2*(pf-1), m, ex))
		}
	case engine.CollectiveBroadcast:
		switch alg {
		case 4:
			hs = append(hs, msgs(clg+1, n/2, ow))
		case 5:
			hs = append(hs, msgs(math.Min(pf-1, 2*math.Floor(math.Log2(pf))), n, ow))
		case 6:
			hs = append(hs, msgs(clg, n, ow))
		case 7:
			hs = append(hs, msgs(math.Min(pf-1, 3*math.Ceil(math.Log2(pf)/2)), n, ow))
		case 8:
			hs = append(hs, hop{2 * clg, 2 * (pf - 1) * m, m, ow})
		case 9:
			hs = append(hs, hop{clg + pf - 1, 2 * (pf - 1) * m, m, ow})
		default: // 1, 2, 3
			hs = append(hs, msgs(pf-1, n, ow))
		}
	case engine.CollectiveReduceScatter:
		switch alg {
		case 1:
			hs = append(hs, msgs(clg, n, ow), msgs(pf-1, m, ow))
		case 2:
			hs = append(hs, hop{clg, (clg - (pf-1)/pf) * n, n / 2, ex})
		default: // 3, 4
			if r > 0 {
				hs = append(hs, msgs(1, n, ow))
			}
			ppf := float64(pp)
			hs = append(hs, hop{float64(L), (ppf - 1) / ppf * n, n / 2, ex})
			if r > 0 {
				hs = append(hs, msgs(1, m, ow))
			}
		}
	case engine.CollectiveAllGather:
		bruck := hop{clg, (pf - 1) * m, m, ex}
		switch alg {
		case 1:
			hs = append(hs, msgs(pf-1, m, ow), msgs(clg, n, ow))
		case 2:
			hs = append(hs, bruck)
		case 3:
			if r == 0 {
				bruck.alphas = float64(L)
			}
			hs = append(hs, bruck)
		case 5:
			if p%2 == 0 {
				hs = append(hs, hop{pf / 2, (pf - 1) * m, m, ex})
			} else {
				hs = append(hs, msgs(pf-1, m, ex))
			}
		case 6:
			hs = append(hs, msgs(1, m, ex))
		default: // 4
			hs = append(hs, msgs(pf-1, m, ex))
		}
	}
	return hs
}

// TunedForced is one collective whose algorithm a cluster file's
// [comm] algorithm forces on Open MPI: the MCA parameter and its value.
type TunedForced struct {
	Kind  engine.CollectiveKind
	Param string // coll_tuned_allreduce_algorithm, …
	Alg   int
}

// ForcedTuned is what [comm] algorithm = "ring", "tree" or "direct"
// forces on Open MPI's coll/tuned across processes (with
// coll_tuned_use_dynamic_rules 1; `gorun launch` passes them to mpirun):
//
//	ring    all-reduce 4 ring, broadcast 3 pipeline, all-gather 4 ring
//	tree    all-reduce 2 nonoverlapping (reduce, broadcast), broadcast
//	        6 binomial, all-gather 2 Bruck, reduce-scatter 3 recursive
//	        halving
//	direct  all-reduce 1, broadcast 1, all-gather 1, reduce-scatter 1
//	        (the linear ones)
//
// Open MPI 4.1 has no ring reduce-scatter: under "ring" it keeps its own
// choice. "auto" forces nothing (nil): Open MPI decides, and the model
// follows its decision tables (TunedAlgorithm).
func ForcedTuned(alg comm.Algorithm) []TunedForced {
	ar, bc, ag, rs := engine.CollectiveAllReduce, engine.CollectiveBroadcast, engine.CollectiveAllGather, engine.CollectiveReduceScatter
	const (
		par = "coll_tuned_allreduce_algorithm"
		pbc = "coll_tuned_bcast_algorithm"
		pag = "coll_tuned_allgather_algorithm"
		prs = "coll_tuned_reduce_scatter_block_algorithm"
	)
	switch alg {
	case comm.Ring:
		return []TunedForced{{ar, par, 4}, {bc, pbc, 3}, {ag, pag, 4}}
	case comm.Tree:
		return []TunedForced{{ar, par, 2}, {bc, pbc, 6}, {ag, pag, 2}, {rs, prs, 3}}
	case comm.Direct:
		return []TunedForced{{ar, par, 1}, {bc, pbc, 1}, {ag, pag, 1}, {rs, prs, 1}}
	}
	return nil
}

// MPIAlgorithm is the Open MPI algorithm a collective of kind over p
// processes on n bytes runs under the cluster's [comm] algorithm alg:
// the forced one (ForcedTuned), else coll/tuned's own (TunedAlgorithm).
// forced says which; alg 0 means none of those tables (a reduce).
func MPIAlgorithm(alg comm.Algorithm, kind engine.CollectiveKind, p int, n int64) (num int, name string, forced bool) {
	for _, f := range ForcedTuned(alg) {
		if f.Kind == kind {
			return f.Alg, tunedNames[kind][f.Alg], true
		}
	}
	num, name = TunedAlgorithm(kind, p, n)
	return num, name, false
}
