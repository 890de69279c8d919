package comm

// Ring algorithms. The ring is 0→1→…→n−1→0: each rank sends to its right
// neighbour and receives from its left one. Buffers are cut into n blocks
// (see block; blocks may be empty). Each block's reduction runs along the
// ring in one fixed order, and each rank ends up with one finished block,
// which the all-gather then copies around: so every rank holds the same
// bits.

// ringSliceFloats is the size of the slices a ring broadcast pipelines
// (256 KiB).
const ringSliceFloats = 64 << 10

func (c *Comm) ringNeighbours() (left, right int) {
	return (c.rank + c.size - 1) % c.size, (c.rank + 1) % c.size
}

// ringAllReduce: a reduce-scatter in place, leaving the finished block
// r+1 on rank r, then an all-gather of the finished blocks. Block k starts
// on rank k and each rank down the ring combines its own block with the
// partial result: x[k−1] ⊕ (… ⊕ (x[k+1] ⊕ x[k])), x[i] being rank i's
// buffer and indices mod n.
func (c *Comm) ringAllReduce(buf []float32, op ReduceOp) error {
	r, n := c.rank, c.size
	left, right := c.ringNeighbours()
	for s := range n - 1 {
		if err := c.t.send(right, block(buf, r-s, n)); err != nil {
			return err
		}
		dst := block(buf, r-s-1, n)
		if err := c.t.recvReduce(left, dst, dst, op); err != nil {
			return err
		}
	}
	if op == Mean {
		divide(block(buf, r+1, n), n)
	}
	return c.ringGather(buf, r+1)
}

// ringGather is the all-gather around the ring: rank r starts with the
// finished block own (own−r the same on every rank) and, after n−1 steps,
// holds every block.
func (c *Comm) ringGather(buf []float32, own int) error {
	n := c.size
	left, right := c.ringNeighbours()
	for s := range n - 1 {
		if err := c.t.send(right, block(buf, own-s, n)); err != nil {
			return err
		}
		if err := c.t.recv(left, block(buf, own-s-1, n)); err != nil {
			return err
		}
	}
	return nil
}

// ringAllGather: this rank's send goes into its block of recv, then around.
func (c *Comm) ringAllGather(send, recv []float32) error {
	copyUnlessSame(block(recv, c.rank, c.size), send)
	return c.ringGather(recv, c.rank)
}

// ringReduceScatter: like ringAllReduce's first half, shifted so that rank
// r finishes block r, with the partial results in two scratch blocks (send
// stays unchanged) and the last step reducing into recv.
func (c *Comm) ringReduceScatter(send, recv []float32, op ReduceOp) error {
	r, n, m := c.rank, c.size, len(recv)
	left, right := c.ringNeighbours()
	var tmp []float32
	if n > 2 {
		tmp = c.scratchFor(2 * m)
	}
	out := block(send, r-1, n) // what step s sends: the partial of block r-s-1
	for s := range n - 1 {
		if err := c.t.send(right, out); err != nil {
			return err
		}
		// The partial sent at step s-1 lives in tmp half (s-1)%2 and was
		// taken before the send above returned; reuse the other half.
		dst := recv
		if s < n-2 {
			dst = tmp[s%2*m : (s%2+1)*m]
		}
		if err := c.t.recvReduce(left, dst, block(send, r-s-2, n), op); err != nil {
			return err
		}
		out = dst
	}
	if op == Mean {
		divide(recv, n)
	}
	return nil
}

// ringReduce: a reduce-scatter into scratch (buf stays unchanged), then
// every rank sends its finished block to the root. The blocks are reduced
// as in ringAllReduce.
func (c *Comm) ringReduce(buf []float32, root int, op ReduceOp) error {
	r, n := c.rank, c.size
	left, right := c.ringNeighbours()
	tmp := c.scratchFor(len(buf))
	for s := range n - 1 {
		out := block(tmp, r-s, n)
		if s == 0 {
			out = block(buf, r, n)
		}
		if err := c.t.send(right, out); err != nil {
			return err
		}
		if err := c.t.recvReduce(left, block(tmp, r-s-1, n), block(buf, r-s-1, n), op); err != nil {
			return err
		}
	}
	mine := block(tmp, r+1, n)
	if op == Mean {
		divide(mine, n)
	}
	// The root overwrites buf below: its first send must have been taken.
	if err := c.t.flush(); err != nil {
		return err
	}
	if r != root {
		return c.t.send(root, mine)
	}
	copy(block(buf, r+1, n), mine)
	for q := range n {
		if q != root {
			if err := c.t.recv(q, block(buf, q+1, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ringBroadcast: a chain root→root+1→…→root−1, pipelined in slices of
// about ringSliceFloats: a rank passes slice k on while it receives k+1.
func (c *Comm) ringBroadcast(buf []float32, root int) error {
	n := c.size
	v := (c.rank - root + n) % n // position in the chain
	left, right := c.ringNeighbours()
	slices := max(1, (len(buf)+ringSliceFloats-1)/ringSliceFloats)
	for k := range slices {
		sl := buf[k*len(buf)/slices : (k+1)*len(buf)/slices]
		if v > 0 {
			if err := c.t.recv(left, sl); err != nil {
				return err
			}
		}
		if v < n-1 {
			if err := c.t.send(right, sl); err != nil {
				return err
			}
		}
	}
	return nil
}
