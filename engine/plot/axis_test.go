package plot

import (
	"fmt"
	"image"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gplot "gonum.org/v1/plot"
)

func TestLayAxis(t *testing.T) {
	for _, tc := range []struct {
		name     string
		min, max float64
		integer  bool
		want     string // the tick labels
		exp      int
	}{
		// The run: ticks sat at 2.0, 1.2, 0.4 labelled "2", "1", "0".
		{"linear 2.0 to 0.1", 0.1, 2.0, false, "0.0 0.5 1.0 1.5 2.0", 0},
		{"labels with the decimals of the step", 0.91, 1.13, false, "0.90 0.95 1.00 1.05 1.10 1.15", 0},
		{"small step", 2.28, 2.32, false, "2.28 2.29 2.30 2.31 2.32", 0},
		{"non-negative data stay above 0", 0.001, 0.9, false, "0.0 0.2 0.4 0.6 0.8 1.0", 0},
		{"negative data", -1.3, 0.5, false, "-1.5 -1.0 -0.5 0.0 0.5", 0},
		{"constant", 2, 2, false, "1.8 1.9 2.0 2.1 2.2", 0},
		{"constant 0", 0, 0, false, "0.0 0.2 0.4 0.6 0.8 1.0", 0},
		{"constant negative", -3, -3, false, "-3.4 -3.2 -3.0 -2.8 -2.6", 0},
		{"±1e308", -1e308, 1e308, false, "-1.0 -0.5 0.0 0.5 1.0", 308},
		{"±MaxFloat64", -math.MaxFloat64, math.MaxFloat64, false, "-2 -1 0 1 2", 308},
		{"huge constant", math.MaxFloat64, math.MaxFloat64, false, "1.6 1.7 1.8 1.9 2.0", 308},
		{"tiny", 1e-5, 3e-5, false, "1.0 1.5 2.0 2.5 3.0", -5},
		{"subnormal", 0, 5e-324, false, "0 1 2 3 4 5", -324},
		{"steps", 1, 20, true, "0 5 10 15 20", 0},
		{"two steps", 1, 2, true, "1 2", 0},
		{"one epoch", 1, 1, true, "0 1 2", 0},
		{"huge steps", 1, 9e18, true, "0 2000000000000000000 4000000000000000000 6000000000000000000 8000000000000000000 10000000000000000000", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := layAxis(tc.min, tc.max, tc.integer)
			var labels []string
			for _, tk := range a.ticks {
				labels = append(labels, tk.Label)
			}
			if got := strings.Join(labels, " "); got != tc.want || a.exp != tc.exp {
				t.Errorf("ticks %q ×1e%d, want %q ×1e%d", got, a.exp, tc.want, tc.exp)
			}
			lo, hi := a.scale(tc.min), a.scale(tc.max)
			if tol := 1e-9 * a.step; lo < a.lo-tol || hi > a.hi+tol || a.lo != a.ticks[0].Value || a.hi != a.ticks[len(a.ticks)-1].Value {
				t.Errorf("range [%g, %g] does not hold the data [%g, %g] between its end ticks", a.lo, a.hi, lo, hi)
			}
			for _, tk := range a.ticks {
				if v, err := strconv.ParseFloat(tk.Label, 64); err != nil || v != tk.Value {
					t.Errorf("tick at %v labelled %q", tk.Value, tk.Label)
				}
			}
		})
	}
}

// figureFor returns the layout of the figure that Write draws into file
// for runs.
func figureFor(t *testing.T, file string, runs []*Run) layout {
	t.Helper()
	names := legendNames(runs)
	var f func([]*Run, []string) (*gplot.Plot, error)
	switch file {
	case LossStepsFile:
		f = lossSteps
	case LossEpochsFile:
		f = lossEpochs
	case AccuracyFile:
		f = accuracy
	case LRFile:
		f = learningRate
	}
	p, err := f(runs, names)
	if err != nil || p == nil {
		t.Fatalf("%s: %v, %v", file, p, err)
	}
	return layoutOf(p)
}

