package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTrainMPI trains the tutorial's Net on MNIST (global batch 128,
// no evaluation) as 2 processes × 1 device over MPI and as 1 process × 2
// devices in the same run, and reports both speeds and their ratio. One
// iteration is one optimizer step of each: use -benchtime=300x.
func BenchmarkTrainMPI(b *testing.B) {
	bin := mpiGorun(b)
	steps := max(b.N, 50)
	args := []string{"../../scripts/examples/mnist.star", "--set", "batch_size=128", "--set", "eval=None", "--set", "epochs=1",
		"--set", "max_steps=" + itoa(steps), "-q"}
	dir := b.TempDir()
	cluster := filepath.Join(dir, "mpi.toml")
	if err := os.WriteFile(cluster, []byte("[cluster]\ntransport = \"mpi\"\ndevices = 1\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	mpiOut := filepath.Join(dir, "mpi")
	cmd := exec.Command("mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "--bind-to", "core", "-np", "2", bin,
		"--cluster", cluster, "--out", mpiOut}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("mpirun: %v\n%s", err, out)
	}
	inOut := filepath.Join(dir, "inproc")
	cmd = exec.Command(bin, append([]string{"--devices", "2", "--out", inOut}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("in-process: %v\n%s", err, out)
	}
	b.StopTimer()
	mpi, in := summarySpeed(b, mpiOut), summarySpeed(b, inOut)
	b.ReportMetric(mpi, "mpi_2x1_samples/s")
	b.ReportMetric(in, "inproc_1x2_samples/s")
	b.ReportMetric(mpi/in, "ratio_mpi_to_inproc")
}

func itoa(n int) string { return strconv.Itoa(n) }

// summarySpeed reads train_samples_per_s from a run's summary line.
func summarySpeed(b *testing.B, out string) float64 {
	data, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var sum map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		b.Fatal(err)
	}
	v, _ := sum["train_samples_per_s"].(float64)
	return v
}
