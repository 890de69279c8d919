package scripts_test

import (
	"encoding/csv"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/datasets/torchrand"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// trainExample compiles a script of examples/ (with --set overrides) for
// one CPU device and trains it into a temporary run folder.
func trainExample(t *testing.T, name string, opts runner.RunOptions, sets ...string) (*engine.Plan, *runner.Result, string) {
	t.Helper()
	var ov []script.Override
	for _, s := range sets {
		o, err := script.ParseOverride(s)
		if err != nil {
			t.Fatal(err)
		}
		ov = append(ov, o)
	}
	path, err := filepath.Abs(filepath.Join("examples", name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(path, script.WithOverrides(ov...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Compile(s, engine.DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	if opts.Out == "" {
		opts.Out = filepath.Join(t.TempDir(), "run")
	}
	res, err := runner.Run(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, res, opts.Out
}

// readTable reads a CSV of the examples: its header and its rows.
func readTable(t *testing.T, name string) ([]string, [][]string) {
	t.Helper()
	f, err := os.Open(filepath.Join("examples", "tables", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows[0], rows[1:]
}

// split is data.csv's split of n rows for test_fraction 0.2 and seed 0:
// torch.utils.data.random_split's.
func split(n int) (train, test []int) {
	perm := torchrand.RandPerm(n, 0)
	k := n / 5
	return perm[:n-k], perm[n-k:]
}

// solve solves a·x = b (a is n×n, row-major) by Gaussian elimination with
// partial pivoting.
func solve(a []float64, b []float64) []float64 {
	n := len(b)
	a, b = slices.Clone(a), slices.Clone(b)
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r*n+c]) > math.Abs(a[p*n+c]) {
				p = r
			}
		}
		for j := range n {
			a[c*n+j], a[p*n+j] = a[p*n+j], a[c*n+j]
		}
		b[c], b[p] = b[p], b[c]
		for r := c + 1; r < n; r++ {
			f := a[r*n+c] / a[c*n+c]
			for j := c; j < n; j++ {
				a[r*n+j] -= f * a[c*n+j]
			}
			b[r] -= f * b[c]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for j := r + 1; j < n; j++ {
			s -= a[r*n+j] * x[j]
		}
		x[r] = s / a[r*n+r]
	}
	return x
}

func number(t *testing.T, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCSVRegressionExample trains examples/csv_regression.star and holds
// it to the closed form: ordinary least squares on the training rows (the
// normal equations, in float64). The test loss (MSE) must be within 0.5%
// of the least-squares fit's, and the trained weights, taken back to the
// raw columns through the standardisation kept in model.safetensors,
// within 1% of its coefficients.
func TestCSVRegressionExample(t *testing.T) {
	_, rows := readTable(t, "houses.csv")
	n, d := len(rows), 4
	x, y := make([]float64, n*(d+1)), make([]float64, n)
	for i, r := range rows {
		for j := range d {
			x[i*(d+1)+j] = number(t, r[j])
		}
		x[i*(d+1)+d] = 1
		y[i] = number(t, r[d])
	}
	train, test := split(n)
	// Normal equations: (XᵀX) w = Xᵀy over the training rows.
	xtx, xty := make([]float64, (d+1)*(d+1)), make([]float64, d+1)
	for _, i := range train {
		for a := range d + 1 {
			xty[a] += x[i*(d+1)+a] * y[i]
			for b := range d + 1 {
				xtx[a*(d+1)+b] += x[i*(d+1)+a] * x[i*(d+1)+b]
			}
		}
	}
	w := solve(xtx, xty)
	mse := 0.0
	for _, i := range test {
		p := 0.0
		for a := range d + 1 {
			p += w[a] * x[i*(d+1)+a]
		}
		mse += (p - y[i]) * (p - y[i]) / float64(len(test))
	}

	_, res, out := trainExample(t, "csv_regression.star", runner.RunOptions{})
	if rel := math.Abs(res.TestLoss-mse) / mse; rel > 0.005 {
		t.Errorf("test loss %.4f, least squares %.4f: %.2f%% apart, want at most 0.5%%", res.TestLoss, mse, 100*rel)
	}
	f, err := safetensors.ReadFile(filepath.Join(out, runner.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	var meta datasets.CSVMeta
	if err := json.Unmarshal([]byte(f.Metadata["csv"]), &meta); err != nil {
		t.Fatalf("model.safetensors' csv metadata %q: %v", f.Metadata["csv"], err)
	}
	if meta.Task != "regression" || meta.Y != "price_k" || len(meta.Mean) != d {
		t.Fatalf("csv metadata %+v", meta)
	}
	wt, _ := f.Get("fc.weight")
	bt, _ := f.Get("fc.bias")
	weights, err := wt.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bias, err := bt.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	// The model reads (v − mean)/std: per raw column the weight is
	// w/std, and the intercept b − Σ w·mean/std.
	got := make([]float64, d+1)
	got[d] = float64(bias[0])
	for j := range d {
		got[j] = float64(weights[j]) / meta.Std[j]
		got[d] -= float64(weights[j]) * meta.Mean[j] / meta.Std[j]
	}
	norm := 0.0
	for _, v := range w {
		norm += v * v
	}
	for j := range d + 1 {
		if math.Abs(got[j]-w[j]) > 0.01*math.Sqrt(norm) {
			t.Errorf("coefficient %d: trained %.4f, least squares %.4f", j, got[j], w[j])
		}
	}
	t.Logf("test MSE %.4f (least squares %.4f); coefficients %.3f (least squares %.3f)", res.TestLoss, mse, got, w)
}

// TestCSVClassesExample trains examples/csv_classes.star (a linear
// classifier) and holds its test accuracy to linear discriminant analysis
// computed in closed form (class means, pooled covariance, priors) on the
// same training rows: at most 2 of the 60 test rows apart.
func TestCSVClassesExample(t *testing.T) {
	_, rows := readTable(t, "penguins.csv")
	names := []string{}
	for _, r := range rows {
		if !slices.Contains(names, r[5]) {
			names = append(names, r[5])
		}
	}
	sort.Strings(names)
	n, d, k := len(rows), 4, len(names)
	x, y := make([]float64, n*d), make([]int, n)
	for i, r := range rows {
		for j := range d {
			x[i*d+j] = number(t, r[j])
		}
		y[i] = slices.Index(names, r[5])
	}
	train, test := split(n)
	mu, count := make([]float64, k*d), make([]float64, k)
	for _, i := range train {
		count[y[i]]++
		for j := range d {
			mu[y[i]*d+j] += x[i*d+j]
		}
	}
	for c := range k {
		for j := range d {
			mu[c*d+j] /= count[c]
		}
	}
	cov := make([]float64, d*d)
	for _, i := range train {
		for a := range d {
			for b := range d {
				cov[a*d+b] += (x[i*d+a] - mu[y[i]*d+a]) * (x[i*d+b] - mu[y[i]*d+b]) / float64(len(train)-k)
			}
		}
	}
	// Σ⁻¹μ_c for each class.
	sim := make([][]float64, k)
	for c := range k {
		sim[c] = solve(cov, mu[c*d:(c+1)*d])
	}
	right := 0
	for _, i := range test {
		best, bestScore := -1, math.Inf(-1)
		for c := range k {
			s := math.Log(count[c] / float64(len(train)))
			for j := range d {
				s += x[i*d+j]*sim[c][j] - 0.5*mu[c*d+j]*sim[c][j]
			}
			if s > bestScore {
				best, bestScore = c, s
			}
		}
		if best == y[i] {
			right++
		}
	}
	lda := float64(right) / float64(len(test))

	_, res, out := trainExample(t, "csv_classes.star", runner.RunOptions{})
	if math.Abs(res.TestAccuracy-lda) > 2.0/60+1e-9 || res.TestAccuracy < 0.9 {
		t.Errorf("test accuracy %.4f, linear discriminant analysis %.4f: want at most 2 of 60 rows apart, and 0.9 or more", res.TestAccuracy, lda)
	}
	f, err := safetensors.ReadFile(filepath.Join(out, runner.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Metadata["classes"]; got != `["Adelie","Chinstrap","Gentoo"]` {
		t.Errorf("model.safetensors' classes %q", got)
	}
	t.Logf("test accuracy %.4f (linear discriminant analysis %.4f)", res.TestAccuracy, lda)
}

// relabeled is a dataset with its labels renumbered: label l becomes
// to[l].
type relabeled struct {
	datasets.Dataset
	to     []int32
	labels []int32
}

func relabel(d datasets.Dataset, to []int32) *relabeled {
	r := &relabeled{Dataset: d, to: to}
	for _, l := range d.Labels() {
		r.labels = append(r.labels, to[l])
	}
	return r
}

func (r *relabeled) Labels() []int32 { return r.labels }

func (r *relabeled) Fill(idx []int, x []float32, y []int32) {
	r.Dataset.Fill(idx, x, y)
	for i := range idx {
		y[i] = r.to[y[i]]
	}
}

// fashionFolders are Fashion-MNIST's classes as folder names.
var fashionFolders = []string{"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"}

// TestImagesExample trains examples/resnet_images.star (a short run) on
// Fashion-MNIST written out as PNGs (datasets.WriteImageFolder), then the
// same plan on the IDX files seen in the folder's order and with its class
// numbering: the two runs train the same model, bit for bit (the PNGs
// give the IDX pixels exactly), so data.images trains to the accuracy the
// IDX files do. The class names reach model.safetensors.
func TestImagesExample(t *testing.T) {
	if _, err := os.Stat(datasets.FashionMNISTDir); err != nil {
		t.Skipf("SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	dir := t.TempDir()
	idx := map[string]datasets.Dataset{}
	for split, per := range map[string]int{"train": 40, "test": 10} {
		ds, err := datasets.FashionMNIST(split, "", datasets.FashionMNISTMean, datasets.FashionMNISTStd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := datasets.WriteImageFolder(ds, filepath.Join(dir, split), fashionFolders, per); err != nil {
			t.Fatal(err)
		}
		idx[split] = ds
	}
	sets := []string{"data.dir=" + strconv.Quote(dir), "eval.dir=" + strconv.Quote(dir), "epochs=1", "batch_size=40"}
	p, res, out := trainExample(t, "resnet_images.star", runner.RunOptions{}, sets...)

	// The folder's order (classes sorted by name, files sorted) and
	// numbering, on the IDX datasets.
	sorted := slices.Sorted(slices.Values(fashionFolders))
	to := make([]int32, len(fashionFolders))
	for l, name := range fashionFolders {
		to[l] = int32(slices.Index(sorted, name))
	}
	view := map[string]datasets.Dataset{}
	for split := range idx {
		var order []int
		for _, name := range sorted {
			files, err := filepath.Glob(filepath.Join(dir, split, name, "*.png"))
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(files)
			for _, f := range files {
				i, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".png"))
				order = append(order, i)
			}
		}
		v, err := datasets.View(idx[split], order)
		if err != nil {
			t.Fatal(err)
		}
		view[split] = relabel(v, to)
	}
	hflip, err := datasets.HFlip(0.5)
	if err != nil {
		t.Fatal(err)
	}
	aug, err := datasets.Augment(view["train"], datasets.NormalizedZero(datasets.FashionMNISTMean, datasets.FashionMNISTStd), []datasets.Transform{hflip})
	if err != nil {
		t.Fatal(err)
	}
	refOut := filepath.Join(t.TempDir(), "idx")
	ref, err := runner.Run(p, runner.RunOptions{Out: refOut, Train: aug, Eval: view["test"]})
	if err != nil {
		t.Fatal(err)
	}
	if res.TestAccuracy != ref.TestAccuracy || res.TestLoss != ref.TestLoss || res.Steps != ref.Steps {
		t.Errorf("from the PNGs: accuracy %v, loss %v, %d steps; from the IDX files: %v, %v, %d steps",
			res.TestAccuracy, res.TestLoss, res.Steps, ref.TestAccuracy, ref.TestLoss, ref.Steps)
	}
	a, err := safetensors.ReadFile(filepath.Join(out, runner.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := safetensors.ReadFile(filepath.Join(refOut, runner.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range a.Names() {
		x, _ := a.Get(name)
		y, ok := b.Get(name)
		if !ok || !slices.Equal(x.Data, y.Data) {
			t.Errorf("parameter %s differs between the two runs", name)
		}
	}
	var classes []string
	if err := json.Unmarshal([]byte(a.Metadata["classes"]), &classes); err != nil || !slices.Equal(classes, sorted) {
		t.Errorf("model.safetensors' classes %q (%v), want %v", a.Metadata["classes"], err, sorted)
	}
	t.Logf("%d steps, test accuracy %.4f from both", res.Steps, res.TestAccuracy)
}

// writeGrayPNG writes a 4×4 grey PNG at path (its folders made).
func writeGrayPNG(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var px [16]byte
	img := &image.Gray{Pix: px[:], Stride: 4, Rect: image.Rect(0, 0, 4, 4)}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
}

// TestImagesCompileChecks: before any image is decoded, compiling refuses
// an eval folder whose classes are not the training folder's (same count,
// other names), but not a set over the cluster's memory_limit (streamed).
func TestImagesCompileChecks(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/cat/1.png", "a/dog/1.png", "b/cat/1.png", "b/cow/1.png"} {
		writeGrayPNG(t, filepath.Join(dir, p))
	}
	path := filepath.Join(dir, "train.star")
	if err := os.WriteFile(path, []byte(`
train(
    model = nn.sequential(nn.flatten(), nn.linear(16, 2)),
    loss = "cross_entropy",
    data = data.images("a", channels = 1, test_fraction = 0),
    eval = data.images("b", channels = 1, test_fraction = 0),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 2,
)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.Compile(s, engine.DefaultCluster())
	want := path + ":6:23: eval set data.images names its classes cat, cow, but the model learns the training set's cat, dog (in this order)"
	if err == nil || err.Error() != want {
		t.Errorf("eval classes: %v, want %s", err, want)
	}
	// A set over the memory limit is no compile error: it is streamed
	// from disk as it trains.
	if _, err := datasets.Describe(&s.Data, datasets.WithMemoryLimit(30)); err != nil {
		t.Errorf("memory_limit 30 bytes: %v", err)
	}
}
