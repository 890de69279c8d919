package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"gorun/datasets"
	"gorun/engine"
)

// torchReference runs testdata/torch_mnist.py (the same Net, recipe and
// batch in PyTorch, one thread per process) once per configuration and
// caches its samples/s, so a benchmark can report gorun's speed next to
// PyTorch's measured in the same run. ok is false, with the reason, when
// /usr/bin/python3 has no torch or MNIST is missing.
func torchReference(b *testing.B, steps, batch, world int) (float64, bool) {
	key := fmt.Sprint(steps, batch, world)
	torchMu.Lock()
	defer torchMu.Unlock()
	if r, ok := torchCache[key]; ok {
		return r, r > 0
	}
	torchCache[key] = 0
	dir, err := datasets.MNISTDefaultDir()
	if err != nil {
		b.Logf("SKIP PyTorch reference: %v", err)
		return 0, false
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		b.Logf("SKIP PyTorch reference: /usr/bin/python3 cannot import torch (install python3-torch)")
		return 0, false
	}
	cmd := exec.Command("/usr/bin/python3", "testdata/torch_mnist.py", "--data", dir,
		"--steps", fmt.Sprint(steps), "--batch", fmt.Sprint(batch), "--world", fmt.Sprint(world))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		b.Logf("SKIP PyTorch reference: torch_mnist.py: %v", err)
		return 0, false
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r struct {
		SamplesPerS float64 `json:"samples_per_s"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		b.Logf("SKIP PyTorch reference: bad output %q", out)
		return 0, false
	}
	torchCache[key] = r.SamplesPerS
	return r.SamplesPerS, true
}

var (
	torchMu    sync.Mutex
	torchCache = map[string]float64{}
)

// BenchmarkTrainMNIST measures training steps of the tutorial's Net on
// MNIST, batch 64, one device, and reports samples/s next to PyTorch 1.13
// on one thread (the same recipe) measured in the same run, and their
// ratio. One iteration is one optimizer step; run with -benchtime=300x for
// a figure over 300 steps.
func BenchmarkTrainMNIST(b *testing.B) {
	benchTrain(b, 1, 64)
}

// BenchmarkTrainMNISTTwoDevices trains with --devices 2 at global batch
// 128 (64 per device, DDP-style all-reduce of the mean) and with one
// device at batch 64, in the same run, and reports the two-device speed as
// a ratio to one device (2.0 is perfect scaling) and to PyTorch
// DistributedDataParallel over gloo with two processes. One iteration is
// one optimizer step of each configuration; use -benchtime=300x.
func BenchmarkTrainMNISTTwoDevices(b *testing.B) {
	one := trainSpeed(b, 1, 64)
	two := trainSpeed(b, 2, 128)
	b.ReportMetric(two, "samples/s")
	b.ReportMetric(one, "one_device_samples/s")
	b.ReportMetric(two/one, "ratio_to_one_device")
	if b.N >= 100 {
		if ref, ok := torchReference(b, 300, 128, 2); ok {
			b.ReportMetric(ref, "ddp_samples/s")
			b.ReportMetric(two/ref, "ratio_to_ddp")
		}
	}
}

func benchTrain(b *testing.B, devices, batch int) {
	sps := trainSpeed(b, devices, batch)
	b.ReportMetric(sps, "samples/s")
	if b.N < 100 {
		return // too short to compare; run with -benchtime=300x
	}
	if ref, ok := torchReference(b, 300, batch, devices); ok {
		b.ReportMetric(ref, "torch_samples/s")
		b.ReportMetric(sps/ref, "ratio_to_torch")
	}
}

// trainSpeed trains b.N optimizer steps (after 10 untimed ones) and
// returns samples/s over the timed steps.
func trainSpeed(b *testing.B, devices, batch int) float64 {
	s := loadSpec(b, mnistScript, fmt.Sprintf("batch_size=%d", batch), "eval=None")
	p := compile(b, s, devices)
	ds, err := engine.LoadData(&s.Data)
	if err != nil {
		b.Skipf("SKIP: MNIST not available: %v", err)
	}
	steps := max(b.N, 1)
	const warmup = 10 // steps not timed
	s.MaxSteps = steps + warmup
	var t0, t1 float64
	b.ResetTimer()
	_, err = Run(p, RunOptions{Train: ds, OnStep: func(m StepMetrics) {
		if m.Step == warmup {
			t0 = m.Time
		}
		t1 = m.Time
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	return float64(steps*batch) / (t1 - t0)
}
