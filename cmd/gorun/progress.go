package main

import (
	"fmt"
	"gorun/datasets"
	"gorun/engine/runner"
	"io"
	"math"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal (a progress bar makes sense).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress draws a bar per epoch, counting samples, with the loss, the
// speed and the time left. It is used only on a terminal; elsewhere the
// engine's one line per epoch is the output.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	title string
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) epoch(e runner.EpochInfo) {
	p.title = fmt.Sprintf("epoch %d/%d", e.Epoch, e.Epochs)
	p.bar = progressbar.NewOptions64(e.Samples,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(p.title),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("samples"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100_000_000), // 100ms
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	)
	if e.Done > 0 {
		p.bar.Set64(e.Done)
	}
}

func (p *progress) step(m runner.StepMetrics) {
	if p.bar == nil {
		return
	}
	if m.Step%10 == 0 || m.SkippedSteps == 1 && math.IsNaN(m.Loss) {
		desc := fmt.Sprintf("%s loss %.4f", p.title, m.Loss)
		if m.SkippedSteps > 0 {
			desc += fmt.Sprintf(", %d steps skipped (non-finite)", m.SkippedSteps)
		}
		p.bar.Describe(desc)
	}
	p.bar.Add(m.Samples)
}

func (p *progress) epochEnd(int) {
	if p.bar != nil {
		p.bar.Finish()
		p.bar.Clear()
		p.bar = nil
	}
}

// dataProgress reports the decoding of a dataset (data.images) before
// step 1 on w: one line redrawn in place on a terminal, else (with -v) a
// line at every tenth and at the end.
func dataProgress(w io.Writer, terminal bool) func(datasets.Progress) {
	lastTenth, finished := map[string]int{}, map[string]bool{}
	return func(p datasets.Progress) {
		rate := float64(p.Done) / max(p.Elapsed.Seconds(), 1e-9)
		line := fmt.Sprintf("decoding %s: %d/%d images (%.0f/s)", p.What, p.Done, p.Total, rate)
		if finished[p.What] {
			return
		}
		if terminal {
			end := ""
			if p.Done == p.Total {
				end, finished[p.What] = "\n", true
			}
			fmt.Fprintf(w, "\r\x1b[K%s%s", line, end)
			return
		}
		tenth := p.Done * 10 / max(p.Total, 1)
		if p.Done == p.Total {
			finished[p.What] = true
		} else if tenth <= lastTenth[p.What] {
			return
		}
		lastTenth[p.What] = tenth
		fmt.Fprintln(w, line)
	}
}
