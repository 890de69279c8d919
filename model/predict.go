package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"gorgonia.org/tensor"

	"gorun/ops"
)

// Predict runs the model's evaluation pass on x and returns its outputs.
// x is a batch [N, ...InputShape] or one sample [...InputShape], whose
// outputs come back [N, ...OutputShape] or [...OutputShape]; see the
// package documentation for the dtypes it takes and what they mean.
// Concurrent calls share batches; Predict returns ctx.Err() as soon as
// ctx is done. x is copied before Predict queues it, and never changed.
func (m *Model) Predict(ctx context.Context, x *tensor.Dense) (*tensor.Dense, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, single, err := m.request(x)
	if err != nil {
		return nil, err
	}
	r.ctx = ctx
	r.out = make([]float32, r.n*m.b.out)
	if err := m.b.submit(r); err != nil {
		return nil, err
	}
	if err := m.b.wait(r); err != nil {
		return nil, err
	}
	shape := m.OutputShape()
	if !single {
		shape = append([]int{r.n}, shape...)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(r.out)), nil
}

// request checks x and turns it into a request of the model's input type.
func (m *Model) request(x *tensor.Dense) (r *request, single bool, err error) {
	if x == nil {
		return nil, false, errors.New("model: Predict: the input is a nil tensor")
	}
	n, single, err := m.batchOf(x.Shape())
	if err != nil {
		return nil, false, err
	}
	data, err := values(x)
	if err != nil {
		return nil, false, err
	}
	per := m.b.in
	r = &request{n: n}
	if m.kind == Sequence {
		r.ids, err = m.tokens(data, per)
	} else {
		r.x, err = m.floats(data, per)
	}
	if err != nil {
		return nil, false, err
	}
	return r, single, nil
}

// batchOf checks an input's shape: a batch [N, ...InputShape] of N > 0
// samples, or one sample (single).
func (m *Model) batchOf(shape []int) (n int, single bool, err error) {
	sample := m.plan.Sample
	want := fmt.Sprintf("[N %s] or one sample %v", dims(sample), sample)
	switch {
	case slices.Equal(shape, sample):
		return 1, true, nil
	case len(shape) == len(sample)+1 && slices.Equal(shape[1:], sample):
		n = shape[0]
	default:
		return 0, false, fmt.Errorf("model: input has shape %v, the model takes %s", shape, want)
	}
	if n == 0 {
		return 0, false, fmt.Errorf("model: input has shape %v: no samples (the model takes %s)", shape, want)
	}
	return n, false, nil
}

// dims writes a shape's dimensions without brackets ("1 28 28").
func dims(s []int) string {
	t := fmt.Sprint(s)
	return t[1 : len(t)-1]
}

// values is x's elements in row-major order (a copy only when x is a
// view that is not contiguous).
func values(x *tensor.Dense) (any, error) {
	if x.RequiresIterator() || x.IsMaterializable() {
		mat, ok := x.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("model: input of type %T: cannot read its values", x.Materialize())
		}
		x = mat
	}
	n := x.Shape().TotalSize()
	if x.IsScalar() {
		return nil, fmt.Errorf("model: input is a scalar, the model takes tensors of shape [N ...]")
	}
	check := func(l int) error {
		if l < n {
			return fmt.Errorf("model: input of shape %v holds %d values", x.Shape(), l)
		}
		return nil
	}
	switch v := x.Data().(type) {
	case []float32:
		return v[:n], check(len(v))
	case []float64:
		return v[:n], check(len(v))
	case []uint8:
		return v[:n], check(len(v))
	case []int32:
		return v[:n], check(len(v))
	case []int64:
		return v[:n], check(len(v))
	case []int:
		return v[:n], check(len(v))
	}
	return nil, fmt.Errorf("model: input has dtype %v, which no model takes (float32, float64 or uint8 pixels; int32, int64 or int token ids)", x.Dtype())
}

// floats converts a float model's input: float32 as it is, float64 to
// float32, uint8 pixels normalised as the training set's; every value
// must be finite.
func (m *Model) floats(data any, per int) ([]float32, error) {
	var out []float32
	switch v := data.(type) {
	case []float32:
		// A copy: after a cancellation an arena may still read it.
		out = slices.Clone(v)
	case []float64:
		out = make([]float32, len(v))
		for i, f := range v {
			out[i] = float32(f)
			if math.IsInf(float64(out[i]), 0) && !math.IsInf(f, 0) {
				return nil, fmt.Errorf("model: input sample %d holds %g at element %d: beyond float32's range", i/per, f, i%per)
			}
		}
	case []uint8:
		if m.prep.csv != nil {
			return nil, fmt.Errorf("model: input has dtype uint8: a model trained on data.csv takes float32 inputs (its columns standardised as in training: Normalize or FromCSV make them from raw values), not pixels")
		}
		return m.prep.pixels(v), nil
	default:
		return nil, fmt.Errorf("model: input has dtype %s: the model takes float32 values (float64 converted, uint8 pixels normalised as in training), not token ids", dtypeOf(data))
	}
	for i, f := range out {
		if f-f != 0 { // NaN or ±Inf
			return nil, fmt.Errorf("model: input sample %d holds %v at element %d: inputs must be finite", i/per, f, i%per)
		}
	}
	return out, nil
}

