package datasets

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gorun/datasets/userfile"
)

// The mean and standard deviation of MNIST's training pixels scaled to
// [0, 1]: the values of torchvision's customary
// Normalize((0.1307,), (0.3081,)).
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// mnistClasses is the number of classes of MNIST (the digits 0-9) and of
// Fashion-MNIST.
const mnistClasses = 10

// MNIST reads one split of MNIST ("train": 60000 samples, "test": 10000)
// from the four standard IDX files in dir, gzipped or not, under either
// naming convention (train-images-idx3-ubyte or train-images.idx3-ubyte,
// with or without .gz; t10k-… for the test split). dir == "" means
// MNISTDefaultDir().
//
// Samples have shape [1 rows cols] ([1 28 28] for MNIST) and Fill writes
// each pixel p as (p/255 − mean)/std, computed in float32 exactly as
// torchvision's ToTensor followed by Normalize((mean,), (std,)) does; pass
// MNISTMean and MNISTStd for the usual normalization, or 0 and 1 for plain
// p/255.
func MNIST(split, dir string, mean, std float64) (Dataset, error) {
	return openIDXSplit(idxSource{name: "mnist", defaultDir: MNISTDefaultDir}, split, dir, mean, std)
}

// idxSource is a dataset in MNIST's layout: four IDX files of unsigned
// bytes, train-… and t10k-… images and labels, ten classes.
type idxSource struct {
	name       string                 // "mnist", "fashion-mnist"
	defaultDir func() (string, error) // the folder used when dir is ""
	// fix, when set, is appended to the error for a missing folder or file:
	// how to get the files.
	fix string
}

// openIDXSplit reads one split of an MNIST-layout dataset: the work of
// MNIST and FashionMNIST.
func openIDXSplit(src idxSource, split, dir string, mean, std float64) (Dataset, error) {
	var prefix string
	switch split {
	case "train":
		prefix = "train"
	case "test":
		prefix = "t10k"
	default:
		return nil, fmt.Errorf("datasets: %s: unknown split %q: want \"train\" or \"test\"", src.name, split)
	}
	name := src.name + "/" + split
	if math.IsNaN(mean) || math.IsInf(mean, 0) {
		return nil, fmt.Errorf("datasets: %s: normalization mean %v is not a finite number", name, mean)
	}
	if !(std > 0) || math.IsInf(std, 0) {
		return nil, fmt.Errorf("datasets: %s: normalization std %v must be a positive finite number", name, std)
	}
	if dir == "" {
		d, err := src.defaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	missing := func(err error) error {
		if src.fix != "" {
			return fmt.Errorf("%w\nfix: %s", err, src.fix)
		}
		return err
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, missing(fmt.Errorf("datasets: %s: data folder: %w", name, err))
	} else if !st.IsDir() {
		return nil, fmt.Errorf("datasets: %s: data folder %s is not a folder", name, dir)
	}

	imgPath, err := findIDX(name, dir, prefix+"-images", "idx3-ubyte")
	if err != nil {
		return nil, missing(err)
	}
	lblPath, err := findIDX(name, dir, prefix+"-labels", "idx1-ubyte")
	if err != nil {
		return nil, missing(err)
	}

	// The labels file is tiny; read it alongside the images.
	type result struct {
		f   *idxFile
		err error
	}
	lblc := make(chan result, 1)
	go func() {
		f, err := readIDX(lblPath, idxLabels)
		lblc <- result{f, err}
	}()
	img, err := readIDX(imgPath, idxImages)
	lr := <-lblc
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	if lr.err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, lr.err)
	}
	lbl := lr.f

	n := img.dims[0]
	if lbl.dims[0] != n {
		return nil, fmt.Errorf("datasets: %s: %s holds %d images but %s holds %d labels",
			name, imgPath, n, lblPath, lbl.dims[0])
	}
	labels := make([]int32, n)
	for i, b := range lbl.data {
		if b >= mnistClasses {
			return nil, fmt.Errorf("datasets: %s: %s: label %d of sample %d is out of range [0, %d)",
				name, lblPath, b, i, mnistClasses)
		}
		labels[i] = int32(b)
	}
	return newImageSet(name, img.data, labels, []int{1, img.dims[1], img.dims[2]}, mnistClasses, mean, std), nil
}

