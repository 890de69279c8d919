package comm

// Direct algorithms: one round, each rank reading what it needs straight
// from every other rank. Every rank posts its data to every peer first, so
// no one waits on a send.

// directBroadcast: every rank copies from the root.
func (c *Comm) directBroadcast(buf []float32, root int) error {
	if c.rank != root {
		return c.t.recv(root, buf)
	}
	for q := range c.size {
		if q != root {
			if err := c.t.send(q, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// directReduce: the root reduces every rank's buf into its own, in the
// order root, root+1, …, root−1 (mod n).
func (c *Comm) directReduce(buf []float32, root int, op ReduceOp) error {
	n := c.size
	if c.rank != root {
		return c.t.send(root, buf)
	}
	for i := 1; i < n; i++ {
		if err := c.t.recvReduce((root+i)%n, buf, buf, op); err != nil {
			return err
		}
	}
	if op == Mean {
		divide(buf, n)
	}
	return nil
}

// directAllReduce: every rank reduces all n buffers in rank order,
// ((x0 ⊕ x1) ⊕ x2) ⊕ …, into scratch — the same computation everywhere,
// so the same bits — then copies the result into buf once no peer reads
// buf any more.
func (c *Comm) directAllReduce(buf []float32, op ReduceOp) error {
	r, n := c.rank, c.size
	for q := range n {
		if q != r {
			if err := c.t.send(q, buf); err != nil {
				return err
			}
		}
	}
	acc := c.scratchFor(len(buf))
	if r == 0 {
		copy(acc, buf)
	} else if err := c.t.recv(0, acc); err != nil {
		return err
	}
	for q := 1; q < n; q++ {
		if q == r {
			reduceInto(acc, acc, buf, op)
		} else if err := c.t.recvReduce(q, acc, acc, op); err != nil {
			return err
		}
	}
	if op == Mean {
		divide(acc, n)
	}
	if err := c.t.flush(); err != nil {
		return err
	}
	copy(buf, acc)
	return nil
}

// directAllGather: every rank copies every other rank's send.
func (c *Comm) directAllGather(send, recv []float32) error {
	r, n, m := c.rank, c.size, len(send)
	copyUnlessSame(recv[r*m:(r+1)*m], send)
	for q := range n {
		if q != r {
			if err := c.t.send(q, send); err != nil {
				return err
			}
		}
	}
	for q := range n {
		if q != r {
			if err := c.t.recv(q, recv[q*m:(q+1)*m]); err != nil {
				return err
			}
		}
	}
	return nil
}

// directReduceScatter: rank r reduces block r of every rank's send into
// recv, in the order r, r+1, …, r−1 (mod n).
func (c *Comm) directReduceScatter(send, recv []float32, op ReduceOp) error {
	r, n, m := c.rank, c.size, len(recv)
	for q := range n {
		if q != r {
			if err := c.t.send(q, send[q*m:(q+1)*m]); err != nil {
				return err
			}
		}
	}
	copyUnlessSame(recv, send[r*m:(r+1)*m])
	for i := 1; i < n; i++ {
		if err := c.t.recvReduce((r+i)%n, recv, recv, op); err != nil {
			return err
		}
	}
	if op == Mean {
		divide(recv, n)
	}
	return nil
}
