package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gorun runs the CLI in-process and returns its exit code and output.
func gorun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// small is a quick training script on generated data.
const small = `
train(
    model = nn.sequential(
        nn.conv2d(1, 4, kernel = 3, name = "conv"),
        nn.relu(),
        nn.maxpool2d(2),
        nn.dropout(0.1),
        nn.flatten(),
        nn.linear(36, 3, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.synthetic(size = 300, shape = (1, 8, 8), classes = 3, noise = 0.5),
    eval = data.synthetic(size = 90, shape = (1, 8, 8), classes = 3, noise = 0.5, split = "test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 30,
    epochs = 3,
    seed = 1,
)
`

func writeScript(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "train.star")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTrainWritesRunFolder(t *testing.T) {
	script := writeScript(t, small)
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, script, "--set", "epochs=2", "--out", out, "--devices", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"rank 0 epoch 1 loss", "rank 1 epoch 2 loss", "epoch 2/2: loss", "test accuracy", "done: 20 steps"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["kind"] != "summary" || last["test_accuracy"].(float64) < 0.5 {
		t.Errorf("summary = %v", last)
	}
	for _, f := range []string{"loss_steps.png", "loss_epochs.png", "accuracy.png", "model.safetensors", "best.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("run folder lacks %s", f)
		}
	}
	// Resume the finished run with one more epoch.
	code, stdout, stderr = gorun(t, script, "--set", "epochs=3", "--resume", out, "--devices", "2", "-q")
	if code != 0 || stdout != "" {
		t.Fatalf("resume: exit %d\n%s\n%s", code, stdout, stderr)
	}
	b, _ = os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if n := strings.Count(string(b), `"kind":"epoch"`); n != 3 {
		t.Errorf("after resuming to 3 epochs, metrics have %d epoch lines", n)
	}
	// Plots of two runs on one figure.
	other := filepath.Join(t.TempDir(), "other")
	if code, _, stderr := gorun(t, script, "--set", "epochs=1", "--set", "optimizer.lr=0.01", "--out", other, "-q"); code != 0 {
		t.Fatal(stderr)
	}
	figs := t.TempDir()
	code, stdout, stderr = gorun(t, "plot", "-o", figs, out, other)
	if code != 0 {
		t.Fatalf("plot: exit %d: %s", code, stderr)
	}
	f, err := os.Open(filepath.Join(figs, "loss_steps.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() < 300 {
		t.Errorf("loss_steps.png: %v, %v", err, img)
	}
}

func TestPlanOutput(t *testing.T) {
	code, stdout, stderr := gorun(t, "plan", "../../scripts/examples/mnist.star", "--devices", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"parameters: 8 tensors, 21840 values", "device 1 (rank 1, cpu): batch 32", "allreduce(sum)", "85.3 KiB/step", "conv2d_grad_weight"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	dot := filepath.Join(t.TempDir(), "plan.dot")
	if code, _, stderr := gorun(t, "plan", "--dot", dot, "../../scripts/examples/mnist.star"); code != 0 {
		t.Fatal(stderr)
	}
	b, _ := os.ReadFile(dot)
	if !strings.HasPrefix(string(b), "digraph plan {") || !strings.Contains(string(b), "conv2d") {
		t.Errorf("--dot wrote %q", b)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name   string
		src    string
		args   []string
		code   int
		stderr string
	}{
		{"syntax", "x = (1,\n", nil, 1, "train.star:2:1: got end of file, want ')'"},
		{"runtime backtrace", "def f():\n    return nn.linear(1)\nf()\n", nil, 1,
			"Traceback (most recent call last):\n  %s:3:2: in <toplevel>\n  %s:2:21: in f\nError in nn.linear: nn.linear: missing argument for out_features"},
		{"shape", strings.Replace(small, "nn.linear(36, 3", "nn.linear(30, 3", 1), nil, 1,
			`%s:9:18: linear "fc": linear: input has 36 features, weight expects 30`},
		{"bad set", small, []string{"--set", "epoch=2"}, 1, `--set epoch: train() has no parameter "epoch"`},
		{"bad flag", small, []string{"--frobnicate"}, 2, "flag provided but not defined: -frobnicate"},
		{"two scripts", small, []string{"other.star"}, 2, "needs exactly one SCRIPT.star, got 2"},
		{"missing cluster", small, []string{"--cluster", "/nonexistent.toml"}, 1, "cluster file: open /nonexistent.toml"},
		{"launch without mpi", small, []string{}, 2, ""},
	}
	for _, c := range cases {
		script := writeScript(t, c.src)
		args := append([]string{script}, c.args...)
		if c.name == "launch without mpi" {
			args = []string{"launch", script}
			c.stderr = "launch needs --cluster C.toml"
		}
		code, _, stderr := gorun(t, args...)
		want := strings.ReplaceAll(c.stderr, "%s", script)
		if code != c.code || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", c.name, code, stderr, c.code, want)
		}
	}
	if code, _, _ := gorun(t); code != 2 {
		t.Errorf("no arguments: exit %d, want 2", code)
	}
}
