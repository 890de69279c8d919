package datasets

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// synth is a small synthetic MNIST-like split.
type synth struct {
	n, rows, cols int
	pixels        []byte
	labels        []byte
}

func newSynth(n, rows, cols int) synth {
	s := synth{n: n, rows: rows, cols: cols, pixels: make([]byte, n*rows*cols), labels: make([]byte, n)}
	for i := range s.pixels {
		if (i/16)%3 != 0 { // runs of background, as in real digits
			s.pixels[i] = byte(i*37 + i/7)
		}
	}
	for i := range s.labels {
		s.labels[i] = byte((i*3 + 1) % 10)
	}
	return s
}

// idxBytes encodes an IDX file: magic, dims, data.
func idxBytes(magic uint32, dims []uint32, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(data)
	return b.Bytes()
}

func (s synth) imagesFile() []byte {
	return idxBytes(2051, []uint32{uint32(s.n), uint32(s.rows), uint32(s.cols)}, s.pixels)
}

func (s synth) labelsFile() []byte {
	return idxBytes(2049, []uint32{uint32(s.n)}, s.labels)
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileNames returns the images and labels file names for a split prefix
// ("train" or "t10k") under a naming convention.
func fileNames(prefix string, dotted, gz bool) (images, labels string) {
	sep := "-"
	if dotted {
		sep = "."
	}
	images = prefix + "-images" + sep + "idx3-ubyte"
	labels = prefix + "-labels" + sep + "idx1-ubyte"
	if gz {
		images += ".gz"
		labels += ".gz"
	}
	return images, labels
}

// writeSplit writes s as the files of a split in dir.
func writeSplit(t testing.TB, dir, prefix string, s synth, dotted, gz bool) (imagesPath, labelsPath string) {
	t.Helper()
	in, ln := fileNames(prefix, dotted, gz)
	img, lbl := s.imagesFile(), s.labelsFile()
	if gz {
		img, lbl = gzipBytes(t, img), gzipBytes(t, lbl)
	}
	imagesPath, labelsPath = filepath.Join(dir, in), filepath.Join(dir, ln)
	writeFile(t, imagesPath, img)
	writeFile(t, labelsPath, lbl)
	return imagesPath, labelsPath
}

func TestMNISTSynthetic(t *testing.T) {
	for _, gz := range []bool{false, true} {
		for _, dotted := range []bool{false, true} {
			for _, split := range []string{"train", "test"} {
				name := split
				if gz {
					name += "/gz"
				}
				if dotted {
					name += "/dotted"
				}
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					prefix := map[string]string{"train": "train", "test": "t10k"}[split]
					s := newSynth(7, 3, 5)
					writeSplit(t, dir, prefix, s, dotted, gz)
					const mean, std = 0.25, 0.5
					d, err := MNIST(split, dir, mean, std)
					if err != nil {
						t.Fatal(err)
					}
					checkSynth(t, d, s, "mnist/"+split, mean, std)
				})
			}
		}
	}
}

