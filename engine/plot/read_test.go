package plot

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeMetrics writes text as DIR/metrics.jsonl in a new folder named name
// under a test temp folder and returns the folder.
func writeMetrics(t testing.TB, name, text string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadRunAllKinds(t *testing.T) {
	dir := writeMetrics(t, "mnist-ddp", `{"kind":"step","step":1,"epoch":1,"loss":2.3,"lr":0.01,"samples_per_s":5400.2,"comm_seconds":0.0001,"time":0.1}
{"kind":"step","step":2,"epoch":1,"loss":1.9,"lr":0.01,"samples_per_s":5500,"comm_seconds":0.0002,"time":0.2,"grad_norm":3.5}

{"kind":"checkpoint","path":"ckpt-2.safetensors","step":2}
{"step":99,"note":"a line without a kind"}
{"kind":"epoch","epoch":1,"train_loss":0.92,"samples":60000,"seconds":13.1,"train_seconds":11.9,"step":2,"extra":{"nested":[1,2]}}
{"kind":"eval","epoch":1,"step":2,"accuracy":0.9475,"loss":0.18,"samples":10000}
{"kind":"summary","train_samples_per_s":4930,"test_accuracy":0.9475,"wall_seconds":13.4,"peak_rss_bytes":97341440,"devices":2}
`)
	r, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "mnist-ddp" || r.Dir != dir {
		t.Errorf("Name, Dir = %q, %q; want mnist-ddp, %q", r.Name, r.Dir, dir)
	}
	wantSteps := []Step{
		{Step: 1, Epoch: 1, Loss: 2.3, LR: 0.01, SamplesPerS: 5400.2, CommSeconds: 0.0001, Time: 0.1},
		{Step: 2, Epoch: 1, Loss: 1.9, LR: 0.01, SamplesPerS: 5500, CommSeconds: 0.0002, Time: 0.2},
	}
	if len(r.Steps) != len(wantSteps) {
		t.Fatalf("steps = %+v, want %+v", r.Steps, wantSteps)
	}
	for i := range wantSteps {
		if r.Steps[i] != wantSteps[i] {
			t.Errorf("step %d = %+v, want %+v", i, r.Steps[i], wantSteps[i])
		}
	}
	wantEpoch := Epoch{Epoch: 1, Step: 2, TrainLoss: 0.92, Samples: 60000, Seconds: 13.1, TrainSeconds: 11.9}
	if len(r.Epochs) != 1 || r.Epochs[0] != wantEpoch {
		t.Errorf("epochs = %+v, want [%+v]", r.Epochs, wantEpoch)
	}
	wantEval := Eval{Epoch: 1, Step: 2, Accuracy: 0.9475, Loss: 0.18, Samples: 10000}
	if len(r.Evals) != 1 || r.Evals[0] != wantEval {
		t.Errorf("evals = %+v, want [%+v]", r.Evals, wantEval)
	}
	if got := r.Summary["test_accuracy"]; got != 0.9475 {
		t.Errorf("summary test_accuracy = %v, want 0.9475", got)
	}
	if got := r.Summary["peak_rss_bytes"]; got != float64(97341440) {
		t.Errorf("summary peak_rss_bytes = %v, want 97341440", got)
	}
	if _, ok := r.Summary["kind"]; ok {
		t.Errorf("summary keeps \"kind\": %v", r.Summary)
	}
}

func TestReadRunNullLoss(t *testing.T) {
	dir := writeMetrics(t, "run", `{"kind":"step","step":1,"epoch":1,"loss":null,"lr":0.01}
{"kind":"step","step":2,"epoch":1,"loss":0.5}
{"kind":"epoch","epoch":1,"train_loss":null}
`)
	r, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 2 {
		t.Fatalf("got %d steps, want 2", len(r.Steps))
	}
	if !math.IsNaN(r.Steps[0].Loss) || r.Steps[0].LR != 0.01 {
		t.Errorf("null loss: step = %+v, want Loss NaN, LR 0.01", r.Steps[0])
	}
	if !math.IsNaN(r.Steps[1].LR) || r.Steps[1].Loss != 0.5 {
		t.Errorf("missing lr: step = %+v, want LR NaN, Loss 0.5", r.Steps[1])
	}
	if !math.IsNaN(r.Epochs[0].TrainLoss) {
		t.Errorf("null train_loss = %v, want NaN", r.Epochs[0].TrainLoss)
	}
	if r.Summary != nil {
		t.Errorf("Summary = %v, want nil without a summary line", r.Summary)
	}
}

// A resumed run appends to the log: steps after the checkpoint appear
// twice, and the later line wins.
func TestReadRunDuplicatesLastWins(t *testing.T) {
	dir := writeMetrics(t, "resumed", `{"kind":"step","step":1,"epoch":1,"loss":1.0}
{"kind":"step","step":2,"epoch":1,"loss":0.9}
{"kind":"epoch","epoch":1,"train_loss":0.95,"step":2}
{"kind":"eval","epoch":1,"step":2,"accuracy":0.5,"loss":0.8}
{"kind":"step","step":3,"epoch":2,"loss":0.8}
{"kind":"step","step":4,"epoch":2,"loss":0.7}
{"kind":"summary","test_accuracy":0.5}
{"kind":"step","step":3,"epoch":2,"loss":0.6}
{"kind":"step","step":4,"epoch":2,"loss":0.5}
{"kind":"epoch","epoch":2,"train_loss":0.55,"step":4}
{"kind":"eval","epoch":2,"step":4,"accuracy":0.7,"loss":0.4}
{"kind":"eval","epoch":1,"step":2,"accuracy":0.6,"loss":0.7}
{"kind":"summary","test_accuracy":0.7}
`)
	r, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1.0, 0.9, 0.6, 0.5}
	if len(r.Steps) != len(want) {
		t.Fatalf("steps = %+v, want %d", r.Steps, len(want))
	}
	for i, s := range r.Steps {
		if s.Step != i+1 || s.Loss != want[i] {
			t.Errorf("steps[%d] = step %d loss %v, want step %d loss %v", i, s.Step, s.Loss, i+1, want[i])
		}
	}
	if len(r.Epochs) != 2 || r.Epochs[1].TrainLoss != 0.55 {
		t.Errorf("epochs = %+v", r.Epochs)
	}
	if len(r.Evals) != 2 || r.Evals[0].Epoch != 1 || r.Evals[0].Accuracy != 0.6 || r.Evals[1].Accuracy != 0.7 {
		t.Errorf("evals = %+v, want epoch 1 at 0.6 then epoch 2 at 0.7", r.Evals)
	}
	if r.Summary["test_accuracy"] != 0.7 {
		t.Errorf("summary = %v, want the last one", r.Summary)
	}
}

