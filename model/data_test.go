package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// imagesScript trains a tiny RGB classifier on data.images, each channel
// normalised with its own mean and std, the images resized to 8×8.
const imagesScript = `
NORM = ((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
train(
    model = nn.sequential(
        nn.conv2d(3, 4, kernel = 3, name = "conv1"),
        nn.batchnorm2d(4, name = "bn1"),
        nn.relu(),
        nn.flatten(),
        nn.linear(144, 3, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.images("imgs", size = 8, channels = 3, normalize = NORM, split = "train"),
    eval = data.images("imgs", size = 8, channels = 3, normalize = NORM, split = "test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 8,
    epochs = 3,
    seed = 1,
)
`

// csvScript trains a tiny classifier on three standardised columns of a
// table that holds others too.
const csvScript = `
train(
    model = nn.sequential(nn.linear(3, 8, name = "fc1"), nn.relu(), nn.linear(8, 3, name = "fc2")),
    loss = "cross_entropy",
    data = data.csv("train.csv", y = "kind", x = ["a", "b", "c"], test_file = "test.csv"),
    eval = data.csv("train.csv", y = "kind", x = ["a", "b", "c"], test_file = "test.csv", split = "test"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
    epochs = 5,
    seed = 2,
)
`

// imageClasses are the class folders of the image test data.
var imageClasses = []string{"cat", "cow", "dog"}

// colourImage is an RGB image of class k (its colour, with noise) of
// w×h; opaque unless alpha.
func colourImage(rng *rand.Rand, k, w, h int, alpha uint8) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	base := [3][3]int{{200, 60, 40}, {50, 180, 70}, {40, 70, 200}}[k]
	for y := range h {
		for x := range w {
			var c [3]uint8
			for j := range c {
				c[j] = uint8(min(255, max(0, base[j]+rng.IntN(81)-40+4*(x-y))))
			}
			img.SetNRGBA(x, y, color.NRGBA{c[0], c[1], c[2], alpha})
		}
	}
	return img
}

