package datasets

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realFashion loads a split of Fashion-MNIST from Debian's package, or
// skips the test when it is not installed.
func realFashion(t testing.TB, split string) Dataset {
	t.Helper()
	if _, err := os.Stat(FashionMNISTDir); err != nil {
		t.Skipf("SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	d, err := FashionMNIST(split, "", FashionMNISTMean, FashionMNISTStd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFashionMNISTReal(t *testing.T) {
	for _, tc := range []struct {
		split    string
		n, per   int
		first    int32
		mean, sd float64
	}{
		// Every class has 6000 training and 1000 test images. The first
		// labels are those of the files' first images (an ankle boot, 9,
		// in the training set; an ankle boot, 9, in the test set).
		{"train", 60000, 6000, 9, FashionMNISTMean, FashionMNISTStd},
		{"test", 10000, 1000, 9, 0.2868, 0.3524},
	} {
		d := realFashion(t, tc.split)
		checkReal(t, d, "fashion-mnist/"+tc.split, tc.n, tc.first,
			[10]int{tc.per, tc.per, tc.per, tc.per, tc.per, tc.per, tc.per, tc.per, tc.per, tc.per})
		// Plain p/255: the split's pixel statistics.
		raw, err := FashionMNIST(tc.split, "", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		mean, std := pixelStats(raw)
		t.Logf("%s: pixel mean %.4f, std %.4f", tc.split, mean, std)
		if math.Abs(mean-tc.mean) > 5e-4 || math.Abs(std-tc.sd) > 5e-4 {
			t.Errorf("%s: pixel mean %.4f and std %.4f, want %.4f and %.4f", tc.split, mean, std, tc.mean, tc.sd)
		}
	}
}

func TestFashionMNISTDir(t *testing.T) {
	// The same reader as MNIST's: a folder of IDX files.
	dir := t.TempDir()
	s := newSynth(6, 28, 28)
	writeSplit(t, dir, "t10k", s, false, true)
	d, err := FashionMNIST("test", dir, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkSynth(t, d, s, "fashion-mnist/test", 0, 1)

	// Missing files or folder: the message names the package.
	for _, missing := range []string{t.TempDir(), filepath.Join(dir, "nope")} {
		_, err := FashionMNIST("train", missing, FashionMNISTMean, FashionMNISTStd)
		if err == nil {
			t.Fatal("no error")
		}
		t.Log(err)
		if !strings.Contains(err.Error(), "apt-get install dataset-fashion-mnist") || !errors.Is(err, fs.ErrNotExist) ||
			!strings.Contains(err.Error(), "fashion-mnist/train") {
			t.Errorf("missing files: %v; want it to name the package and wrap fs.ErrNotExist", err)
		}
	}
	if _, err := FashionMNIST("val", dir, 0, 1); err == nil || !strings.Contains(err.Error(), `fashion-mnist: unknown split "val"`) {
		t.Errorf("bad split: %v", err)
	}
}
