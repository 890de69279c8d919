package cuda

import (
	"slices"
	"strconv"
	"strings"
)

// graphKey identifies one captured training micro-batch: the steps it
// runs and every argument baked into them depend only on these. The live
// batch sets every shape; first decides which steps overwrite and which
// accumulate; last adds the sync and update phases; every lists the
// periods (Step.Every) of the steps that run at this optimizer step.
// Values that change from step to step without changing the work (the
// loss scale, the optimizer step, the dropout RNG seed and offset) are not
// part of the key: they are set in the graph before each launch.
type graphKey struct {
	batch               int
	first, last, update bool
	every               string
}

// newGraphKey is the key of a micro-batch of batch samples (its update
// phase when update is set) at optimizer step step, given the distinct
// positive Every values of the program's steps.
func newGraphKey(batch int, first, last, update bool, step int, periods []int) graphKey {
	k := graphKey{batch: batch, first: first, last: last, update: update}
	if update {
		// The update phase neither writes nor accumulates gradients, and
		// runs after the last micro-batch only.
		k.first, k.last = false, true
	}
	if !k.last {
		return k // the steps with a period are sync or update steps
	}
	var on []string
	for _, p := range periods {
		if p > 0 && step%p == 0 {
			on = append(on, strconv.Itoa(p))
		}
	}
	k.every = strings.Join(on, ",")
	return k
}

// stepPeriods lists the distinct positive values of every, sorted.
func stepPeriods(every []int) []int {
	var out []int
	for _, e := range every {
		if e > 0 && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

// String is the key as gorun plan and errors print it.
func (k graphKey) String() string {
	s := "batch " + strconv.Itoa(k.batch)
	if k.update {
		s += ", update"
	}
	if k.first {
		s += ", first"
	}
	if k.last {
		s += ", last"
	}
	if k.every != "" {
		s += ", every " + k.every
	}
	return s
}