// tokens converts a sequence model's input: integer ids in the vocabulary.
func (m *Model) tokens(data any, per int) ([]int32, error) {
	v := m.plan.Classes
	var out []int32
	conv := func(n int, at func(int) int64) error {
		out = make([]int32, n)
		for i := range out {
			id := at(i)
			if id < 0 || id >= int64(v) {
				return fmt.Errorf("model: input sample %d holds token id %d at position %d: the vocabulary has ids 0 to %d", i/per, id, i%per, v-1)
			}
			out[i] = int32(id)
		}
		return nil
	}
	var err error
	switch d := data.(type) {
	case []int32:
		err = conv(len(d), func(i int) int64 { return int64(d[i]) })
	case []int64:
		err = conv(len(d), func(i int) int64 { return d[i] })
	case []int:
		err = conv(len(d), func(i int) int64 { return int64(d[i]) })
	default:
		return nil, fmt.Errorf("model: input has dtype %s: the model takes token ids (int32, int64 or int)", dtypeOf(data))
	}
	return out, err
}

func dtypeOf(data any) string {
	switch data.(type) {
	case []float32:
		return "float32"
	case []float64:
		return "float64"
	case []uint8:
		return "uint8"
	case []int32:
		return "int32"
	case []int64:
		return "int64"
	}
	return "int"
}

// Normalize turns data in the form of the training set's files into the
// model's inputs, as the training set's reader does, channel by channel
// (Normalization): for a model trained on images (data.images,
// data.mnist, data.fashion_mnist, uint8 data.tensors), uint8 pixels v
// become (v/255 − mean)/std and float values (pixels already scaled to
// [0, 1], or data.tensors' floats) (v − mean)/std, in float32; for a
// data.csv model, float values of its input columns in order become
// (v − mean)/std computed in float64, as data.csv standardised them. x is
// a batch [N, ...InputShape] or one sample; a model with one mean and std
// for every value takes any shape. Integer token ids come back unchanged.
func (m *Model) Normalize(x *tensor.Dense) (*tensor.Dense, error) {
	if x == nil {
		return nil, errors.New("model: Normalize: the input is a nil tensor")
	}
	if m.kind == Sequence {
		return x, nil
	}
	pr := m.prep
	if len(pr.mean) > 1 {
		if _, _, err := m.batchOf(x.Shape()); err != nil {
			return nil, err
		}
	}
	data, err := values(x)
	if err != nil {
		return nil, err
	}
	size := pr.plane * len(pr.mean)
	var out []float32
	switch v := data.(type) {
	case []uint8:
		if pr.csv != nil {
			return nil, fmt.Errorf("model: Normalize: input has dtype uint8: a model trained on data.csv takes float values of its columns")
		}
		out = pr.pixels(v)
	case []float32:
		out = make([]float32, len(v))
		for i, f := range v {
			out[i] = pr.normalize(i%size, float64(f))
		}
	case []float64:
		out = make([]float32, len(v))
		for i, f := range v {
			out[i] = pr.normalize(i%size, f)
		}
	default:
		return nil, fmt.Errorf("model: Normalize: input has dtype %s: the model takes float32, float64 or uint8 data", dtypeOf(data))
	}
	return tensor.New(tensor.WithShape(x.Shape().Clone()...), tensor.WithBacking(out)), nil
}

// Probabilities turns a classifier's or a sequence model's outputs
// (Predict's, any leading shape) into probabilities over the last
// dimension: exp of log-probabilities (a model that ends in
// nn.log_softmax), the outputs themselves after nn.softmax, else the
// softmax of the logits, computed in float64.
func (m *Model) Probabilities(out *tensor.Dense) (*tensor.Dense, error) {
	if m.kind == Regressor {
		return nil, errors.New("model: Probabilities: a regression model's outputs are values, not class scores")
	}
	if out == nil {
		return nil, errors.New("model: Probabilities: the outputs are a nil tensor")
	}
	data, err := values(out)
	if err != nil {
		return nil, err
	}
	v, ok := data.([]float32)
	c := m.plan.Classes
	shape := out.Shape()
	if !ok || len(shape) == 0 || shape[len(shape)-1] != c {
		return nil, fmt.Errorf("model: Probabilities: outputs of dtype %v and shape %v: want Predict's float32 outputs, %d classes in the last dimension", out.Dtype(), shape, c)
	}
	p := make([]float32, len(v))
	for i := 0; i < len(v); i += c {
		softmax(m.last, v[i:i+c], p[i:i+c])
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(p)), nil
}

// softmax writes the probabilities of one row of scores made by op.
func softmax(op ops.Op, row, p []float32) {
	switch op {
	case ops.Softmax:
		copy(p, row)
		return
	case ops.LogSoftmax:
		for j, x := range row {
			p[j] = float32(math.Exp(float64(x)))
		}
		return
	}
	top := math.Inf(-1)
	for _, x := range row {
		top = max(top, float64(x))
	}
	var sum float64
	for _, x := range row {
		sum += math.Exp(float64(x) - top)
	}
	for j, x := range row {
		p[j] = float32(math.Exp(float64(x)-top) / sum)
	}
}
