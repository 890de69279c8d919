package datasets

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gorun/safetensors"
)

// maxTensorClasses bounds the number of classes read from labels when no
// class count is given: a larger label is almost surely not a class.
const maxTensorClasses = 1 << 24

// TensorsSource says where Tensors finds its two arrays: the samples and
// their labels.
type TensorsSource struct {
	// File is a .safetensors file that holds the samples under the key X
	// and the labels under the key Y. When File is "", X and Y are instead
	// the paths of two .npy files.
	File string
	X, Y string
}

// files is the base name of the file, or of the two .npy files.
func (s TensorsSource) files() string {
	if s.File != "" {
		return filepath.Base(s.File)
	}
	return filepath.Base(s.X) + "+" + filepath.Base(s.Y)
}

// name is the dataset's name: the files and the split, e.g.
// "cifar10.safetensors/train".
func (s TensorsSource) name(split string) string { return s.files() + "/" + split }

// Tensors reads a dataset from two arrays (see TensorsSource): the samples
// x, of dtype float32, float64 or uint8 and shape [N, ...] (the sample
// dimension first; a sample is x[i], of shape x.shape[1:]), and the labels
// y, of dtype int64, int32 or uint8 and shape [N]. split ("train" or
// "test") only names the dataset.
//
// The number of classes is classes when it is > 0 (every label must then
// be below it), else the largest label + 1. Samples are converted to
// float32: a uint8 value v becomes v/255, as torchvision's ToTensor does,
// floats are kept; then each value v becomes (v − mean)/std in float32
// (pass 0 and 1 to keep the values). Every problem is an error that names
// the file (and tensor) and says what is wrong: a missing key (listing the
// keys the file holds), a wrong dtype or shape, sample counts that differ
// between x and y, a negative or out-of-range label, a NaN or infinite
// sample value, a truncated or malformed file.
func Tensors(src TensorsSource, split string, classes int, mean, std float64) (Dataset, error) {
	name := src.name(split)
	if split != "train" && split != "test" {
		return nil, fmt.Errorf("datasets: %s: unknown split %q: want \"train\" or \"test\"", name, split)
	}
	if math.IsNaN(mean) || math.IsInf(mean, 0) {
		return nil, fmt.Errorf("datasets: %s: normalization mean %v is not a finite number", name, mean)
	}
	if !(std > 0) || math.IsInf(std, 0) {
		return nil, fmt.Errorf("datasets: %s: normalization std %v must be a positive finite number", name, std)
	}
	x, y, err := readTensors(src, false)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	if isFloat(y) {
		return tensorRegression(name, x, y, classes, float32(mean), float32(std))
	}
	if isTokens(x) {
		return tensorTokens(name, x, y, classes)
	}
	labels, classes, err := tensorLabels(x, y, classes)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	shape := append([]int(nil), x.shape[1:]...)
	if x.dtype == safetensors.DTypeU8 {
		return newImageSet(name, x.data, labels, shape, classes, mean, std), nil
	}
	v, err := tensorSamples(x, float32(mean), float32(std))
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	return &floatSet{name: name, shape: shape, classes: classes, size: len(v) / len(labels), x: v, labels: labels}, nil
}

// TensorsInfo returns the sample shape and number of classes Tensors
// would give, checking the labels fully but reading only the header of
// the samples' .npy file (a .safetensors file is read whole).
//
// For float targets (regression) numClasses is 0 and target is the shape of
// one sample's target ([1] when y has shape [N]); for labels target is nil.
// For integer samples (token ids, with targets of the same shape) tokens is
// set and numClasses is the vocabulary's size.
func TensorsInfo(src TensorsSource, classes int) (shape []int, numClasses int, target []int, tokens bool, err error) {
	info, err := tensorsInfo(src, classes)
	return info.Sample, info.Classes, info.Target, info.Tokens, err
}

// tensorsInfo is TensorsInfo as an Info, with the targets below 0 (which
// only a loss's ignore_index may hold).
func tensorsInfo(src TensorsSource, classes int) (Info, error) {
	x, y, err := readTensors(src, true)
	if err != nil {
		return Info{}, fmt.Errorf("datasets: %s: %w", src.files(), err)
	}
	if isTokens(x) {
		if x.data == nil { // the ids decide the vocabulary: read them
			if x, y, err = readTensors(src, false); err != nil {
				return Info{}, fmt.Errorf("datasets: %s: %w", src.files(), err)
			}
		}
		ds, err := tensorTokens(src.files(), x, y, classes)
		if err != nil {
			return Info{}, err
		}
		return Info{Sample: ds.SampleShape(), Classes: ds.NumClasses(), Tokens: true, Negatives: Negatives(ds)}, nil
	}
	if isFloat(y) {
		if classes != 0 {
			return Info{}, fmt.Errorf("datasets: %s: %s holds float targets (regression), which have no classes; drop classes = %d", src.files(), y.where, classes)
		}
		return Info{Sample: append([]int(nil), x.shape[1:]...), Target: targetShape(y)}, nil
	}
	labels, classes, err := tensorLabels(x, y, classes)
	if err != nil {
		return Info{}, fmt.Errorf("datasets: %s: %w", src.files(), err)
	}
	var negs []Negative
	eachNegative(labels, func(v int32, i int) { negs = append(negs, Negative{Value: v, Sample: i}) })
	return Info{Sample: append([]int(nil), x.shape[1:]...), Classes: classes, Negatives: negs}, nil
}

