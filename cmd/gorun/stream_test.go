package main

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamedImagesNotice: a data.images set over the cluster's
// memory_limit trains, streamed from disk, and gorun says so once on
// stderr (nothing with -q).
func TestStreamedImagesNotice(t *testing.T) {
	dir := t.TempDir()
	for c := range 3 {
		cdir := filepath.Join(dir, fmt.Sprintf("c%d", c))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			img := image.NewGray(image.Rect(0, 0, 10, 10))
			for j := range img.Pix {
				img.Pix[j] = byte((j*31+i*7)%90 + 60*c)
			}
			f, err := os.Create(filepath.Join(cdir, fmt.Sprintf("%03d.png", i)))
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	src := fmt.Sprintf(`
train(
    model = nn.sequential(nn.flatten(), nn.linear(576, 3, name = "fc"), nn.log_softmax()),
    loss = "nll",
    data = data.images(%q, size = 24, channels = 1, test_fraction = 0.2),
    eval = data.images(%q, size = 24, channels = 1, test_fraction = 0.2, split = "test"),
    optimizer = optim.sgd(lr = 0.05),
    batch_size = 30,
    epochs = 1,
    seed = 1,
)
`, dir, dir)
	script := writeScript(t, src)
	code, stdout, stderr := gorun(t, script, "--set", "cluster.memory_limit=256KiB", "--out", filepath.Join(t.TempDir(), "run"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := "data.images: images:" + filepath.Base(dir) + "/train: 480 images decode to 270 KiB (576 bytes each), more than the cluster's memory_limit (256 KiB): streamed from disk"
	if strings.Count(stderr, want) != 1 || strings.Count(stderr, "streamed from disk") != 1 {
		t.Errorf("stderr says %q; want once %q", stderr, want)
	}
	code, _, stderr = gorun(t, script, "--set", "cluster.memory_limit=256KiB", "-q")
	if code != 0 || strings.Contains(stderr, "streamed") {
		t.Errorf("-q: exit %d, stderr %q", code, stderr)
	}
}
