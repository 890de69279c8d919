package script

import (
	"fmt"
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
