// Package datasets reads labelled training data into memory and hands it
// to the training loop one batch at a time.
//
// datasets belongs to the data-loading step at run time: the runner
// (engine/runner) opens the datasets a Spec names once, before the first
// step (Load), and a device then fills every batch from them. Before that,
// the compiler (engine.Compile) asks Describe for their sample shapes and
// targets, which reads headers and folder listings only (data.text and
// data.csv read their text: their shapes and classes are in it); it never
// decodes images. Every switch over the Spec's data kinds (data.mnist,
// data.tensors, data.text, data.images, data.csv, …) and transforms is in
// load.go. What a trained model must keep of its data (class names, how
// an image or a table row became a sample) is Metadata (meta.go).
//
// Opening a dataset (MNIST, MNISTDefaultDir) reports every problem as an
// error, never a panic: a missing folder or file, a bad magic number, a
// truncated or corrupt file, counts that do not match, a label out of
// range. Each message names the file and says what is wrong with it and,
// where there is one, how to fix it. Fill, which runs on the hot path, does
// not return errors: indices out of range or buffers too small are
// programming errors and panic, the way a slice index out of range does.
//
// A Dataset is immutable once opened and safe for concurrent use: several
// workers may call Fill on the same Dataset at once.
//
// A data.images set whose decoded images exceed its memory budget is not
// held in memory but streamed from disk (stream.go): its Fill reads and
// decodes each sample (allocating as decoding does, and panicking on a
// file it cannot decode), unless a Prefetcher, given the order of the
// Fill calls to come, decoded them ahead; a Prefetcher's Fill reports
// such a file through Prefetcher.Err instead.
package datasets

import "fmt"

// Dataset is an in-memory labelled dataset of fixed-shape samples.
//
// Implementations are immutable and safe for concurrent use.
type Dataset interface {
	// Name identifies the dataset in messages and metrics, e.g. "mnist/train".
	Name() string
	// Len is the number of samples.
	Len() int
	// SampleShape is the shape of one sample, e.g. [1 28 28] for MNIST
	// (channels, height, width). The caller must not modify it.
	SampleShape() []int
	// NumClasses is the number of classes; every label is in [0,
	// NumClasses), or below 0: not a class, but a target a loss's
	// ignore_index may skip (Negatives; data.tensors only).
	NumClasses() int
	// Labels returns all labels, in sample order (len Len()). The slice is
	// shared and read-only.
	Labels() []int32
	// Fill writes sample idx[i] into x[i*S:(i+1)*S], where S is the product
	// of SampleShape, as float32, and its label into y[i], for every i. It
	// never allocates. It panics if an index is out of [0, Len()), if
	// len(x) < len(idx)*S or if len(y) < len(idx).
	Fill(idx []int, x []float32, y []int32)
}

// SampleSize is the number of values in one sample of d: the product of
// d.SampleShape().
func SampleSize(d Dataset) int {
	n := 1
	for _, s := range d.SampleShape() {
		n *= s
	}
	return n
}

// Subset returns a view of the first n samples of d; n larger than d.Len()
// is clamped to d.Len(). It copies nothing. Subset panics if n is negative.
func Subset(d Dataset, n int) Dataset {
	if n < 0 {
		panic(fmt.Sprintf("datasets.Subset(%s, %d): negative size", d.Name(), n))
	}
	if n >= d.Len() {
		return d
	}
	switch d := d.(type) {
	case *regressionSet:
		return d.subset(n)
	case *textSet:
		return d.subset(n)
	case *tokenTensors:
		c := *d
		c.x, c.y, c.name = d.x[:n*d.t], d.y[:n*d.t], fmt.Sprintf("%s[:%d]", d.name, n)
		return &c
	}
	if p, ok := d.(*prefix); ok {
		d = p.base
	}
	return &prefix{base: d, n: n, labels: d.Labels()[:n:n]}
}

// prefix is the first n samples of base.
type prefix struct {
	base   Dataset
	n      int
	labels []int32
}

func (p *prefix) Name() string       { return fmt.Sprintf("%s[:%d]", p.base.Name(), p.n) }
func (p *prefix) Len() int           { return p.n }
func (p *prefix) SampleShape() []int { return p.base.SampleShape() }
func (p *prefix) NumClasses() int    { return p.base.NumClasses() }
func (p *prefix) Labels() []int32    { return p.labels }

func (p *prefix) Fill(idx []int, x []float32, y []int32) {
	for _, k := range idx {
		if uint(k) >= uint(p.n) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", p.Name(), k, p.n))
		}
	}
	p.base.Fill(idx, x, y)
}

// View returns the dataset whose sample i is sample idx[i] of d. The index
// list is copied, so the caller may reuse it; indices may repeat. It returns
// an error naming the first index outside [0, d.Len()).
func View(d Dataset, idx []int) (Dataset, error) {
	n := d.Len()
	// A view of a view indexes the underlying dataset directly.
	var outer []int
	if v, ok := d.(*view); ok {
		outer, d = v.idx, v.base
	}
	m := make([]int, len(idx))
	labels := make([]int32, len(idx))
	base := d.Labels()
	for i, k := range idx {
		if uint(k) >= uint(n) {
			return nil, fmt.Errorf("datasets: view of %s: index %d (position %d) out of range [0, %d)", d.Name(), k, i, n)
		}
		if outer != nil {
			k = outer[k]
		}
		m[i] = k
		labels[i] = base[k]
	}
	return &view{base: d, idx: m, labels: labels, size: SampleSize(d)}, nil
}

// view is base seen through an index list.
type view struct {
	base   Dataset
	idx    []int // view position -> base index
	labels []int32
	size   int // values per sample
}

func (v *view) Name() string {
	return fmt.Sprintf("%s[%d indices]", v.base.Name(), len(v.idx))
}
func (v *view) Len() int           { return len(v.idx) }
func (v *view) SampleShape() []int { return v.base.SampleShape() }
func (v *view) NumClasses() int    { return v.base.NumClasses() }
func (v *view) Labels() []int32    { return v.labels }

func (v *view) Fill(idx []int, x []float32, y []int32) {
	s := v.size
	if len(x) < len(idx)*s || len(y) < len(idx) {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d and len(y) >= %d, got %d and %d",
			v.Name(), len(idx), len(idx)*s, len(idx), len(x), len(y)))
	}
	if b, ok := v.base.(*imageSet); ok {
		for i, k := range idx {
			if uint(k) >= uint(len(v.idx)) {
				panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", v.Name(), k, len(v.idx)))
			}
			b.fillOne(v.idx[k], x[i*s:(i+1)*s], &y[i])
		}
		return
	}
	// Any other Dataset: one sample at a time, through a one-element window
	// on the (heap) index list, so nothing is allocated.
	for i, k := range idx {
		if uint(k) >= uint(len(v.idx)) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", v.Name(), k, len(v.idx)))
		}
		v.base.Fill(v.idx[k:k+1], x[i*s:(i+1)*s], y[i:i+1])
	}
}
