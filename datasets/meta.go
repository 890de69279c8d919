package datasets

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gorun/engine/spec"
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
	// MetaData is a JSON DataMeta: the data's kind, sample shape and
	// targets, with which the model is compiled again without its data
	// (Recorded).
	MetaData = "data"
)

// DataMeta is what the compiler learnt of a model's training data
// (Describe's Info, less what other keys hold: the class names, the
// vocabulary): the data.* kind, one sample's shape after the transforms,
// the number of classes (token data: the vocabulary's size), a regression
// target's shape, and whether samples are token windows.
type DataMeta struct {
	Kind    string `json:"kind"`
	Sample  []int  `json:"sample"`
	Classes int    `json:"classes"`
	Target  []int  `json:"target,omitempty"`
	Tokens  bool   `json:"tokens,omitempty"`
}

// String is m as the MetaData key's value.
func (m DataMeta) String() string { return jsonString(m) }

// Record is what a trained model keeps of info (spec.Data.Recorded).
func (i Info) Record() *spec.DataRecord {
	r := &spec.DataRecord{Sample: slices.Clone(i.Sample), Classes: i.Classes, Target: slices.Clone(i.Target), Tokens: i.Tokens,
		ClassNames: slices.Clone(i.ClassNames)}
	if i.Vocab.Kind != "" {
		r.Vocab = i.Vocab.String()
	}
	return r
}

// Recorded reads what the metadata of a model's weights file (meta)
// records of its training data d, for spec.Data.Recorded: the MetaData
// key with the class names and the vocabulary, or, in a file written
// before gorun kept MetaData, what MetaImage (data.images), MetaCSV
// (data.csv) and MetaVocab (data.text) say. It returns nil when the
// metadata say too little (data.tensors without MetaData): the data must
// then be read (Describe). Errors name the metadata key.
func Recorded(d *spec.Data, meta map[string]string) (*spec.DataRecord, error) {
	var names []string
	if s, ok := meta[MetaClasses]; ok {
		if err := json.Unmarshal([]byte(s), &names); err != nil {
			return nil, fmt.Errorf("metadata %q: %v", MetaClasses, err)
		}
	}
	vocab := meta[MetaVocab]
	var v Vocab
	if vocab != "" {
		var err error
		if v, err = ParseVocab(vocab); err != nil {
			return nil, fmt.Errorf("metadata %q: %v", MetaVocab, err)
		}
	}
	if s, ok := meta[MetaData]; ok {
		var m DataMeta
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("metadata %q: %v", MetaData, err)
		}
		switch {
		case m.Kind != d.Kind:
			return nil, fmt.Errorf("metadata %q: the model was trained on data.%s, but the script declares data.%s", MetaData, m.Kind, d.Kind)
		case len(m.Sample) == 0 || slices.ContainsFunc(m.Sample, func(n int) bool { return n < 1 }):
			return nil, fmt.Errorf("metadata %q: sample shape %v", MetaData, m.Sample)
		case m.Classes < 0 || m.Classes == 0 && m.Target == nil:
			return nil, fmt.Errorf("metadata %q: %d classes and no regression target", MetaData, m.Classes)
		case names != nil && len(names) != m.Classes:
			return nil, fmt.Errorf("metadata %q names %d classes, %q says %d", MetaClasses, len(names), MetaData, m.Classes)
		}
		return &spec.DataRecord{Sample: m.Sample, Classes: m.Classes, Target: m.Target, Tokens: m.Tokens, ClassNames: names, Vocab: vocab}, nil
	}
	// A weights file from before MetaData.
	switch d.Kind {
	case "images":
		s, ok := meta[MetaImage]
		if !ok || names == nil {
			return nil, nil
		}
		var m ImageMeta
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("metadata %q: %v", MetaImage, err)
		}
		shape := []int{m.Channels, m.Height, m.Width}
		if len(d.Transforms) > 0 {
			ts, err := transforms(d)
			if err == nil {
				shape, err = TransformedShape(shape, ts)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: data.%s: transforms: %w", d.Pos, d.Kind, err)
			}
		}
		return &spec.DataRecord{Sample: shape, Classes: len(names), ClassNames: names}, nil
	case "csv":
		s, ok := meta[MetaCSV]
		if !ok {
			return nil, nil
		}
		var m CSVMeta
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("metadata %q: %v", MetaCSV, err)
		}
		r := &spec.DataRecord{Sample: []int{len(m.X)}}
		switch {
		case m.Task == "regression":
			r.Target = []int{1}
		case names == nil:
			return nil, nil
		default:
			r.Classes, r.ClassNames = len(names), names
		}
		return r, nil
	case "text":
		if vocab == "" {
			return nil, nil
		}
		return &spec.DataRecord{Sample: []int{d.SeqLen}, Classes: v.Size(), Tokens: true, Vocab: vocab}, nil
	}
	return nil, nil
}

// recordedInfo is Describe of a Data that carries a model's record.
func recordedInfo(d *spec.Data) (Info, error) {
	r := d.Recorded
	info := Info{Sample: slices.Clone(r.Sample), Classes: r.Classes, Target: slices.Clone(r.Target), Tokens: r.Tokens,
		ClassNames: slices.Clone(r.ClassNames)}
	if r.Vocab != "" {
		v, err := ParseVocab(r.Vocab)
		if err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: the model's record of its data: %w", d.Pos, d.Kind, err)
		}
		info.Vocab = v
	}
	return info, nil
}

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
			return nil, fmt.Errorf("no column %q: the model reads the columns %s", col, QuoteList(m.X, 30))
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