// eachNegative calls f with each distinct label below 0 (at most
// maxNegatives) and the first sample holding it.
func eachNegative(labels []int32, f func(v int32, i int)) {
	seen := map[int32]bool{}
	for i, v := range labels {
		if v < 0 && !seen[v] && len(seen) < maxNegatives {
			seen[v] = true
			f(v, i)
		}
	}
}

// isTokens reports integer samples: token ids (TokenTensors).
func isTokens(x *array) bool {
	return x.dtype == safetensors.DTypeI64 || x.dtype == safetensors.DTypeI32
}

// tensorTokens makes the token dataset of ids x [N, T] and targets y
// [N, T]: the vocabulary is classes ids (or the largest id + 1); a
// negative target is one a loss with ignore_index may skip.
func tensorTokens(name string, x, y *array, classes int) (*tokenTensors, error) {
	ids, err := intValues(x)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	tg, err := intValues(y)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	top := int64(-1)
	for i, v := range ids {
		if v < 0 {
			return nil, fmt.Errorf("datasets: %s: %s: token id %d at position %d is negative", name, x.where, v, i)
		}
		top = max(top, v)
	}
	for _, v := range tg {
		top = max(top, v)
	}
	if classes == 0 {
		classes = int(top) + 1
	}
	if top >= int64(classes) || top >= maxTensorClasses {
		return nil, fmt.Errorf("datasets: %s: token id %d is out of the vocabulary of %d (classes = %d)", name, top, classes, classes)
	}
	t := x.shape[1]
	out := &tokenTensors{name: name, t: t, v: classes, x: make([]int32, len(ids)), y: make([]int32, len(tg))}
	for i := range ids {
		out.x[i], out.y[i] = int32(ids[i]), int32(max(tg[i], -1<<31))
	}
	return out, nil
}

// intValues decodes an int64 or int32 array.
func intValues(a *array) ([]int64, error) {
	size := a.dtype.Size()
	n := len(a.data) / size
	out := make([]int64, n)
	for i := range out {
		if a.dtype == safetensors.DTypeI64 {
			out[i] = int64(binary.LittleEndian.Uint64(a.data[i*size:]))
		} else {
			out[i] = int64(int32(binary.LittleEndian.Uint32(a.data[i*size:])))
		}
	}
	return out, nil
}

// tokenTensors is a Tokens dataset of given windows: ids x and targets y,
// n windows of t tokens, a vocabulary of v ids.
type tokenTensors struct {
	name string
	t, v int
	x, y []int32
}

func (s *tokenTensors) Name() string       { return s.name }
func (s *tokenTensors) Len() int           { return len(s.x) / s.t }
func (s *tokenTensors) SampleShape() []int { return []int{s.t} }
func (s *tokenTensors) NumClasses() int    { return s.v }
func (s *tokenTensors) Labels() []int32    { return nil }
func (s *tokenTensors) Vocab() Vocab       { return Vocab{Kind: "ids", N: s.v} }

func (s *tokenTensors) Fill(idx []int, x []float32, _ []int32) {
	for i, j := range idx {
		for k, id := range s.x[j*s.t : (j+1)*s.t] {
			x[i*s.t+k] = float32(id)
		}
	}
}

func (s *tokenTensors) FillTokens(idx []int, x, y []int32) {
	for i, j := range idx {
		copy(x[i*s.t:(i+1)*s.t], s.x[j*s.t:(j+1)*s.t])
		copy(y[i*s.t:(i+1)*s.t], s.y[j*s.t:(j+1)*s.t])
	}
}

func isFloat(a *array) bool {
	return a.dtype == safetensors.DTypeF32 || a.dtype == safetensors.DTypeF64
}

// targetShape is one sample's target shape: y's after the sample
// dimension, [1] for one value per sample.
func targetShape(y *array) []int {
	if len(y.shape) == 1 {
		return []int{1}
	}
	return append([]int(nil), y.shape[1:]...)
}

