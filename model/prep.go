package model

import (
	"encoding/json"
	"fmt"
	"slices"

	"gorun/datasets"
	"gorun/engine"
)

// prep is how the training data became the model's inputs, as the
// weights file's metadata records it (datasets.Metadata): for image data
// how an image file became a sample, for a CSV table which columns of a
// row and their statistics, and the normalisation of each channel (or
// column, or of every value) that Normalize and uint8 inputs apply.
type prep struct {
	data  string              // the data.* kind the model was trained on
	names []string            // the classes' names, nil when they have none
	image *datasets.ImageMeta // mnist, fashion_mnist, images: an image file to a sample
	csv   *datasets.CSVMeta   // csv: a table row to a sample
	// Value i of a sample is normalised with mean[i/plane], std[i/plane]:
	// one pair per channel of an image, per column of a table, or one
	// for every value.
	mean, std []float64
	plane     int
	luts      [][256]float32 // uint8 pixels to model inputs, per channel
}

// newPrep reads the preprocessing of a model compiled as p from its
// weights file's metadata (weights names the file).
func newPrep(p *engine.Plan, meta map[string]string, weights string) (*prep, error) {
	d := &p.Spec.Data
	pr := &prep{data: d.Kind}
	if d.Recorded != nil {
		pr.names = d.Recorded.ClassNames
	}
	size := 1
	for _, n := range p.Sample {
		size *= n
	}
	one := func(mean, std float64) {
		if !(std > 0) {
			mean, std = 0, 1
		}
		pr.mean, pr.std = []float64{mean}, []float64{std}
	}
	switch d.Kind {
	case "mnist", "fashion_mnist":
		one(d.Normalize[0], d.Normalize[1])
		pr.image = &datasets.ImageMeta{Height: 28, Width: 28, Channels: 1, Mean: pr.mean, Std: pr.std, Resize: "bilinear"}
	case "images":
		im := &datasets.ImageMeta{}
		if s, ok := meta[datasets.MetaImage]; ok {
			if err := json.Unmarshal([]byte(s), im); err != nil {
				return nil, fmt.Errorf("%s: metadata %q: %v", weights, datasets.MetaImage, err)
			}
		} else if len(p.Sample) == 3 {
			// Not recorded: the script's settings.
			im = &datasets.ImageMeta{Channels: p.Sample[0], Height: p.Sample[1], Width: p.Sample[2], Mean: d.ChannelMean, Std: d.ChannelStd, Resize: "bilinear"}
		}
		if im.Channels != 1 && im.Channels != 3 || len(p.Sample) == 0 || p.Sample[0] != im.Channels ||
			im.Mean != nil && (len(im.Mean) != im.Channels || len(im.Std) != im.Channels) {
			return nil, fmt.Errorf("%s: metadata %q: images of %d channels (means %v, stds %v) for samples of %v", weights, datasets.MetaImage, im.Channels, im.Mean, im.Std, p.Sample)
		}
		pr.image = im
		pr.mean, pr.std = im.Mean, im.Std
		if im.Mean == nil {
			pr.mean, pr.std = make([]float64, im.Channels), slices.Repeat([]float64{1}, im.Channels)
		}
	case "csv":
		s, ok := meta[datasets.MetaCSV]
		if !ok {
			one(0, 1)
			break
		}
		cm := &datasets.CSVMeta{}
		if err := json.Unmarshal([]byte(s), cm); err != nil {
			return nil, fmt.Errorf("%s: metadata %q: %v", weights, datasets.MetaCSV, err)
		}
		if len(cm.X) != size || cm.Mean != nil && (len(cm.Mean) != len(cm.X) || len(cm.Std) != len(cm.X)) {
			return nil, fmt.Errorf("%s: metadata %q: %d columns (%d means, %d stds) for samples of %v", weights, datasets.MetaCSV, len(cm.X), len(cm.Mean), len(cm.Std), p.Sample)
		}
		pr.csv = cm
		pr.mean, pr.std = cm.Mean, cm.Std
		if cm.Mean == nil {
			pr.mean, pr.std = make([]float64, len(cm.X)), slices.Repeat([]float64{1}, len(cm.X))
		}
	default:
		one(d.Normalize[0], d.Normalize[1])
	}
	pr.plane = size / len(pr.mean)
	pr.luts = make([][256]float32, len(pr.mean))
	// As the datasets (and torchvision's ToTensor then Normalize): v/255,
	// then (v − mean)/std, in float32.
	for c := range pr.luts {
		mean, std := float32(pr.mean[c]), float32(pr.std[c])
		for v := range pr.luts[c] {
			pr.luts[c][v] = (float32(v)/255 - mean) / std
		}
	}
	return pr, nil
}

// pixels converts raw uint8 pixels of whole samples as the training set
// converted its pixels (torchvision's ToTensor then Normalize, in
// float32), channel by channel.
func (pr *prep) pixels(v []uint8) []float32 {
	out := make([]float32, len(v))
	size := pr.plane * len(pr.luts)
	for i, p := range v {
		out[i] = pr.luts[(i%size)/pr.plane][p]
	}
	return out
}

// normalize is value v at index i of a sample normalised: in float64
// for a table's columns (data.csv standardises in float64), in float32
// for pixels and arrays (as the datasets' readers).
func (pr *prep) normalize(i int, v float64) float32 {
	c := i / pr.plane
	if pr.csv != nil {
		return float32((v - pr.mean[c]) / pr.std[c])
	}
	return (float32(v) - float32(pr.mean[c])) / float32(pr.std[c])
}

// dataName is the data.* call the model was trained on, for messages.
func (pr *prep) dataName() string {
	return "data." + pr.data
}
