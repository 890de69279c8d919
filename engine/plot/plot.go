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
	"strconv"
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
// Write fails before drawing anything, naming the run. Steps whose loss is
// null are left out of the lines. loss_epochs.png is skipped when no run
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
	p.Y.Tick.Marker = valueTicks{}
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func lossSteps(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Training loss per step", "step", "loss")
	for i, r := range runs {
		l, err := plotter.NewLine(minMax(stepLoss(r), MaxLinePoints))
		if err != nil {
			return nil, fmt.Errorf("run %q: %w", names[i], err)
		}
		l.Color = runColor(i)
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	return p, nil
}

// learningRate draws each run's learning rate per step (a schedule's), or
// nothing when no run's rate changes.
func learningRate(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Learning rate per step", "step", "lr")
	any := false
	for i, r := range runs {
		xys := make(plotter.XYs, 0, len(r.Steps))
		changes := false
		for _, s := range r.Steps {
			if finite(s.LR) {
				changes = changes || (len(xys) > 0 && s.LR != xys[0].Y)
				xys = append(xys, plotter.XY{X: float64(s.Step), Y: s.LR})
			}
		}
		if !changes {
			continue
		}
		any = true
		l, err := plotter.NewLine(minMax(xys, MaxLinePoints))
		if err != nil {
			return nil, fmt.Errorf("run %q: %w", names[i], err)
		}
		l.Color = runColor(i)
		l.Width = vg.Points(2) // a smooth curve: wide enough to read
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	if !any {
		return nil, nil
	}
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

func lossEpochs(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Loss per epoch (solid: train, dashed: eval)", "epoch", "loss")
	p.X.Tick.Marker = integerTicks{}
	drawn := false
	for i, r := range runs {
		var train, eval plotter.XYs
		for _, e := range r.Epochs {
			if finite(e.TrainLoss) {
				train = append(train, plotter.XY{X: float64(e.Epoch), Y: e.TrainLoss})
			}
		}
		for _, e := range r.Evals {
			if finite(e.Loss) {
				eval = append(eval, plotter.XY{X: float64(e.Epoch), Y: e.Loss})
			}
		}
		if err := epochSeries(p, train, i, names[i]+" train", false); err != nil {
			return nil, err
		}
		if err := epochSeries(p, eval, i, names[i]+" eval", true); err != nil {
			return nil, err
		}
		drawn = drawn || len(train) > 0 || len(eval) > 0
	}
	if !drawn {
		return nil, nil
	}
	return p, nil
}

func accuracy(runs []*Run, names []string) (*plot.Plot, error) {
	p := newPlot("Eval accuracy per epoch", "epoch", "accuracy")
	p.X.Tick.Marker = integerTicks{}
	p.Legend.Top = false // accuracy rises: the lower right is free
	drawn := false
	for i, r := range runs {
		var acc plotter.XYs
		for _, e := range r.Evals {
			if finite(e.Accuracy) {
				acc = append(acc, plotter.XY{X: float64(e.Epoch), Y: e.Accuracy})
			}
		}
		if err := epochSeries(p, acc, i, names[i], false); err != nil {
			return nil, err
		}
		drawn = drawn || len(acc) > 0
	}
	if !drawn {
		return nil, nil
	}
	return p, nil
}

// valueTicks are gonum's default ticks, labelled with as many decimals as
// it takes for neighbouring labels to differ (gonum's own labels can print
// 2.32 and 2.28 both as "2.3").
type valueTicks struct{}

// Ticks implements plot.Ticker.
func (valueTicks) Ticks(min, max float64) []plot.Tick {
	ticks := (plot.DefaultTicks{}).Ticks(min, max)
	var vals []float64
	for _, t := range ticks {
		if t.Label != "" {
			vals = append(vals, t.Value)
		}
	}
	for prec := 0; prec <= 8; prec++ {
		distinct := true
		for i := 1; i < len(vals); i++ {
			if strconv.FormatFloat(vals[i], 'f', prec, 64) == strconv.FormatFloat(vals[i-1], 'f', prec, 64) {
				distinct = false
			}
		}
		if distinct {
			for i := range ticks {
				if ticks[i].Label != "" {
					ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', prec, 64)
				}
			}
			break
		}
	}
	return ticks
}

// integerTicks marks whole numbers only, for epoch axes: gonum's default
// ticks without the fractional ones, or every whole number when that
// leaves fewer than two labelled ticks.
type integerTicks struct{}

// Ticks implements plot.Ticker.
func (integerTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	labelled := 0
	for _, t := range (plot.DefaultTicks{}).Ticks(min, max) {
		if t.Value == math.Trunc(t.Value) {
			ticks = append(ticks, t)
			if t.Label != "" {
				labelled++
			}
		}
	}
	if labelled >= 2 || max-min > 100 {
		return ticks
	}
	ticks = ticks[:0]
	for v := math.Ceil(min); v <= max; v++ {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprint(v)})
	}
	return ticks
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
