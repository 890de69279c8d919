package script

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

// mnistMaker is data.mnist(split = "train", dir = None, normalize =
// (0.1307, 0.3081), limit = 0, transforms = []): MNIST from the GoMNIST
// module, or the IDX files in dir.
var mnistMaker = idxMaker("data.mnist", "mnist", 0.1307, 0.3081)

// fashionMaker is data.fashion_mnist(split = "train", dir = None,
// normalize = (0.2860, 0.3530), limit = 0, transforms = []): Fashion-MNIST
// from Debian's dataset-fashion-mnist package, or the IDX files in dir.
var fashionMaker = idxMaker("data.fashion_mnist", "fashion_mnist", 0.2860, 0.3530)

// idxMaker makes the builtin of a dataset in MNIST's layout: a split,
// a folder (relative to the script), a normalization (mean, std) or None,
// a limit and random transforms.
func idxMaker(builtin, kind string, mean, std float64) *configMaker {
	return &configMaker{
		name:   builtin,
		params: []string{"split?", "dir?", "normalize?", "limit?", "transforms?"},
		build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
			split := "train"
			dir := starlark.Value(starlark.None)
			normalize := starlark.Value(starlark.Tuple{starlark.Float(mean), starlark.Float(std)})
			limit := 0
			transforms := starlark.Value(starlark.None)
			if err := unpack(name, kwargs, "split?", &split, "dir?", &dir, "normalize?", &normalize, "limit?", &limit,
				"transforms?", &transforms); err != nil {
				return nil, err
			}
			if split != "train" && split != "test" {
				return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
			}
			d := spec.Data{Kind: kind, Split: split, Normalize: [2]float64{0, 1}, Limit: limit, Pos: position(thread)}
			if dir != starlark.None {
				s, ok := starlark.AsString(dir)
				if !ok {
					return nil, fmt.Errorf("%s: dir: got %s, want string or None", name, dir.Type())
				}
				if s == "" {
					return nil, fmt.Errorf("%s: dir: empty; give a folder or None", name)
				}
				d.Dir = resolvePath(thread, kwargs, "dir", s)
			}
			if err := dataOptions(name, &d, normalize, limit, transforms); err != nil {
				return nil, err
			}
			return d, nil
		},
	}
}

// dataOptions checks and sets the options data.mnist, data.fashion_mnist
// and data.tensors share: normalize, limit and transforms.
func dataOptions(name string, d *spec.Data, normalize starlark.Value, limit int, transforms starlark.Value) error {
	if normalize != starlark.None {
		p, err := floatPair(normalize)
		if err != nil {
			return fmt.Errorf("%s: normalize: %v (mean, std)", name, err)
		}
		if p[1] <= 0 {
			return fmt.Errorf("%s: normalize: std must be positive, got %g", name, p[1])
		}
		d.Normalize = p
	}
	if limit < 0 {
		return fmt.Errorf("%s: limit must be ≥ 0, got %d", name, limit)
	}
	if transforms == starlark.None {
		return nil
	}
	seq, ok := transforms.(starlark.Indexable)
	if _, isStr := transforms.(starlark.String); !ok || isStr {
		return fmt.Errorf("%s: transforms: got %s, want a list such as [data.random_crop(28, padding = 4), data.hflip(0.5)]", name, transforms.Type())
	}
	for i := 0; i < seq.Len(); i++ {
		c, ok := seq.Index(i).(*Config)
		var t transformSpec
		if ok {
			t, ok = c.Value.(transformSpec)
		}
		if !ok {
			return fmt.Errorf("%s: transforms[%d]: got %s, want data.random_crop(...) or data.hflip(...)", name, i, seq.Index(i).Type())
		}
		d.Transforms = append(d.Transforms, t)
	}
	return nil
}

// resolvePath resolves a path argument (key) relative to the calling
// script (see resolveDir) and writes the result back into kwargs, so that
// rebuilding the value (--set data.limit=...) from another file does not
// resolve it again.
func resolvePath(thread *starlark.Thread, kwargs []starlark.Tuple, key, path string) string {
	abs := resolveDir(thread, path)
	for i, kv := range kwargs {
		if kv[0] == starlark.String(key) {
			kwargs[i] = starlark.Tuple{kv[0], starlark.String(abs)}
		}
	}
	return abs
}