func writePNG(t testing.TB, path string, img image.Image) {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeImageFolder writes imgs/train and imgs/test under dir: perClass
// (train) and 4 (test) images of each class, of sizes from 8×8 to
// 10×11, and returns the test files in the dataset's order.
func writeImageFolder(t testing.TB, dir string, perClass int) []string {
	rng := rand.New(rand.NewPCG(3, 4))
	var test []string
	for _, split := range []string{"train", "test"} {
		n := perClass
		if split == "test" {
			n = 4
		}
		for k, name := range imageClasses {
			for i := range n {
				p := filepath.Join(dir, "imgs", split, name, fmt.Sprintf("%02d.png", i))
				writePNG(t, p, colourImage(rng, k, 8+i%3, 8+(i%4)%4, 255))
				if split == "test" {
					test = append(test, p)
				}
			}
		}
	}
	return test
}

// trainRun trains src (in dir, with its data there) into dir/run as
// gorun does (with the run.json cmd/gorun writes), and returns the run
// folder and the engine's evaluation outputs on the eval set, computed
// while the data are there.
func trainRun(t testing.TB, dir, src string) (run string, want []float32) {
	t.Helper()
	path := filepath.Join(dir, "train.star")
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
	run = filepath.Join(dir, "run")
	if _, err := runner.Run(p, runner.RunOptions{Out: run}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"script": path, "sets": []string{}})
	if err := os.WriteFile(filepath.Join(run, runInfoFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(run, modelFile)
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
	if want, err = e.Outputs(ds, 0); err != nil {
		t.Fatal(err)
	}
	return run, want
}

// dropMetadata rewrites a weights file without the metadata keys,
// as a gorun that did not write them would have left it.
func dropMetadata(t testing.TB, path string, keys ...string) {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{}
	for k, v := range f.Metadata {
		if !slices.Contains(keys, k) {
			meta[k] = v
		}
	}
	if err := safetensors.WriteFile(path, f.Tensors, meta); err != nil {
		t.Fatal(err)
	}
}

func loadRun(t testing.TB, dir string, opts ...Option) *Model {
	t.Helper()
	m, err := Load(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func predictOf(t testing.TB, m *Model, x any, shape ...int) []float32 {
	t.Helper()
	out, err := m.Predict(context.Background(), dense(shape, x))
	if err != nil {
		t.Fatal(err)
	}
	return out.Data().([]float32)
}

func fromImageFile(t testing.TB, m *Model, path string) []float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, err := m.FromImage(f)
	if err != nil {
		t.Fatal(err)
	}
	return x.Data().([]float32)
}

// TestImagesWithoutData: a model trained on data.images loads once its
// image folder is gone, from model.safetensors' metadata (its classes,
// sample shape, each channel's normalisation), and gives the engine's
// evaluation outputs bit for bit on the test images: as files through
// FromImage (decoded and resized from their own sizes as training did)
// and as raw uint8 pixels through Predict (each channel normalised with
// its own mean and std). A grayscale image and one with an alpha
// channel are converted to RGB as training converts them.
func TestImagesWithoutData(t *testing.T) {
	dir := t.TempDir()
	test := writeImageFolder(t, dir, 12)
	run, want := trainRun(t, dir, imagesScript)
	// Keep the test images elsewhere, then remove the data.
	kept := t.TempDir()
	for i, p := range test {
		test[i] = filepath.Join(kept, fmt.Sprintf("%02d.png", i))
		copyFile(t, p, test[i])
	}
	if err := os.RemoveAll(filepath.Join(dir, "imgs")); err != nil {
		t.Fatal(err)
	}

	m := loadRun(t, run)
	if !slices.Equal(m.ClassNames(), imageClasses) || !slices.Equal(m.InputShape(), []int{3, 8, 8}) || m.DataKind() != "images" {
		t.Fatalf("classes %q, input shape %v, data %s", m.ClassNames(), m.InputShape(), m.DataKind())
	}
	mean, std := m.Normalization()
	if !slices.Equal(mean, []float64{0.5, 0.4, 0.3}) || !slices.Equal(std, []float64{0.2, 0.25, 0.3}) {
		t.Errorf("normalisation: means %v, stds %v", mean, std)
	}
	im, ok := m.ImageMeta()
	if !ok || im.Height != 8 || im.Width != 8 || im.Channels != 3 {
		t.Errorf("image metadata %+v, %v", im, ok)
	}
	if _, ok := m.CSVMeta(); ok {
		t.Error("an image model has CSV metadata")
	}

	n := len(test)
	var x []float32
	var raw []uint8
	for _, p := range test {
		x = append(x, fromImageFile(t, m, p)...)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		px := make([]byte, 3*64)
		if err := datasets.PrepareImage(datasets.ImagePrep{Height: 8, Width: 8, Channels: 3}, p, b, px); err != nil {
			t.Fatal(err)
		}
		raw = append(raw, px...)
	}
	if i := sameBits(predictOf(t, m, x, n, 3, 8, 8), want, 3); i >= 0 {
		t.Errorf("FromImage: sample %d: Predict's outputs differ from the engine's evaluation", i)
	}
	if i := sameBits(predictOf(t, m, raw, n, 3, 8, 8), want, 3); i >= 0 {
		t.Errorf("uint8 pixels: sample %d: Predict's outputs differ from the engine's evaluation", i)
	}
	norm, err := m.Normalize(dense([]int{n, 3, 8, 8}, raw))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(norm.Data().([]float32), x, 3*64); i >= 0 {
		t.Errorf("Normalize of the pixels differs from FromImage at sample %d", i)
	}
	// Each channel's own normalisation: pixel value 255 in every channel.
	white := make([]uint8, 3*64)
	for i := range white {
		white[i] = 255
	}
	w, err := m.Normalize(dense([]int{3, 8, 8}, white))
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		got := w.Data().([]float32)[c*64]
		if exp := (float32(1) - float32(mean[c])) / float32(std[c]); got != exp {
			t.Errorf("channel %d: 255 normalised to %v, want %v", c, got, exp)
		}
	}

	// Another number of channels: converted as training converts images.
	rng := rand.New(rand.NewPCG(5, 6))
	rgb := colourImage(rng, 1, 9, 10, 255)
	gray := image.NewGray(rgb.Rect)
	grayRGB := image.NewNRGBA(rgb.Rect)
	translucent := image.NewNRGBA(rgb.Rect)
	for i := range gray.Pix {
		r, g, b := rgb.Pix[4*i], rgb.Pix[4*i+1], rgb.Pix[4*i+2]
		l := uint8((uint32(r)*19595 + uint32(g)*38470 + uint32(b)*7471 + 0x8000) >> 16)
		gray.Pix[i] = l
		copy(grayRGB.Pix[4*i:], []uint8{l, l, l, 255})
		copy(translucent.Pix[4*i:], []uint8{r, g, b, 100})
	}
	for _, c := range []struct {
		name      string
		img, same image.Image
	}{
		{"a grayscale PNG", gray, grayRGB},
		{"an RGBA PNG", translucent, rgb},
	} {
		a, b := filepath.Join(kept, "a.png"), filepath.Join(kept, "b.png")
		writePNG(t, a, c.img)
		writePNG(t, b, c.same)
		if i := sameBits(fromImageFile(t, m, a), fromImageFile(t, m, b), 1); i >= 0 {
			t.Errorf("%s: value %d differs from the image converted to RGB", c.name, i)
		}
	}

	// Refused, each naming the problem.
	garbage := filepath.Join(kept, "garbage.png")
	os.WriteFile(garbage, []byte("hello, world"), 0o644)
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"not an image", func() error { f, _ := os.Open(garbage); defer f.Close(); _, err := m.FromImage(f); return err },
			"model: " + garbage + ": not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes 68 65 6c 6c 6f 2c 20 77"},
		{"empty", func() error { _, err := m.FromImage(strings.NewReader("")); return err }, "model: the image: empty (0 bytes), not an image"},
		{"CSV rows", func() error { _, err := m.FromCSV(strings.NewReader("a,b\n1,2\n")); return err },
			"model: the CSV: the model was trained on data.images, not on a CSV table: it takes no CSV rows"},
	} {
		if err := c.err(); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}

	// A weights file from before gorun recorded the data's shape: the
	// image metadata describe the model still.
	dropMetadata(t, filepath.Join(run, modelFile), datasets.MetaData)
	old := loadRun(t, run)
	if i := sameBits(predictOf(t, old, x, n, 3, 8, 8), want, 3); i >= 0 {
		t.Errorf("without %q metadata: sample %d differs from the engine's evaluation", datasets.MetaData, i)
	}
}