// tensorRegression makes the regression dataset of samples x and float
// targets y (not normalised; checked finite).
func tensorRegression(name string, x, y *array, classes int, mean, std float32) (Dataset, error) {
	if classes != 0 {
		return nil, fmt.Errorf("datasets: %s: %s holds float targets (regression), which have no classes; drop classes = %d", name, y.where, classes)
	}
	if x.dtype == safetensors.DTypeU8 {
		return nil, fmt.Errorf("datasets: %s: uint8 samples with float targets: store the samples as float32", name)
	}
	v, err := tensorSamples(x, mean, std)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	t, err := tensorSamples(&array{where: y.where, dtype: y.dtype, shape: append([]int{y.shape[0]}, targetShape(y)...), data: y.data}, 0, 1)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", name, err)
	}
	n := x.shape[0]
	return &regressionSet{name: name, shape: append([]int(nil), x.shape[1:]...), tshape: targetShape(y),
		size: len(v) / n, tsize: len(t) / n, x: v, y: t, n: n}, nil
}

// readTensors reads the samples and labels arrays and checks their dtypes
// and shapes. With headerOnly, the samples of a .npy file are not read.
func readTensors(src TensorsSource, headerOnly bool) (x, y *array, err error) {
	if src.File != "" {
		f, err := safetensors.ReadFile(src.File)
		if err != nil {
			return nil, nil, err
		}
		get := func(key, role string) (*array, error) {
			t, ok := f.Get(key)
			if !ok {
				return nil, fmt.Errorf("%s has no tensor %q (the %s); it holds %s", src.File, key, role, keyList(f.Names()))
			}
			return &array{where: fmt.Sprintf("%s: tensor %q", src.File, key), dtype: t.DType, shape: t.Shape, data: t.Data}, nil
		}
		if x, err = get(src.X, "samples, x"); err != nil {
			return nil, nil, err
		}
		if y, err = get(src.Y, "labels, y"); err != nil {
			return nil, nil, err
		}
	} else {
		if x, err = readNPY(src.X, headerOnly); err != nil {
			return nil, nil, err
		}
		if y, err = readNPY(src.Y, false); err != nil {
			return nil, nil, err
		}
	}
	switch x.dtype {
	case safetensors.DTypeF32, safetensors.DTypeF64, safetensors.DTypeU8:
	case safetensors.DTypeI64, safetensors.DTypeI32:
		// Token ids: the targets are token ids of the same shape.
		if y.dtype != safetensors.DTypeI64 && y.dtype != safetensors.DTypeI32 || !slices.Equal(x.shape, y.shape) {
			return nil, nil, fmt.Errorf("%s: integer samples (token ids) of shape %v need integer targets of the same shape, one per position; %s is %s %v",
				x.where, x.shape, y.where, dtypeName(y.dtype), y.shape)
		}
		if len(x.shape) != 2 || x.shape[0] == 0 || x.shape[1] == 0 {
			return nil, nil, fmt.Errorf("%s: token ids of shape %v: want [N, T] windows", x.where, x.shape)
		}
		return x, y, nil
	default:
		return nil, nil, fmt.Errorf("%s: samples of dtype %s: want float32, float64 or uint8 (or int64/int32 token ids)", x.where, dtypeName(x.dtype))
	}
	if len(x.shape) < 2 {
		return nil, nil, fmt.Errorf("%s: samples of shape %v: want the sample dimension first and the sample's after it, [N, ...]", x.where, x.shape)
	}
	if x.shape[0] == 0 {
		return nil, nil, fmt.Errorf("%s: shape %v holds no samples", x.where, x.shape)
	}
	for _, d := range x.shape[1:] {
		if d == 0 {
			return nil, nil, fmt.Errorf("%s: shape %v: samples of shape %v hold no values", x.where, x.shape, x.shape[1:])
		}
	}
	switch y.dtype {
	case safetensors.DTypeI64, safetensors.DTypeI32, safetensors.DTypeU8:
		if len(y.shape) != 1 {
			return nil, nil, fmt.Errorf("%s: labels of shape %v: want one label per sample, shape [N]", y.where, y.shape)
		}
	case safetensors.DTypeF32, safetensors.DTypeF64:
		// Float targets: regression (nn.mse_loss), one target of any shape per sample.
		if len(y.shape) < 1 {
			return nil, nil, fmt.Errorf("%s: targets of shape %v: want the sample dimension first, [N, ...]", y.where, y.shape)
		}
	default:
		return nil, nil, fmt.Errorf("%s: labels of dtype %s: want integer class labels of dtype int64, int32 or uint8, or float32/float64 regression targets", y.where, dtypeName(y.dtype))
	}
	if x.shape[0] != y.shape[0] {
		return nil, nil, fmt.Errorf("%s holds %d samples but %s holds %d labels", x.where, x.shape[0], y.where, y.shape[0])
	}
	return x, y, nil
}