// tensorsMaker is data.tensors: samples and labels from arrays in files.
//
//	data.tensors(path, x = "images", y = "labels", normalize = None,
//	             classes = 0, limit = 0, split = "train", transforms = [])
//	data.tensors(x = "x.npy", y = "y.npy", ...)
//
// The first form reads the .safetensors file path, whose tensor x holds
// the samples and tensor y the labels. The second (path None) reads two
// .npy files (format 1.0, 2.0 or 3.0, little-endian, C order). Paths are
// relative to the script. The samples are float32, float64 or uint8 (uint8
// values v become v/255, as torchvision's ToTensor makes them), with the
// sample dimension first: shape [N, ...]; the labels are int64, int32 or
// uint8 class indices, shape [N]. normalize = (mean, std) then maps every
// value v to (v − mean)/std. classes is the number of classes (0: the
// largest label + 1; give it when a split may lack the last class).
var tensorsMaker = &configMaker{
	name:   "data.tensors",
	params: []string{"path?", "x?", "y?", "normalize?", "classes?", "limit?", "split?", "transforms?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		path := starlark.Value(starlark.None)
		x, y := "", ""
		normalize := starlark.Value(starlark.None)
		classes, limit := 0, 0
		split := "train"
		transforms := starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "path?", &path, "x?", &x, "y?", &y, "normalize?", &normalize,
			"classes?", &classes, "limit?", &limit, "split?", &split, "transforms?", &transforms); err != nil {
			return nil, err
		}
		const forms = `data.tensors("data.safetensors", x = "images", y = "labels") or data.tensors(x = "x.npy", y = "y.npy")`
		d := spec.Data{Kind: "tensors", Split: split, Normalize: [2]float64{0, 1}, Limit: limit, Classes: classes, Pos: position(thread)}
		if path != starlark.None {
			p, ok := starlark.AsString(path)
			if !ok || p == "" {
				return nil, fmt.Errorf("%s: path: got %s, want the path of a .safetensors file; the forms are %s", name, path.String(), forms)
			}
			if strings.HasSuffix(strings.ToLower(p), ".npy") {
				return nil, fmt.Errorf("%s: path %q is a .npy file: give the samples and the labels as two .npy files, x = \"x.npy\", y = \"y.npy\", without path", name, p)
			}
			if x == "" {
				x = "images"
			}
			if y == "" {
				y = "labels"
			}
			d.File, d.X, d.Y = resolvePath(thread, kwargs, "path", p), x, y
		} else {
			if x == "" || y == "" {
				return nil, fmt.Errorf("%s: without path, x and y must name two .npy files (samples and labels); the forms are %s", name, forms)
			}
			for _, f := range []string{x, y} {
				if !strings.HasSuffix(strings.ToLower(f), ".npy") {
					return nil, fmt.Errorf("%s: without path, x and y are .npy files, got %q; for a .safetensors file give path; the forms are %s", name, f, forms)
				}
			}
			d.X, d.Y = resolvePath(thread, kwargs, "x", x), resolvePath(thread, kwargs, "y", y)
		}
		switch {
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case classes < 0 || classes == 1:
			return nil, fmt.Errorf("%s: classes must be 0 (the largest label + 1) or ≥ 2, got %d", name, classes)
		}
		if err := dataOptions(name, &d, normalize, limit, transforms); err != nil {
			return nil, err
		}
		return d, nil
	},
}

