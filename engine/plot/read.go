package plot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gorun/datasets/userfile"
)

// MetricsFile is the name of the metrics log inside a run folder. It is
// the same name the engine writes (engine.MetricsFile); it is repeated
// here so that the engine may import this package without a cycle.
const MetricsFile = "metrics.jsonl"

// Run is one run's metrics, read from a run folder by ReadRun.
//
// A float that the log records as null (a loss that was not finite) or
// leaves out is NaN; an integer it leaves out is 0. Steps are sorted by step number, epochs by epoch
// number, evals by (epoch, step); each holds at most one entry per key.
type Run struct {
	// Name names the run in legends: the base name of its folder.
	Name string
	// Dir is the folder the run was read from; Write uses it to tell apart
	// runs whose folders have the same base name. It may be empty.
	Dir string

	Steps  []Step
	Epochs []Epoch
	Evals  []Eval
	// Summary is the last "summary" line, as decoded by encoding/json
	// (numbers are float64); nil when the run wrote none.
	Summary map[string]any
}

// Step is one optimizer step: a "step" line of metrics.jsonl.
type Step struct {
	Step  int // 1-based optimizer step
	Epoch int // 1-based
	// Loss is the mean over the whole global batch; NaN when null.
	Loss        float64
	LR          float64
	SamplesPerS float64 // the step's throughput
	CommSeconds float64 // time rank 0 spent in collectives
	Time        float64 // seconds since the run started
}

// Epoch is the end of one training epoch: an "epoch" line.
type Epoch struct {
	Epoch        int
	Step         int     // the last optimizer step of the epoch
	TrainLoss    float64 // mean training loss over the epoch
	Samples      int
	Seconds      float64 // the whole epoch, eval included
	TrainSeconds float64 // training only
}

// Eval is one evaluation on the eval data set: an "eval" line.
type Eval struct {
	Epoch    int
	Step     int
	Accuracy float64 // fraction in [0, 1]
	Loss     float64
	Samples  int
}

// line holds every field that ReadRun looks at, of any kind. Fields it
// does not know are ignored by encoding/json. A null leaves a field as it
// was, so fields start out as "missing" (reset) and nothing is allocated
// per line beyond what encoding/json needs.
type line struct {
	Kind         string  `json:"kind"`
	Step         int     `json:"step"`
	Epoch        int     `json:"epoch"`
	Loss         float64 `json:"loss"`
	LR           float64 `json:"lr"`
	SamplesPerS  float64 `json:"samples_per_s"`
	CommSeconds  float64 `json:"comm_seconds"`
	Time         float64 `json:"time"`
	TrainLoss    float64 `json:"train_loss"`
	Samples      int     `json:"samples"`
	Seconds      float64 `json:"seconds"`
	TrainSeconds float64 `json:"train_seconds"`
	Accuracy     float64 `json:"accuracy"`
}

// missing marks an integer field that a line leaves out or sets to null.
const missing = math.MinInt

func (l *line) reset() {
	nan := math.NaN()
	*l = line{
		Step: missing, Epoch: missing, Samples: missing,
		Loss: nan, LR: nan, SamplesPerS: nan, CommSeconds: nan, Time: nan,
		TrainLoss: nan, Seconds: nan, TrainSeconds: nan, Accuracy: nan,
	}
}

// orZero is n, or 0 when missing.
func orZero(n int) int {
	if n == missing {
		return 0
	}
	return n
}

// ReadRun reads DIR/metrics.jsonl. dir may also name the metrics file
// itself; the run is then named after the folder holding it.
//
// Lines of an unknown kind, lines without a kind, unknown fields and
// blank lines are ignored, so that the format can grow. When a step,
// epoch or eval appears more than once (a resumed run appends to the log
// of the run it resumes), the last line wins. A final line that is cut
// short (no newline at the end of the file, and not valid JSON), as a
// crash in the middle of a write leaves it, is ignored; any other line
// that is not a JSON object, or whose fields have the wrong type, is an
// error naming the file and line number.
func ReadRun(dir string) (*Run, error) {
	path := filepath.Join(dir, MetricsFile)
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		path, dir = dir, filepath.Dir(dir)
	}
	f, err := userfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	defer f.Close()

	name := filepath.Clean(dir)
	if abs, err := filepath.Abs(dir); err == nil {
		name = abs
	}
	r := &Run{Name: filepath.Base(name), Dir: dir}

	// Index of the entry kept for each key, so that a later line replaces
	// an earlier one in place.
	steps := map[int]int{}
	epochs := map[int]int{}
	type evalKey struct{ epoch, step int }
	evals := map[evalKey]int{}

	br := bufio.NewReaderSize(f, 1<<16)
	var l line
	for n := 1; ; n++ {
		b, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("plot: %s:%d: %w", path, n, rerr)
		}
		last := errors.Is(rerr, io.EOF)
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			if last {
				break
			}
			continue
		}
		l.reset()
		if err := json.Unmarshal(b, &l); err != nil {
			var syn *json.SyntaxError
			if last && errors.As(err, &syn) && syn.Offset == int64(len(b)) {
				break // a final line cut short by a crash
			}
			return nil, fmt.Errorf("plot: %s:%d: %w", path, n, err)
		}
		switch l.Kind {
		case "step":
			if l.Step == missing {
				return nil, fmt.Errorf("plot: %s:%d: step line without \"step\"", path, n)
			}
			s := Step{
				Step: l.Step, Epoch: orZero(l.Epoch), Loss: l.Loss, LR: l.LR,
				SamplesPerS: l.SamplesPerS, CommSeconds: l.CommSeconds, Time: l.Time,
			}
			upsert(steps, &r.Steps, s.Step, s)
		case "epoch":
			if l.Epoch == missing {
				return nil, fmt.Errorf("plot: %s:%d: epoch line without \"epoch\"", path, n)
			}
			e := Epoch{
				Epoch: l.Epoch, Step: orZero(l.Step), TrainLoss: l.TrainLoss,
				Samples: orZero(l.Samples), Seconds: l.Seconds, TrainSeconds: l.TrainSeconds,
			}
			upsert(epochs, &r.Epochs, e.Epoch, e)
		case "eval":
			if l.Epoch == missing {
				return nil, fmt.Errorf("plot: %s:%d: eval line without \"epoch\"", path, n)
			}
			e := Eval{
				Epoch: l.Epoch, Step: orZero(l.Step), Accuracy: l.Accuracy,
				Loss: l.Loss, Samples: orZero(l.Samples),
			}
			upsert(evals, &r.Evals, evalKey{e.Epoch, e.Step}, e)
		case "summary":
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, fmt.Errorf("plot: %s:%d: %w", path, n, err)
			}
			delete(m, "kind")
			r.Summary = m
		}
		if last {
			break
		}
	}

	sort.SliceStable(r.Steps, func(i, j int) bool { return r.Steps[i].Step < r.Steps[j].Step })
	sort.SliceStable(r.Epochs, func(i, j int) bool { return r.Epochs[i].Epoch < r.Epochs[j].Epoch })
	sort.SliceStable(r.Evals, func(i, j int) bool {
		a, b := r.Evals[i], r.Evals[j]
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		return a.Step < b.Step
	})
	return r, nil
}

// upsert puts v at key in list: in place of the earlier entry with that
// key (a resumed run logs some lines twice; the last wins), else appended.
func upsert[K comparable, T any](index map[K]int, list *[]T, key K, v T) {
	if i, ok := index[key]; ok {
		(*list)[i] = v
		return
	}
	index[key] = len(*list)
	*list = append(*list, v)
}
