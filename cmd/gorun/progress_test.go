package main

import (
	"bytes"
	"gorun/datasets"
	"gorun/engine/runner"
	"strings"
	"testing"
	"time"
)

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	p.epoch(runner.EpochInfo{Epoch: 2, Epochs: 3, Steps: 10, Samples: 640})
	for i := 1; i <= 9; i++ {
		p.step(runner.StepMetrics{Step: 10 + i, Loss: 0.25, Samples: 64})
		time.Sleep(15 * time.Millisecond)
	}
	time.Sleep(120 * time.Millisecond) // past the bar's redraw throttle
	p.step(runner.StepMetrics{Step: 20, Loss: 0.125, Samples: 64})
	out := b.String()
	for _, want := range []string{"epoch 2/3 loss 0.1250", "/640,", "samples/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q: %q", want, out)
		}
	}
	p.epochEnd(2)
	if p.bar != nil {
		t.Error("the bar outlives its epoch")
	}
	// A resumed epoch starts part-way.
	b.Reset()
	p.epoch(runner.EpochInfo{Epoch: 1, Epochs: 1, Samples: 100, Done: 60})
	time.Sleep(120 * time.Millisecond)
	p.step(runner.StepMetrics{Step: 7, Loss: 1, Samples: 10})
	if !strings.Contains(b.String(), "70/100") {
		t.Errorf("resumed bar: %q", b.String())
	}
}

// TestDataProgress: decoding a dataset prints a line at every tenth and
// one at the end off a terminal, and redraws one line, ended once, on a
// terminal.
func TestDataProgress(t *testing.T) {
	var b strings.Builder
	report := dataProgress(&b, false)
	for _, done := range []int{0, 50, 120, 130, 990, 1000, 1000} {
		report(datasets.Progress{What: "images:pics/train", Done: done, Total: 1000, Elapsed: time.Second})
	}
	want := "decoding images:pics/train: 120/1000 images (120/s)\n" +
		"decoding images:pics/train: 990/1000 images (990/s)\n" +
		"decoding images:pics/train: 1000/1000 images (1000/s)\n"
	if b.String() != want {
		t.Errorf("off a terminal:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	report = dataProgress(&b, true)
	for _, done := range []int{10, 1000, 1000} {
		report(datasets.Progress{What: "x", Done: done, Total: 1000, Elapsed: time.Second})
	}
	want = "\r\x1b[Kdecoding x: 10/1000 images (10/s)\r\x1b[Kdecoding x: 1000/1000 images (1000/s)\n"
	if b.String() != want {
		t.Errorf("on a terminal: %q, want %q", b.String(), want)
	}
}