// textMaker is data.text(path, seq_len, vocab = "bytes", split = "train",
// test_fraction = 0.1, limit = 0): a text file (or a folder of them, such
// as Debian's fortunes in /usr/share/games/fortunes) cut into windows of
// seq_len tokens, each with the next token at every position as target.
var textMaker = &configMaker{
	name:   "data.text",
	params: []string{"path", "seq_len", "vocab?", "split?", "test_fraction?", "limit?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var path string
		var seqLen, limit int
		vocab, split := "bytes", "train"
		frac := number(0.1)
		if err := unpack(name, kwargs, "path", &path, "seq_len", &seqLen, "vocab?", &vocab, "split?", &split,
			"test_fraction?", &frac, "limit?", &limit); err != nil {
			return nil, err
		}
		switch {
		case path == "":
			return nil, fmt.Errorf("%s: path: give a text file or a folder of text files", name)
		case seqLen < 1:
			return nil, fmt.Errorf("%s: seq_len must be ≥ 1, got %d", name, seqLen)
		case vocab != "bytes" && vocab != "chars":
			return nil, fmt.Errorf("%s: vocab must be \"bytes\" or \"chars\", got %q", name, vocab)
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case frac <= 0 || frac >= 1:
			return nil, fmt.Errorf("%s: test_fraction must be in (0, 1), got %g", name, float64(frac))
		case limit < 0:
			return nil, fmt.Errorf("%s: limit must be ≥ 0, got %d", name, limit)
		}
		return spec.Data{Kind: "text", File: resolvePath(thread, kwargs, "path", path), SeqLen: seqLen, Vocab: vocab,
			Split: split, TestFraction: float64(frac), Limit: limit, Pos: position(thread)}, nil
	},
}

// imagesMaker is data.images: torchvision's ImageFolder.
//
//	data.images(dir, size = None, channels = 3, normalize = None,
//	            split = "train", test_fraction = 0.2, seed = 0,
//	            transforms = [], limit = 0)
//
// dir (relative to the script) holds one folder per class, or train/ and
// test/ folders that each do; size is (height, width) or an int for a
// square (None: the images' own, all alike); channels 1 is grayscale, 3
// RGB; normalize is (mean, std) for every channel or ((m1, m2, m3),
// (s1, s2, s3)) per channel, applied after scaling to [0, 1].
var imagesMaker = &configMaker{
	name:   "data.images",
	params: []string{"dir", "size?", "channels?", "normalize?", "split?", "test_fraction?", "seed?", "transforms?", "limit?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var dir string
		size := starlark.Value(starlark.None)
		channels, limit := 3, 0
		normalize := starlark.Value(starlark.None)
		split := "train"
		frac := number(0.2)
		var seed int64
		transforms := starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "dir", &dir, "size?", &size, "channels?", &channels, "normalize?", &normalize,
			"split?", &split, "test_fraction?", &frac, "seed?", &seed, "transforms?", &transforms, "limit?", &limit); err != nil {
			return nil, err
		}
		switch {
		case dir == "":
			return nil, fmt.Errorf("%s: dir: empty; give the folder that holds one folder per class", name)
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case channels != 1 && channels != 3:
			return nil, fmt.Errorf("%s: channels must be 1 (grayscale) or 3 (RGB), got %d", name, channels)
		case frac < 0 || frac >= 1:
			return nil, fmt.Errorf("%s: test_fraction must be in [0, 1), got %g", name, float64(frac))
		case seed < 0:
			return nil, fmt.Errorf("%s: seed must be ≥ 0, got %d", name, seed)
		}
		d := spec.Data{Kind: "images", Split: split, Channels: channels, TestFraction: float64(frac), Seed: seed,
			Limit: limit, Normalize: [2]float64{0, 1}, Pos: position(thread)}
		if size != starlark.None {
			hw, err := sizePair(size)
			if err != nil {
				return nil, fmt.Errorf("%s: size: %v", name, err)
			}
			d.ImageSize = hw
		}
		if normalize != starlark.None {
			m, s, err := channelNormalize(normalize, channels)
			if err != nil {
				return nil, fmt.Errorf("%s: normalize: %v", name, err)
			}
			d.ChannelMean, d.ChannelStd = m, s
		}
		if err := dataOptions(name, &d, starlark.None, limit, transforms); err != nil {
			return nil, err
		}
		d.Dir = resolvePath(thread, kwargs, "dir", dir)
		return d, nil
	},
}

