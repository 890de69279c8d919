package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every figure is 6×4 inches at 96 dpi.
const wantW, wantH = 576, 384

// metricsText is a run's metrics.jsonl: a decaying, noisy loss over
// steps (offset lifts the whole curve), an epoch line every stepsPerEpoch
// steps and, when evals, an eval line after each epoch.
func metricsText(steps, stepsPerEpoch int, offset float64, evals bool) string {
	var b strings.Builder
	for s := 1; s <= steps; s++ {
		epoch := (s-1)/stepsPerEpoch + 1
		loss := offset + 0.1 + 2.2*math.Exp(-float64(s)/float64(steps/5+1)) + 0.05*math.Sin(float64(s)*0.7)
		fmt.Fprintf(&b, `{"kind":"step","step":%d,"epoch":%d,"loss":%g,"lr":0.01,"samples_per_s":5400,"comm_seconds":0.0001,"time":%g}`+"\n",
			s, epoch, loss, float64(s)*0.01)
		if s%stepsPerEpoch == 0 {
			fmt.Fprintf(&b, `{"kind":"epoch","epoch":%d,"train_loss":%g,"samples":60000,"seconds":13.1,"train_seconds":11.9,"step":%d}`+"\n",
				epoch, offset+1/float64(epoch), s)
			if evals {
				fmt.Fprintf(&b, `{"kind":"eval","epoch":%d,"step":%d,"accuracy":%g,"loss":%g,"samples":10000}`+"\n",
					epoch, s, 0.99-offset/10-0.3/float64(epoch), offset+0.8/float64(epoch))
			}
		}
	}
	b.WriteString(`{"kind":"summary","train_samples_per_s":4930,"test_accuracy":0.9475,"wall_seconds":13.4,"peak_rss_bytes":97341440}` + "\n")
	return b.String()
}

func readRun(t testing.TB, name, text string) *Run {
	t.Helper()
	r, err := ReadRun(writeMetrics(t, name, text))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decode reads a PNG and checks its size.
func decode(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != wantW || b.Dy() != wantH {
		t.Errorf("%s is %d×%d pixels, want %d×%d", filepath.Base(path), b.Dx(), b.Dy(), wantW, wantH)
	}
	return img
}

func near(c color.Color, want color.RGBA, tol int) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) int {
		v := int(x>>8) - int(y)
		if v < 0 {
			return -v
		}
		return v
	}
	return d(r, want.R)+d(g, want.G)+d(b, want.B) <= tol
}

// checkDrawn checks that img is not blank (a meaningful share of its
// pixels differ from the white background) and that each colour is drawn
// across most of the plot's width, which the legend alone cannot do.
func checkDrawn(t *testing.T, name string, img image.Image, colors ...color.RGBA) {
	t.Helper()
	b := img.Bounds()
	white := color.RGBA{255, 255, 255, 255}
	inked := 0
	columns := make([]int, len(colors))
	for x := b.Min.X; x < b.Max.X; x++ {
		found := make([]bool, len(colors))
		for y := b.Min.Y; y < b.Max.Y; y++ {
			c := img.At(x, y)
			if !near(c, white, 0) {
				inked++
			}
			for i, want := range colors {
				if near(c, want, 24) {
					found[i] = true
				}
			}
		}
		for i, f := range found {
			if f {
				columns[i]++
			}
		}
	}
	if total := b.Dx() * b.Dy(); inked < total/50 {
		t.Errorf("%s: only %d of %d pixels differ from the background", name, inked, total)
	}
	for i, n := range columns {
		if n < b.Dx()*6/10 {
			t.Errorf("%s: colour %v appears in %d of %d pixel columns, want the line across the plot", name, colors[i], n, b.Dx())
		}
	}
}

func checkOnlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s holds %v, want %v (no temporary files left)", dir, got, want)
	}
}

func TestWriteOneRun(t *testing.T) {
	r := readRun(t, "run", metricsText(2000, 400, 0, true))
	out := filepath.Join(t.TempDir(), "plots")
	files, err := Write([]*Run{r}, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(out, LossStepsFile), filepath.Join(out, LossEpochsFile), filepath.Join(out, AccuracyFile)}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("Write returned %v, want %v", files, want)
	}
	for _, f := range files {
		checkDrawn(t, filepath.Base(f), decode(t, f), runColor(0))
	}
	checkOnlyFiles(t, out, AccuracyFile, LossEpochsFile, LossStepsFile)
}

func TestWriteTwoRuns(t *testing.T) {
	a := readRun(t, "sgd", metricsText(3000, 600, 0, true))
	b := readRun(t, "adam", metricsText(2500, 500, 0.6, true))
	out := t.TempDir()
	files, err := Write([]*Run{a, b}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("Write returned %v, want 3 files", files)
	}
	for _, f := range files {
		checkDrawn(t, filepath.Base(f), decode(t, f), runColor(0), runColor(1))
	}
}

func TestWriteSkipsAccuracyWithoutEvals(t *testing.T) {
	r := readRun(t, "run", metricsText(1000, 250, 0, false))
	out := t.TempDir()
	files, err := Write([]*Run{r}, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(out, LossStepsFile), filepath.Join(out, LossEpochsFile)}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("Write returned %v, want %v", files, want)
	}
	checkDrawn(t, LossEpochsFile, decode(t, files[1]), runColor(0))
	checkOnlyFiles(t, out, LossEpochsFile, LossStepsFile)
}

