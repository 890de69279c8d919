// Package plot draws training curves from a run folder as PNG images.
//
// It belongs to the phase after a run, or its very end: ReadRun reads the
// metrics.jsonl that a run started with --out DIR wrote (the engine's
// step, epoch, eval and summary lines), and Write draws one or more runs
// into a folder:
//
//	loss_steps.png   training loss per optimizer step
//	loss_epochs.png  train loss (solid) and eval loss (dashed) per epoch
//	accuracy.png     eval accuracy per epoch
//	lr.png           learning rate per step (runs whose rate changes)
//
// Several runs on one figure compare them: each run keeps one colour on
// every figure and one legend entry, named by its folder.
//
// Nothing here panics on bad input and nothing is global: errors are
// returned, start with "plot: ", and name the file and line (ReadRun) or
// the run and image (Write).
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The files Write may produce inside its output folder.
const (
	LossStepsFile  = "loss_steps.png"
	LossEpochsFile = "loss_epochs.png"
	AccuracyFile   = "accuracy.png"
	LRFile         = "lr.png"
)

// Every figure is 6×4 inches, drawn at gonum's 96 dots per inch:
// 576×384 pixels.
const (
	figWidth  = 6 * vg.Inch
	figHeight = 4 * vg.Inch
)

// MaxLinePoints bounds the points drawn for one run's loss-per-step line;
// longer series are thinned by keeping the lowest and highest loss of each
// bucket of consecutive steps (see Write).
const MaxLinePoints = 4000

