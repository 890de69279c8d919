package datasets

import (
	"fmt"
	"slices"

	"gorun/engine/spec"
)

// Info is what the compiler needs to know of a dataset before any of it
// is read: the shape of one sample and its targets.
type Info struct {
	// Sample is the shape of one sample (after the transforms).
	Sample []int
	// Classes is the number of classes of the labels (token data: the
	// vocabulary).
	Classes int
	// Target is one sample's float target shape (regression data), nil
	// for class labels.
	Target []int
	// Tokens is set for token data (data.text): integer inputs (token
	// ids) and a class (token) target at every position of the sample.
	Tokens bool
	// Negatives are the class targets below 0 (data.tensors'), which
	// only a loss's ignore_index may hold (CheckNegatives).
	Negatives []Negative
	// Vocab is token data's vocabulary (its Kind is empty for other
	// data): what a model built for this data reads, which an eval set
	// must use too (WithVocab).
	Vocab Vocab
	// ClassNames are the names of the classes in label order (data.images'
	// class folders, data.csv's label names), nil when they have none: an
	// eval set must name the same classes in the same order.
	ClassNames []string
}

// Option changes how Describe and Load read a dataset.
type Option func(*options)

type options struct {
	vocab       *Vocab
	memoryLimit int64
	prefetch    int
	progress    func(Progress)
}

// WithMemoryLimit bounds the memory a dataset held decoded (data.images)
// may take: the cluster's memory_limit. 0 (the default) is
// DefaultImageBudget(). A data.images set over it is streamed from disk
// (Streamed).
func WithMemoryLimit(bytes int64) Option {
	return func(o *options) { o.memoryLimit = bytes }
}

// WithPrefetch is the most samples the prefetchers of a streamed set
// (Prefetch) will hold at once, over every device of the process: the
// part of the memory limit kept for them (ImagesConfig.Prefetch).
func WithPrefetch(samples int) Option {
	return func(o *options) { o.prefetch = samples }
}

// WithProgress has Load report how far decoding has come, for data that
// take a while to decode (data.images).
func WithProgress(f func(Progress)) Option {
	return func(o *options) { o.progress = f }
}

// WithVocab reads a data.text dataset with the vocabulary of the model it
// feeds (the training data's, Info.Vocab) instead of one of its own: an
// eval text is then encoded as the model reads text, and a character
// outside the model's vocabulary is an error naming it (with a vocabulary
// of its own, an eval text with other characters would silently give its
// ids other meanings). An empty vocabulary changes nothing.
func WithVocab(v Vocab) Option {
	return func(o *options) {
		if v.Kind != "" {
			o.vocab = &v
		}
	}
}

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Describe gives the sample shape and targets of the dataset a Spec names
// without loading it: fixed for MNIST and Fashion-MNIST, from the Spec for
// synthetic data, from the labels and headers only for data.tensors. A
// data.text dataset is read (its vocabulary is the text's, or the one
// WithVocab gives). A Data that carries a trained model's record
// (spec.Data.Recorded, see Recorded) is described from it alone. Errors
// carry the script position of the data.* call.
func Describe(d *spec.Data, opts ...Option) (Info, error) {
	if d.Recorded != nil {
		return recordedInfo(d)
	}
	o := optionsOf(opts)
	var info Info
	switch d.Kind {
	case "mnist", "fashion_mnist":
		info = Info{Sample: []int{1, 28, 28}, Classes: 10}
	case "synthetic":
		info = Info{Sample: d.Shape, Classes: d.Classes}
	case "tensors":
		var err error
		if info, err = tensorsInfo(tensorsSource(d), d.Classes); err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: %w", d.Pos, d.Kind, err)
		}
		if info.Tokens {
			info.Vocab = Vocab{Kind: "ids", N: info.Classes}
		}
		if info.Target != nil && len(d.Transforms) > 0 {
			return Info{}, fmt.Errorf("%s: data.%s: transforms are for images with class labels; this dataset has float targets (regression)", d.Pos, d.Kind)
		}
	case "text":
		ds, err := textData(d, o)
		if err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: %w", d.Pos, d.Kind, err)
		}
		info = Info{Sample: ds.SampleShape(), Classes: ds.NumClasses(), Tokens: true, Vocab: ds.Vocab()}
	case "images":
		shape, classes, err := ImagesInfo(imagesConfig(d, o))
		if err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: %w", d.Pos, d.Kind, err)
		}
		info = Info{Sample: shape, Classes: len(classes), ClassNames: classes}
	case "csv":
		ds, err := CSV(csvConfig(d))
		if err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: %w", d.Pos, d.Kind, err)
		}
		info = Info{Sample: ds.SampleShape(), Classes: ds.NumClasses(), ClassNames: ClassNames(ds)}
		if r, ok := ds.(Regression); ok {
			info.Target = r.TargetShape()
		}
		if info.Target != nil && len(d.Transforms) > 0 {
			return Info{}, fmt.Errorf("%s: data.%s: transforms are for images; this is a table", d.Pos, d.Kind)
		}
	default:
		return Info{}, fmt.Errorf("%s: unknown dataset %q", d.Pos, d.Kind)
	}
	if len(d.Transforms) > 0 {
		ts, err := transforms(d)
		if err == nil {
			info.Sample, err = TransformedShape(info.Sample, ts)
		}
		if err != nil {
			return Info{}, fmt.Errorf("%s: data.%s: transforms: %w", d.Pos, d.Kind, err)
		}
	}
	return info, nil
}