// maxImageSide bounds a side of data.images' size.
const maxImageSide = 8192

// sizePair reads an image size: an int n for (n, n), or (height, width).
func sizePair(v starlark.Value) ([2]int, error) {
	var hw [2]int
	ok := starlark.AsInt(v, &hw[0]) == nil
	hw[1] = hw[0]
	if seq, isSeq := v.(starlark.Indexable); isSeq {
		_, isStr := v.(starlark.String)
		ok = !isStr && seq.Len() == 2 && starlark.AsInt(seq.Index(0), &hw[0]) == nil && starlark.AsInt(seq.Index(1), &hw[1]) == nil
	}
	if !ok {
		return hw, fmt.Errorf("got %s, want (height, width) or an int", v.String())
	}
	if hw[0] < 1 || hw[1] < 1 || hw[0] > maxImageSide || hw[1] > maxImageSide {
		return hw, fmt.Errorf("got %s, want sides from 1 to %d", v.String(), maxImageSide)
	}
	return hw, nil
}

// channelNormalize reads normalize = (mean, std) for every channel, or
// ((m1, …), (s1, …)) with one value per channel.
func channelNormalize(v starlark.Value, channels int) (mean, std []float64, err error) {
	const want = "want (mean, std) or ((mean per channel), (std per channel))"
	seq, ok := v.(starlark.Indexable)
	if _, isStr := v.(starlark.String); !ok || isStr || seq.Len() != 2 {
		return nil, nil, fmt.Errorf("got %s, %s", v.String(), want)
	}
	read := func(x starlark.Value) ([]float64, error) {
		if f, ok := starlark.AsFloat(x); ok {
			out := make([]float64, channels)
			for i := range out {
				out[i] = f
			}
			return out, nil
		}
		s, ok := x.(starlark.Indexable)
		if _, isStr := x.(starlark.String); !ok || isStr {
			return nil, fmt.Errorf("got %s, %s", v.String(), want)
		}
		if s.Len() != channels {
			return nil, fmt.Errorf("%s has %d values for %d channels", x.String(), s.Len(), channels)
		}
		out := make([]float64, channels)
		for i := range out {
			f, ok := starlark.AsFloat(s.Index(i))
			if !ok {
				return nil, fmt.Errorf("got %s, %s", v.String(), want)
			}
			out[i] = f
		}
		return out, nil
	}
	if mean, err = read(seq.Index(0)); err != nil {
		return nil, nil, err
	}
	if std, err = read(seq.Index(1)); err != nil {
		return nil, nil, err
	}
	for i := range mean {
		if math.IsNaN(mean[i]) || math.IsInf(mean[i], 0) {
			return nil, nil, fmt.Errorf("mean %v is not a finite number", mean[i])
		}
		if !(std[i] > 0) || math.IsInf(std[i], 0) {
			return nil, nil, fmt.Errorf("std must be positive and finite, got %v", std[i])
		}
	}
	return mean, std, nil
}

