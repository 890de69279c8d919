package datasets

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// What a model trained on a dataset must know of it to be used later
// (gorun sample, gorun predict, the model package): the names of its
// classes, how an image file became a sample, which columns of a CSV row
// are the input and how they were standardized, a text's vocabulary. The
// runner writes Metadata(train) into the metadata of model.safetensors
// (and of every checkpoint's), next to the parameters.

// Metadata keys of model.safetensors (see Metadata).
const (
	// MetaClasses is a JSON array of the class names, in label order.
	MetaClasses = "classes"
	// MetaImage is a JSON ImageMeta: how data.images made samples.
	MetaImage = "image"
	// MetaCSV is a JSON CSVMeta: how data.csv made samples.
	MetaCSV = "csv"
	// MetaVocab is a token dataset's vocabulary (Vocab.String).
	MetaVocab = "vocab"
)

// ImageMeta is how data.images turned an image file into a sample: decoded,
// converted to Channels (1: PIL's convert("L"), 3: convert("RGB")),
// resized to Height × Width with Resize ("bilinear": PIL's antialiased
// bilinear filter, as torchvision's Resize), scaled to [0, 1] and, when Mean
// is not nil, normalized as (v − Mean[c])/Std[c].
type ImageMeta struct {
	Height   int       `json:"height"`
	Width    int       `json:"width"`
	Channels int       `json:"channels"`
	Mean     []float64 `json:"mean,omitempty"`
	Std      []float64 `json:"std,omitempty"`
	Resize   string    `json:"resize"`
}

// Sample decodes an image file's bytes (name is the file, for errors)
// into a sample as training saw it: Channels × Height × Width float32
// values.
func (m ImageMeta) Sample(name string, b []byte) ([]float32, error) {
	if m.Channels != 1 && m.Channels != 3 {
		return nil, fmt.Errorf("image metadata: %d channels, want 1 or 3", m.Channels)
	}
	if m.Mean != nil && (len(m.Mean) != m.Channels || len(m.Std) != m.Channels) {
		return nil, fmt.Errorf("image metadata: %d means and %d stds for %d channels", len(m.Mean), len(m.Std), m.Channels)
	}
	plane := m.Height * m.Width
	px := make([]byte, m.Channels*plane)
	if err := PrepareImage(ImagePrep{Height: m.Height, Width: m.Width, Channels: m.Channels}, name, b, px); err != nil {
		return nil, err
	}
	out := make([]float32, len(px))
	for c := range m.Channels {
		mean, std := float32(0), float32(1)
		if m.Mean != nil {
			mean, std = float32(m.Mean[c]), float32(m.Std[c])
		}
		for j, v := range px[c*plane : (c+1)*plane] {
			out[c*plane+j] = (float32(v)/255 - mean) / std
		}
	}
	return out, nil
}

// CSVMeta is how data.csv turned a row into a sample: the values of the
// columns X, in order, each standardized as (v − Mean[i])/Std[i] when
// Mean is not nil (the training split's statistics); Y is the target
// column, Task "classes" or "regression".
type CSVMeta struct {
	X    []string  `json:"x"`
	Y    string    `json:"y"`
	Task string    `json:"task"`
	Mean []float64 `json:"mean,omitempty"`
	Std  []float64 `json:"std,omitempty"`
}

// Sample makes the input of one table row as training saw it: header
// names the row's fields (the row may hold other columns too, in any
// order); the values of the columns X are read as numbers and, when Mean
// is set, standardised. Errors name the column.
func (m CSVMeta) Sample(header, row []string) ([]float32, error) {
	if len(row) != len(header) {
		return nil, fmt.Errorf("a row of %d fields for %d column names", len(row), len(header))
	}
	if m.Mean != nil && (len(m.Mean) != len(m.X) || len(m.Std) != len(m.X)) {
		return nil, fmt.Errorf("csv metadata: %d means and %d stds for %d columns", len(m.Mean), len(m.Std), len(m.X))
	}
	out := make([]float32, len(m.X))
	for i, col := range m.X {
		j := slices.Index(header, col)
		if j < 0 {
			return nil, fmt.Errorf("no column %q: the model reads the columns %s", col, quoteList(m.X, 30))
		}
		s := strings.TrimSpace(row[j])
		if s == "" {
			return nil, fmt.Errorf("column %q: missing value", col)
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("column %q: %q is not a number", col, clip(s))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("column %q: %q is not a finite number", col, clip(s))
		}
		if m.Mean != nil {
			v = (v - m.Mean[i]) / m.Std[i]
		}
		out[i] = float32(v)
	}
	return out, nil
}

// metadataSource is a dataset that carries metadata for the model.
type metadataSource interface {
	metadata() map[string]string
}

// base is the dataset under the views and wrappers of this package
// (Subset, View, Augment, Epoch).
func base(ds Dataset) Dataset {
	for {
		switch d := ds.(type) {
		case *prefix:
			ds = d.base
		case *view:
			ds = d.base
		case *Augmented:
			ds = d.base
		case *fetchSet:
			return d.imageSet
		default:
			return ds
		}
	}
}

// Metadata is what a model trained on ds keeps of it (see MetaClasses,
// MetaImage, MetaCSV, MetaVocab), as string values for a safetensors
// header; empty for data that need nothing kept (MNIST, data.tensors'
// arrays).
func Metadata(ds Dataset) map[string]string {
	m := map[string]string{}
	if tk, ok := ds.(Tokens); ok {
		m[MetaVocab] = tk.Vocab().String()
	}
	if s, ok := base(ds).(metadataSource); ok {
		for k, v := range s.metadata() {
			m[k] = v
		}
	}
	return m
}

// ClassNames returns the names of ds's classes in label order (data.images'
// class folders, data.csv's label names), or nil when its classes have no
// names.
func ClassNames(ds Dataset) []string {
	switch d := base(ds).(type) {
	case *imageSet:
		return d.classNames
	case *floatSet:
		return d.classNames
	}
	return nil
}

func (d *imageSet) metadata() map[string]string {
	m := map[string]string{}
	if d.classNames != nil {
		m[MetaClasses] = jsonString(d.classNames)
	}
	if d.prep != nil {
		m[MetaImage] = jsonString(d.prep)
	}
	return m
}

func (s *floatSet) metadata() map[string]string {
	m := map[string]string{}
	if s.classNames != nil {
		m[MetaClasses] = jsonString(s.classNames)
	}
	if s.csv != nil {
		m[MetaCSV] = jsonString(s.csv)
	}
	return m
}

func (s *regressionSet) metadata() map[string]string {
	if s.csv == nil {
		return nil
	}
	return map[string]string{MetaCSV: jsonString(s.csv)}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain strings and numbers only
	}
	return string(b)
}