// scaleOf reads an axis label's scale: 1e308 from "loss (×1e308)", 1
// when there is none.
func scaleOf(t *testing.T, label string) float64 {
	m := regexp.MustCompile(`\(×1e(-?\d+)\)$`).FindStringSubmatch(label)
	if m == nil {
		return 1
	}
	e, _ := strconv.Atoi(m[1])
	return math.Pow(10, float64(e))
}

// readTicks reads the labels of an axis's ticks as numbers, checking that
// they run one way along the axis.
func readTicks(t *testing.T, ticks []tickPos, scale float64) (vals, pixels []float64) {
	t.Helper()
	if len(ticks) < 2 {
		t.Fatalf("%d labelled ticks, want at least 2", len(ticks))
	}
	for i, tk := range ticks {
		v, err := strconv.ParseFloat(tk.Label, 64)
		if err != nil {
			t.Fatalf("tick label %q is not a number", tk.Label)
		}
		vals = append(vals, v*scale)
		pixels = append(pixels, tk.Pixel)
		if i > 0 && (vals[i] <= vals[i-1] || pixels[i] == pixels[i-1]) {
			t.Fatalf("ticks %v do not run one way", ticks)
		}
	}
	return vals, pixels
}

// interp maps x through the piecewise-linear function through (xs, ys),
// extended beyond its ends.
func interp(x float64, xs, ys []float64) float64 {
	i := 1
	for i < len(xs)-1 && x > xs[i] {
		i++
	}
	return ys[i-1] + (x-xs[i-1])*(ys[i]-ys[i-1])/(xs[i]-xs[i-1])
}

// weightedRow is the darkness-weighted mean row (pixel centres) of column x
// between rows lo and hi, and the darkness found there.
func weightedRow(img image.Image, x, lo, hi int, weight func(r, g, b int) float64) (float64, float64) {
	sum, total := 0.0, 0.0
	for y := max(lo, 0); y <= hi && y < img.Bounds().Max.Y; y++ {
		r, g, b, _ := img.At(x, y).RGBA()
		w := weight(int(r>>8), int(g>>8), int(b>>8))
		sum += w * (float64(y) + 0.5)
		total += w
	}
	return sum / total, total
}

