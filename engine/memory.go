package engine

// MemoryUse is a Program's arena by what its bytes hold. Each buffer of
// its own memory counts with its alignment, so the fields add up to the
// arena (Program.MemoryBytes).
type MemoryUse struct {
	// Params: the parameters (whole, a sharded plan's shard, and stage
	// 3's memory for gathered layers).
	Params int64
	// Grads: the parameter gradients (whole, or a shard and the memory
	// of the buckets being reduced).
	Grads int64
	// State: the optimizer state (and clipping's sums).
	State int64
	// Activations: the model's values (inputs, activations and their
	// gradients, losses) and its running statistics.
	Activations int64
	// Scratch: the space kernels share.
	Scratch int64
	// InFlightGrads and InFlightParams are the parts of Grads and Params
	// that a sharded plan reuses over the step (buckets being reduced,
	// layers gathered), 0 otherwise.
	InFlightGrads, InFlightParams int64
}

// Total is the arena's size.
func (m MemoryUse) Total() int64 {
	return m.Params + m.Grads + m.State + m.Activations + m.Scratch
}

// Memory sorts the Program's buffers by what they hold.
func (prog *Program) Memory() MemoryUse {
	var m MemoryUse
	for _, b := range prog.Buffers {
		if b.View != nil {
			continue
		}
		n := int64(alignUp(max(b.Elems(), 1))) * 4
		switch {
		case b == prog.ParamArena || b == prog.ParamShard:
			m.Params += n
			if b == prog.ParamArena && prog.ParamShard != nil {
				m.InFlightParams += n
			}
		case b == prog.GradArena || b == prog.GradShard || b == prog.Zeros:
			m.Grads += n
			if b == prog.GradArena && prog.GradShard != nil {
				m.InFlightGrads += n
			}
		case b == prog.Work:
			m.Scratch += n
		case b.Value == nil && b != prog.StatArena:
			// Optimizer state (a parameter's, or a shard's), clipping's
			// sums: the buffers of no model value.
			m.State += n
		default:
			m.Activations += n
		}
	}
	return m
}

// Traffic is what one device of the Program sends per optimizer step by
// the ring algorithms (Collective.SentBytes), for a world of n and
// accumulate micro-batches a step: the collectives of the forward and
// backward phases run every micro-batch, the others once.
func (prog *Program) Traffic(n, accumulate int) map[CollectiveKind]int64 {
	out := map[CollectiveKind]int64{}
	for _, st := range prog.Steps {
		c := st.Collective
		if st.Kind != CollectiveStep || c == nil || st.Every > 0 {
			continue
		}
		times := int64(1)
		if st.Phase == PhaseForward || st.Phase == PhaseBackward {
			times = int64(accumulate)
		}
		out[c.Kind] += times * c.SentBytes(n)
	}
	return out
}