// Write draws runs into outDir, creating it when needed, and returns the
// paths of the files it wrote, in the order LossStepsFile, LossEpochsFile,
// AccuracyFile, LRFile.
//
// Every run must have at least one step with a finite loss; otherwise
// Write fails before drawing anything, naming the run. Values that are
// null or not finite are left out of the lines, and the legend says how
// many (Notes says the same in words).
//
// Axes tell the truth: a value's pixel sits where the axis labels say it
// is. Ticks are every multiple of a step of 1, 2 or 5 × 10^k, labelled
// with exactly the decimals the step needs, and each axis runs from a
// tick to a tick around the data, never below 0 for data that are not
// negative. Values too large or too small to label (beyond 1e6, below
// 1e-3, up to ±1.8e308) are drawn on a scaled axis, "loss (×1e308)";
// a constant series or a single point gets a range around its value. loss_epochs.png is skipped when no run
// has an epoch or eval loss, accuracy.png when no run has an eval
// accuracy, and lr.png when no run's learning rate changes (no schedule),
// rather than drawing an empty figure.
//
// Runs are named in the legend by their Name (the folder's base name);
// runs with the same name are told apart by more of their folder's path,
// or else numbered: "run", "run (2)".
//
// A run longer than MaxLinePoints steps is thinned before drawing: the
// steps are cut into MaxLinePoints/2 buckets of consecutive steps, and
// each bucket keeps its lowest and its highest loss, in step order, along
// with the first and last step of the run. Unlike a running mean this
// keeps the spread of a noisy loss and every spike visible, at the
// figure's resolution, and 100,000 steps draw in well under a second.
//
// Each image is written to a temporary file in outDir and renamed into
// place, so that a crash never leaves a half-written image. When Write
// fails after writing some images, it returns those along with the error.
func Write(runs []*Run, outDir string) ([]string, error) {
	if len(runs) == 0 {
		return nil, errors.New("plot: no runs to draw")
	}
	for i, r := range runs {
		if r == nil {
			return nil, fmt.Errorf("plot: run %d is nil", i+1)
		}
	}
	names := legendNames(runs)
	for i, r := range runs {
		if len(r.Steps) == 0 {
			return nil, fmt.Errorf("plot: run %q%s has no step metrics to draw", names[i], from(r))
		}
		if len(stepLoss(r)) == 0 {
			return nil, fmt.Errorf("plot: run %q%s: all %d step losses are null (not finite)", names[i], from(r), len(r.Steps))
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}

	figures := []struct {
		file string
		draw func([]*Run, []string) (*plot.Plot, error)
	}{
		{LossStepsFile, lossSteps},
		{LossEpochsFile, lossEpochs},
		{AccuracyFile, accuracy},
		{LRFile, learningRate},
	}
	var written []string
	for _, f := range figures {
		path := filepath.Join(outDir, f.file)
		p, err := f.draw(runs, names)
		if err != nil {
			return written, fmt.Errorf("plot: %s: %w", path, err)
		}
		if p == nil {
			continue
		}
		if err := save(p, path); err != nil {
			return written, fmt.Errorf("plot: %s: %w", path, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// Notes says, one line a run, which values Write leaves out of the
// figures for not being finite (a null loss in metrics.jsonl: the run's
// loss diverged or a step was skipped), so that a gap in a line is never
// silent. It returns nil when every value is drawn. The figures' legends
// say the same.
func Notes(runs []*Run) []string {
	var notes []string
	names := legendNames(runs)
	for i, r := range runs {
		if r == nil {
			continue
		}
		var parts []string
		count := func(n, of int, what string) {
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%d of %d %s", n, of, what))
			}
		}
		count(len(r.Steps)-len(stepLoss(r)), len(r.Steps), "step losses")
		_, n := epochPoints(r.Epochs, func(e Epoch) int { return e.Epoch }, func(e Epoch) float64 { return e.TrainLoss })
		count(n, len(r.Epochs), "epoch train losses")
		_, n = epochPoints(r.Evals, func(e Eval) int { return e.Epoch }, func(e Eval) float64 { return e.Loss })
		count(n, len(r.Evals), "eval losses")
		_, n = epochPoints(r.Evals, func(e Eval) int { return e.Epoch }, func(e Eval) float64 { return e.Accuracy })
		count(n, len(r.Evals), "eval accuracies")
		if len(parts) > 0 {
			notes = append(notes, fmt.Sprintf("run %q%s: %s are null or not finite; not drawn", names[i], from(r), strings.Join(parts, ", ")))
		}
	}
	return notes
}

// from says which folder a run came from, for error messages.
func from(r *Run) string {
	if r.Dir == "" {
		return ""
	}
	return " (" + filepath.Join(r.Dir, MetricsFile) + ")"
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// stepLoss is the run's finite loss per step.
func stepLoss(r *Run) plotter.XYs {
	xys := make(plotter.XYs, 0, len(r.Steps))
	for _, s := range r.Steps {
		if finite(s.Loss) {
			xys = append(xys, plotter.XY{X: float64(s.Step), Y: s.Loss})
		}
	}
	return xys
}

// minMax thins xys to at most max points (max >= 4): it keeps the first
// and the last point and, for each of (max-2)/2 buckets of consecutive
// points in between, the lowest and the highest, in their order.
func minMax(xys plotter.XYs, max int) plotter.XYs {
	n := len(xys)
	if n <= max {
		return xys
	}
	buckets := (max - 2) / 2
	inner := n - 2
	out := make(plotter.XYs, 0, max)
	out = append(out, xys[0])
	for b := 0; b < buckets; b++ {
		lo, hi := 1+b*inner/buckets, 1+(b+1)*inner/buckets
		if lo >= hi {
			continue
		}
		imin, imax := lo, lo
		for i := lo + 1; i < hi; i++ {
			if xys[i].Y < xys[imin].Y {
				imin = i
			}
			if xys[i].Y > xys[imax].Y {
				imax = i
			}
		}
		first, second := imin, imax
		if first > second {
			first, second = second, first
		}
		out = append(out, xys[first])
		if second != first {
			out = append(out, xys[second])
		}
	}
	return append(out, xys[n-1])
}

// runColor returns run i's colour: Tableau's ten, repeating after ten runs.
func runColor(i int) color.RGBA {
	palette := [...]color.RGBA{
		{31, 119, 180, 255},  // blue
		{255, 127, 14, 255},  // orange
		{44, 160, 44, 255},   // green
		{214, 39, 40, 255},   // red
		{148, 103, 189, 255}, // purple
		{140, 86, 75, 255},   // brown
		{227, 119, 194, 255}, // pink
		{127, 127, 127, 255}, // grey
		{188, 189, 34, 255},  // olive
		{23, 190, 207, 255},  // cyan
	}
	return palette[i%len(palette)]
}

// newPlot returns a figure with a title, axis labels and a light grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func lossSteps(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Training loss per step", "step", "loss")
	lines := make([]plotter.XYs, len(runs))
	for i, r := range runs {
		lines[i] = minMax(stepLoss(r), MaxLinePoints)
	}
	f, ok := newFrame(true, lines...)
	if !ok {
		return nil, nil
	}
	for i, r := range runs {
		if err := addLine(p, f.points(lines[i]), i, names[i]+notDrawn(len(r.Steps)-len(stepLoss(r)), "step"), vg.Points(1)); err != nil {
			return nil, err
		}
	}
	f.apply(p)
	return p, nil
}

// addLine draws run i's series xys as a line of the given width, named
// in the legend. A series of one point, which a line cannot show, is drawn
// as a dot.
func addLine(p *plot.Plot, xys plotter.XYs, i int, name string, width vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("run %q: %w", name, err)
	}
	l.Color = runColor(i)
	l.Width = width
	p.Add(l)
	if len(xys) != 1 {
		p.Legend.Add(name, l)
		return nil
	}
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return fmt.Errorf("run %q: %w", name, err)
	}
	s.Color = runColor(i)
	s.Radius = vg.Points(2.5)
	s.Shape = draw.CircleGlyph{}
	p.Add(s)
	p.Legend.Add(name, l, s)
	return nil
}

// notDrawn is a legend's note on n values of a series left out for not
// being finite: "" when n is 0.
func notDrawn(n int, what string) string {
	switch n {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (1 %s not finite, not drawn)", what)
	}
	return fmt.Sprintf(" (%d %ss not finite, not drawn)", n, what)
}

// learningRate draws each run's learning rate per step (a schedule's), or
// nothing when no run's rate changes.
func learningRate(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Learning rate per step", "step", "lr")
	lines := make([]plotter.XYs, len(runs))
	for i, r := range runs {
		xys := make(plotter.XYs, 0, len(r.Steps))
		changes := false
		for _, s := range r.Steps {
			if finite(s.LR) {
				changes = changes || (len(xys) > 0 && s.LR != xys[0].Y)
				xys = append(xys, plotter.XY{X: float64(s.Step), Y: s.LR})
			}
		}
		if changes {
			lines[i] = minMax(xys, MaxLinePoints)
		}
	}
	f, ok := newFrame(true, lines...)
	if !ok {
		return nil, nil
	}
	for i := range runs {
		if len(lines[i]) == 0 {
			continue
		}
		// A smooth curve: wide enough to read.
		if err := addLine(p, f.points(lines[i]), i, names[i], vg.Points(2)); err != nil {
			return nil, err
		}
	}
	f.apply(p)
	return p, nil
}

// epochSeries draws one per-epoch series of run i as a line through
// points; dashed lines and rings mark eval series. It adds nothing when
// xys is empty.
func epochSeries(p *plot.Plot, xys plotter.XYs, i int, name string, eval bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("run %q: %w", name, err)
	}
	l.Color = runColor(i)
	l.Width = vg.Points(1.5)
	s.Color = runColor(i)
	s.Radius = vg.Points(2.5)
	s.Shape = draw.CircleGlyph{}
	if eval {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		s.Shape = draw.RingGlyph{}
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// epochPoints is (epoch, v) for each entry of a per-epoch series, and how
// many of the values are not finite.
func epochPoints[T any](list []T, epoch func(T) int, v func(T) float64) (plotter.XYs, int) {
	var xys plotter.XYs
	skipped := 0
	for _, e := range list {
		if y := v(e); finite(y) {
			xys = append(xys, plotter.XY{X: float64(epoch(e)), Y: y})
		} else {
			skipped++
		}
	}
	return xys, skipped
}

func lossEpochs(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Loss per epoch (solid: train, dashed: eval)", "epoch", "loss")
	train := make([]plotter.XYs, len(runs))
	eval := make([]plotter.XYs, len(runs))
	trainSkipped := make([]int, len(runs))
	evalSkipped := make([]int, len(runs))
	for i, r := range runs {
		train[i], trainSkipped[i] = epochPoints(r.Epochs, func(e Epoch) int { return e.Epoch }, func(e Epoch) float64 { return e.TrainLoss })
		eval[i], evalSkipped[i] = epochPoints(r.Evals, func(e Eval) int { return e.Epoch }, func(e Eval) float64 { return e.Loss })
	}
	f, ok := newFrame(true, append(append([]plotter.XYs{}, train...), eval...)...)
	if !ok {
		return nil, nil
	}
	for i := range runs {
		if err := epochSeries(p, f.points(train[i]), i, names[i]+" train"+notDrawn(trainSkipped[i], "epoch"), false); err != nil {
			return nil, err
		}
		if err := epochSeries(p, f.points(eval[i]), i, names[i]+" eval"+notDrawn(evalSkipped[i], "eval"), true); err != nil {
			return nil, err
		}
	}
	f.apply(p)
	return p, nil
}

func accuracy(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Eval accuracy per epoch", "epoch", "accuracy")
	p.Legend.Top = false // accuracy rises: the lower right is free
	acc := make([]plotter.XYs, len(runs))
	skipped := make([]int, len(runs))
	for i, r := range runs {
		acc[i], skipped[i] = epochPoints(r.Evals, func(e Eval) int { return e.Epoch }, func(e Eval) float64 { return e.Accuracy })
	}
	f, ok := newFrame(true, acc...)
	if !ok {
		return nil, nil
	}
	for i := range runs {
		if err := epochSeries(p, f.points(acc[i]), i, names[i]+notDrawn(skipped[i], "eval"), false); err != nil {
			return nil, err
		}
	}
	f.apply(p)
	return p, nil
}

// legendNames names each run for legends: its Name ("run N" when empty);
// runs with equal names by the shortest tail of their folders' paths that
// tells them apart; whatever still clashes is numbered "name (2)", ….
func legendNames(runs []*Run) []string {
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name
		if names[i] == "" {
			names[i] = fmt.Sprintf("run %d", i+1)
		}
	}
	groups := map[string][]int{}
	for i, n := range names {
		groups[n] = append(groups[n], i)
	}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		for k := 2; k <= 16; k++ {
			cand := make([]string, len(g))
			longer := false // some path has more than k parts
			for j, i := range g {
				var ok bool
				cand[j], ok = pathTail(runs[i].Dir, k)
				longer = longer || ok
			}
			if distinct(cand) {
				for j, i := range g {
					names[i] = cand[j]
				}
				break
			}
			if !longer {
				break
			}
		}
	}
	seen := map[string]bool{}
	for i, n := range names {
		name := n
		for k := 2; seen[name]; k++ {
			name = fmt.Sprintf("%s (%d)", n, k)
		}
		seen[name] = true
		names[i] = name
	}
	return names
}

// pathTail returns the last k parts of dir's absolute path joined by "/",
// and whether the path has more than k parts. An empty dir gives "".
func pathTail(dir string, k int) (string, bool) {
	if dir == "" {
		return "", false
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	parts := strings.FieldsFunc(filepath.ToSlash(dir), func(r rune) bool { return r == '/' })
	if len(parts) <= k {
		return strings.Join(parts, "/"), false
	}
	return strings.Join(parts[len(parts)-k:], "/"), true
}

func distinct(s []string) bool {
	seen := map[string]bool{}
	for _, v := range s {
		if v == "" || seen[v] {
			return false
		}
		seen[v] = true
	}
	return true
}

// save writes p as a PNG to path through a temporary file in the same
// folder, renamed into place once complete.
func save(p *plot.Plot, path string) (err error) {
	wt, err := p.WriterTo(figWidth, figHeight, "png")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = wt.WriteTo(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
