package engine

import (
	"fmt"
	"slices"
	"sort"
)

// Sharding is how a sharded sync strategy (sync.zero, engine/sync_zero.go)
// splits a model among the ranks: the Plan holds one (Plan.Sharding), nil
// for the strategies that keep every parameter on every rank.
//
// The parameters are flattened in the order of Plan.Buckets (the order
// backward completes their gradients), each bucket padded with zeros to a
// multiple of the world (Bucket.Pad): FlatElems elements. Rank r owns
// block r of every bucket, a contiguous slice of it of Bucket.Block
// elements; its shard is its blocks one after another (Bucket.ShardOffset),
// ShardElems elements. With one bucket, a rank's shard is the r-th
// contiguous slice of the flattened parameter list. A rank keeps the
// optimizer state of its shard only (stage 1), also the reduced gradients
// of its shard only (stage 2, Grads), and also the parameters of its shard
// only (stage 3, Params).
type Sharding struct {
	// Stage is ZeRO's stage, 1 to 3.
	Stage int
	// World is the number of ranks, which every bucket's length divides.
	World int
	// Grads is set when a rank holds its gradients whole only while
	// backward computes them and their bucket is reduced (stage 2 and 3
	// with one micro-batch a step): the memory of a reduced bucket is
	// reused, and the rank's reduced blocks persist in
	// Program.GradShard. Otherwise the gradient arena is whole and each
	// rank's reduced blocks are reduced into its own place in it.
	Grads bool
	// Params is set when a rank holds its parameters whole only around
	// the steps that read them (stage 3): each layer's are gathered into
	// reused memory before its forward and its backward steps, and the
	// rank's blocks persist in Program.ParamShard.
	Params bool
	// Prefetch is how many layers ahead stage 3 gathers parameters.
	Prefetch int
	// FlatElems is the length of the flattened, padded parameter list;
	// ShardElems a rank's shard (FlatElems / World).
	FlatElems, ShardElems int
	// ParamAt is each parameter's first element in the flattened list
	// and ParamBucket its bucket, by Graph.Params index.
	ParamAt, ParamBucket []int
}

// Piece is the part of parameter i (Graph.Params) that rank r holds in a
// sharded plan: elements [lo, hi) of the parameter, at element at of the
// rank's shard; lo == hi when the rank holds none of it.
func (p *Plan) Piece(i, r int) (lo, hi, at int) {
	sh := p.Sharding
	b := &p.Buckets[sh.ParamBucket[i]]
	start, n := sh.ParamAt[i], p.Graph.Params[i].Value.Elems()
	blo := b.Offset + r*b.Block
	bhi := blo + b.Block
	from, to := max(start, blo), min(start+n, bhi)
	if from >= to {
		return 0, 0, 0
	}
	return from - start, to - start, b.ShardOffset + from - blo
}

// Unshard puts every rank's shard, one after another in rank order (World
// × ShardElems elements), back into the flattened parameter layout
// (FlatElems elements).
func (p *Plan) Unshard(shards []float32) []float32 {
	sh := p.Sharding
	flat := make([]float32, sh.FlatElems)
	for _, b := range p.Buckets {
		for r := 0; r < sh.World; r++ {
			copy(flat[b.Offset+r*b.Block:][:b.Block], shards[r*sh.ShardElems+b.ShardOffset:][:b.Block])
		}
	}
	return flat
}

// ShardOf is rank r's shard (ShardElems elements) of values in the
// flattened parameter layout.
func (p *Plan) ShardOf(flat []float32, r int) []float32 {
	sh := p.Sharding
	out := make([]float32, sh.ShardElems)
	for _, b := range p.Buckets {
		copy(out[b.ShardOffset:][:b.Block], flat[b.Offset+r*b.Block:][:b.Block])
	}
	return out
}

// padBuckets pads each of p's buckets to a multiple of world elements and
// lays them out one after another in the flattened list, setting Offset,
// Pad, Block and ShardOffset, and returns the Sharding's sizes and each
// parameter's place.
func (p *Plan) padBuckets(stage, world int) *Sharding {
	sh := &Sharding{Stage: stage, World: world}
	idx := map[*Param]int{}
	for i, prm := range p.Graph.Params {
		idx[prm] = i
	}
	sh.ParamAt = make([]int, len(p.Graph.Params))
	sh.ParamBucket = make([]int, len(p.Graph.Params))
	off, shard := 0, 0
	for bi := range p.Buckets {
		b := &p.Buckets[bi]
		b.Offset = off
		b.Pad = (world - b.Elems%world) % world
		b.Block = (b.Elems + b.Pad) / world
		b.ShardOffset = shard
		at := off
		for _, prm := range b.Params {
			sh.ParamAt[idx[prm]] = at
			sh.ParamBucket[idx[prm]] = bi
			at += prm.Value.Elems()
		}
		off += b.Elems + b.Pad
		shard += b.Block
	}
	sh.FlatElems, sh.ShardElems = off, shard
	return sh
}