// csvMaker is data.csv: a table with a header line, one sample a row.
//
//	data.csv(path, y, x = None, task = "classes", classes = 0,
//	         normalize = "standard", split = "train", test_fraction = 0.2,
//	         seed = 0, test_file = None, limit = 0)
//
// y names the target column; x the input columns (None: all but y; a
// name or a list of names). task is "classes" (labels: integers 0..K-1 or
// names) or "regression" (a float target). normalize "standard" scales
// every input column by the training split's mean and std; None keeps the
// values. The test split is test_file (relative to the script) when given,
// else the test_fraction of path's rows drawn with seed.
var csvMaker = &configMaker{
	name:   "data.csv",
	params: []string{"path", "y", "x?", "task?", "classes?", "normalize?", "split?", "test_fraction?", "seed?", "test_file?", "limit?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var path, y string
		x := starlark.Value(starlark.None)
		task := "classes"
		classes, limit := 0, 0
		normalize := starlark.Value(starlark.String("standard"))
		split := "train"
		frac := number(0.2)
		var seed int64
		testFile := starlark.Value(starlark.None)
		if err := unpack(name, kwargs, "path", &path, "y", &y, "x?", &x, "task?", &task, "classes?", &classes,
			"normalize?", &normalize, "split?", &split, "test_fraction?", &frac, "seed?", &seed,
			"test_file?", &testFile, "limit?", &limit); err != nil {
			return nil, err
		}
		d := spec.Data{Kind: "csv", Split: split, Y: y, Classes: classes, TestFraction: float64(frac), Seed: seed,
			Limit: limit, Normalize: [2]float64{0, 1}, Pos: position(thread)}
		switch {
		case path == "":
			return nil, fmt.Errorf("%s: path: give a CSV file", name)
		case y == "":
			return nil, fmt.Errorf("%s: y: name the target column", name)
		case task != "classes" && task != "regression":
			return nil, fmt.Errorf("%s: task must be \"classes\" or \"regression\", got %q", name, task)
		case task == "regression" && classes != 0:
			return nil, fmt.Errorf("%s: classes = %d is for task = \"classes\", not regression", name, classes)
		case classes < 0 || classes == 1:
			return nil, fmt.Errorf("%s: classes must be 0 (from the labels) or ≥ 2, got %d", name, classes)
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case frac < 0 || frac >= 1:
			return nil, fmt.Errorf("%s: test_fraction must be in [0, 1), got %g", name, float64(frac))
		case seed < 0:
			return nil, fmt.Errorf("%s: seed must be ≥ 0, got %d", name, seed)
		case limit < 0:
			return nil, fmt.Errorf("%s: limit must be ≥ 0, got %d", name, limit)
		}
		d.Regression = task == "regression"
		switch n := normalize.(type) {
		case starlark.NoneType:
		case starlark.String:
			if n != "standard" {
				return nil, fmt.Errorf("%s: normalize must be \"standard\" or None, got %s", name, n.String())
			}
			d.Standardize = true
		default:
			return nil, fmt.Errorf("%s: normalize must be \"standard\" or None, got %s", name, normalize.String())
		}
		switch v := x.(type) {
		case starlark.NoneType:
		case starlark.String:
			d.Columns = []string{string(v)}
		case starlark.Indexable:
			for i := 0; i < v.Len(); i++ {
				s, ok := starlark.AsString(v.Index(i))
				if !ok {
					return nil, fmt.Errorf("%s: x[%d]: got %s, want a column name", name, i, v.Index(i).Type())
				}
				d.Columns = append(d.Columns, s)
			}
			if len(d.Columns) == 0 {
				return nil, fmt.Errorf("%s: x: an empty list; give column names, or None for every column but y", name)
			}
		default:
			return nil, fmt.Errorf("%s: x: got %s, want a list of column names or None (every column but y)", name, x.Type())
		}
		d.File = resolvePath(thread, kwargs, "path", path)
		if testFile != starlark.None {
			s, ok := starlark.AsString(testFile)
			if !ok || s == "" {
				return nil, fmt.Errorf("%s: test_file: got %s, want a CSV file or None", name, testFile.String())
			}
			d.TestFile = resolvePath(thread, kwargs, "test_file", s)
		}
		return d, nil
	},
}

// transformSpec is one element of spec.Data's Transforms.
type transformSpec = struct {
	Kind          string
	Height, Width int
	Padding       int
	P             float64
}

// randomCropMaker is data.random_crop(size, padding = 0): torchvision's
// RandomCrop. size is an int or a (height, width) pair; the sample is
// padded with padding black pixels on every side, then cut at a random
// position, drawn from the run's seed, the epoch and the sample.
var randomCropMaker = &configMaker{
	name:   "data.random_crop",
	params: []string{"size", "padding?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		var size starlark.Value
		padding := 0
		if err := unpack(name, kwargs, "size", &size, "padding?", &padding); err != nil {
			return nil, err
		}
		t := transformSpec{Kind: "random_crop", Padding: padding}
		ok := starlark.AsInt(size, &t.Height) == nil
		t.Width = t.Height
		if seq, isSeq := size.(starlark.Indexable); isSeq && seq.Len() == 2 {
			ok = starlark.AsInt(seq.Index(0), &t.Height) == nil && starlark.AsInt(seq.Index(1), &t.Width) == nil
		}
		if !ok {
			return nil, fmt.Errorf("%s: size: got %s, want an int or a (height, width) pair", name, size.String())
		}
		switch {
		case t.Height < 1 || t.Width < 1:
			return nil, fmt.Errorf("%s: size must be positive, got %s", name, size.String())
		case padding < 0:
			return nil, fmt.Errorf("%s: padding must be ≥ 0, got %d", name, padding)
		}
		return t, nil
	},
}