// A run that stopped inside its first epoch has only steps.
func TestWriteStepsOnly(t *testing.T) {
	r := readRun(t, "run", metricsText(300, 1000, 0, true))
	out := t.TempDir()
	files, err := Write([]*Run{r}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || filepath.Base(files[0]) != LossStepsFile {
		t.Fatalf("Write returned %v, want only %s", files, LossStepsFile)
	}
	checkDrawn(t, LossStepsFile, decode(t, files[0]), runColor(0))
}

func TestWriteNothingToDraw(t *testing.T) {
	good := readRun(t, "good", metricsText(100, 50, 0, true))
	for _, tc := range []struct {
		name string
		runs []*Run
		want string
	}{
		{"no runs", nil, "no runs"},
		{"no steps", []*Run{good, readRun(t, "empty", `{"kind":"summary","wall_seconds":1}`+"\n")}, `run "empty" (`},
		{"null losses", []*Run{readRun(t, "diverged", `{"kind":"step","step":1,"loss":null}`+"\n")}, "all 1 step losses are null"},
		{"nil run", []*Run{nil}, "run 1 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			files, err := Write(tc.runs, out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if len(files) != 0 {
				t.Errorf("Write returned %v with its error", files)
			}
			checkOnlyFiles(t, out)
		})
	}
}

func TestLegendNames(t *testing.T) {
	tmp := t.TempDir()
	run := func(dir string) *Run { return &Run{Name: filepath.Base(dir), Dir: dir} }
	a, b := filepath.Join(tmp, "a", "run"), filepath.Join(tmp, "b", "run")
	for _, tc := range []struct {
		name string
		runs []*Run
		want string
	}{
		{"distinct", []*Run{run(a), run(filepath.Join(tmp, "other"))}, "run|other"},
		{"same base name", []*Run{run(a), run(b), run(filepath.Join(tmp, "c"))}, "a/run|b/run|c"},
		{"same folder twice", []*Run{run(a), run(a)}, "run|run (2)"},
		{"no names", []*Run{{}, {}}, "run 1|run 2"},
		{"no folders", []*Run{{Name: "x"}, {Name: "x"}, {Name: "x (2)"}}, "x|x (2)|x (2) (2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(legendNames(tc.runs), "|"); got != tc.want {
				t.Errorf("legendNames = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMinMax(t *testing.T) {
	const n = 100_000
	r := &Run{}
	for i := range n {
		r.Steps = append(r.Steps, Step{Step: i + 1, Loss: math.Sin(float64(i) * 0.01)})
	}
	r.Steps[500].Loss = 10 // a spike must survive thinning
	all := stepLoss(r)
	thin := minMax(all, MaxLinePoints)
	if len(thin) > MaxLinePoints || len(thin) < MaxLinePoints/2 {
		t.Fatalf("thinned to %d points, want at most %d", len(thin), MaxLinePoints)
	}
	if thin[0] != all[0] || thin[len(thin)-1] != all[n-1] {
		t.Errorf("first/last point lost: %v %v", thin[0], thin[len(thin)-1])
	}
	spike := false
	for i, p := range thin {
		if i > 0 && p.X <= thin[i-1].X {
			t.Fatalf("x not increasing at %d: %v after %v", i, p.X, thin[i-1].X)
		}
		spike = spike || p.Y == 10
	}
	if !spike {
		t.Error("the spike at step 501 was thinned away")
	}
	if short := all[:100]; len(minMax(short, MaxLinePoints)) != 100 {
		t.Error("a short series was thinned")
	}
}

// BenchmarkWrite100kSteps draws two runs of 100,000 steps each (thinned
// to MaxLinePoints) and their epoch curves.
func BenchmarkWrite100kSteps(b *testing.B) {
	runs := []*Run{
		readRun(b, "a", metricsText(100_000, 10_000, 0, true)),
		readRun(b, "b", metricsText(100_000, 10_000, 0.5, true)),
	}
	out := b.TempDir()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Write(runs, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadRun100kSteps reads a metrics.jsonl of 100,000 steps.
func BenchmarkReadRun100kSteps(b *testing.B) {
	dir := writeMetrics(b, "run", metricsText(100_000, 10_000, 0, true))
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReadRun(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteLearningRate: a run whose learning rate changes (a schedule)
// gets lr.png, drawn across the plot; one with a constant rate does not.
func TestWriteLearningRate(t *testing.T) {
	text := metricsText(1200, 300, 0, true)
	var b strings.Builder
	for i, line := range strings.SplitAfter(text, "\n") {
		// A cosine from 0.01 down over the run's step lines.
		b.WriteString(strings.Replace(line, `"lr":0.01`, fmt.Sprintf(`"lr":%g`, 0.005*(1+math.Cos(math.Pi*float64(i)/1500))), 1))
	}
	scheduled := readRun(t, "cosine", b.String())
	constant := readRun(t, "constant", metricsText(1000, 250, 0, true))
	out := t.TempDir()
	files, err := Write([]*Run{scheduled, constant}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 || files[3] != filepath.Join(out, LRFile) {
		t.Fatalf("Write returned %v, want lr.png last", files)
	}
	checkDrawn(t, LRFile, decode(t, files[3]), runColor(0))
	out = t.TempDir()
	if files, err = Write([]*Run{constant}, out); err != nil || len(files) != 3 {
		t.Errorf("a constant rate: Write returned %v, %v; want no lr.png", files, err)
	}
}
