package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/script"
)

// writeNPY writes float32 values as a .npy file of the given shape.
func writeNPY(t *testing.T, path string, shape []int, v []float32) {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	h := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }", strings.Join(dims, ", "))
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPredictCommand trains the small script into a run folder, writes its
// test set as a .npy file and checks that gorun predict prints a line per
// sample whose classes give the accuracy the run's last evaluation
// reported, from the run folder's copy of the script once the script has
// moved; then --json, a one-sample file, and the errors.
func TestPredictCommand(t *testing.T) {
	path := writeScript(t, small)
	out := filepath.Join(t.TempDir(), "run")
	if code, stdout, stderr := gorun(t, path, "--set", "epochs=1", "--out", out, "-q"); code != 0 {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	acc, _ := lastEvalLoss(t, out)
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := datasets.Load(s.Eval)
	if err != nil {
		t.Fatal(err)
	}
	n := ds.Len()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	x := make([]float32, n*64)
	labels := make([]int32, n)
	ds.Fill(idx, x, labels)
	dir := t.TempDir()
	all := filepath.Join(dir, "test.npy")
	writeNPY(t, all, []int{n, 1, 8, 8}, x)
	one := filepath.Join(dir, "one.npy")
	writeNPY(t, one, []int{1, 8, 8}, x[:64])

	// The run folder's copy of the script rebuilds the model: the script
	// itself may go.
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gorun(t, "predict", out, all, one)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != n+1 {
		t.Fatalf("%d lines for %d + 1 samples:\n%s", len(lines), n, stdout)
	}
	correct := 0
	for i, line := range lines[:n] {
		var name string
		var class int
		var p float64
		if _, err := fmt.Sscanf(line, "%s %d %g", &name, &class, &p); err != nil || name != fmt.Sprintf("%s[%d]", filepath.ToSlash(all), i) || p < 1.0/3 || p > 1 {
			t.Fatalf("line %d: %q (%v)", i, line, err)
		}
		if int32(class) == labels[i] {
			correct++
		}
	}
	if got := float64(correct) / float64(n); got != acc {
		t.Errorf("accuracy of gorun predict's classes %v, the run's evaluation %v", got, acc)
	}
	if want := filepath.ToSlash(one) + "  " + strings.Fields(lines[0])[1] + "  "; !strings.HasPrefix(lines[n], want) {
		t.Errorf("one-sample file: %q, want it to start %q", lines[n], want)
	}

	code, stdout, stderr = gorun(t, "predict", "--json", out, one)
	var rec struct {
		File          string
		Index, Class  int
		Probability   float64
		Probabilities []float64
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rec) != nil || rec.File != one || len(rec.Probabilities) != 3 || rec.Probabilities[rec.Class] != rec.Probability {
		t.Errorf("--json: exit %d %q %+v\n%s", code, stdout, rec, stderr)
	}

	bad := filepath.Join(dir, "bad.npy")
	writeNPY(t, bad, []int{2, 64}, x[:128])
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"predict", out}, 2, "gorun: predict needs a RUN_DIR and at least one FILE (an image, .csv, .npy or .safetensors), got 1 arguments\n"},
		{[]string{"predict", out, filepath.Join(dir, "none.npy")}, 1, "gorun: " + filepath.Join(dir, "none.npy") + ": no such file or directory\n"},
		{[]string{"predict", out, bad}, 1, "gorun: " + bad + ": input has shape [2 64], the model takes [N 1 8 8] or one sample [1 8 8]\n"},
		{[]string{"predict", dir, one}, 1, "gorun: " + dir + " is not a run folder: it has no run.json (gorun writes one when it trains with --out)\n"},
		{[]string{"predict", out, one, "--key", "x"}, 1, "gorun: " + one + ": a .npy file holds one array; a key (\"x\") is for .safetensors files\n"},
	} {
		code, stdout, stderr := gorun(t, c.args...)
		if code != c.code || stderr != c.want || stdout != "" {
			t.Errorf("gorun %s: exit %d, stdout %q, stderr\n%s\nwant exit %d and\n%s", strings.Join(c.args, " "), code, stdout, stderr, c.code, c.want)
		}
	}
}

// TestPredictRegression: for a regression model gorun predict prints the
// values, normalised inputs as data.tensors normalises them.
func TestPredictRegression(t *testing.T) {
	dir := t.TempDir()
	const n = 40
	x := make([]float32, n*3)
	y := make([]float32, n)
	for i := range n {
		for j := range 3 {
			x[i*3+j] = float32((i*7+j*3)%11) / 5
		}
		y[i] = 2*x[i*3] - x[i*3+1] + 0.5*x[i*3+2] + 1
	}
	writeNPY(t, filepath.Join(dir, "x.npy"), []int{n, 3}, x)
	writeNPY(t, filepath.Join(dir, "y.npy"), []int{n}, y)
	path := filepath.Join(dir, "reg.star")
	src := `train(
    model = nn.linear(3, 1, name = "fc"),
    loss = "mse",
    data = data.tensors(x = "x.npy", y = "y.npy", normalize = (1.0, 2.0)),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
    epochs = 300,
    seed = 1,
)
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	if code, stdout, stderr := gorun(t, path, "--out", out, "-q"); code != 0 {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr := gorun(t, "predict", out, filepath.Join(dir, "x.npy"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines for %d samples:\n%s", len(lines), n, stdout)
	}
	var worst float64
	for i, line := range lines {
		var name string
		var v float64
		if _, err := fmt.Sscanf(line, "%s %g", &name, &v); err != nil {
			t.Fatalf("line %d: %q: %v", i, line, err)
		}
		worst = math.Max(worst, math.Abs(v-float64(y[i])))
	}
	if worst > 0.1 {
		t.Errorf("predicted values are up to %.3f from the targets (the linear model fits them exactly):\n%s", worst, stdout)
	}
	code, stdout, _ = gorun(t, "predict", "--json", out, filepath.Join(dir, "x.npy"))
	var rec struct {
		Index  int
		Values []float64
	}
	if code != 0 || json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &rec) != nil || len(rec.Values) != 1 {
		t.Errorf("--json: exit %d, %q", code, stdout)
	}
}