// hflipMaker is data.hflip(p = 0.5): torchvision's RandomHorizontalFlip,
// a left-right mirror with probability p, drawn from the run's seed, the
// epoch and the sample.
var hflipMaker = &configMaker{
	name:   "data.hflip",
	params: []string{"p?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		p := number(0.5)
		if err := unpack(name, kwargs, "p?", &p); err != nil {
			return nil, err
		}
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("%s: p must be from 0 to 1, got %g", name, float64(p))
		}
		return transformSpec{Kind: "hflip", P: float64(p)}, nil
	},
}

var syntheticMaker = &configMaker{
	name:   "data.synthetic",
	params: []string{"size?", "shape?", "classes?", "noise?", "seed?", "split?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		size, classes := 1024, 10
		noise := number(1)
		var seed int64
		split := "train"
		shape := starlark.Value(starlark.Tuple{starlark.MakeInt(1), starlark.MakeInt(28), starlark.MakeInt(28)})
		if err := unpack(name, kwargs, "size?", &size, "shape?", &shape, "classes?", &classes, "noise?", &noise,
			"seed?", &seed, "split?", &split); err != nil {
			return nil, err
		}
		seq, ok := shape.(starlark.Indexable)
		if !ok || seq.Len() == 0 {
			return nil, fmt.Errorf("%s: shape: got %s, want a tuple of sizes such as (1, 28, 28)", name, shape.String())
		}
		d := spec.Data{Kind: "synthetic", Split: split, Size: size, Classes: classes, Noise: float64(noise), Seed: seed, Pos: position(thread)}
		for i := 0; i < seq.Len(); i++ {
			var n int
			if err := starlark.AsInt(seq.Index(i), &n); err != nil || n <= 0 {
				return nil, fmt.Errorf("%s: shape: got %s, want positive sizes", name, shape.String())
			}
			d.Shape = append(d.Shape, n)
		}
		switch {
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case size < 1:
			return nil, fmt.Errorf("%s: size must be ≥ 1, got %d", name, size)
		case classes < 2:
			return nil, fmt.Errorf("%s: classes must be ≥ 2, got %d", name, classes)
		case noise < 0:
			return nil, fmt.Errorf("%s: noise must be ≥ 0, got %g", name, float64(noise))
		}
		return d, nil
	},
}

var dataModule = &starlarkstruct.Module{
	Name: "data",
	Members: starlark.StringDict{
		"mnist":         mnistMaker.builtin(),
		"fashion_mnist": fashionMaker.builtin(),
		"tensors":       tensorsMaker.builtin(),
		"text":          textMaker.builtin(),
		"synthetic":     syntheticMaker.builtin(),
		"images":        imagesMaker.builtin(),
		"csv":           csvMaker.builtin(),
		"random_crop":   randomCropMaker.builtin(),
		"hflip":         hflipMaker.builtin(),
	},
}

// resolveDir resolves a relative dir= against the folder of the script that
// called the builtin, as load() does, and makes it absolute. A path given on
// the command line (--set) or in the library shipped with gorun is taken
// relative to the working folder.
func resolveDir(thread *starlark.Thread, dir string) string {
	if !filepath.IsAbs(dir) && thread.CallStackDepth() >= 2 {
		from := thread.CallFrame(1).Pos.Filename()
		if from != "" && !strings.HasPrefix(from, libraryPrefix) && !strings.HasPrefix(from, "--set ") {
			dir = filepath.Join(filepath.Dir(from), dir)
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
