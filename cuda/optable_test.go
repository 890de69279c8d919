//go:build cuda

package cuda

import (
	"testing"

	"gorun/ops"
)

// TestEveryOpHasAKernel fails when an op has neither a function in the
// CUDA backend's table nor a reason to decline it, when an op has both,
// and when either lists something that is not an op.
func TestEveryOpHasAKernel(t *testing.T) {
	known := map[ops.Op]bool{}
	for _, op := range ops.All() {
		known[op] = true
		_, has := opSteps[op]
		reason := Backend{}.Declines(op)
		switch {
		case has && reason != "":
			t.Errorf("op %s has a CUDA kernel and is declined (%s)", op, reason)
		case !has && reason == "":
			t.Errorf("op %s has no CUDA kernel and no reason to decline it", op)
		case (Backend{}).Target().Supports(op) != has:
			t.Errorf("Supports(%s) = %v, the table says %v", op, !has, has)
		}
	}
	for op := range opSteps {
		if !known[op] {
			t.Errorf("the CUDA table has an entry for %s, not an op", op)
		}
	}
	for op := range declined {
		if !known[op] {
			t.Errorf("the CUDA backend declines %s, not an op", op)
		}
	}
	if (Backend{}).Target().Supports(ops.Invalid) || (Backend{}).Declines(ops.Invalid) != "" {
		t.Error("the invalid op is supported or declined")
	}
}
