package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gorun/datasets/userfile"
)

// MetricsFile is the name of the metrics log inside a run's --out folder.
const MetricsFile = "metrics.jsonl"

// metrics writes metrics.jsonl: one JSON object a line, with a "kind" of
// "step", "epoch", "eval", "summary" or, where a resumed run starts,
// "resume" (and "restart" after it, when gorun launch restarted the run
// after a lost host: restart.go). Each line goes to the file in one
// write as it is made, unbuffered: the log is whole up to its last line
// when the process is killed or its host lost (a write a step costs a few
// microseconds next to milliseconds of training). Step lines are written
// without allocating.
type metrics struct {
	f   *os.File
	buf []byte
}

func openMetrics(dir string, appendTo bool) (*metrics, error) {
	if dir == "" {
		return &metrics{}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(filepath.Join(dir, MetricsFile), flags, 0o644)
	if err != nil {
		return nil, err
	}
	return &metrics{f: f, buf: make([]byte, 0, 512)}, nil
}

// StepMetrics is one optimizer step as metrics.jsonl records it.
type StepMetrics struct {
	Step  int     // 1-based optimizer step
	Epoch int     // 1-based
	Loss  float64 // mean over the whole global batch
	LR    float64
	// Samples is the step's global batch.
	Samples int
	// SamplesPerS is the step's throughput; CommSeconds the time rank 0
	// spent in collectives during the step.
	SamplesPerS float64
	CommSeconds float64
	// DataWaitSeconds is the time rank 0's Gathers waited during the step
	// for samples not yet decoded (a dataset streamed from disk whose
	// prefetch fell behind); 0 for data held in memory.
	DataWaitSeconds float64
	Time            float64 // seconds since the run started
	// SkippedSteps counts the epoch's steps so far whose update
	// on_nonfinite = "skip" skipped (this one too when its Loss is NaN).
	// metrics.jsonl's epoch line has it; the step line's loss is null.
	SkippedSteps int
	// LossScale is the dynamic loss scale the step ran under
	// (train(precision = "fp16"): GradScaler's scale); 0 for the other
	// precisions, whose step lines leave it out.
	LossScale float64
}

func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func (m *metrics) step(s *StepMetrics) error {
	if m.f == nil {
		return nil
	}
	b := append(m.buf[:0], `{"kind":"step","step":`...)
	b = strconv.AppendInt(b, int64(s.Step), 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, int64(s.Epoch), 10)
	b = append(b, `,"loss":`...)
	b = appendFloat(b, s.Loss)
	b = append(b, `,"lr":`...)
	b = appendFloat(b, s.LR)
	b = append(b, `,"samples_per_s":`...)
	b = appendFloat(b, s.SamplesPerS)
	b = append(b, `,"comm_seconds":`...)
	b = appendFloat(b, s.CommSeconds)
	b = append(b, `,"data_wait_seconds":`...)
	b = appendFloat(b, s.DataWaitSeconds)
	b = append(b, `,"time":`...)
	b = appendFloat(b, s.Time)
	if s.LossScale != 0 {
		b = append(b, `,"loss_scale":`...)
		b = appendFloat(b, s.LossScale)
	}
	b = append(b, "}\n"...)
	m.buf = b
	_, err := m.f.Write(b)
	return err
}

// record writes one non-step line. Non-finite floats become null.
func (m *metrics) record(kind string, fields map[string]any) error {
	if m.f == nil {
		return nil
	}
	obj := map[string]any{"kind": kind}
	for k, v := range fields {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			v = nil
		}
		obj[k] = v
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = m.f.Write(b)
	return err
}

// close closes the file; closing twice is harmless.
func (m *metrics) close() error {
	if m.f == nil {
		return nil
	}
	err := m.f.Close()
	m.f = nil
	return err
}

// PeakRSS returns the process's peak resident set size in bytes (VmHWM),
// or 0 when the system does not say.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// trimMetrics rewrites a resumed run's metrics.jsonl (atomically) to what
// the checkpoint covers: step lines up to its step, epoch and eval lines of
// the epochs it completed, no summary, and no half-written last line.
func trimMetrics(dir string, pr *progress) error {
	path := filepath.Join(dir, MetricsFile)
	b, err := userfile.ReadFile(path, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var keep []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 || line[len(line)-1] != '\n' {
			continue // a line cut short by a crash
		}
		var rec struct {
			Kind  string `json:"kind"`
			Step  int    `json:"step"`
			Epoch int    `json:"epoch"`
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch rec.Kind {
		case "step":
			if rec.Step > pr.Step {
				continue
			}
		case "epoch", "eval":
			if rec.Epoch > pr.Epoch {
				continue
			}
		case "resume", "restart": // resumed at rec.Step: a resume from here replaces it
			if rec.Step >= pr.Step {
				continue
			}
		case "summary":
			continue
		}
		keep = append(keep, line...)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, keep, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
