package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"gorun/safetensors"
	"gorun/script/scriptcopy"
)

// TestHostileInputs: every input Predict refuses gets an error that names
// the problem, and the model goes on answering.
func TestHostileInputs(t *testing.T) {
	m := loadNet(t)
	x, _, _ := testSet(t)
	nan := append([]float32(nil), x[:2*784]...)
	nan[784+17] = float32(math.NaN())
	inf := make([]float64, 784)
	inf[3] = math.Inf(-1)
	huge := make([]float64, 784)
	huge[5] = 1e39
	const takes = "the model takes [N 1 28 28] or one sample [1 28 28]"
	for _, c := range []struct {
		name string
		x    *tensor.Dense
		want string
	}{
		{"nil", nil, "model: Predict: the input is a nil tensor"},
		{"no channel dimension", dense([]int{3, 28, 28}, x[:3*784]), "model: input has shape [3 28 28], " + takes},
		{"flat", dense([]int{2, 784}, x[:2*784]), "model: input has shape [2 784], " + takes},
		{"scalar", tensor.New(tensor.FromScalar(float32(1))), "model: input has shape [], " + takes},
		{"empty batch", dense([]int{0, 1, 28, 28}, []float32{}), "model: input has shape [0 1 28 28]: no samples (" + takes + ")"},
		{"int32", dense([]int{1, 1, 28, 28}, make([]int32, 784)), "model: input has dtype int32: the model takes float32 values (float64 converted, uint8 pixels normalised as in training), not token ids"},
		{"bool", tensor.New(tensor.WithShape(1, 1, 28, 28), tensor.Of(tensor.Bool)), "model: input has dtype bool, which no model takes (float32, float64 or uint8 pixels; int32, int64 or int token ids)"},
		{"NaN", dense([]int{2, 1, 28, 28}, nan), "model: input sample 1 holds NaN at element 17: inputs must be finite"},
		{"-Inf float64", dense([]int{1, 28, 28}, inf), "model: input sample 0 holds -Inf at element 3: inputs must be finite"},
		{"beyond float32", dense([]int{1, 28, 28}, huge), "model: input sample 0 holds 1e+39 at element 5: beyond float32's range"},
	} {
		out, err := m.Predict(context.Background(), c.x)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: Predict returned %v, %v; want the error %q", c.name, out, err, c.want)
		}
	}
	if _, err := m.Predict(context.Background(), dense([]int{1, 28, 28}, x[:784])); err != nil {
		t.Errorf("after the hostile inputs: %v", err)
	}
	if _, err := m.Probabilities(nil); err == nil {
		t.Error("Probabilities(nil): no error")
	}
	if _, err := m.Probabilities(dense([]int{2, 3}, make([]float32, 6))); err == nil || !strings.Contains(err.Error(), "10 classes") {
		t.Errorf("Probabilities of 3 columns: %v", err)
	}
}

// TestViewInput: a tensor that is a non-contiguous view gives the outputs
// of its values.
func TestViewInput(t *testing.T) {
	m := loadNet(t)
	x, _, _ := testSet(t)
	const n = 5
	wide := make([]float32, n*28*56) // each row twice as long; the view keeps its first half
	for i := range n * 28 {
		copy(wide[i*56:i*56+28], x[i*28:i*28+28])
		for j := 28; j < 56; j++ {
			wide[i*56+j] = float32(math.NaN()) // out of the view: never read
		}
	}
	v, err := dense([]int{n, 1, 28, 56}, wide).Slice(nil, nil, nil, tensor.S(0, 28))
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Predict(context.Background(), v.(*tensor.Dense))
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Predict(context.Background(), dense([]int{n, 1, 28, 28}, x[:n*784]))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(got.Data().([]float32), want.Data().([]float32), 10); i >= 0 {
		t.Errorf("sample %d of the view differs from the same values in a plain tensor", i)
	}
}

