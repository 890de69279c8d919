package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
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

// engineEval is the training engine's evaluation outputs on the eval set
// of the script at path (with its data where the script says), with the
// weights of run folder out.
func engineEval(t *testing.T, path, out string) []float32 {
	t.Helper()
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Compile(s, engine.DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(out, "model.safetensors")
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
	v, err := e.Outputs(ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// predictRecord is a line of gorun predict --json.
type predictRecord struct {
	File          string
	Index, Class  int
	Label         string
	Probability   float32
	Probabilities []float32
	Outputs       []float32
	Values        []float32
}

func predictJSON(t *testing.T, args ...string) []predictRecord {
	t.Helper()
	code, stdout, stderr := gorun(t, append([]string{"predict", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("gorun predict --json %s: exit %d\n%s\n%s", strings.Join(args, " "), code, stdout, stderr)
	}
	var recs []predictRecord
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r predictRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func sameFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// imagesRunScript trains on an image folder of three coloured classes,
// each channel normalised with its own statistics.
const imagesRunScript = `
NORM = ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
train(
    model = nn.sequential(
        nn.conv2d(3, 4, kernel = 3, name = "conv1"),
        nn.relu(),
        nn.flatten(),
        nn.linear(144, 3, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.images("imgs", size = 8, channels = 3, normalize = NORM),
    eval = data.images("imgs", size = 8, channels = 3, normalize = NORM, split = "test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 16,  # the 9 test images: one batch, as gorun predict runs them
    epochs = 4,
    seed = 1,
)
`

// TestPredictImagesWithoutData trains on an image folder with gorun,
// removes the folder, and checks that gorun predict, given the test
// images as files, prints their class names and gives the training
// engine's evaluation outputs bit for bit (--json); an image to a model
// of another kind, and a file that is not an image, are refused naming
// the file.
func TestPredictImagesWithoutData(t *testing.T) {
	dir := t.TempDir()
	classes := []string{"cat", "cow", "dog"}
	rng := rand.New(rand.NewPCG(1, 2))
	kept := t.TempDir()
	var test []string
	for _, split := range []string{"train", "test"} {
		for k, name := range classes {
			for i := range map[string]int{"train": 10, "test": 3}[split] {
				img := image.NewNRGBA(image.Rect(0, 0, 8+i%3, 9+i%2))
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
				if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				if split == "test" {
					test = append(test, filepath.Join(kept, fmt.Sprintf("%s-%02d.png", name, i)))
					os.WriteFile(test[len(test)-1], b.Bytes(), 0o644)
				}
			}
		}
	}
	path := filepath.Join(dir, "images.star")
	os.WriteFile(path, []byte(imagesRunScript), 0o644)
	out := filepath.Join(dir, "run")
	if code, stdout, stderr := gorun(t, path, "--out", out, "-q"); code != 0 {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := engineEval(t, path, out)
	if err := os.RemoveAll(filepath.Join(dir, "imgs")); err != nil {
		t.Fatal(err)
	}

	recs := predictJSON(t, append([]string{out}, test...)...)
	if len(recs) != len(test) {
		t.Fatalf("%d records for %d images", len(recs), len(test))
	}
	for i, r := range recs {
		if r.File != test[i] || r.Index != 0 || !sameFloats(r.Outputs, want[i*3:(i+1)*3]) {
			t.Errorf("image %d: %+v; want outputs %v", i, r, want[i*3:(i+1)*3])
		}
		best := 0
		for c, v := range r.Outputs {
			if v > r.Outputs[best] {
				best = c
			}
		}
		if r.Class != best || r.Label != classes[best] || r.Probability != r.Probabilities[best] {
			t.Errorf("image %d: class %d %q probability %v; the likeliest is %d", i, r.Class, r.Label, r.Probability, best)
		}
	}
	correct := 0
	for i, r := range recs {
		if strings.HasPrefix(filepath.Base(test[i]), r.Label+"-") {
			correct++
		}
	}
	if correct < 6 {
		t.Errorf("%d of %d test images classified right: the model did not learn, the comparison proves little", correct, len(test))
	}
	code, stdout, stderr := gorun(t, "predict", out, test[0], test[4])
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for j, i := range []int{0, 4} {
		f := strings.Fields(lines[j])
		if len(f) != 3 || f[0] != filepath.ToSlash(test[i]) || f[1] != recs[i].Label || f[2] != strconv.FormatFloat(float64(recs[i].Probability), 'f', 4, 32) {
			t.Errorf("line %q, want %s  %s  %.4f", lines[j], test[i], recs[i].Label, recs[i].Probability)
		}
	}

	notImage := filepath.Join(kept, "notes.png")
	os.WriteFile(notImage, []byte("hello, world"), 0o644)
	rows := filepath.Join(kept, "rows.csv")
	os.WriteFile(rows, []byte("a,b\n1,2\n"), 0o644)
	for _, c := range []struct {
		file, want string
	}{
		{notImage, "gorun: " + notImage + ": not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes 68 65 6c 6c 6f 2c 20 77\n"},
		{rows, "gorun: " + rows + ": the model was trained on data.images, not on a CSV table: it takes no CSV rows\n"},
	} {
		if code, stdout, stderr := gorun(t, "predict", out, c.file); code != 1 || stderr != c.want {
			t.Errorf("%s: exit %d %q %q\nwant exit 1 and %q", c.file, code, stdout, stderr, c.want)
		}
	}
}

// TestPredictCSVWithoutData trains a regression on a CSV table with gorun,
// removes the tables, and checks that gorun predict, given the test rows
// with their columns in another order and another column besides, gives
// the training engine's evaluation outputs bit for bit; a table without
// one of the model's columns, and an image, are refused naming them.
func TestPredictCSVWithoutData(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	type row struct{ size, rooms, price float64 }
	table := func(n int) []row {
		r := make([]row, n)
		for i := range r {
			size := float64(40 + rng.IntN(160))
			rooms := float64(1 + rng.IntN(6))
			r[i] = row{size, rooms, math.Round(3000*size+20000*rooms+rng.NormFloat64()*10000) / 1000}
		}
		return r
	}
	write := func(path string, rs []row, cols ...string) {
		var b strings.Builder
		b.WriteString(strings.Join(cols, ",") + "\n")
		for _, r := range rs {
			f := make([]string, len(cols))
			for j, c := range cols {
				switch c {
				case "size":
					f[j] = strconv.FormatFloat(r.size, 'g', -1, 64)
				case "rooms":
					f[j] = strconv.FormatFloat(r.rooms, 'g', -1, 64)
				case "price":
					f[j] = strconv.FormatFloat(r.price, 'g', -1, 64)
				case "note":
					f[j] = `"a house, with a garden"`
				}
			}
			b.WriteString(strings.Join(f, ",") + "\n")
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	train, test := table(80), table(12)
	write(filepath.Join(dir, "houses.csv"), train, "size", "rooms", "price")
	write(filepath.Join(dir, "test.csv"), test, "size", "rooms", "price")
	path := filepath.Join(dir, "houses.star")
	os.WriteFile(path, []byte(`
D = dict(y = "price", x = ["size", "rooms"], task = "regression", test_file = "test.csv")
train(
    model = nn.linear(2, 1, name = "fc"),
    loss = "mse",
    data = data.csv("houses.csv", **D),
    eval = data.csv("houses.csv", split = "test", **D),
    optimizer = optim.sgd(lr = 0.05),
    batch_size = 8,
    epochs = 20,
    seed = 1,
)
`), 0o644)
	out := filepath.Join(dir, "run")
	if code, stdout, stderr := gorun(t, path, "--out", out, "-q"); code != 0 {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := engineEval(t, path, out)
	os.Remove(filepath.Join(dir, "houses.csv"))
	os.Remove(filepath.Join(dir, "test.csv"))

	kept := t.TempDir()
	rows := filepath.Join(kept, "rows.csv")
	write(rows, test, "note", "rooms", "price", "size")
	recs := predictJSON(t, out, rows)
	if len(recs) != len(test) {
		t.Fatalf("%d records for %d rows", len(recs), len(test))
	}
	for i, r := range recs {
		if r.File != rows || r.Index != i || !sameFloats(r.Values, want[i:i+1]) {
			t.Errorf("row %d: %+v; want values %v", i, r, want[i:i+1])
		}
	}
	var worst float64
	for i, r := range recs {
		worst = max(worst, math.Abs(float64(r.Values[0])-test[i].price)/test[i].price)
	}
	if worst > 0.5 {
		t.Errorf("predicted prices up to %.0f%% off: the model did not learn, the comparison proves little", 100*worst)
	}

	noRooms := filepath.Join(kept, "norooms.csv")
	write(noRooms, test, "size", "price")
	img := filepath.Join(kept, "house.png")
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 2, 2)))
	os.WriteFile(img, b.Bytes(), 0o644)
	for _, c := range []struct {
		file, want string
	}{
		{noRooms, "gorun: " + noRooms + ` has no column "rooms": the model reads the columns "size", "rooms"` + "\n"},
		{img, "gorun: " + img + ": the model was trained on data.csv, not on images: it takes no image files\n"},
	} {
		if code, stdout, stderr := gorun(t, "predict", out, c.file); code != 1 || stderr != c.want {
			t.Errorf("%s: exit %d %q %q\nwant exit 1 and %q", c.file, code, stdout, stderr, c.want)
		}
	}
}

// TestSampleWithoutText: gorun sample continues a prompt as before once
// the run's text is gone: the vocabulary and the window come from
// model.safetensors.
func TestSampleWithoutText(t *testing.T) {
	script, run := tokenRun(t, "max_steps=6")
	sample := func() (int, string, string) {
		return gorun(t, "sample", run, "--prompt", "the ", "--tokens", "30", "--temperature", "0")
	}
	code, want, stderr := sample()
	if code != 0 || !strings.HasPrefix(want, "the ") {
		t.Fatalf("sample: exit %d, %q\n%s", code, want, stderr)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(script), "text.txt")); err != nil {
		t.Fatal(err)
	}
	if code, got, stderr := sample(); code != 0 || got != want {
		t.Errorf("without the text: exit %d, %q, want %q\n%s", code, got, want, stderr)
	}
}