// Load reads the dataset a Spec names. A dataset with transforms is an
// EpochDataset: its samples are transformed only through Epoch, which the
// runner calls for the training set at every epoch. Errors carry the
// script position of the data.* call. WithVocab gives a data.text eval set
// the model's vocabulary.
func Load(d *spec.Data, opts ...Option) (Dataset, error) {
	o := optionsOf(opts)
	var ds Dataset
	var err error
	switch d.Kind {
	case "mnist":
		ds, err = MNIST(d.Split, d.Dir, d.Normalize[0], d.Normalize[1])
	case "fashion_mnist":
		ds, err = FashionMNIST(d.Split, d.Dir, d.Normalize[0], d.Normalize[1])
	case "tensors":
		ds, err = Tensors(tensorsSource(d), d.Split, d.Classes, d.Normalize[0], d.Normalize[1])
	case "synthetic":
		ds, err = Synthetic(d.Split, d.Size, d.Shape, d.Classes, d.Noise, uint64(d.Seed))
	case "text":
		ds, err = textData(d, o)
	case "images":
		ds, err = Images(imagesConfig(d, o))
	case "csv":
		ds, err = CSV(csvConfig(d))
	default:
		err = fmt.Errorf("unknown dataset %q", d.Kind)
	}
	if err == nil && d.Limit > 0 && d.Limit < ds.Len() {
		ds = Subset(ds, d.Limit)
	}
	if err == nil && len(d.Transforms) > 0 {
		var ts []Transform
		if ts, err = transforms(d); err == nil {
			// Padding is black: the value a zero pixel takes, in
			// every channel.
			pads := []float32{0}
			switch {
			case d.ChannelMean != nil:
				pads = make([]float32, len(d.ChannelMean))
				for c := range pads {
					pads[c] = NormalizedZero(d.ChannelMean[c], d.ChannelStd[c])
				}
			case d.Kind == "images":
			case d.Normalize[1] > 0:
				pads[0] = NormalizedZero(d.Normalize[0], d.Normalize[1])
			}
			ds, err = AugmentChannels(ds, pads, ts)
		}
	}
	if err != nil {
		if d.Pos != "" {
			return nil, fmt.Errorf("%s: data.%s: %w", d.Pos, d.Kind, err)
		}
		return nil, err
	}
	if d.Kind == "tensors" || d.Kind == "text" || d.Kind == "csv" || d.Kind == "images" {
		// Its shape and classes come from the files just read: checking
		// them would read the files again.
		return ds, nil
	}
	info, err := Describe(d)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(ds.SampleShape(), info.Sample) || ds.NumClasses() != info.Classes {
		return nil, fmt.Errorf("%s: %s has samples %v and %d classes, the plan expects %v and %d",
			d.Pos, ds.Name(), ds.SampleShape(), ds.NumClasses(), info.Sample, info.Classes)
	}
	return ds, nil
}

// imagesConfig is a data.images dataset's settings.
func imagesConfig(d *spec.Data, o options) ImagesConfig {
	return ImagesConfig{Dir: d.Dir, Split: d.Split, Height: d.ImageSize[0], Width: d.ImageSize[1], Channels: d.Channels,
		Mean: d.ChannelMean, Std: d.ChannelStd, TestFraction: d.TestFraction, Seed: d.Seed, Limit: d.Limit,
		MemoryLimit: o.memoryLimit, Prefetch: o.prefetch, Progress: o.progress}
}

// csvConfig is a data.csv dataset's settings.
func csvConfig(d *spec.Data) CSVConfig {
	return CSVConfig{Path: d.File, TestFile: d.TestFile, X: d.Columns, Y: d.Y, Regression: d.Regression, Classes: d.Classes,
		Standardize: d.Standardize, Split: d.Split, TestFraction: d.TestFraction, Seed: d.Seed}
}

// tensorsSource is where a data.tensors dataset's arrays are.
func tensorsSource(d *spec.Data) TensorsSource {
	return TensorsSource{File: d.File, X: d.X, Y: d.Y}
}

// transforms builds the Data's random transforms.
func transforms(d *spec.Data) ([]Transform, error) {
	var ts []Transform
	for _, t := range d.Transforms {
		var tr Transform
		var err error
		switch t.Kind {
		case "random_crop":
			tr, err = RandomCrop(t.Height, t.Width, t.Padding)
		case "hflip":
			tr, err = HFlip(t.P)
		default:
			err = fmt.Errorf("unknown transform %q", t.Kind)
		}
		if err != nil {
			return nil, err
		}
		ts = append(ts, tr)
	}
	return ts, nil
}

// textData reads a data.text dataset, with the model's vocabulary when o
// gives one.
func textData(d *spec.Data, o options) (Tokens, error) {
	text, err := ReadText(d.File)
	if err != nil {
		return nil, err
	}
	if o.vocab != nil {
		return ModelText(d.File, text, d.SeqLen, d.Vocab, *o.vocab, d.Split, d.TestFraction)
	}
	return Text(d.File, text, d.SeqLen, d.Vocab, d.Split, d.TestFraction)
}
