package comm

// Tree algorithms, over binomial trees. In the tree rooted at root, rank r
// has the position v = (r − root) mod n; the children of v are v+1, v+2,
// v+4, … below v's lowest set bit (and below n), its parent is v minus its
// lowest set bit. A reduction runs up the tree, each rank combining its own
// buffer with its children's results in the order v+1, v+2, v+4, …; results
// come down the same tree.

// treeUp reduces in over the tree rooted at root: every rank with children
// accumulates into acc (acc may be in), sends it to its parent, and the
// result lands in root's acc. Ranks without children send in itself.
func (c *Comm) treeUp(in, acc []float32, root int, op ReduceOp) error {
	n := c.size
	v := (c.rank - root + n) % n
	cur := in
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			return c.t.send((v-mask+root)%n, cur)
		}
		if v+mask < n {
			if err := c.t.recvReduce((v+mask+root)%n, acc, cur, op); err != nil {
				return err
			}
			cur = acc
		}
	}
	if !same(cur, acc) {
		copy(acc, cur)
	}
	return nil
}

// treeDown copies root's buf to every rank down the tree rooted at root,
// the larger subtrees first.
func (c *Comm) treeDown(buf []float32, root int) error {
	n := c.size
	v := (c.rank - root + n) % n
	mask := 1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			if err := c.t.recv((v-mask+root)%n, buf); err != nil {
				return err
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			if err := c.t.send((v+mask+root)%n, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// treeAllReduce: up the tree rooted at 0 in place, then down again.
func (c *Comm) treeAllReduce(buf []float32, op ReduceOp) error {
	if err := c.treeUp(buf, buf, 0, op); err != nil {
		return err
	}
	if c.rank == 0 && op == Mean {
		divide(buf, c.size)
	}
	// buf is overwritten next: what was sent up must have been taken.
	if err := c.t.flush(); err != nil {
		return err
	}
	return c.treeDown(buf, 0)
}

// treeBroadcast: down the tree rooted at root.
func (c *Comm) treeBroadcast(buf []float32, root int) error {
	return c.treeDown(buf, root)
}

// treeReduceTo: up the tree rooted at root; ranks other than the root
// accumulate in scratch, so their buf stays unchanged.
func (c *Comm) treeReduceTo(buf []float32, root int, op ReduceOp) error {
	acc := buf
	if v := (c.rank - root + c.size) % c.size; v != 0 && v%2 == 0 && v+1 < c.size {
		acc = c.scratchFor(len(buf)) // v has children
	}
	if err := c.treeUp(buf, acc, root, op); err != nil {
		return err
	}
	if c.rank == root && op == Mean {
		divide(buf, c.size)
	}
	return nil
}

// subtree returns the ranks [v, end) of v's subtree in a tree rooted at 0.
func subtree(v, n int) (end int) {
	if v == 0 {
		return n
	}
	return min(v+v&-v, n)
}

// treeAllGather: the blocks gather up the tree rooted at 0 (rank v's
// subtree is the contiguous ranks [v, subtree(v))), then the whole of recv
// comes down it.
func (c *Comm) treeAllGather(send, recv []float32) error {
	r, n, m := c.rank, c.size, len(send)
	copyUnlessSame(recv[r*m:(r+1)*m], send)
	have := r + 1 // recv holds blocks [r, have)
	for mask := 1; mask < n; mask <<= 1 {
		if r&mask != 0 {
			if err := c.t.send(r-mask, recv[r*m:have*m]); err != nil {
				return err
			}
			break
		}
		if child := r + mask; child < n {
			end := subtree(child, n)
			if err := c.t.recv(child, recv[child*m:end*m]); err != nil {
				return err
			}
			have = end
		}
	}
	if err := c.t.flush(); err != nil {
		return err
	}
	return c.treeDown(recv, 0)
}

// treeReduceScatter: up the tree rooted at 0, accumulating the whole of
// send in scratch, then each rank's subtree's blocks come down the tree.
func (c *Comm) treeReduceScatter(send, recv []float32, op ReduceOp) error {
	r, n, m := c.rank, c.size, len(recv)
	end := subtree(r, n)
	var acc []float32
	if end-r > 1 {
		acc = c.scratchFor(len(send))
	}
	if err := c.treeUp(send, acc, 0, op); err != nil {
		return err
	}
	if err := c.t.flush(); err != nil {
		return err
	}
	// Down: receive this subtree's blocks, pass the children theirs.
	if r != 0 {
		parent := r - r&-r
		dst := recv
		if end-r > 1 {
			dst = acc[r*m : end*m]
		}
		if err := c.t.recv(parent, dst); err != nil {
			return err
		}
	}
	mask := 1
	for mask < end-r {
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if child := r + mask; child < end {
			if err := c.t.send(child, acc[child*m:subtree(child, n)*m]); err != nil {
				return err
			}
		}
	}
	if end-r > 1 {
		copy(recv, acc[r*m:(r+1)*m])
	}
	if op == Mean {
		divide(recv, n)
	}
	return nil
}
