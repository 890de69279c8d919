package datasets

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkImages decodes and resizes a folder of 3000 Fashion-MNIST PNGs
// (28×28 → 32×32, one channel, normalized) with data.images, and in the
// same run with torchvision's ImageFolder + DataLoader(num_workers = 2)
// (testdata/images/bench_imagefolder.py, Debian's python3-torchvision),
// and reports both rates and their ratio (x_torchvision, the issue wants
// 2 or more):
//
//	go test -bench Images -run '^$' ./datasets
func BenchmarkImages(b *testing.B) {
	dir := fashionPNGs(b, filepath.Join(b.TempDir(), "fashion-png"), 300, 0)
	const h, w = 32, 32
	// torchvision's rate: the better of a run before and a run after
	// data.images' (this machine's speed moves between seconds).
	var torchRate float64
	torch := func() {
		cmd := exec.Command("/usr/bin/python3", filepath.Join("testdata", "images", "bench_imagefolder.py"), dir, strconv.Itoa(h), strconv.Itoa(w), "1")
		out, err := cmd.Output()
		if err != nil {
			b.Logf("torchvision's side did not run (%v): no ratio", err)
			return
		}
		var r struct {
			Images  int
			Seconds float64
			Torch   string
		}
		if err := json.Unmarshal(out, &r); err != nil {
			b.Fatalf("bench_imagefolder.py: %v: %s", err, out)
		}
		torchRate = max(torchRate, float64(r.Images)/r.Seconds)
		b.Logf("torchvision (torch %s, DataLoader num_workers = 2): %d images in %.3fs", r.Torch, r.Images, r.Seconds)
	}
	torch()
	c := ImagesConfig{Dir: dir, Split: "train", Height: h, Width: w, Channels: 1, Mean: []float64{0.5}, Std: []float64{0.25}}
	if _, err := Images(c); err != nil { // the file cache warmed, as torchvision's first pass
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		ds, err := Images(c)
		if err != nil {
			b.Fatal(err)
		}
		n += ds.Len()
	}
	rate := float64(n) / b.Elapsed().Seconds()
	b.StopTimer()
	if torchRate > 0 {
		torch()
	}
	b.ReportMetric(rate, "images/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "goroutines")
	if torchRate > 0 {
		b.ReportMetric(torchRate, "torchvision_images/s")
		b.ReportMetric(rate/torchRate, "x_torchvision")
	}
}
