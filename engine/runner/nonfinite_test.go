package runner

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/safetensors"
)

// TestNonFiniteStopsTheRun: a step whose loss turns non-finite (a learning
// rate of 1e30 overflows the second forward pass) ends the run with an
// error naming the op that produced the first non-finite value, before
// that step's update, and no model file is written.
func TestNonFiniteStopsTheRun(t *testing.T) {
	for _, devices := range []int{1, 2} {
		dir := t.TempDir()
		p := compile(t, loadSpec(t, tinyScript, "optimizer=optim.sgd(lr=1e30)"), devices)
		_, err := Run(p, RunOptions{Out: dir})
		if err == nil {
			t.Fatalf("%d devices: a diverging run succeeded", devices)
		}
		for _, want := range []string{"epoch 1 step 2: non-finite values", "first produced by", "the parameters were not updated", `on_nonfinite = "skip"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%d devices: error %q lacks %q", devices, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, ModelFile)); err == nil {
			t.Errorf("%d devices: a model file was written after a non-finite step", devices)
		}
	}
}

// TestNonFiniteSkip: with on_nonfinite = "skip" such steps leave the
// parameters as they were and the run goes on to its end.
func TestNonFiniteSkip(t *testing.T) {
	s := loadSpec(t, tinyScript, "optimizer=optim.sgd(lr=1e30)", "epochs=1")
	s.OnNonFinite = "skip"
	p := compile(t, s, 2)
	var log bytes.Buffer
	res, err := Run(p, RunOptions{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 32 {
		t.Errorf("%d steps, want 32", res.Steps)
	}
	for r, params := range res.Params {
		for _, v := range params {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("rank %d holds a non-finite parameter after skipped steps", r)
			}
		}
	}
	if !strings.Contains(log.String(), "update skipped") {
		t.Errorf("the log does not say steps were skipped:\n%s", log.String())
	}
}

// TestInitRejectsNonFinite: --init weights holding NaN are refused, naming
// the parameter.
func TestInitRejectsNonFinite(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "", 1, "max_steps=2")
	model := filepath.Join(dir, ModelFile)
	f, err := safetensors.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		tn, _ := f.Get(name)
		v, _ := tn.Float32s()
		if name == "fc.bias" {
			v[2] = float32(math.NaN())
		}
		ts = append(ts, safetensors.F32(name, tn.Shape, v))
	}
	bad := filepath.Join(dir, "bad.safetensors")
	if err := safetensors.WriteFile(bad, ts, nil); err != nil {
		t.Fatal(err)
	}
	p := compile(t, loadSpec(t, dropoutScript), 1)
	_, err = Run(p, RunOptions{Init: bad})
	if err == nil || !strings.Contains(err.Error(), "fc.bias") || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("--init with a NaN: %v", err)
	}
}

// nanSet is random MNIST-like data with one NaN pixel in sample 5.
type nanSet struct{ randomSet }

func (s *nanSet) Fill(idx []int, x []float32, y []int32) {
	s.randomSet.Fill(idx, x, y)
	for i, j := range idx {
		if j == 5 {
			x[i*784+100] = float32(math.NaN())
		}
	}
}

// TestNonFiniteNamesTheRank: a NaN in one rank's data is named there as
// coming from the input batch; the other rank, which only received it
// through the all-reduce, says so instead of blaming an op of its own.
func TestNonFiniteNamesTheRank(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript, "eval=None", "shuffle=False", "batch_size=16"), 2)
	_, err := Run(p, RunOptions{Train: &nanSet{*newMNISTLike(64)}})
	if err == nil {
		t.Fatal("a NaN in the data trained")
	}
	msg := err.Error()
	for _, want := range []string{"rank 0: epoch 1 step 1: non-finite values", "first in the input batch", "rank 1: epoch 1 step 1: non-finite values", "after the allreduce"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

// TestNonFiniteSkipEveryStep: with on_nonfinite = "skip", an epoch line
// says how many steps were skipped; an epoch whose every step was skipped
// has no train loss (null, not the previous epoch's) and ends the run with
// an error that says so.
func TestNonFiniteSkipEveryStep(t *testing.T) {
	for _, devices := range []int{1, 2} {
		dir := t.TempDir()
		// lr 1e30: step 1 updates, every later step is non-finite.
		s := loadSpec(t, tinyScript, "optimizer=optim.sgd(lr=1e30)", "epochs=3")
		s.OnNonFinite = "skip"
		p := compile(t, s, devices)
		var log bytes.Buffer
		res, err := Run(p, RunOptions{Out: dir, Log: &log})
		if err == nil {
			t.Fatalf("%d devices: a run whose epoch 2 skipped every step succeeded", devices)
		}
		for _, want := range []string{"epoch 2: all 32 of its steps had a non-finite loss or gradients and were skipped", "the last good checkpoint is " + filepath.Join(dir, "checkpoints")} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%d devices: error %q lacks %q", devices, err, want)
			}
		}
		if strings.Count(err.Error(), "all 32 of its steps") != 1 {
			t.Errorf("%d devices: the error is repeated per rank: %v", devices, err)
		}
		if res != nil {
			t.Errorf("%d devices: a result for a failed run", devices)
		}
		var epochs []map[string]any
		for _, rec := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			if rec["kind"] == "epoch" {
				epochs = append(epochs, rec)
			}
		}
		if len(epochs) != 2 {
			t.Fatalf("%d devices: %d epoch lines, want 2 (the run stops after epoch 2): %v", devices, len(epochs), epochs)
		}
		if l, ok := epochs[0]["train_loss"].(float64); !ok || math.IsNaN(l) || epochs[0]["skipped_steps"] != 31.0 || epochs[0]["samples"] != 16.0 {
			t.Errorf("%d devices: epoch 1 line %v, want the loss of its one good step, skipped_steps 31, samples 16", devices, epochs[0])
		}
		if v, ok := epochs[1]["train_loss"]; !ok || v != nil || epochs[1]["skipped_steps"] != 32.0 {
			t.Errorf("%d devices: epoch 2 line %v, want train_loss null and skipped_steps 32", devices, epochs[1])
		}
		for _, want := range []string{"epoch 1/3: loss ", ", 31 of 32 steps skipped (non-finite)", "epoch 2/3: no train loss: all 32 steps skipped (non-finite)"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("%d devices: the log lacks %q:\n%s", devices, want, lastLines(log.String(), 6))
			}
		}
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