// checkSynth checks that d holds s, normalized with mean and std.
func checkSynth(t *testing.T, d Dataset, s synth, name string, mean, std float64) {
	t.Helper()
	if got := d.Name(); got != name {
		t.Errorf("Name() = %q, want %q", got, name)
	}
	if got := d.Len(); got != s.n {
		t.Fatalf("Len() = %d, want %d", got, s.n)
	}
	if got, want := d.SampleShape(), []int{1, s.rows, s.cols}; !equalInts(got, want) {
		t.Errorf("SampleShape() = %v, want %v", got, want)
	}
	if got := d.NumClasses(); got != 10 {
		t.Errorf("NumClasses() = %d, want 10", got)
	}
	if got := SampleSize(d); got != s.rows*s.cols {
		t.Errorf("SampleSize = %d, want %d", got, s.rows*s.cols)
	}
	labels := d.Labels()
	for i, l := range labels {
		if l != int32(s.labels[i]) {
			t.Fatalf("Labels()[%d] = %d, want %d", i, l, s.labels[i])
		}
	}
	// Fill every sample, in reverse order, into an oversized buffer.
	S := s.rows * s.cols
	idx := make([]int, s.n)
	for i := range idx {
		idx[i] = s.n - 1 - i
	}
	x := make([]float32, s.n*S+3)
	y := make([]int32, s.n+1)
	x[len(x)-1], y[len(y)-1] = 42, 42
	d.Fill(idx, x, y)
	m, sd := float32(mean), float32(std)
	for i, k := range idx {
		if y[i] != int32(s.labels[k]) {
			t.Fatalf("y[%d] = %d, want label of sample %d = %d", i, y[i], k, s.labels[k])
		}
		for j := 0; j < S; j++ {
			want := (float32(s.pixels[k*S+j])/255 - m) / sd
			if got := x[i*S+j]; got != want {
				t.Fatalf("x[%d] (sample %d value %d) = %v, want %v", i*S+j, k, j, got, want)
			}
		}
	}
	if x[len(x)-1] != 42 || y[len(y)-1] != 42 {
		t.Errorf("Fill wrote past the batch")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMNISTNormalizationMatchesTorchvision(t *testing.T) {
	// torchvision: ToTensor gives p/255 in float32; Normalize subtracts the
	// float32 mean and divides by the float32 std.
	dir := t.TempDir()
	s := synth{n: 1, rows: 16, cols: 16, pixels: make([]byte, 256), labels: []byte{3}}
	for i := range s.pixels {
		s.pixels[i] = byte(i)
	}
	writeSplit(t, dir, "train", s, false, false)
	d, err := MNIST("train", dir, MNISTMean, MNISTStd)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 256)
	y := make([]int32, 1)
	d.Fill([]int{0}, x, y)
	if x[0] != (0-float32(0.1307))/float32(0.3081) {
		t.Errorf("pixel 0 -> %v", x[0])
	}
	if got, want := x[255], (1-float32(0.1307))/float32(0.3081); got != want {
		t.Errorf("pixel 255 -> %v, want %v", got, want)
	}
	for p := 1; p < 256; p++ {
		if !(x[p] > x[p-1]) {
			t.Fatalf("normalization not increasing at %d: %v then %v", p, x[p-1], x[p])
		}
	}
	// mean 0, std 1: plain p/255.
	d, err = MNIST("train", dir, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.Fill([]int{0}, x, y)
	for p := range 256 {
		if want := float32(p) / 255; x[p] != want {
			t.Fatalf("mean 0 std 1: pixel %d -> %v, want %v", p, x[p], want)
		}
	}
}

func TestMNISTPrefersGzipDashedName(t *testing.T) {
	// With several conventions present, the first of the documented order
	// wins: here the dashed .gz files hold 4 samples, the others 2.
	dir := t.TempDir()
	writeSplit(t, dir, "train", newSynth(2, 2, 2), true, false)
	writeSplit(t, dir, "train", newSynth(4, 2, 2), false, true)
	d, err := MNIST("train", dir, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 4 {
		t.Errorf("Len() = %d, want 4 (from the .gz files)", d.Len())
	}
}

func TestMNISTLargerSample(t *testing.T) {
	// A sample size that is not a multiple of 8 and larger than MNIST's.
	dir := t.TempDir()
	s := newSynth(3, 31, 33)
	writeSplit(t, dir, "t10k", s, false, true)
	d, err := MNIST("test", dir, 0.5, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	checkSynth(t, d, s, "mnist/test", 0.5, 0.25)
}

func TestMNISTErrors(t *testing.T) {
	good := newSynth(5, 4, 4)
	truncate := func(b []byte, n int) []byte { return b[:len(b)-n] }
	// corruptCRC flips a bit of the gzip CRC-32 trailer.
	corruptCRC := func(b []byte) []byte {
		c := bytes.Clone(b)
		c[len(c)-8] ^= 1
		return c
	}
	badMagic := good.imagesFile()
	binary.BigEndian.PutUint32(badMagic, 2049)
	notIDX := good.imagesFile()
	binary.BigEndian.PutUint32(notIDX, 0x89504e47) // PNG
	wrongDims := good.labelsFile()
	binary.BigEndian.PutUint32(wrongDims, 0x0802)
	zeroRows := idxBytes(2051, []uint32{5, 0, 4}, nil)
	huge := idxBytes(2051, []uint32{1 << 30, 1 << 10, 1 << 10}, good.pixels)
	badLabels := bytes.Clone(good.labels)
	badLabels[3] = 10
	fewerLabels := idxBytes(2049, []uint32{4}, good.labels[:4])

	tests := []struct {
		name    string
		images  []byte // nil: good, gzipped as gz says
		labels  []byte
		gz      bool
		file    string // the file the message must name: "images" or "labels"
		message []string
	}{
		{name: "bad images magic", images: badMagic, file: "images",
			message: []string{"bad magic number 2049 (0x00000801) (that of a labels file): want 2051 (0x00000803) for an IDX images file"}},
		{name: "bad labels magic", labels: good.imagesFile(), file: "labels",
			message: []string{"bad magic number 2051", "(that of an images file)", "want 2049"}},
		{name: "not an IDX file", images: notIDX, file: "images",
			message: []string{"bad magic number", "(not an IDX file)"}},
		{name: "wrong number of dimensions", labels: wrongDims, file: "labels",
			message: []string{"bad magic number 2050", "(an IDX file of 2 dimensions)"}},
		{name: "truncated header", images: good.imagesFile()[:10], file: "images",
			message: []string{"truncated: the file ends inside the 16-byte IDX header, after 10 bytes"}},
		{name: "empty labels file", labels: []byte{}, file: "labels",
			message: []string{"truncated: the file ends inside the 8-byte IDX header, after 0 bytes"}},
		{name: "truncated images", images: truncate(good.imagesFile(), 3), file: "images",
			message: []string{"truncated: the header declares 5 images of 4x4 (80 bytes of data) but the data ends after 77 bytes"}},
		{name: "truncated labels", labels: truncate(good.labelsFile(), 1), file: "labels",
			message: []string{"truncated: the header declares 5 labels (5 bytes of data) but the data ends after 4 bytes"}},
		{name: "truncated gzip images", images: truncate(gzipBytes(t, good.imagesFile()), 20), gz: true, file: "images",
			message: []string{"truncated"}},
		{name: "gzip checksum", images: corruptCRC(gzipBytes(t, good.imagesFile())), gz: true, file: "images",
			message: []string{"corrupt gzip data", "checksum"}},
		{name: "not gzip", images: []byte{0x1f, 0x8b, 0, 0, 0}, gz: true, file: "images",
			message: []string{"not a valid gzip file"}},
		{name: "trailing data", images: append(good.imagesFile(), 0), file: "images",
			message: []string{"unexpected data after the 5 images of 4x4 the header declares (80 bytes)"}},
		{name: "zero rows", images: zeroRows, file: "images",
			message: []string{"the header gives 0 rows per sample"}},
		{name: "implausible size", images: huge, file: "images",
			message: []string{"the header declares 1073741824 images of 1024x1024", "more than the 2147483647 allowed"}},
		{name: "mismatched counts", labels: fewerLabels, file: "images",
			message: []string{"holds 5 images but", "holds 4 labels"}},
		{name: "label out of range", labels: idxBytes(2049, []uint32{5}, badLabels), file: "labels",
			message: []string{"label 10 of sample 3 is out of range [0, 10)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in, ln := fileNames("train", false, tc.gz)
			img, lbl := good.imagesFile(), good.labelsFile()
			if tc.gz {
				img, lbl = gzipBytes(t, img), gzipBytes(t, lbl)
			}
			if tc.images != nil {
				img = tc.images
			}
			if tc.labels != nil {
				lbl = tc.labels
			}
			writeFile(t, filepath.Join(dir, in), img)
			writeFile(t, filepath.Join(dir, ln), lbl)
			d, err := MNIST("train", dir, 0, 1)
			if err == nil {
				t.Fatalf("no error; got a dataset of %d samples", d.Len())
			}
			msg := err.Error()
			t.Log(msg)
			file := map[string]string{"images": in, "labels": ln}[tc.file]
			if !strings.Contains(msg, filepath.Join(dir, file)) {
				t.Errorf("message does not name the %s file %s", tc.file, file)
			}
			for _, m := range tc.message {
				if !strings.Contains(msg, m) {
					t.Errorf("message lacks %q", m)
				}
			}
		})
	}
}

func TestMNISTArgumentErrors(t *testing.T) {
	dir := t.TempDir()
	writeSplit(t, dir, "train", newSynth(2, 2, 2), false, false)
	tests := []struct {
		name, split, dir string
		mean, std        float64
		message          []string
	}{
		{"unknown split", "validation", dir, 0, 1, []string{`unknown split "validation"`, `want "train" or "test"`}},
		{"zero std", "train", dir, 0, 0, []string{"mnist/train", "std 0 must be a positive finite number"}},
		{"negative std", "train", dir, 0, -1, []string{"std -1 must be"}},
		{"NaN mean", "train", dir, nanValue(), 1, []string{"mean NaN is not a finite number"}},
		{"missing folder", "train", filepath.Join(dir, "nope"), 0, 1, []string{"data folder", filepath.Join(dir, "nope"), "no such file"}},
		{"missing files", "test", dir, 0, 1, []string{
			"mnist/test: no t10k-images file in " + dir,
			"tried t10k-images-idx3-ubyte.gz, t10k-images-idx3-ubyte, t10k-images.idx3-ubyte.gz, t10k-images.idx3-ubyte"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MNIST(tc.split, tc.dir, tc.mean, tc.std)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, m := range tc.message {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message lacks %q", m)
				}
			}
		})
	}

	// A missing labels file next to a good images file.
	dir2 := t.TempDir()
	in, _ := fileNames("train", true, false)
	writeFile(t, filepath.Join(dir2, in), newSynth(2, 2, 2).imagesFile())
	_, err := MNIST("train", dir2, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "no train-labels file") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing labels file: got %v, want a 'no train-labels file' error wrapping fs.ErrNotExist", err)
	}
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}
