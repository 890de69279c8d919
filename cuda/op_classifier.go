//go:build cuda

// The fused classifier (ops.CrossEntropyFused, llm.c's fused_classifier):
// one block per row of the logits writes the row's loss term into the
// device's partials and dlogits over the logits' gradient, then one
// block adds the terms in a fixed order into the loss.

package cuda

import (
	"fmt"

	"gorun/engine"
	"gorun/ops"
)

// classifierSteps are the fused classifier's ops.
var classifierSteps = map[ops.Op]opStep{
	ops.CrossEntropyFused: runCrossEntropyFused,
}

// runCrossEntropyFused queues CrossEntropyFused: logits, target, dloss →
// loss (added to with acc), dx.
func runCrossEntropyFused(d *Device, st *engine.Step, acc bool) error {
	a := &st.Attrs
	x, t, dloss := st.In[0], st.In[1], st.In[2]
	n, c := d.rows(x)
	if n > d.partN {
		// Load sized d.part for the program's shapes (partialsNeeded).
		return fmt.Errorf("%s: the fused classifier over %d rows needs %d partials, Load reserved %d", d.Name(), n, n, d.partN)
	}
	part := ptrArg(uintptr(d.part))
	if err := d.launch(kCrossEntropyFused, blockPer(min(n, maxGrid)), d.bufArg(x), d.bufArg(t), d.bufArg(dloss), part, d.bufArg(st.Out[1]),
		intArg(n), intArg(c), floatArg(a.LabelSmoothing), lossScaleArg(), boolArg(a.HasIgnore), intArg(a.IgnoreIndex)); err != nil {
		return err
	}
	return d.launch(kCrossEntropyFusedLoss, oneBlock(), part, d.bufArg(st.Out[0]), intArg(n), lossScaleArg(), boolArg(acc))
}
