//go:build cuda

package cuda

import (
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/datasets"
)

// TestLoadDataRefusesStreamed: a data.images set streamed from disk (over
// its memory limit) is refused by the cuda backend, which holds a dataset
// whole in GPU memory, before anything reaches the GPU, saying what to do
// instead.
func TestLoadDataRefusesStreamed(t *testing.T) {
	dir := t.TempDir()
	for _, class := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, class), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, class, "1.png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, image.NewGray(image.Rect(0, 0, 4, 4))); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	ds, err := datasets.Images(datasets.ImagesConfig{Dir: dir, Split: "train", Channels: 1, MemoryLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Device{index: 0}).LoadData(ds)
	if err == nil || !strings.Contains(err.Error(), "data.images would stream it from disk, which the cuda backend does not do") ||
		!strings.Contains(err.Error(), `raise the cluster's memory_limit`) {
		t.Errorf("LoadData of a streamed set: %v", err)
	}
}
