package runner

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"time"

	"gorun/datasets/userfile"
)

// Restart describes an elastic restart (gorun launch --max-restarts): a
// job lost hosts or processes, and launch started the run again, with
// Resume, on the hosts that still answer. Rank 0's process writes a
// "restart" line into metrics.jsonl right after the resume line, and the
// summary line counts the restarts.
type Restart struct {
	// Number counts the run's restarts: 1 for the first.
	Number int
	// LostHosts are the hosts the failed job lost, as the cluster file
	// names them; Dropped those that launch left out because they then
	// failed its host check (their reason in launch's stderr).
	LostHosts, Dropped []string
	// FromProcesses is the failed job's process count.
	FromProcesses int
	// FailedAt is when gorun launch saw the failed job end; the restart
	// line's down_seconds run from it to the resumed run's start (the
	// clocks of launch's machine and rank 0's host are taken to agree).
	FailedAt time.Time
}

// restartRecord is the restart line's fields.
func (rs *runState) restartRecord(r *Restart, pr *progress, reached int, redo float64) map[string]any {
	down := 0.0
	if !r.FailedAt.IsZero() {
		down = math.Max(0, time.Since(r.FailedAt).Seconds())
	}
	lost, dropped := r.LostHosts, r.Dropped
	if lost == nil {
		lost = []string{}
	}
	if dropped == nil {
		dropped = []string{}
	}
	return map[string]any{
		"restart": r.Number, "lost_hosts": lost, "dropped_hosts": dropped,
		"step": pr.Step, "epoch": pr.Epoch + 1, "reached_step": reached,
		"from_processes": r.FromProcesses, "processes": rs.plan.Cluster.ProcessCount(), "devices": rs.plan.World,
		"down_seconds": down, "redo_seconds": redo, "seconds_lost": down + redo,
	}
}

// lostWork reads a run folder's metrics.jsonl, before a resume trims it,
// for what the failed job did past checkpoint step: the last step it
// logged (reached), and the seconds its steps after the checkpoint took
// (redo), which the resumed run trains again. Only the lines after the
// last resume or restart line are the failed job's; when its checkpoint
// step is not among them (it came from an earlier job), redo counts from
// that job's start. A missing or unreadable file gives step and 0.
func lostWork(dir string, step int) (reached int, redo float64) {
	b, err := userfile.ReadFile(filepath.Join(dir, MetricsFile), 0)
	if err != nil {
		return step, 0
	}
	reached = step
	var ckptTime, lastTime float64
	haveCkpt := false
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		var rec struct {
			Kind string  `json:"kind"`
			Step int     `json:"step"`
			Time float64 `json:"time"`
		}
		if len(line) == 0 || line[len(line)-1] != '\n' || json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch rec.Kind {
		case "resume", "restart": // a later job: its times start again
			reached, lastTime, ckptTime, haveCkpt = step, 0, 0, false
		case "step":
			if rec.Step == step {
				ckptTime, haveCkpt = rec.Time, true
			}
			if rec.Step > reached {
				reached, lastTime = rec.Step, rec.Time
			}
		}
	}
	if reached == step {
		return step, 0
	}
	if !haveCkpt {
		ckptTime = 0
	}
	return reached, math.Max(0, lastTime-ckptTime)
}