// TestHostileFolders: Load refuses what is not a finished run with an
// error naming the folder and what it lacks.
func TestHostileFolders(t *testing.T) {
	run := trainNet(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	empty := filepath.Join(tmp, "empty")
	os.Mkdir(empty, 0o755)
	unfinished := filepath.Join(tmp, "unfinished")
	os.MkdirAll(filepath.Join(unfinished, "checkpoints"), 0o755)
	copyFile(t, filepath.Join(run, runInfoFile), filepath.Join(unfinished, runInfoFile))
	noWeights := filepath.Join(tmp, "noweights")
	os.Mkdir(noWeights, 0o755)
	copyFile(t, filepath.Join(run, runInfoFile), filepath.Join(noWeights, runInfoFile))
	lost := filepath.Join(tmp, "lost")
	os.Mkdir(lost, 0o755)
	b, _ := json.Marshal(map[string]any{"script": "/nowhere/net.star"})
	os.WriteFile(filepath.Join(lost, runInfoFile), b, 0o644)
	copyFile(t, filepath.Join(run, modelFile), filepath.Join(lost, modelFile))
	badJSON := filepath.Join(tmp, "badjson")
	os.Mkdir(badJSON, 0o755)
	os.WriteFile(filepath.Join(badJSON, runInfoFile), []byte("{"), 0o644)
	other := filepath.Join(tmp, "other.safetensors")
	if err := safetensors.WriteFile(other, []safetensors.Tensor{safetensors.F32("fc.weight", []int{2}, []float32{1, 2})}, nil); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(tmp, "garbage.safetensors")
	os.WriteFile(garbage, []byte("not a safetensors file"), 0o644)

	for _, c := range []struct {
		name string
		load func() (*Model, error)
		want string
	}{
		{"missing", func() (*Model, error) { return Load(filepath.Join(tmp, "nope")) }, "model: " + filepath.Join(tmp, "nope") + ": no such run folder"},
		{"a file", func() (*Model, error) { return Load(file) }, "model: " + file + " is a file, not a run folder"},
		{"not a run folder", func() (*Model, error) { return Load(empty) },
			"model: " + empty + " is not a run folder: it has no run.json (gorun writes one when it trains with --out)"},
		{"unfinished", func() (*Model, error) { return Load(unfinished) },
			"model: " + unfinished + " has no model.safetensors: the run did not finish; it holds checkpoints, which WithWeights (gorun predict --weights) can name"},
		{"no weights", func() (*Model, error) { return Load(noWeights) },
			"model: " + noWeights + " has no model.safetensors: the run did not finish (nor save any weights)"},
		{"script gone", func() (*Model, error) { return Load(lost) },
			"model: " + filepath.Join(lost, runInfoFile) + " records the script /nowhere/net.star, which cannot be read (stat /nowhere/net.star: no such file or directory), and the run folder keeps no copy of it (an earlier gorun made it)"},
		{"bad run.json", func() (*Model, error) { return Load(badJSON) }, "model: " + filepath.Join(badJSON, runInfoFile) + ": unexpected end of JSON input"},
		{"another model's weights", func() (*Model, error) { return Load(run, WithWeights(other)) },
			"model: " + other + ": no tensor \"conv1.weight\" for parameter conv1.weight [4 1 5 5]"},
		{"garbage weights", func() (*Model, error) { return Load(run, WithWeights(garbage)) }, "model: safetensors: " + garbage + ": "},
		{"missing weights", func() (*Model, error) { return Load(run, WithWeights(filepath.Join(tmp, "none.safetensors"))) },
			"model: weights: stat " + filepath.Join(tmp, "none.safetensors") + ": no such file or directory"},
		{"batch 0", func() (*Model, error) { return Load(run, WithMaxBatch(0)) }, "model: WithMaxBatch(0): want at least 1"},
		{"unknown backend", func() (*Model, error) { return Load(run, WithBackend("tpu")) }, "model: unknown backend \"tpu\" (this gorun has cpu)"},
	} {
		m, err := c.load()
		if err == nil {
			m.Close()
			t.Errorf("%s: loaded", c.name)
			continue
		}
		if got := err.Error(); got != c.want && !(strings.HasSuffix(c.want, ": ") && strings.HasPrefix(got, c.want)) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKeptScript: a run folder that kept a copy of its script (RUN/script/,
// package scriptcopy) loads from the copy, as the script was when the run
// began, though the recorded script is gone; a copy changed since is
// refused; LoadScript loads a script and a weights file.
func TestKeptScript(t *testing.T) {
	run := trainNet(t)
	var info struct{ Script string }
	b, _ := os.ReadFile(filepath.Join(run, runInfoFile))
	json.Unmarshal(b, &info)
	src, err := os.ReadFile(info.Script)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	copyDir := filepath.Join(dir, scriptcopy.Dir)
	os.MkdirAll(copyDir, 0o755)
	copyFile(t, filepath.Join(run, modelFile), filepath.Join(dir, modelFile))
	os.WriteFile(filepath.Join(copyDir, "net.star"), src, 0o644)
	sum := sha256.Sum256(src)
	manifest, _ := json.Marshal(scriptcopy.Manifest{Script: "/gone/net.star", SearchPath: []string{},
		Files: []scriptcopy.File{{Path: "/gone/net.star", Copy: "net.star", SHA256: hex.EncodeToString(sum[:])}}})
	os.WriteFile(filepath.Join(copyDir, scriptcopy.ManifestFile), manifest, 0o644)
	b, _ = json.Marshal(map[string]any{"script": "/gone/net.star", "sets": []string{"epochs=3"}, "copy": scriptcopy.Dir})
	os.WriteFile(filepath.Join(dir, runInfoFile), b, 0o644)
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.plan.Spec.Epochs; got != 3 {
		t.Errorf("the run's --set epochs=3 gave epochs %d", got)
	}
	m2, err := LoadScript(info.Script, filepath.Join(dir, modelFile), WithArenas(1))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	x, _, _ := testSet(t)
	a, err := m.Predict(context.Background(), dense([]int{4, 1, 28, 28}, x[:4*784]))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m2.Predict(context.Background(), dense([]int{4, 1, 28, 28}, x[:4*784]))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(a.Data().([]float32), c.Data().([]float32), 10); i >= 0 {
		t.Errorf("Load and LoadScript differ at sample %d", i)
	}
	if m.Kind() != Classifier || m.Classes() != 10 || m.MaxBatch() != DefaultMaxBatch {
		t.Errorf("kind %v, classes %d, max batch %d", m.Kind(), m.Classes(), m.MaxBatch())
	}
	if mean, std := m.Normalization(); len(mean) != 1 || len(std) != 1 || float32(mean[0]) != 0.1307 || float32(std[0]) != 0.3081 {
		t.Errorf("normalization %v, %v", mean, std)
	}

	os.WriteFile(filepath.Join(copyDir, "net.star"), append(src, '#'), 0o644)
	want := "model: " + dir + ": the copy of the run's script is unreadable: " + filepath.Join(copyDir, "net.star") + ": the copy was changed (its SHA-256 is not the manifest's)"
	if m, err := Load(dir); err == nil || err.Error() != want {
		if m != nil {
			m.Close()
		}
		t.Errorf("a changed copy: %v\nwant %s", err, want)
	}
}

// TestClosed: a closed model refuses requests.
func TestClosed(t *testing.T) {
	m, err := Load(trainNet(t), WithArenas(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	x, _, _ := testSet(t)
	if _, err := m.Predict(context.Background(), dense([]int{1, 28, 28}, x[:784])); err == nil || err.Error() != "model: closed" {
		t.Errorf("Predict after Close: %v, want model: closed", err)
	}
}