// A window is arena memory that items share over time: a sharded plan's
// gradient buckets (stage 2) or gathered layers (stage 3) each live from
// the first step that touches them to the last, and items that do not
// live at the same time (in training, nor in evaluation) may take the
// same memory. Its buffer (buf) is placed at the end of the arena once
// the Program's steps are known (place); until then its views' offsets
// are relative.
type window struct {
	buf   *Buffer
	items []int                // elements of each item
	at    map[*Buffer]windowAt // each view of the window: its item and place in it
	// keep holds each item's memory in training until the keep-th item to
	// end after it has ended too: a collective still reading an item on
	// its own goroutine (overlap) does not hold back the next item's
	// first step, which would wait for it (double buffering, keep 1).
	keep int
	// refill, when set, is the collective that fills a whole item anew
	// (stage 3's gathers): the item's memory is free between the last
	// step that touches it and the next refill, so that each layer holds
	// memory only around its forward and its backward steps.
	refill CollectiveKind
}

type windowAt struct{ item, rel int }

// newWindow plans a window buffer whose place in the arena comes later.
func (prog *Program) newWindow(name string) *window {
	b := &Buffer{ID: len(prog.Buffers), Name: name, Max: []int{0}}
	prog.Buffers = append(prog.Buffers, b)
	return &window{buf: b, at: map[*Buffer]windowAt{}}
}

// item adds an item of n elements to the window and returns its index.
func (w *window) item(n int) int {
	w.items = append(w.items, n)
	return len(w.items) - 1
}

// view plans a view of elements [rel, rel+prod(shape)) of item it.
func (w *window) view(prog *Program, name string, v *Value, it, rel int, shape []int) *Buffer {
	b := prog.view(name, v, w.buf, 0, shape, false)
	w.at[b] = windowAt{it, rel}
	return b
}

// place gives every item of the window its place, by the steps that touch
// it (prog.Steps and prog.Eval, separately), puts the window at the end
// of the arena, and sets its views' offsets.
func (w *window) place(prog *Program) {
	type span struct{ lo, hi int } // steps, inclusive
	// live gives each item's spans: from a step that touches it to the
	// last one before it is refilled (or the end).
	live := func(steps []*Step) [][]span {
		out := make([][]span, len(w.items))
		for i, st := range steps {
			bufs := slices.Concat(st.In, st.Out)
			fill := -1
			if c := st.Collective; c != nil {
				bufs = append(bufs, c.Buffer, c.Part)
				if at, ok := w.at[c.Buffer]; ok && w.refill != "" && c.Kind == w.refill {
					fill = at.item
				}
			}
			for _, b := range bufs {
				at, ok := w.at[b]
				if !ok {
					continue
				}
				sp := out[at.item]
				if len(sp) == 0 || at.item == fill && sp[len(sp)-1].hi < i {
					out[at.item] = append(sp, span{i, i})
					continue
				}
				sp[len(sp)-1].hi = i
			}
		}
		return out
	}
	train, eval := live(prog.Steps), live(prog.Eval)
	if w.keep > 0 {
		var ends []int
		for _, sp := range train {
			if len(sp) > 0 {
				ends = append(ends, sp[len(sp)-1].hi)
			}
		}
		sort.Ints(ends)
		for _, sp := range train {
			if len(sp) > 0 {
				last := &sp[len(sp)-1]
				k, _ := slices.BinarySearch(ends, last.hi)
				last.hi = ends[min(k+w.keep, len(ends)-1)]
			}
		}
	}
	meet := func(a, b []span) bool {
		for _, x := range a {
			for _, y := range b {
				if x.lo <= y.hi && y.lo <= x.hi {
					return true
				}
			}
		}
		return false
	}
	first := func(it int) int {
		if len(train[it]) == 0 {
			return 1 << 62
		}
		return train[it][0].lo
	}
	order := make([]int, len(w.items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return first(order[x]) < first(order[y]) })
	start := make([]int, len(w.items))
	placed := []int{}
	size := 0
	for _, it := range order {
		n := alignUp(w.items[it])
		// The lowest place that no item living at the same time takes.
		at := 0
		for moved := true; moved; {
			moved = false
			for _, o := range placed {
				if !meet(train[it], train[o]) && !meet(eval[it], eval[o]) {
					continue
				}
				if at < start[o]+alignUp(w.items[o]) && start[o] < at+n {
					at = start[o] + alignUp(w.items[o])
					moved = true
				}
			}
		}
		start[it] = at
		placed = append(placed, it)
		size = max(size, at+n)
	}
	w.buf.Max = []int{size}
	w.buf.Offset = prog.ArenaElems
	prog.ArenaElems += alignUp(max(size, 1))
	for b, a := range w.at {
		b.Offset = w.buf.Offset + start[a.item] + a.rel
	}
}

// alignUp rounds n elements up to the arena's alignment.
func alignUp(n int) int { return (n + arenaAlign - 1) / arenaAlign * arenaAlign }

// check refuses a sharding whose sizes do not add up (a bug, not a
// user's mistake).
func (sh *Sharding) check() error {
	if sh.FlatElems != sh.ShardElems*sh.World {
		return fmt.Errorf("sharding: %d flattened elements are not %d ranks × %d", sh.FlatElems, sh.World, sh.ShardElems)
	}
	return nil
}
