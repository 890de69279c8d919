package runner

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMetricsLinesReachTheFile: every metrics.jsonl line is in the file
// as soon as it is written, with the writer still open — what a killed
// process or a lost host leaves — not only once a buffer fills or the run
// ends. During a run, each OnStep (called after the step's line) finds the
// file holding every step so far.
func TestMetricsLinesReachTheFile(t *testing.T) {
	dir := t.TempDir()
	m, err := openMetrics(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	for i := 1; i <= 3; i++ {
		if err := m.step(&StepMetrics{Step: i, Epoch: 1, Loss: 0.5, LR: 0.1, Samples: 8}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.record("epoch", map[string]any{"epoch": 1, "train_loss": 0.5}); err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, filepath.Join(dir, MetricsFile)) // the writer is still open
	if len(recs) != 4 || recs[2]["step"] != 3.0 || recs[3]["kind"] != "epoch" {
		t.Fatalf("with the writer open, metrics.jsonl holds %d lines, want the 4 written: %v", len(recs), recs)
	}

	out := t.TempDir()
	p := compile(t, loadSpec(t, tinyScript, "epochs=1", "max_steps=20"), 1)
	var missing []string
	_, err = Run(p, RunOptions{Out: out, OnStep: func(s StepMetrics) {
		b, err := os.ReadFile(filepath.Join(out, MetricsFile))
		if err != nil {
			t.Error(err)
			return
		}
		if n := bytes.Count(b, []byte(`"kind":"step"`)); n != s.Step {
			missing = append(missing, strings.TrimSpace(string(b[max(0, len(b)-200):])))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("at %d of 20 steps metrics.jsonl lacked written lines; the first time it ended with %q", len(missing), missing[0])
	}
}

// TestEpochLinesCountTheirEpoch: each epoch line's train loss, samples and
// skipped_steps are of that epoch alone (they used to add up every epoch
// so far), and after a resume at an epoch's end too.
func TestEpochLinesCountTheirEpoch(t *testing.T) {
	check := func(dir string) {
		t.Helper()
		var stepLoss [4]float64
		var steps [4]int
		var lines []map[string]any
		for _, rec := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			switch rec["kind"] {
			case "step":
				e := int(rec["epoch"].(float64))
				stepLoss[e] += rec["loss"].(float64)
				steps[e]++
			case "epoch":
				lines = append(lines, rec)
			}
		}
		if len(lines) != 3 {
			t.Fatalf("%d epoch lines, want 3", len(lines))
		}
		for i, rec := range lines {
			e := i + 1
			want := stepLoss[e] / float64(steps[e]) // every step has 16 samples
			if got, _ := rec["train_loss"].(float64); math.Abs(got-want) > 1e-9*want || rec["samples"] != 512.0 || rec["skipped_steps"] != 0.0 {
				t.Errorf("epoch %d line %v: want train_loss %.6f (the mean of its %d steps), samples 512, skipped_steps 0", e, rec, want, steps[e])
			}
		}
	}
	dir := t.TempDir()
	runIn(t, dir, "", 1, "epochs=3")
	check(dir)
	dir = t.TempDir()
	runIn(t, dir, "", 1, "epochs=3", "max_steps=32") // the end of epoch 1
	runIn(t, "", dir, 1, "epochs=3")
	check(dir)
}

// BenchmarkMetricsStep is the cost of one step line written straight to
// the file (a write system call), next to a step of the MNIST Net that
// takes milliseconds.
func BenchmarkMetricsStep(b *testing.B) {
	m, err := openMetrics(b.TempDir(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer m.close()
	s := &StepMetrics{Step: 1, Epoch: 1, Loss: 0.123456789, LR: 0.01, Samples: 64, SamplesPerS: 15000, CommSeconds: 0.0001, Time: 12.5}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Step = i
		if err := m.step(s); err != nil {
			b.Fatal(err)
		}
	}
}
