package plot

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// targetIntervals is about how many intervals between labelled ticks an
// axis gets: nice steps give between targetIntervals/2 and
// targetIntervals+2 of them.
const targetIntervals = 5

// axis is one axis of a figure as it is drawn: its range [lo, hi] and its
// ticks, in drawn units, which are the values divided by 10^exp.
//
// Ticks are nice: every multiple of a step of 1, 2 or 5 × 10^k from lo to
// hi, and lo and hi are ticks themselves, so the ends of the axis are
// labelled. Each tick is labelled with exactly the decimals its step
// needs ("0.0", "0.5", "1.0"; "0.02", "0.04"), so a label is the value of
// its tick, never a rounding of it. An axis whose data are all ≥ 0 never
// reaches below 0.
type axis struct {
	lo, hi float64
	step   float64
	ticks  []plot.Tick
	// exp is the power of ten the values are divided by to draw them:
	// 0, unless the values are so large (≥ 1e6) or so small (< 1e-3) that
	// labels would be unreadable, or their span would not fit a float64
	// (±1e308). The axis's label then says "(×1e308)".
	exp int
}

// layAxis lays out an axis over the finite values in [min, max] (min ≤
// max; both finite). An integer axis (steps, epochs) gets whole-number
// ticks only and is never scaled.
//
// Every computation stays finite: the span max-min of values near
// ±math.MaxFloat64 is taken after scaling, and an empty span (a constant
// series, a single point) is widened by a tenth of the value (by 1 around
// 0) so that the axis has a range and the point sits in its middle.
func layAxis(min, max float64, integer bool) axis {
	a := axis{}
	maxAbs := math.Max(math.Abs(min), math.Abs(max))
	if !integer && maxAbs > 0 && (maxAbs >= 1e6 || maxAbs < 1e-3) {
		a.exp = decimalExp(maxAbs)
	}
	lo, hi := a.scale(min), a.scale(max)
	if span := hi - lo; !(span > math.Max(math.Abs(lo), math.Abs(hi))*1e-9) {
		c := lo/2 + hi/2
		d := math.Abs(c) / 10
		if d == 0 {
			d = 1
		}
		lo, hi = c-d, c+d
		if min >= 0 && lo < 0 {
			lo = 0
		}
	}
	// The step: the smallest of 1, 2, 5 × 10^k that cuts [lo, hi] into at
	// most targetIntervals intervals. raw/10^k is in [1, 10), so 10 × 10^k
	// always does.
	raw := (hi - lo) / targetIntervals
	k := decimalExp(raw)
	m := 1.0
	for _, m = range []float64{1, 2, 5, 10} {
		if m*math.Pow10(k) >= raw*(1-1e-9) {
			break
		}
	}
	if m == 10 {
		m, k = 1, k+1
	}
	if integer && k < 0 {
		m, k = 1, 0
	}
	// tick is the i-th multiple of the step m × 10^k, computed so that it
	// is the float64 nearest its decimal label (i × m / 100, not
	// i × 0.01, which makes 2.2800000000000002 of 2.28).
	tick := func(i float64) float64 {
		if k < 0 {
			return i * m / math.Pow10(-k)
		}
		return i * m * math.Pow10(k)
	}
	decimals := 0
	if k < 0 {
		decimals = -k
	}
	// The tolerance keeps a value that is a tick, up to rounding (0.3/0.1
	// is 2.9999999999999996), from adding an interval beyond it.
	a.step = m * math.Pow10(k)
	first := math.Floor(lo/a.step + 1e-9)
	last := math.Ceil(hi/a.step - 1e-9)
	for i := 0; i <= int(last-first); i++ {
		v := tick(first+float64(i)) + 0 // +0: never a "-0"
		a.ticks = append(a.ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
	}
	a.lo, a.hi = a.ticks[0].Value, a.ticks[len(a.ticks)-1].Value
	return a
}

// decimalExp is the power of ten of v's leading digit (v > 0): 308 for
// 1.7e308, -324 for 5e-324. It reads it from the decimal form, which is
// exact, where math.Log10 is not for subnormal numbers.
func decimalExp(v float64) int {
	s := strconv.FormatFloat(v, 'e', -1, 64)
	e, _ := strconv.Atoi(s[strings.IndexByte(s, 'e')+1:])
	return e
}

// scale turns a value into drawn units: v / 10^exp, without overflow or
// loss to subnormal powers of ten.
func (a axis) scale(v float64) float64 {
	switch {
	case a.exp == 0:
		return v
	case a.exp < -290:
		return v * 1e300 / math.Pow10(a.exp+300)
	default:
		return v / math.Pow10(a.exp)
	}
}

// label is an axis label with the axis's scale, if any: "loss (×1e308)".
func (a axis) label(text string) string {
	if a.exp == 0 {
		return text
	}
	return fmt.Sprintf("%s (×1e%d)", text, a.exp)
}

// frame is the axes of one figure, laid out over all its series before
// any is drawn.
type frame struct {
	x, y axis
}

// newFrame lays out the axes over the finite points of every series in
// sets. It reports false when no series has a finite point.
func newFrame(integerX bool, sets ...plotter.XYs) (frame, bool) {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, xys := range sets {
		for _, p := range xys {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	if xmin > xmax {
		return frame{}, false
	}
	return frame{x: layAxis(xmin, xmax, integerX), y: layAxis(ymin, ymax, false)}, true
}

// points returns the finite points of xys in drawn units.
func (f frame) points(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, 0, len(xys))
	for _, p := range xys {
		if finite(p.X) && finite(p.Y) {
			out = append(out, plotter.XY{X: f.x.scale(p.X), Y: f.y.scale(p.Y)})
		}
	}
	return out
}

// apply sets p's ranges, ticks and the scale in its axis labels. It is
// called after every plotter is added, since adding one widens the
// ranges to its data.
func (f frame) apply(p *plot.Plot) {
	for _, ax := range []struct {
		a *plot.Axis
		l axis
	}{{&p.X, f.x}, {&p.Y, f.y}} {
		ax.a.Min, ax.a.Max = ax.l.lo, ax.l.hi
		ax.a.Tick.Marker = plot.ConstantTicks(ax.l.ticks)
		ax.a.Label.Text = ax.l.label(ax.a.Label.Text)
	}
}

// tickPos is a labelled tick as the image shows it: its label and its
// position in pixels from the image's top-left
// corner (a column for the x axis, a row for the y axis; the centre of a
// one-pixel line at row r is r+0.5).
type tickPos struct {
	Label string
	Pixel float64
}

// layout is where a figure's axes sit in the image that save writes:
// what a reader of the PNG sees.
type layout struct {
	X, Y   []tickPos
	YLabel string // the y axis's label, with its scale: "loss (×1e308)"
	// The data area, in pixels from the top-left corner.
	Left, Right, Top, Bottom float64
}

// layoutOf returns the layout of p drawn at figWidth×figHeight, as save
// draws it. p's axes must be set (frame.apply).
func layoutOf(p *plot.Plot) layout {
	c := vgimg.New(figWidth, figHeight)
	dc := p.DataCanvas(draw.New(c))
	toPx := func(l vg.Length) float64 { return float64(l) / float64(vg.Inch) * vgimg.DefaultDPI }
	h := toPx(figHeight)
	trX, trY := p.Transforms(&dc)
	lay := layout{
		Left: toPx(dc.Min.X), Right: toPx(dc.Max.X),
		Top: h - toPx(dc.Max.Y), Bottom: h - toPx(dc.Min.Y),
		YLabel: p.Y.Label.Text,
	}
	for _, t := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if t.Label != "" {
			lay.X = append(lay.X, tickPos{t.Label, toPx(trX(t.Value))})
		}
	}
	for _, t := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if t.Label != "" {
			lay.Y = append(lay.Y, tickPos{t.Label, h - toPx(trY(t.Value))})
		}
	}
	return lay
}