// keyList lists a file's keys for a message, shortened when there are
// many.
func keyList(names []string) string {
	if len(names) == 0 {
		return "no tensors"
	}
	q := make([]string, 0, min(len(names), 20))
	for _, n := range names[:min(len(names), 20)] {
		q = append(q, fmt.Sprintf("%q", n))
	}
	s := strings.Join(q, ", ")
	if len(names) > 20 {
		s += fmt.Sprintf(" and %d more", len(names)-20)
	}
	return fmt.Sprintf("%d tensors: %s", len(names), s)
}

// tensorLabels decodes and checks the labels y and gives the number of
// classes: classes when > 0, else the largest label + 1. Labels below 0
// are kept: they are for a loss's ignore_index (Negatives).
func tensorLabels(x, y *array, classes int) ([]int32, int, error) {
	if classes < 0 {
		return nil, 0, fmt.Errorf("classes %d is negative", classes)
	}
	n := y.shape[0]
	labels := make([]int32, n)
	size := y.dtype.Size()
	limit := int64(classes)
	if classes == 0 {
		limit = maxTensorClasses
	}
	top := int64(-1)
	for i := range labels {
		var v int64
		switch y.dtype {
		case safetensors.DTypeI64:
			v = int64(binary.LittleEndian.Uint64(y.data[i*size:]))
		case safetensors.DTypeI32:
			v = int64(int32(binary.LittleEndian.Uint32(y.data[i*size:])))
		default:
			v = int64(y.data[i])
		}
		switch {
		case v < math.MinInt32:
			return nil, 0, fmt.Errorf("%s: label %d of sample %d is negative and too small: labels are class indices, 0 to classes − 1, or the loss's ignore_index", y.where, v, i)
		case v < 0:
			// Not a class: the loss's ignore_index, or an error the
			// engine reports (CheckNegatives), knowing the loss.
		case v >= limit && classes > 0:
			return nil, 0, fmt.Errorf("%s: label %d of sample %d is out of range [0, %d) (classes = %d)", y.where, v, i, classes, classes)
		case v >= limit:
			return nil, 0, fmt.Errorf("%s: label %d of sample %d is too large: labels are class indices, and more than %d classes is not supported", y.where, v, i, maxTensorClasses)
		}
		labels[i] = int32(v)
		top = max(top, v)
	}
	if classes == 0 && top < 0 {
		return nil, 0, fmt.Errorf("%s: every label is below 0, so none says how many classes there are: give classes = N", y.where)
	}
	if classes == 0 {
		classes = int(top) + 1
	}
	return labels, classes, nil
}

// tensorSamples converts float samples to float32, checks that every value
// is finite, and normalizes them as (v − mean)/std in float32.
func tensorSamples(x *array, mean, std float32) ([]float32, error) {
	per := 1
	for _, d := range x.shape[1:] {
		per *= d
	}
	n := len(x.data) / x.dtype.Size()
	out := make([]float32, n)
	bad := func(i int, v float64) error {
		return fmt.Errorf("%s: sample %d holds %v at element %d: every value must be finite", x.where, i/per, v, i%per)
	}
	if x.dtype == safetensors.DTypeF32 {
		for i := range out {
			v := math.Float32frombits(binary.LittleEndian.Uint32(x.data[4*i:]))
			if v-v != 0 { // NaN or ±Inf
				return nil, bad(i, float64(v))
			}
			out[i] = (v - mean) / std
		}
		return out, checkNormalized(x, out, per)
	}
	for i := range out {
		v := math.Float64frombits(binary.LittleEndian.Uint64(x.data[8*i:]))
		if v-v != 0 {
			return nil, bad(i, v)
		}
		f := float32(v)
		if math.IsInf(float64(f), 0) {
			return nil, fmt.Errorf("%s: sample %d holds %g at element %d: beyond float32's range", x.where, i/per, v, i%per)
		}
		out[i] = (f - mean) / std
	}
	return out, checkNormalized(x, out, per)
}

// checkNormalized reports a value that normalization took out of float32's
// range (a tiny std).
func checkNormalized(x *array, v []float32, per int) error {
	for i, f := range v {
		if f-f != 0 {
			return fmt.Errorf("%s: sample %d, element %d: normalization gives %v: std too small", x.where, i/per, i%per, f)
		}
	}
	return nil
}