// findIDX returns the path of the first file in dir named stem-kind or
// stem.kind, with or without .gz.
func findIDX(name, dir, stem, kind string) (string, error) {
	cands := []string{
		stem + "-" + kind + ".gz",
		stem + "-" + kind,
		stem + "." + kind + ".gz",
		stem + "." + kind,
	}
	for _, c := range cands {
		p := filepath.Join(dir, c)
		_, err := userfile.Check(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			// Another kind of file (a FIFO, a folder) under that name.
			return "", fmt.Errorf("datasets: %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("datasets: %s: no %s file in %s (tried %s): %w",
		name, stem, dir, strings.Join(cands, ", "), fs.ErrNotExist)
}

// imageSet is a dataset of byte-valued samples normalized on the fly,
// channel by channel.
type imageSet struct {
	name    string
	pixels  []byte // n samples of size values each
	labels  []int32
	shape   []int
	size    int
	classes int
	plane   int            // values per channel: size / len(luts)
	luts    [][256]float32 // per channel: byte value -> normalized float32
	// classNames and prep are data.images' class folders and how its
	// files became samples (nil for other data).
	classNames []string
	prep       *ImageMeta
	// stream, when set, reads the samples from disk as they are filled
	// (pixels is nil): data.images over its memory budget (stream.go).
	stream *imageStream
}

func newImageSet(name string, pixels []byte, labels []int32, shape []int, classes int, mean, std float64) *imageSet {
	return newImageSetChannels(name, pixels, labels, shape, classes, []float64{mean}, []float64{std})
}

// newImageSetChannels is an imageSet whose samples are len(mean) planes
// (channels), channel c normalized with mean[c] and std[c].
func newImageSetChannels(name string, pixels []byte, labels []int32, shape []int, classes int, mean, std []float64) *imageSet {
	d := &imageSet{name: name, pixels: pixels, labels: labels, shape: shape, classes: classes}
	d.size = 1
	for _, s := range shape {
		d.size *= s
	}
	d.plane = d.size / len(mean)
	d.luts = make([][256]float32, len(mean))
	// As torchvision: ToTensor divides by 255 in float32, Normalize then
	// subtracts the mean and divides by the std, also in float32.
	for c := range mean {
		m, s := float32(mean[c]), float32(std[c])
		for p := range d.luts[c] {
			v := float32(p) / 255
			d.luts[c][p] = (v - m) / s
		}
	}
	return d
}

func (d *imageSet) Name() string       { return d.name }
func (d *imageSet) Len() int           { return len(d.labels) }
func (d *imageSet) SampleShape() []int { return d.shape }
func (d *imageSet) NumClasses() int    { return d.classes }
func (d *imageSet) Labels() []int32    { return d.labels[:len(d.labels):len(d.labels)] }

func (d *imageSet) Fill(idx []int, x []float32, y []int32) {
	s := d.size
	if len(x) < len(idx)*s || len(y) < len(idx) {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d and len(y) >= %d, got %d and %d",
			d.name, len(idx), len(idx)*s, len(idx), len(x), len(y)))
	}
	for i, k := range idx {
		if uint(k) >= uint(len(d.labels)) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", d.name, k, len(d.labels)))
		}
		d.fillOne(k, x[i*s:(i+1)*s], &y[i])
	}
}

// fillOne writes sample k (which must be in range) into x (len size).
func (d *imageSet) fillOne(k int, x []float32, y *int32) {
	if d.stream != nil {
		d.stream.fill(d, k, x)
	} else {
		d.fillPixels(x, d.pixels[k*d.size:(k+1)*d.size])
	}
	*y = d.labels[k]
}

// fillPixels writes one sample's bytes px, normalized, into x.
func (d *imageSet) fillPixels(x []float32, px []byte) {
	for c := range d.luts {
		lo := c * d.plane
		fillPlane(x[lo:lo+d.plane], px[lo:lo+d.plane], &d.luts[c])
	}
}

// fillPlane writes lut[src[j]] into dst[j] for every j.
func fillPlane(dst []float32, src []byte, lut *[256]float32) {
	dst = dst[:len(src)]
	zero := lut[0]
	j := 0
	for ; j+8 <= len(src); j += 8 {
		w := binary.LittleEndian.Uint64(src[j:])
		b := dst[j : j+8 : j+8]
		if w == 0 {
			// Mostly background: MNIST is about 80% zeros.
			b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7] = zero, zero, zero, zero, zero, zero, zero, zero
			continue
		}
		b[0] = lut[byte(w)]
		b[1] = lut[byte(w>>8)]
		b[2] = lut[byte(w>>16)]
		b[3] = lut[byte(w>>24)]
		b[4] = lut[byte(w>>32)]
		b[5] = lut[byte(w>>40)]
		b[6] = lut[byte(w>>48)]
		b[7] = lut[byte(w>>56)]
	}
	for ; j < len(src); j++ {
		dst[j] = lut[src[j]]
	}
}
