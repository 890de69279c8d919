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
	acc, loss := lastEval(t, out)
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
	acc, loss := lastEval(t, out)
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

// lastEval is the accuracy and loss of a run folder's last eval line.
func lastEval(t *testing.T, out string) (acc, loss float64) {
	t.Helper()
	metrics, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		var rec struct {
			Kind           string
			Accuracy, Loss float64
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == "eval" {
			acc, loss = rec.Accuracy, rec.Loss
		}
	}
	if acc == 0 {
		t.Fatalf("no eval line in metrics.jsonl:\n%s", metrics)
	}
	return acc, loss
}
