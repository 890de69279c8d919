package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gorun/datasets"
)

// TestCheckpointLoadsInPyTorch trains the tutorial's Net briefly, then
// loads model.safetensors into the same Net written in PyTorch with
// load_state_dict(strict=True) and checks that PyTorch's test accuracy and
// loss on 2,000 test images equal gorun's.
func TestCheckpointLoadsInPyTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("SKIP: /usr/bin/python3 with torch and numpy not found; install python3-torch python3-numpy")
	}
	mnist, err := datasets.MNISTDefaultDir()
	if err != nil {
		t.Skipf("SKIP: MNIST not found: %v", err)
	}
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, "../../scripts/examples/mnist.star", "--set", "epochs=1", "--set", "max_steps=100",
		"--set", "eval=data.mnist(split='test', limit=2000)", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	acc, loss := lastEvalLoss(t, out)
	cmd := exec.Command("/usr/bin/python3", "../../engine/runner/testdata/torch_load.py", filepath.Join(out, "model.safetensors"), mnist, "2000")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("PyTorch could not load the checkpoint: %v\n%s", err, b)
	}
	var got struct{ Accuracy, Loss float64 }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if math.Abs(got.Accuracy-acc) > 1e-3 || math.Abs(got.Loss-loss) > 1e-3 {
		t.Errorf("PyTorch: accuracy %.4f loss %.4f; gorun: accuracy %.4f loss %.4f", got.Accuracy, got.Loss, acc, loss)
	}
}

// TestResNetLoadsInPyTorch trains scripts/examples/resnet_fashion.star for
// a few steps on 2 devices, then loads its model.safetensors (parameters
// and batch norm's running statistics) into the same ResNet written as
// PyTorch modules with load_state_dict(strict=True): PyTorch's eval-mode
// accuracy and loss on 500 test images equal gorun's.
func TestResNetLoadsInPyTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("SKIP: /usr/bin/python3 with torch and numpy not found; install python3-torch python3-numpy")
	}
	fashion := "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(filepath.Join(fashion, "t10k-images-idx3-ubyte.gz")); err != nil {
		t.Skip("SKIP: Fashion-MNIST not found; install dataset-fashion-mnist")
	}
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, "../../scripts/examples/resnet_fashion.star", "--devices", "2", "--set", "epochs=1", "--set", "max_steps=6",
		"--set", "eval=data.fashion_mnist(split='test', limit=500)", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	acc, loss := lastEvalLoss(t, out)
	cmd := exec.Command("/usr/bin/python3", "../../engine/runner/testdata/torch_resnet_load.py", filepath.Join(out, "model.safetensors"), fashion, "500")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("PyTorch could not load the checkpoint: %v\n%s", err, b)
	}
	var got struct{ Accuracy, Loss float64 }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if math.Abs(got.Accuracy-acc) > 1e-3 || math.Abs(got.Loss-loss) > 1e-4*math.Max(1, loss) {
		t.Errorf("PyTorch: accuracy %.4f loss %.6f; gorun: accuracy %.4f loss %.6f", got.Accuracy, got.Loss, acc, loss)
	}
}

// TestGPTLoadsInPyTorch trains scripts/examples/gpt_text.star for a few
// steps on 2 devices, loads its model.safetensors into the same GPT
// written as PyTorch modules (nn.MultiheadAttention, lm_head tied to wte)
// with load_state_dict(strict=True), and checks that PyTorch's test loss
// on 32 windows equals gorun's to 1e-4; then gorun sample continues a
// prompt from the run folder.
func TestGPTLoadsInPyTorch(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("SKIP: /usr/bin/python3 with torch and numpy not found; install python3-torch python3-numpy")
	}
	const text = "/usr/share/games/fortunes"
	if _, err := os.Stat(text); err != nil {
		t.Skip("SKIP: /usr/share/games/fortunes not found; install fortunes")
	}
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, "../../scripts/examples/gpt_text.star", "--devices", "2", "--set", "epochs=1", "--set", "max_steps=4",
		"--set", "eval=data.text(TEXT, seq_len=T, split='test', limit=32)", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	_, loss := lastEvalLoss(t, out)
	b, err := exec.Command("/usr/bin/python3", "../../engine/runner/testdata/torch_gpt_load.py", filepath.Join(out, "model.safetensors"), text, "32").CombinedOutput()
	if err != nil {
		t.Fatalf("PyTorch could not load the checkpoint: %v\n%s", err, b)
	}
	var got struct{ Loss float64 }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if math.Abs(got.Loss-loss) > 1e-4*loss {
		t.Errorf("PyTorch test loss %.6f, gorun %.6f", got.Loss, loss)
	}
	code, stdout, stderr = gorun(t, "sample", out, "--prompt", "The ", "--tokens", "20", "--temperature", "0")
	if code != 0 || !strings.HasPrefix(stdout, "The ") || len(stdout) < len("The ")+10 {
		t.Errorf("gorun sample: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// lastEvalLoss is the accuracy (NaN when the line has none) and loss of a
// run folder's last eval line.
func lastEvalLoss(t *testing.T, out string) (acc, loss float64) {
	t.Helper()
	metrics, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	acc, loss = math.NaN(), math.NaN()
	for _, line := range strings.Split(string(metrics), "\n") {
		var rec struct {
			Kind     string
			Accuracy *float64
			Loss     float64
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == "eval" {
			loss = rec.Loss
			if rec.Accuracy != nil {
				acc = *rec.Accuracy
			}
		}
	}
	if math.IsNaN(loss) {
		t.Fatalf("no eval line in metrics.jsonl:\n%s", metrics)
	}
	return acc, loss
}