// checkReadBack reads a loss_steps.png back as a reader would: the tick
// marks must sit at the rows the layout gives its labels, and at several
// columns across the plot the run's line must sit at the row that the
// axis labels give its value, interpolated between labelled ticks.
func checkReadBack(t *testing.T, r *Run) {
	t.Helper()
	out := t.TempDir()
	if _, err := Write([]*Run{r}, out); err != nil {
		t.Fatal(err)
	}
	img := decode(t, filepath.Join(out, LossStepsFile))
	lay := figureFor(t, LossStepsFile, []*Run{r})

	xv, xp := readTicks(t, lay.X, 1)
	// Values are compared in the axis's units (the labels' numbers) so
	// that ±1e308 does not overflow.
	scale := scaleOf(t, lay.YLabel)
	yv, yp := readTicks(t, lay.Y, 1)

	// The tick marks left of the plot: the y axis's line is the darkest
	// column left of the data area; the marks reach left from it, dark at
	// each tick's row.
	dark := func(r, g, b int) float64 { return float64(3*255-r-g-b) / (3 * 255) }
	axisX, most := 0, 0.0
	for x := int(lay.Left) - 30; x < int(lay.Left); x++ {
		if _, ink := weightedRow(img, x, int(lay.Top), int(lay.Bottom), dark); ink > most {
			axisX, most = x, ink
		}
	}
	if most < (lay.Bottom-lay.Top)/4 {
		t.Fatalf("no y axis line left of column %.0f", lay.Left)
	}
	for _, tk := range lay.Y {
		row, ink := weightedRow(img, axisX-3, int(tk.Pixel)-4, int(tk.Pixel)+4, dark)
		if ink < 0.5 || math.Abs(row-tk.Pixel) > 1 {
			t.Errorf("tick %q: the layout puts it at row %.1f; the image has a tick mark at %.1f (ink %.2f)", tk.Label, tk.Pixel, row, ink)
		}
	}

	// The run's line.
	xs := make([]float64, 0, len(r.Steps))
	ys := make([]float64, 0, len(r.Steps))
	for _, s := range r.Steps {
		if finite(s.Loss) {
			xs, ys = append(xs, float64(s.Step)), append(ys, s.Loss/scale)
		}
	}
	// How much of the run's colour a pixel holds over the white
	// background (antialiasing blends the two); 0 for other colours, such
	// as the grey grid and the grey edges of the axes.
	c := runColor(0)
	line := func(r, g, b int) float64 {
		if r == g && g == b {
			return 0
		}
		a := [3]float64{
			float64(255-r) / float64(255-int(c.R)),
			float64(255-g) / float64(255-int(c.G)),
			float64(255-b) / float64(255-int(c.B)),
		}
		if math.Max(a[0], math.Max(a[1], a[2]))-math.Min(a[0], math.Min(a[1], a[2])) > 0.15 {
			return 0
		}
		return (a[0] + a[1] + a[2]) / 3
	}
	checked := 0
	for _, frac := range []float64{0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95} {
		col := int(lay.Left + frac*(lay.Right-lay.Left))
		step := interp(float64(col)+0.5, xp, xv) // the step this column shows, by the x labels
		if step < xs[0] || step > xs[len(xs)-1] {
			continue
		}
		want := interp(interp(step, xs, ys), yv, yp) // the row the y labels give the loss there
		// The legend sits at the top right: look below it.
		got, ink := weightedRow(img, col, int(lay.Top), int(lay.Bottom), line)
		if frac > 0.75 && want < lay.Top+30 {
			continue
		}
		if ink < 0.5 {
			t.Errorf("column %d (step %.2f): no line drawn; want it at row %.1f", col, step, want)
			continue
		}
		if math.Abs(got-want) > 1.5 {
			t.Errorf("column %d (step %.2f, loss %.4g): line at row %.1f, the axis labels put it at row %.1f (ticks %v)",
				col, step, interp(step, xs, ys)*scale, got, want, lay.Y)
		}
		checked++
	}
	if checked < 4 {
		t.Errorf("only %d columns checked", checked)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func seriesRun(name string, n int, f func(i int) float64) *Run {
	r := &Run{Name: name}
	for i := range n {
		r.Steps = append(r.Steps, Step{Step: i + 1, Epoch: 1, Loss: f(i), LR: 0.01})
	}
	return r
}

// TestPlotReadBack: a value's pixel sits where the axis labels say it is.
func TestPlotReadBack(t *testing.T) {
	for _, r := range []*Run{
		// The run: drawn from about 2.35 to -0.2 against its labels.
		seriesRun("linear", 20, func(i int) float64 { return 2.0 - 1.9*float64(i)/19 }),
		seriesRun("decay", 1000, func(i int) float64 { return 0.05 + 2.3*math.Exp(-float64(i)/300) }),
		seriesRun("narrow", 50, func(i int) float64 { return 2.32 - 0.04*float64(i)/49 }),
		seriesRun("negative", 40, func(i int) float64 { return 0.5 - 1.8*float64(i)/39 }),
		seriesRun("huge", 30, func(i int) float64 { return 1e308 * (1 - 1.98*float64(i)/29) }),
		seriesRun("tiny", 30, func(i int) float64 { return 3e-5 - 2e-5*float64(i)/29 }),
		seriesRun("resumed", 300, func(i int) float64 { return 1 + math.Cos(float64(i)/50) }),
	} {
		t.Run(r.Name, func(t *testing.T) {
			if r.Name == "resumed" {
				for i := range r.Steps {
					r.Steps[i].Step += 5000
				}
			}
			checkReadBack(t, r)
		})
	}
}

// within runs f, failing the test when it has not returned after d: a
// hang fails instead of stalling the suite.
func within[T any](t *testing.T, d time.Duration, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatalf("still running after %v: a hang", d)
		panic("unreachable")
	}
}

type drawn struct {
	files []string
	err   error
}

// TestWriteHostileValues: values that overflow an axis's span, that are
// not finite, or that give an axis no span, each drawn in bounded time
// with labels that are numbers, or refused by name.
func TestWriteHostileValues(t *testing.T) {
	steps := func(losses ...string) string {
		var b strings.Builder
		for i, l := range losses {
			fmt.Fprintf(&b, `{"kind":"step","step":%d,"epoch":1,"loss":%s,"lr":%s}`+"\n", i+1, l, l)
		}
		return b.String()
	}
	const max = "1.7976931348623157e308"
	for _, tc := range []struct {
		name    string
		text    string
		run     *Run   // instead of text: values JSON cannot hold
		want    string // the error, or "" when it draws
		files   int
		yLabel  string
		notes   string  // "*" stands for the run's folder
		between float64 // a value the y ticks must surround
	}{
		{name: "±1e308", text: steps("1e308", "-1e308", "1e308", "-1e308"), files: 2, yLabel: "loss (×1e308)", between: 0},
		{name: "±MaxFloat64", text: steps(max, "-"+max, max), files: 2, yLabel: "loss (×1e308)", between: 1e308},
		{name: "huge constant", text: steps(max, max, max), files: 1, yLabel: "loss (×1e308)", between: math.MaxFloat64},
		{name: "subnormal", text: steps("5e-324", "0", "1e-323"), files: 2, yLabel: "loss (×1e-323)", between: 5e-324},
		{name: "constant", text: steps("2", "2", "2", "2"), files: 1, yLabel: "loss", between: 2},
		{name: "zero", text: steps("0", "0"), files: 1, yLabel: "loss", between: 0},
		{name: "single point", text: steps("0.7"), files: 1, yLabel: "loss", between: 0.7},
		{name: "null losses", text: steps("1", "null", "0.5", "null"), files: 2, yLabel: "loss", between: 0.75,
			notes: `run "null losses" (*/null losses/metrics.jsonl): 2 of 4 step losses are null or not finite; not drawn`},
		{name: "inf and nan", run: &Run{Name: "inf", Steps: []Step{
			{Step: 1, Loss: math.Inf(1), LR: math.Inf(1)}, {Step: 2, Loss: 1, LR: 0.1}, {Step: 3, Loss: math.NaN(), LR: math.NaN()},
			{Step: 4, Loss: 0.5, LR: 0.2}, {Step: 5, Loss: math.Inf(-1), LR: math.Inf(-1)},
		}}, files: 2, yLabel: "loss", between: 0.75, notes: `run "inf": 3 of 5 step losses are null or not finite; not drawn`},
		{name: "epochs ±1e308", text: steps("1", "2") +
			`{"kind":"epoch","epoch":1,"train_loss":1e308}` + "\n" + `{"kind":"epoch","epoch":2,"train_loss":null}` + "\n" +
			`{"kind":"eval","epoch":1,"loss":-1e308,"accuracy":1e308}` + "\n" + `{"kind":"eval","epoch":2,"loss":-1e308,"accuracy":-1e308}` + "\n",
			files: 4, yLabel: "loss", between: 1.5,
			notes: `run "epochs ±1e308" (*): 1 of 2 epoch train losses are null or not finite; not drawn`},
		{name: "empty metrics file", text: "", want: `run "empty metrics file" (`},
		{name: "only null losses", text: steps("null", "null"), want: "all 2 step losses are null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run
			if r == nil {
				r = readRun(t, tc.name, tc.text)
			}
			out := t.TempDir()
			got := within(t, 20*time.Second, func() drawn {
				files, err := Write([]*Run{r}, out)
				return drawn{files, err}
			})
			if tc.want != "" {
				if got.err == nil || !strings.Contains(got.err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", got.err, tc.want)
				}
				return
			}
			if got.err != nil || len(got.files) != tc.files {
				t.Fatalf("Write = %v, %v; want %d files", got.files, got.err, tc.files)
			}
			for _, f := range got.files {
				decode(t, f)
			}
			notes := strings.Join(Notes([]*Run{r}), "\n")
			// "*" in tc.notes stands for the run's folder.
			want := "^" + strings.ReplaceAll(regexp.QuoteMeta(tc.notes), `\*`, ".*") + "$"
			if !regexp.MustCompile(want).MatchString(notes) {
				t.Errorf("Notes = %q, want %q", notes, tc.notes)
			}
			lay := figureFor(t, LossStepsFile, []*Run{r})
			if lay.YLabel != tc.yLabel {
				t.Errorf("y label %q, want %q", lay.YLabel, tc.yLabel)
			}
			// Labels are numbers, in order, and surround the data.
			scale := scaleOf(t, lay.YLabel)
			yv, _ := readTicks(t, lay.Y, 1)
			if v := tc.between / scale; v < yv[0] || v > yv[len(yv)-1] {
				t.Errorf("y ticks %v do not surround %g", lay.Y, tc.between)
			}
			readTicks(t, lay.X, 1)
		})
	}
}

