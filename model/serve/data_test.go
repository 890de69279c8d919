package serve

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// trainHere trains the script src (written in dir, its data there) into
// dir/run and returns the script, the weights and the engine's
// evaluation outputs of each eval sample run alone (alone) or of the
// eval set in batches of the training's batch_size (batch), computed
// while the data are there.
func trainHere(t *testing.T, dir, src string) (path, weights string, alone [][]float32, batch []float32) {
	t.Helper()
	path = filepath.Join(dir, "train.star")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
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
	weights = filepath.Join(run, "model.safetensors")
	f, err := safetensors.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEvaluator(p, 0, weights, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ds, err := datasets.Load(p.Spec.Eval)
	if err != nil {
		t.Fatal(err)
	}
	if batch, err = e.Outputs(ds, 0); err != nil {
		t.Fatal(err)
	}
	for i := range ds.Len() {
		one, err := datasets.View(ds, []int{i})
		if err != nil {
			t.Fatal(err)
		}
		out, err := e.Outputs(one, 1)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, out)
	}
	return path, weights, alone, batch
}

// TestImagesAndCSVWithoutData: models trained on an image folder and on
// a CSV table, served once their data are gone. Each test image, posted
// alone, gets the engine's evaluation outputs for that image bit for bit
// and its class's name as "label"; the test table, posted as CSV with a
// header, its columns in another order, gets the engine's outputs for
// the test split; a table without one of the model's columns is refused
// naming it.
func TestImagesAndCSVWithoutData(t *testing.T) {
	classes := []string{"cat", "cow", "dog"}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	var test [][]byte
	for _, split := range []string{"train", "test"} {
		for k, name := range classes {
			for i := range map[string]int{"train": 10, "test": 3}[split] {
				img := image.NewNRGBA(image.Rect(0, 0, 9+i%2, 8+i%3))
				for j := 0; j < len(img.Pix); j += 4 {
					for c := range 3 {
						v := 60 + rng.IntN(60)
						if c == k {
							v += 120
						}
						img.Pix[j+c] = uint8(v)
					}
					img.Pix[j+3] = 255
				}
				var b bytes.Buffer
				png.Encode(&b, img)
				p := filepath.Join(dir, "imgs", split, name, fmt.Sprintf("%02d.png", i))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, b.Bytes(), 0o644)
				if split == "test" {
					test = append(test, b.Bytes())
				}
			}
		}
	}
	const imagesSrc = `
NORM = ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
train(
    model = nn.sequential(nn.conv2d(3, 4, kernel = 3, name = "conv1"), nn.relu(), nn.flatten(),
                          nn.linear(144, 3, name = "fc"), nn.log_softmax()),
    loss = "nll",
    data = data.images("imgs", size = 8, channels = 3, normalize = NORM),
    eval = data.images("imgs", size = 8, channels = 3, normalize = NORM, split = "test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 8,
    epochs = 3,
    seed = 1,
)
`
	path, weights, alone, _ := trainHere(t, dir, imagesSrc)
	os.RemoveAll(filepath.Join(dir, "imgs"))
	m := load(t, path, weights)
	s := serve(t, m, Options{})
	for i, img := range test {
		preds := predictions(t, s.do(t, "POST", "/v1/predict", "image/png", img))
		if len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), alone[i]) >= 0 {
			t.Fatalf("test image %d: %+v; want outputs %v", i, preds, alone[i])
		}
		if c := preds[0].Class; c == nil || preds[0].Label != classes[*c] {
			t.Errorf("test image %d: class %v, label %q", i, c, preds[0].Label)
		}
	}
	if r := s.do(t, "GET", "/healthz", "", nil); !strings.Contains(string(r.body), `"images":true`) {
		t.Errorf("/healthz: %s", r.body)
	}

	// A table.
	dir = t.TempDir()
	type row struct {
		a, b, c float64
		kind    string
	}
	table := func(n int) []row {
		rs := make([]row, n)
		for i := range rs {
			r := row{a: float64(rng.IntN(100)) / 10, b: float64(rng.IntN(50)), c: float64(rng.IntN(3))}
			r.kind = []string{"low", "mid", "high"}[min(2, int(r.a/3.4))]
			rs[i] = r
		}
		return rs
	}
	write := func(path string, rs []row, cols ...string) []byte {
		var b strings.Builder
		b.WriteString(strings.Join(cols, ",") + "\n")
		for _, r := range rs {
			f := make([]string, len(cols))
			for j, c := range cols {
				f[j] = map[string]string{"a": strconv.FormatFloat(r.a, 'g', -1, 64), "b": strconv.FormatFloat(r.b, 'g', -1, 64),
					"c": strconv.FormatFloat(r.c, 'g', -1, 64), "kind": r.kind}[c]
			}
			b.WriteString(strings.Join(f, ",") + "\n")
		}
		if path != "" {
			os.WriteFile(path, []byte(b.String()), 0o644)
		}
		return []byte(b.String())
	}
	train, testRows := table(60), table(12)
	write(filepath.Join(dir, "train.csv"), train, "a", "b", "c", "kind")
	write(filepath.Join(dir, "test.csv"), testRows, "a", "b", "c", "kind")
	const csvSrc = `
D = dict(y = "kind", x = ["a", "b", "c"], test_file = "test.csv")
train(
    model = nn.sequential(nn.linear(3, 8, name = "fc1"), nn.relu(), nn.linear(8, 3, name = "fc2")),
    loss = "cross_entropy",
    data = data.csv("train.csv", **D),
    eval = data.csv("train.csv", split = "test", **D),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 16,
    epochs = 5,
    seed = 2,
)
`
	path, weights, _, batch := trainHere(t, dir, csvSrc)
	os.Remove(filepath.Join(dir, "train.csv"))
	os.Remove(filepath.Join(dir, "test.csv"))
	m = load(t, path, weights)
	names := m.ClassNames()
	s = serve(t, m, Options{})
	preds := predictions(t, s.do(t, "POST", "/v1/predict", "text/csv", write("", testRows, "c", "kind", "b", "a")))
	if len(preds) != len(testRows) {
		t.Fatalf("%d predictions for %d rows", len(preds), len(testRows))
	}
	for i, p := range preds {
		if sameBits(floats32(t, p.Outputs), batch[i*3:(i+1)*3]) >= 0 || p.Class == nil || p.Label != names[*p.Class] {
			t.Errorf("row %d: %+v; want outputs %v", i, p, batch[i*3:(i+1)*3])
		}
	}
	r := s.do(t, "POST", "/v1/predict", "text/csv", write("", testRows, "a", "c"))
	if want := `the CSV body has no column "b": the model reads the columns "a", "b", "c"`; r.code != 400 || r.errorText() != want {
		t.Errorf("a table without column b: %d %s; want 400 %q", r.code, r.body, want)
	}
	r = s.do(t, "POST", "/v1/predict", "text/csv", []byte("b,a,c\n1,,2\n"))
	if want := `the CSV body line 2 (row 1): column "a": missing value`; r.code != 400 || r.errorText() != want {
		t.Errorf("a missing value: %d %s; want 400 %q", r.code, r.body, want)
	}
	r = s.do(t, "POST", "/v1/predict", "image/png", test[0])
	if want := "a PNG image: this model does not take images (its data were csv, samples of [3]): send JSON or CSV"; r.code != 415 || r.errorText() != want {
		t.Errorf("an image: %d %s; want 415 %q", r.code, r.body, want)
	}
	// Rows of numbers, without a header: the model's inputs, as before.
	x, err := m.FromCSV(bytes.NewReader(write("", testRows[:2], "a", "b", "c")))
	if err != nil {
		t.Fatal(err)
	}
	v := x.Data().([]float32)
	body := strconv.FormatFloat(float64(v[0]), 'g', -1, 32) + "," + strconv.FormatFloat(float64(v[1]), 'g', -1, 32) + "," + strconv.FormatFloat(float64(v[2]), 'g', -1, 32) + "\n"
	preds = predictions(t, s.do(t, "POST", "/v1/predict", "text/csv", []byte(body)))
	if want := predict(t, m, dense([]int{1, 3}, v[:3])); len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), want) >= 0 {
		t.Errorf("a row of model inputs: %+v, want outputs %v", preds, want)
	}
}
