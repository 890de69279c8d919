package model

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// textScript is a tiny sequence model of byte windows.
const textScript = `
T = 8
x = data.input()
h = nn.embedding(256, 16, name = "wte")(x)
logits = nn.linear(16, 256, name = "head")(h)
train(
    model = logits,
    loss = "cross_entropy",
    data = data.text("text.txt", seq_len = T),
    eval = data.text("text.txt", seq_len = T, split = "test"),
    optimizer = optim.adam(lr = 0.01),
    batch_size = 16,
    epochs = 2,
    seed = 3,
)
`

// trainText trains textScript into a run folder and returns it and the
// training Plan.
func trainText(t *testing.T) (string, *engine.Plan) {
	t.Helper()
	dir := t.TempDir()
	text := strings.Repeat("the cat sat on the mat. ", 40)
	if err := os.WriteFile(filepath.Join(dir, "text.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpt.star")
	if err := os.WriteFile(path, []byte(textScript), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Compile(s, engine.DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if _, err := runner.Run(p, runner.RunOptions{Out: run}); err != nil {
		t.Fatal(err)
	}
	b := fmt.Sprintf(`{"script": %q, "sets": []}`, path)
	if err := os.WriteFile(filepath.Join(run, runInfoFile), []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	return run, p
}

// TestSequenceModel: a model of token windows takes [N, T] ids and gives
// [N, T, V] logits equal to the engine's evaluation's; Generate continues
// a prompt as gorun sample does (runner.Generate), token for token.
func TestSequenceModel(t *testing.T) {
	run, plan := trainText(t)
	m, err := Load(run, WithArenas(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Kind() != Sequence || !slices.Equal(m.InputShape(), []int{8}) || !slices.Equal(m.OutputShape(), []int{8, 256}) {
		t.Fatalf("kind %v, input %v, output %v", m.Kind(), m.InputShape(), m.OutputShape())
	}
	ds, err := datasets.Load(plan.Spec.Eval)
	if err != nil {
		t.Fatal(err)
	}
	tk := ds.(datasets.Tokens)
	n := ds.Len()
	ids := make([]int32, n*8)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	tk.FillTokens(idx, ids, make([]int32, n*8))
	f, err := safetensors.ReadFile(filepath.Join(run, modelFile))
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEvaluator(plan, 0, filepath.Join(run, modelFile), f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want, err := e.Outputs(ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	wide := make([]int64, len(ids))
	for i, id := range ids {
		wide[i] = int64(id)
	}
	out, err := m.Predict(context.Background(), dense([]int{n, 8}, wide))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]int(out.Shape()), []int{n, 8, 256}) {
		t.Fatalf("output shape %v", out.Shape())
	}
	if i := sameBits(out.Data().([]float32), want, 8*256); i >= 0 {
		t.Errorf("window %d: Predict's logits differ from the engine's evaluation", i)
	}
	probs, err := m.Probabilities(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]int(probs.Shape()), []int{n, 8, 256}) {
		t.Errorf("probabilities of shape %v", probs.Shape())
	}

	for _, o := range []GenerateOptions{{Tokens: 20}, {Tokens: 30, Temperature: 0.8, Seed: 5}} {
		got, err := m.Generate(context.Background(), "the c", o)
		if err != nil {
			t.Fatal(err)
		}
		prompt := []int32{'t', 'h', 'e', ' ', 'c'}
		ref, err := runner.Generate(plan, filepath.Join(run, modelFile), prompt, runner.SampleOptions{Tokens: o.Tokens, Temperature: o.Temperature, Seed: o.Seed})
		if err != nil {
			t.Fatal(err)
		}
		if want := (datasets.Vocab{Kind: "bytes", N: 256}).Decode(ref); got != want || len(ref) != o.Tokens {
			t.Errorf("Generate(%+v) = %q, gorun sample's path gives %q (%d tokens)", o, got, want, len(ref))
		}
	}

	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"id out of range", func() error {
			_, err := m.Predict(context.Background(), dense([]int{1, 8}, []int32{1, 2, 3, 300, 5, 6, 7, 8}))
			return err
		}, "model: input sample 0 holds token id 300 at position 3: the vocabulary has ids 0 to 255"},
		{"negative id", func() error {
			_, err := m.Predict(context.Background(), dense([]int{8}, []int{1, 2, 3, 4, 5, 6, 7, -1}))
			return err
		}, "model: input sample 0 holds token id -1 at position 7: the vocabulary has ids 0 to 255"},
		{"floats", func() error {
			_, err := m.Predict(context.Background(), dense([]int{1, 8}, make([]float32, 8)))
			return err
		}, "model: input has dtype float32: the model takes token ids (int32, int64 or int)"},
		{"window too long", func() error {
			_, err := m.Predict(context.Background(), dense([]int{1, 9}, make([]int32, 9)))
			return err
		}, "model: input has shape [1 9], the model takes [N 8] or one sample [8]"},
		{"no tokens", func() error {
			_, err := m.Generate(context.Background(), "x", GenerateOptions{})
			return err
		}, "model: Generate: Tokens 0: want at least 1"},
		{"empty prompt", func() error {
			_, err := m.Generate(context.Background(), "", GenerateOptions{Tokens: 1})
			return err
		}, "model: Generate: an empty prompt: give at least one character"},
	} {
		if err := c.run(); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Generate(ctx, "the", GenerateOptions{Tokens: 5}); err != context.Canceled {
		t.Errorf("Generate with a cancelled context: %v", err)
	}
	// A classifier has no Generate.
	net := loadNet(t, WithArenas(1))
	if _, err := net.Generate(context.Background(), "x", GenerateOptions{Tokens: 1}); err == nil ||
		err.Error() != "model: Generate: a classifier, not a sequence model of token windows (data.text)" {
		t.Errorf("Generate on a classifier: %v", err)
	}
}

// writeNPY writes a .npy file (version 1.0) of one little-endian dtype.
func writeNPY(t *testing.T, path, descr string, shape []int, data []byte) {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(append(b, h...), data...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadArray: .npy files and safetensors tensors read as tensors of
// their dtype; what is not an array the model could take is refused.
func TestReadArray(t *testing.T) {
	dir := t.TempDir()
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], uint32(0x3f800000+i)) // ~1.0
	}
	writeNPY(t, filepath.Join(dir, "x.npy"), "<f4", []int{2, 3}, f32)
	writeNPY(t, filepath.Join(dir, "u.npy"), "|u1", []int{6}, []byte{0, 1, 2, 3, 4, 255})
	writeNPY(t, filepath.Join(dir, "h.npy"), "<f2", []int{1}, []byte{0, 0x3c})
	x, err := ReadArray(filepath.Join(dir, "x.npy"), "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]int(x.Shape()), []int{2, 3}) || x.Data().([]float32)[0] != 1 {
		t.Errorf("x.npy: %v %v", x.Shape(), x.Data())
	}
	u, err := ReadArray(filepath.Join(dir, "u.npy"), "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(u.Data().([]uint8), []uint8{0, 1, 2, 3, 4, 255}) {
		t.Errorf("u.npy: %v", u.Data())
	}
	st := filepath.Join(dir, "a.safetensors")
	if err := safetensors.WriteFile(st, []safetensors.Tensor{
		safetensors.I64("ids", []int{1, 2}, []int64{7, 9}),
		safetensors.F32("x", []int{1}, []float32{2}),
	}, nil); err != nil {
		t.Fatal(err)
	}
	ids, err := ReadArray(st, "ids")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids.Data().([]int64), []int64{7, 9}) {
		t.Errorf("ids: %v", ids.Data())
	}
	for _, c := range []struct{ path, key, want string }{
		{st, "", st + " holds 2 tensors: \"ids\", \"x\": name the one to read"},
		{st, "y", st + " has no tensor \"y\"; it holds 2 tensors: \"ids\", \"x\""},
		{filepath.Join(dir, "x.npy"), "x", filepath.Join(dir, "x.npy") + ": a .npy file holds one array; a key (\"x\") is for .safetensors files"},
		{filepath.Join(dir, "h.npy"), "", filepath.Join(dir, "h.npy") + ": dtype F16: want float32, float64, uint8, int32 or int64"},
		{filepath.Join(dir, "none.npy"), "", "open " + filepath.Join(dir, "none.npy") + ": no such file or directory"},
	} {
		if _, err := ReadArray(c.path, c.key); err == nil || err.Error() != c.want {
			t.Errorf("ReadArray(%s, %q): %v\nwant %s", c.path, c.key, err, c.want)
		}
	}
}