// csvRow is one row of the CSV test tables.
type csvRow struct {
	a, b, c float64
	kind    string
}

// csvTable makes n rows whose kind follows from a, b and c.
func csvTable(rng *rand.Rand, n int) []csvRow {
	rows := make([]csvRow, n)
	for i := range rows {
		r := csvRow{a: math.Round(rng.NormFloat64()*300) / 10, b: 100 + math.Round(rng.NormFloat64()*500)/100, c: float64(rng.IntN(7))}
		switch {
		case r.a > 3:
			r.kind = "high"
		case r.b > 101:
			r.kind = "mid"
		default:
			r.kind = "low"
		}
		rows[i] = r
	}
	return rows
}

// writeTable writes rows with the named columns in order ("id", "a",
// "b", "c", "kind", "extra").
func writeTable(t testing.TB, path string, rows []csvRow, cols ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(strings.Join(cols, ",") + "\n")
	for i, r := range rows {
		f := make([]string, len(cols))
		for j, c := range cols {
			switch c {
			case "id":
				f[j] = strconv.Itoa(i)
			case "a":
				f[j] = strconv.FormatFloat(r.a, 'g', -1, 64)
			case "b":
				f[j] = strconv.FormatFloat(r.b, 'g', -1, 64)
			case "c":
				f[j] = strconv.FormatFloat(r.c, 'g', -1, 64)
			case "kind":
				f[j] = r.kind
			case "extra":
				f[j] = `"x, y"`
			}
		}
		b.WriteString(strings.Join(f, ",") + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCSVWithoutData: a model trained on data.csv loads once its tables
// are gone, from model.safetensors' metadata (its columns, their
// statistics, its class names), and FromCSV turns a table whose columns
// come in another order, among others, into the inputs training made:
// Predict gives the engine's evaluation outputs bit for bit. Normalize
// standardises raw column values as training did; a missing column, a
// missing value and uint8 inputs are refused, naming the problem.
func TestCSVWithoutData(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	train, test := csvTable(rng, 60), csvTable(rng, 20)
	writeTable(t, filepath.Join(dir, "train.csv"), train, "id", "a", "b", "c", "kind")
	writeTable(t, filepath.Join(dir, "test.csv"), test, "id", "a", "b", "c", "kind")
	run, want := trainRun(t, dir, csvScript)
	kept := filepath.Join(t.TempDir(), "rows.csv")
	writeTable(t, kept, test, "kind", "c", "extra", "a", "b")
	os.Remove(filepath.Join(dir, "train.csv"))
	os.Remove(filepath.Join(dir, "test.csv"))

	m := loadRun(t, run)
	if !slices.Equal(m.ClassNames(), []string{"high", "low", "mid"}) || !slices.Equal(m.InputShape(), []int{3}) {
		t.Fatalf("classes %q, input shape %v", m.ClassNames(), m.InputShape())
	}
	cm, ok := m.CSVMeta()
	if !ok || !slices.Equal(cm.X, []string{"a", "b", "c"}) || len(cm.Mean) != 3 {
		t.Fatalf("CSV metadata %+v, %v", cm, ok)
	}
	f, err := os.Open(kept)
	if err != nil {
		t.Fatal(err)
	}
	x, err := m.FromCSV(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]int(x.Shape()), []int{len(test), 3}) {
		t.Fatalf("FromCSV: shape %v", x.Shape())
	}
	xs := x.Data().([]float32)
	if i := sameBits(predictOf(t, m, xs, len(test), 3), want, 3); i >= 0 {
		t.Errorf("FromCSV: row %d: Predict's outputs differ from the engine's evaluation", i)
	}
	// Normalize: raw values of the columns a, b, c.
	rawv := make([]float64, 0, 3*len(test))
	for _, r := range test {
		rawv = append(rawv, r.a, r.b, r.c)
	}
	norm, err := m.Normalize(dense([]int{len(test), 3}, rawv))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(norm.Data().([]float32), xs, 3); i >= 0 {
		t.Errorf("Normalize differs from FromCSV at row %d", i)
	}
	mean, std := m.Normalization()
	if !slices.Equal(mean, cm.Mean) || !slices.Equal(std, cm.Std) || mean[1] < 99 {
		t.Errorf("normalisation %v %v, the CSV metadata's %v %v", mean, std, cm.Mean, cm.Std)
	}

	for _, c := range []struct {
		name, table, want string
	}{
		{"a missing column", "a,c,kind\n1,2,low\n", `model: the CSV has no column "b": the model reads the columns "a", "b", "c"`},
		{"missing columns", "c,kind\n1,low\n", `model: the CSV has no columns "a", "b": the model reads the columns "a", "b", "c"`},
		{"a missing value", "b,a,c\n1,2,3\n4,,6\n", `model: the CSV line 3 (row 2): column "a": missing value`},
		{"a word", "b,a,c\n1,2,x\n", `model: the CSV line 2 (row 1): column "c": "x" is not a number`},
		{"a short row", "a,b,c\n1,2\n", `model: the CSV line 2 (row 1): 2 fields, but the header names 3 columns`},
		{"no rows", "a,b,c\n", `model: the CSV: a header but no rows`},
		{"empty", "", `model: the CSV: empty: the model takes a header line naming the columns ("a", "b", "c"), then one row per sample`},
	} {
		if _, err := m.FromCSV(strings.NewReader(c.table)); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
	if _, err := m.Predict(context.Background(), dense([]int{3}, []uint8{1, 2, 3})); err == nil || !strings.Contains(err.Error(), "input has dtype uint8: a model trained on data.csv takes float32 inputs") {
		t.Errorf("uint8 inputs: %v", err)
	}
	if _, err := m.FromImage(strings.NewReader("\x89PNG\r\n\x1a\n")); err == nil || err.Error() != "model: the image: the model was trained on data.csv, not on images: it takes no image files" {
		t.Errorf("an image: %v", err)
	}
}

// tensorsScript is a regression on .npy files, which records nothing of
// its data but the shapes (model.safetensors' "data").
const tensorsScript = `
train(
    model = nn.linear(3, 2, name = "fc"),
    loss = "mse",
    data = data.tensors(x = "x.npy", y = "y.npy"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
    epochs = 2,
    seed = 1,
)
`

// TestOldRunWithoutData: a data.tensors model loads without its arrays
// from the shapes its weights file records; a weights file from before
// gorun recorded them reads the arrays' headers instead, and when they
// are gone Load says what is missing.
func TestOldRunWithoutData(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	x := make([]float32, n*3)
	y := make([]float32, n*2)
	for i := range x {
		x[i] = float32(i%7) / 3
	}
	for i := range y {
		y[i] = float32(i%5) - 1
	}
	writeNPYFile(t, filepath.Join(dir, "x.npy"), []int{n, 3}, x)
	writeNPYFile(t, filepath.Join(dir, "y.npy"), []int{n, 2}, y)
	src := strings.Replace(tensorsScript, "epochs = 2,", "epochs = 2,\n    eval = data.tensors(x = \"x.npy\", y = \"y.npy\"),", 1)
	run, want := trainRun(t, dir, src)
	os.Remove(filepath.Join(dir, "x.npy"))
	m := loadRun(t, run)
	if m.Kind() != Regressor || !slices.Equal(m.InputShape(), []int{3}) || !slices.Equal(m.OutputShape(), []int{2}) {
		t.Fatalf("kind %v, shapes %v → %v", m.Kind(), m.InputShape(), m.OutputShape())
	}
	if i := sameBits(predictOf(t, m, x, n, 3), want, 2); i >= 0 {
		t.Errorf("sample %d: Predict's outputs differ from the engine's evaluation", i)
	}

	weights := filepath.Join(run, modelFile)
	dropMetadata(t, weights, datasets.MetaData)
	wantErr := "model: " + weights + " does not record the shape of its training data (an earlier gorun wrote it), so it is read from the data the script names, which failed: " +
		filepath.Join(dir, "train.star") + ":5:24: data.tensors: datasets: x.npy+y.npy: open " + filepath.Join(dir, "x.npy") + ": no such file or directory"
	if m, err := Load(run); err == nil || err.Error() != wantErr {
		if m != nil {
			m.Close()
		}
		t.Errorf("an old run without its data: %v\nwant %s", err, wantErr)
	}
	writeNPYFile(t, filepath.Join(dir, "x.npy"), []int{n, 3}, x)
	old := loadRun(t, run)
	if i := sameBits(predictOf(t, old, x, n, 3), want, 2); i >= 0 {
		t.Errorf("an old run with its data: sample %d differs from the engine's evaluation", i)
	}
}

// writeNPYFile writes float32 values as a .npy file of shape.
func writeNPYFile(t testing.TB, path string, shape []int, v []float32) {
	t.Helper()
	d := make([]string, len(shape))
	for i, s := range shape {
		d[i] = strconv.Itoa(s)
	}
	h := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }", strings.Join(d, ", "))
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, f := range v {
		b = append(b, byte(math.Float32bits(f)), byte(math.Float32bits(f)>>8), byte(math.Float32bits(f)>>16), byte(math.Float32bits(f)>>24))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTextWithoutData: a sequence model of data.text loads once its text
// is gone (the vocabulary and the window from model.safetensors), with a
// weights file that records its data's shape and with one of an earlier
// gorun (described from its vocabulary), and continues a prompt as it
// did with the text there.
func TestTextWithoutData(t *testing.T) {
	run, plan := trainText(t)
	m := loadRun(t, run)
	want, err := m.Generate(context.Background(), "the ", GenerateOptions{Tokens: 20, Temperature: 0.8, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(plan.Spec.Data.File)
	for _, drop := range []bool{false, true} {
		if drop {
			dropMetadata(t, filepath.Join(run, modelFile), datasets.MetaData)
		}
		m := loadRun(t, run)
		if m.Kind() != Sequence || !slices.Equal(m.InputShape(), []int{8}) || m.Classes() != 256 {
			t.Fatalf("without %q %v: kind %v, input shape %v, %d classes", datasets.MetaData, drop, m.Kind(), m.InputShape(), m.Classes())
		}
		got, err := m.Generate(context.Background(), "the ", GenerateOptions{Tokens: 20, Temperature: 0.8, Seed: 5})
		if err != nil || got != want {
			t.Errorf("without the text (dropped %q: %v): %q, %v; with it %q", datasets.MetaData, drop, got, err, want)
		}
	}
}
