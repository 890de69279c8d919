package comm

import "fmt"

// Hier is one rank of a two-level group: the devices of each process form
// a local group (in-process shared memory), and the processes form a cross
// group (MPI) joined by each process's local rank 0. A collective first
// combines the local group in memory, then one cross collective per call
// moves data between processes (from local rank 0 only), then the result
// is shared back inside each process — the hierarchical all-reduce.
//
// Global ranks are process-major: rank = process·L + local rank, with L
// devices in every process. Every local rank of every process must make
// the same calls, as with any Communicator.
type Hier struct {
	local   Communicator
	cross   Communicator // nil except on local rank 0
	proc    int
	procs   int
	scratch []float32
}

var _ Communicator = (*Hier)(nil)

// NewHier joins a local rank to its process's cross group. cross must be
// non-nil exactly on local rank 0; proc and procs are this process's index
// and the number of processes.
func NewHier(local Communicator, cross Communicator, proc, procs int) (*Hier, error) {
	if (local.Rank() == 0) != (cross != nil) {
		return nil, fmt.Errorf("comm: local rank %d of process %d: the cross group belongs to local rank 0 only", local.Rank(), proc)
	}
	if cross != nil && (cross.Size() != procs || cross.Rank() != proc) {
		return nil, fmt.Errorf("comm: process %d of %d, but the cross group says %d of %d", proc, procs, cross.Rank(), cross.Size())
	}
	return &Hier{local: local, cross: cross, proc: proc, procs: procs}, nil
}

// Rank returns the global rank.
func (h *Hier) Rank() int { return h.proc*h.local.Size() + h.local.Rank() }

// Size returns the global world size.
func (h *Hier) Size() int { return h.procs * h.local.Size() }

// split returns the process and local rank of a global rank.
func (h *Hier) split(g int) (int, int, error) {
	if g < 0 || g >= h.Size() {
		return 0, 0, fmt.Errorf("comm: root %d is not a rank of a world of %d", g, h.Size())
	}
	return g / h.local.Size(), g % h.local.Size(), nil
}

func (h *Hier) scratchFor(n int) []float32 {
	if cap(h.scratch) < n {
		h.scratch = make([]float32, n)
	}
	return h.scratch[:n]
}

// Broadcast copies global root's buf into every rank's buf.
func (h *Hier) Broadcast(buf []float32, root int, t Tag) error {
	p, lr, err := h.split(root)
	if err != nil {
		return err
	}
	if p == h.proc && lr != 0 {
		if err := h.local.Broadcast(buf, lr, t); err != nil {
			return err
		}
	}
	if h.cross != nil {
		if err := h.cross.Broadcast(buf, p, t); err != nil {
			return err
		}
	}
	return h.local.Broadcast(buf, 0, t)
}

// AllReduce reduces every rank's buf with op into every rank's buf: a
// local reduction, one cross all-reduce, a local broadcast. Mean divides
// the global sum by the world size once, at the end, as Comm's does.
func (h *Hier) AllReduce(buf []float32, op ReduceOp, t Tag) error {
	sub := op
	if op == Mean {
		sub = Sum
	}
	if err := h.localReduce(buf, sub, t); err != nil {
		return err
	}
	if h.cross != nil {
		acc := h.scratchFor(len(buf))
		if err := h.cross.AllReduce(acc, sub, t); err != nil {
			return err
		}
		if op == Mean {
			n := float32(h.Size())
			for i := range acc {
				acc[i] /= n
			}
		}
		copy(buf, acc)
	}
	return h.local.Broadcast(buf, 0, t)
}

// localReduce reduces every local rank's buf into local rank 0's scratch,
// leaving every buf unchanged.
func (h *Hier) localReduce(buf []float32, op ReduceOp, t Tag) error {
	if h.local.Rank() != 0 {
		return h.local.Reduce(buf, 0, op, t)
	}
	acc := h.scratchFor(len(buf))
	copy(acc, buf)
	return h.local.Reduce(acc, 0, op, t)
}

// Reduce reduces every rank's buf with op into global root's buf; the
// other ranks' bufs are left unchanged.
func (h *Hier) Reduce(buf []float32, root int, op ReduceOp, t Tag) error {
	p, lr, err := h.split(root)
	if err != nil {
		return err
	}
	sub := op
	if op == Mean {
		sub = Sum
	}
	if err := h.localReduce(buf, sub, t); err != nil {
		return err
	}
	if h.cross != nil {
		acc := h.scratchFor(len(buf))
		if err := h.cross.Reduce(acc, p, sub, t); err != nil {
			return err
		}
		if op == Mean && p == h.proc {
			n := float32(h.Size())
			for i := range acc {
				acc[i] /= n
			}
		}
	}
	if p != h.proc {
		return nil
	}
	// The result is in local rank 0's scratch: hand it to the root.
	if lr == 0 {
		if h.local.Rank() == 0 {
			copy(buf, h.scratch[:len(buf)])
		}
		return nil
	}
	x := h.scratchFor(len(buf))
	if h.local.Rank() == lr {
		x = buf
	}
	return h.local.Broadcast(x, 0, t)
}

// AllGather concatenates every rank's send, in global rank order, into
// every rank's recv.
func (h *Hier) AllGather(send, recv []float32, t Tag) error {
	n := len(send)
	if len(recv) != n*h.Size() {
		return fmt.Errorf("comm: allgather %q: recv has %d elements, want %d·%d", t.Name, len(recv), h.Size(), n)
	}
	l := h.local.Size()
	mine := recv[h.proc*l*n : (h.proc+1)*l*n]
	if err := h.local.AllGather(send, mine, t); err != nil {
		return err
	}
	if h.cross != nil {
		block := h.scratchFor(len(mine))
		copy(block, mine)
		if err := h.cross.AllGather(block, recv, t); err != nil {
			return err
		}
	}
	return h.local.Broadcast(recv, 0, t)
}

// ReduceScatter reduces every rank's send with op and leaves global block
// r of the result in rank r's recv (an all-reduce of a copy: simple, not
// the fastest).
func (h *Hier) ReduceScatter(send, recv []float32, op ReduceOp, t Tag) error {
	if len(send) != len(recv)*h.Size() {
		return fmt.Errorf("comm: reduce_scatter %q: send has %d elements, want %d·%d", t.Name, len(send), h.Size(), len(recv))
	}
	all := make([]float32, len(send))
	copy(all, send)
	if err := h.AllReduce(all, op, t); err != nil {
		return err
	}
	copy(recv, all[h.Rank()*len(recv):])
	return nil
}

// Barrier returns once every rank of every process has called it.
func (h *Hier) Barrier(t Tag) error {
	if err := h.local.Barrier(t); err != nil {
		return err
	}
	if h.cross != nil {
		if err := h.cross.Barrier(t); err != nil {
			return err
		}
	}
	return h.local.Barrier(t)
}
