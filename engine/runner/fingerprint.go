package runner

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strings"

	"gorun/comm"
	"gorun/engine"
)

// checkFingerprints compares this process's Plan with rank 0's before the
// first collective of the run: rank 0 broadcasts its fingerprint (the
// number of entries, then each entry's hash), every rank compares, and the
// ranks agree through one all-reduce on whether any differs. A rank that
// compiled another script, or with another --set, so stops every rank with
// an error naming the first differing step, instead of a hang or a
// mismatch deep inside a collective. Within one process every Program
// comes from one Plan, so only multi-process runs check.
func (rs *runState) checkFingerprints() error {
	if rs.opts.Cross == nil || rs.plan.World == 1 {
		return nil
	}
	fp := rs.plan.Fingerprint()
	// The flags that shape the run (--init, --resume, --out, --set):
	// rank 0's alone would otherwise decide some (its --init, its run
	// folder) while a rank given others went on unaware.
	fp = append(fp, rs.opts.Flags...)
	// What the Plan cannot know but every process must agree on: the data
	// each loaded (its sizes set the number of steps) and the checkpoint
	// each resumes from.
	fp = append(fp, engine.PlanStep{Label: "training data", Text: fmt.Sprintf("%s, %d samples", rs.train.Name(), rs.train.Len())})
	if rs.eval != nil {
		fp = append(fp, engine.PlanStep{Label: "eval data", Text: fmt.Sprintf("%s, %d samples", rs.eval.Name(), rs.eval.Len())})
	}
	if rs.resume != nil {
		fp = append(fp, engine.PlanStep{Label: "resumed checkpoint", Text: fmt.Sprintf("step %d", rs.resume.Step)})
	}
	errs := make([]error, len(rs.workers))
	done := make(chan int, len(rs.workers))
	for i, d := range rs.workers {
		go func() {
			defer func() {
				if v := recover(); v != nil {
					errs[i] = &PanicError{Value: v, Stack: debug.Stack()}
					rs.abort(errs[i])
				}
				done <- i
			}()
			errs[i] = checkRank(d, fp)
		}()
	}
	for range rs.workers {
		<-done
	}
	return errors.Join(errs...)
}

// checkRank is one rank's part of checkFingerprints.
func checkRank(d *worker, fp []engine.PlanStep) error {
	tag := comm.Tag{Name: "plan fingerprint"}
	count := []float32{float32(len(fp))}
	if err := d.host.Broadcast(count, 0, tag); err != nil {
		return fmt.Errorf("comparing plans with rank 0: %w", err)
	}
	n0 := int(count[0])
	hashes := make([]float32, 2*n0)
	if d.rank == 0 {
		for i, e := range fp {
			h := e.Hash()
			hashes[2*i], hashes[2*i+1] = math.Float32frombits(uint32(h>>32)), math.Float32frombits(uint32(h))
		}
	}
	if err := d.host.Broadcast(hashes, 0, tag); err != nil {
		return fmt.Errorf("comparing plans with rank 0: %w", err)
	}
	first := -1 // the first entry that differs from rank 0's
	for i := 0; i < max(n0, len(fp)) && first < 0; i++ {
		if i >= n0 || i >= len(fp) {
			first = i
			break
		}
		h := uint64(math.Float32bits(hashes[2*i]))<<32 | uint64(math.Float32bits(hashes[2*i+1]))
		if h != fp[i].Hash() {
			first = i
		}
	}
	// The lowest rank whose plan differs, agreed by all.
	who := []float32{float32(math.Inf(1))}
	if first >= 0 {
		who[0] = float32(d.rank)
	}
	if err := d.host.AllReduce(who, comm.Min, tag); err != nil {
		return fmt.Errorf("comparing plans with rank 0: %w", err)
	}
	switch {
	case first >= 0 && first < len(fp) && first < n0 && isFlag(fp[first]):
		return fmt.Errorf("rank %d was started with %s, unlike rank 0: every process of the run must be given the same %s (an mpirun command line with ':' gives processes their own flags)",
			d.rank, flagText(fp[first]), fp[first].Label)
	case first >= 0 && first >= len(fp):
		return fmt.Errorf("rank %d's plan differs from rank 0's: rank 0's has %d steps, this one %d (another script or another --set on some rank?)", d.rank, n0, len(fp))
	case first >= 0 && first >= n0:
		return fmt.Errorf("rank %d's plan differs from rank 0's: it has more steps, from %s (%s) on; rank 0's has %d (another script or another --set on some rank?)", d.rank, fp[first].Label, fp[first].Text, n0)
	case first >= 0:
		return fmt.Errorf("rank %d's plan differs from rank 0's first at %s: here %s (another script or another --set on some rank?)", d.rank, fp[first].Label, fp[first].Text)
	case !math.IsInf(float64(who[0]), 1):
		return fmt.Errorf("rank %d's plan or flags differ from rank 0's (its error names what differs): every rank must run the same script with the same --set, --init, --resume and --out", int(who[0]))
	}
	return nil
}

// isFlag reports whether a fingerprint entry is a command-line flag
// (RunOptions.Flags: "--init").
func isFlag(e engine.PlanStep) bool { return strings.HasPrefix(e.Label, "--") }

// flagText is a flag entry as a command line gives it: "--init w.safetensors",
// or "no --init".
func flagText(e engine.PlanStep) string {
	if e.Text == "" {
		return "no " + e.Label
	}
	return e.Label + " " + e.Text
}
