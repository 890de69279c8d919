package datasets

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"gorun/safetensors"
)

// The goldens of testdata/images/golden.safetensors are what torchvision
// 0.14 and PIL 9.4 make of the images next to them (gen_golden.py): read
// as ImageFolder reads a file, converted to grayscale for one channel,
// resized with transforms.Resize((H, W)).

// goldenDiff compares data.images' sample of one golden with it: the
// largest difference in grey levels and the mean absolute difference.
func goldenDiff(t *testing.T, name string, want safetensors.Tensor) (maxDiff int, meanDiff float64) {
	t.Helper()
	parts := strings.Split(name, "/") // file/C/HxW
	var c, h, w int
	if _, err := fmt.Sscanf(parts[1]+" "+parts[2], "%d %dx%d", &c, &h, &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	path := filepath.Join("testdata", "images", parts[0])
	b, err := ReadImageFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, c*h*w)
	if err := PrepareImage(ImagePrep{Height: h, Width: w, Channels: c}, path, b, got); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(want.Data) != len(got) {
		t.Fatalf("%s: golden of %d values, sample of %d", name, len(want.Data), len(got))
	}
	sum := 0
	for i := range got {
		d := int(got[i]) - int(want.Data[i])
		if d < 0 {
			d = -d
		}
		maxDiff = max(maxDiff, d)
		sum += d
	}
	return maxDiff, float64(sum) / float64(len(got))
}

// TestImagesMatchTorchvision holds data.images' decoding and resizing to
// torchvision's, in grey levels of 0–255:
//
//   - PNG, BMP, TIFF, lossless WebP and GIF, at their own size or resized
//     (to smaller, larger, wider and taller sizes): equal, to the bit
//     (resizing is Pillow's bilinear filter step for step, resample.go).
//   - JPEG: at most 3 apart, 0.05 on average (Go's integer IDCT is not
//     libjpeg-turbo's; chroma is upsampled and converted as libjpeg does,
//     without which a 4:2:0 JPEG is 14 apart).
func TestImagesMatchTorchvision(t *testing.T) {
	f, err := safetensors.ReadFile(filepath.Join("testdata", "images", "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Names()) < 80 {
		t.Fatalf("%d goldens, want the 80 gen_golden.py writes", len(f.Names()))
	}
	for _, name := range f.Names() {
		want, _ := f.Get(name)
		file := strings.Split(name, "/")[0]
		c, h, w := want.Shape[0], want.Shape[1], want.Shape[2]
		b, err := ReadImageFile(filepath.Join("testdata", "images", file))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := ImageConfig(file, b); err != nil {
			t.Fatal(err)
		}
		maxDiff, mean := goldenDiff(t, name, want)
		maxOK, meanOK := 0, 0.0
		if strings.HasSuffix(file, ".jpg") {
			maxOK, meanOK = 3, 0.05
		}
		t.Logf("%-24s max %d mean %.3f", name, maxDiff, mean)
		if maxDiff > maxOK || mean > meanOK {
			t.Errorf("%s (%d channels, %d×%d): %d grey levels apart at most, %.3f on average; want at most %d and %.2f",
				name, c, h, w, maxDiff, mean, maxOK, meanOK)
		}
	}
}
