package vec

// SGDArgs are one SGD step's hyperparameters, as torch.optim.SGD's.
type SGDArgs struct {
	LR, WeightDecay, Momentum float32
	// Keep is 1 - dampening: the gradient's weight in the momentum buffer
	// (computed by the caller in the precision its option has).
	Keep     float32
	Nesterov bool
	// First is the first step: the momentum buffer starts as the gradient.
	First bool
}

// SGD updates p in place from the gradient g, as torch.optim.SGD's
// single-tensor loop: d = g + wd·p (when WeightDecay ≠ 0); with momentum,
// buf = First ? d : momentum·buf + Keep·d, then d = Nesterov ?
// d + momentum·buf : buf; p = p - lr·d. Each step is a fused
// multiply-add (momentum·buf rounded first), as PyTorch's float32 CPU
// kernels compute it. buf is unused (may be nil) without momentum.
func SGD(a *SGDArgs, p, g, buf []float32) {
	if len(p) == 0 {
		return
	}
	_ = g[len(p)-1]
	if a.Momentum != 0 {
		_ = buf[len(p)-1]
	}
	sgd(level, a, p, g, buf)
}

// sgdGo is SGD in Go; fma32 rounds twice, so an element can differ from the
// C levels by one unit in the last place (rarely).
func sgdGo(a *SGDArgs, p, g, buf []float32) {
	for i, d := range g[:len(p)] {
		if a.WeightDecay != 0 {
			d = fma32(a.WeightDecay, p[i], d)
		}
		if a.Momentum != 0 {
			b := d
			if !a.First {
				b = fma32(a.Keep, d, buf[i]*a.Momentum)
			}
			buf[i] = b
			if a.Nesterov {
				d = fma32(a.Momentum, b, d)
			} else {
				d = b
			}
		}
		p[i] = fma32(-a.LR, d, p[i])
	}
}