// TestReadRunOverflow: a number no float64 holds is an error naming the
// file and line, not an infinity drawn off the figure.
func TestReadRunOverflow(t *testing.T) {
	dir := writeMetrics(t, "run", `{"kind":"step","step":1,"loss":1}`+"\n"+`{"kind":"step","step":2,"loss":1e309}`+"\n")
	_, err := ReadRun(dir)
	if err == nil || !strings.Contains(err.Error(), "metrics.jsonl:2:") || !strings.Contains(err.Error(), "1e309") {
		t.Fatalf("err = %v, want one naming metrics.jsonl:2 and 1e309", err)
	}
}

// TestPlotConstantReadBack: a constant loss sits on its labelled value,
// mid-axis.
func TestPlotConstantReadBack(t *testing.T) {
	checkReadBack(t, seriesRun("constant", 30, func(int) float64 { return 2 }))
	checkReadBack(t, seriesRun("zero", 30, func(int) float64 { return 0 }))
}

// TestPlotSinglePointReadBack: a run of one step is drawn as a dot, where
// the axis labels say its step and loss are.
func TestPlotSinglePointReadBack(t *testing.T) {
	r := seriesRun("one", 1, func(int) float64 { return 0.7 })
	r.Steps[0].Step = 7
	out := t.TempDir()
	if _, err := Write([]*Run{r}, out); err != nil {
		t.Fatal(err)
	}
	img := decode(t, filepath.Join(out, LossStepsFile))
	lay := figureFor(t, LossStepsFile, []*Run{r})
	xv, xp := readTicks(t, lay.X, 1)
	yv, yp := readTicks(t, lay.Y, 1)
	wantX, wantY := interp(7, xv, xp), interp(0.7, yv, yp)
	// The centroid of the run's colour inside the data area, below the
	// legend.
	c := runColor(0)
	var sx, sy, n float64
	for y := int(lay.Top) + 20; y < int(lay.Bottom); y++ {
		for x := int(lay.Left); x < int(lay.Right); x++ {
			if near(img.At(x, y), c, 40) {
				sx, sy, n = sx+float64(x)+0.5, sy+float64(y)+0.5, n+1
			}
		}
	}
	if n < 4 {
		t.Fatalf("no dot drawn; want one at (%.1f, %.1f)", wantX, wantY)
	}
	if math.Abs(sx/n-wantX) > 1.5 || math.Abs(sy/n-wantY) > 1.5 {
		t.Errorf("dot at (%.1f, %.1f), the axis labels put it at (%.1f, %.1f)", sx/n, sy/n, wantX, wantY)
	}
}