func TestReadRunBadLine(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"syntax", "{\"kind\":\"step\",\"step\":1,\"loss\":1}\n\n{\"kind\":\"step\",\"step\":2,\n{\"kind\":\"step\",\"step\":3}\n", ":3: "},
		{"type", "{\"kind\":\"step\",\"step\":1}\n{\"kind\":\"eval\",\"epoch\":\"one\"}\n", ":2: "},
		{"not an object", "[1,2,3]\n", ":1: "},
		{"step without step", "{\"kind\":\"step\",\"loss\":1}\n", `:1: step line without "step"`},
		{"garbage last line", "{\"kind\":\"step\",\"step\":1}\nxyz", ":2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeMetrics(t, "run", tc.text)
			_, err := ReadRun(dir)
			if err == nil {
				t.Fatal("no error")
			}
			file := filepath.Join(dir, MetricsFile)
			if !strings.Contains(err.Error(), file+tc.want) {
				t.Errorf("error %q does not name %q", err, file+tc.want)
			}
		})
	}
}

// A crash in the middle of a write cuts the last line short; that line
// is dropped, the rest is read.
func TestReadRunTruncatedLastLine(t *testing.T) {
	dir := writeMetrics(t, "crashed", "{\"kind\":\"step\",\"step\":1,\"loss\":1}\n{\"kind\":\"step\",\"step\":2,\"lo")
	r, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 1 {
		t.Errorf("got %d steps, want 1", len(r.Steps))
	}
	// The same line with its newline is an error: it was written whole.
	dir = writeMetrics(t, "bad", "{\"kind\":\"step\",\"step\":1,\"loss\":1}\n{\"kind\":\"step\",\"step\":2,\"lo\n")
	if _, err := ReadRun(dir); err == nil || !strings.Contains(err.Error(), MetricsFile+":2: ") {
		t.Errorf("err = %v, want one naming line 2", err)
	}
}

func TestReadRunMissingFile(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadRun(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, MetricsFile)) || !strings.HasPrefix(err.Error(), "plot: ") {
		t.Errorf("error %q does not name the file", err)
	}
}

func TestReadRunFromFile(t *testing.T) {
	dir := writeMetrics(t, "run7", "{\"kind\":\"step\",\"step\":1,\"loss\":1}\n")
	r, err := ReadRun(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "run7" || len(r.Steps) != 1 {
		t.Errorf("Name %q, %d steps; want run7, 1", r.Name, len(r.Steps))
	}
}
