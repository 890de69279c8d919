package serve

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"gorgonia.org/tensor"

	"gorun/model"
)

// answer writes Predict's outputs of n samples as {"predictions": […]},
// one object per sample:
//
//   - a classifier: "class" (the likeliest), "label" (its name, with
//     Options.ClassNames), "probability" (its probability),
//     "probabilities" (Model.Probabilities: one per class) and "outputs"
//     (what the model's last layer computed: logits or log-probabilities);
//   - a regressor: "values", of OutputShape;
//   - a sequence model: "outputs", the logits [T][V].
//
// Every float32 is written with its shortest representation, which
// parses back (as float32) to the same bits; a value that is not finite
// is written null.
func (s *Server) answer(out *tensor.Dense, n int) ([]byte, error) {
	vals, ok := out.Data().([]float32)
	if !ok {
		return nil, errorf(http.StatusInternalServerError, "the model answered %v values, not float32", out.Dtype())
	}
	var probs []float32
	if s.m.Kind() == model.Classifier {
		p, err := s.m.Probabilities(out)
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, "%v", err)
		}
		probs = p.Data().([]float32)
	}
	oshape := s.m.OutputShape()
	per := len(vals) / n
	b := make([]byte, 0, 64+n*per*24)
	b = append(b, `{"predictions":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		row := vals[i*per : (i+1)*per]
		switch s.m.Kind() {
		case model.Classifier:
			pr := probs[i*per : (i+1)*per]
			best := 0
			for c, p := range pr {
				if p > pr[best] {
					best = c
				}
			}
			b = append(b, `{"class":`...)
			b = strconv.AppendInt(b, int64(best), 10)
			if len(s.opts.ClassNames) > 0 {
				b = append(b, `,"label":`...)
				name, _ := json.Marshal(s.opts.ClassNames[best])
				b = append(b, name...)
			}
			b = append(b, `,"probability":`...)
			b = appendFloat(b, pr[best])
			b = append(b, `,"probabilities":`...)
			b = appendArray(b, pr, oshape)
			b = append(b, `,"outputs":`...)
			b = appendArray(b, row, oshape)
			b = append(b, '}')
		case model.Regressor:
			b = append(b, `{"values":`...)
			b = appendArray(b, row, oshape)
			b = append(b, '}')
		default:
			b = append(b, `{"outputs":`...)
			b = appendArray(b, row, oshape)
			b = append(b, '}')
		}
	}
	return append(b, "]}\n"...), nil
}

// appendFloat writes v as JSON: the shortest decimal that parses back to
// v as a float32, or null.
func appendFloat(b []byte, v float32) []byte {
	if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(v), 'g', -1, 32)
}

// appendArray writes v nested to shape (a flat array for one dimension).
func appendArray(b []byte, v []float32, shape []int) []byte {
	if len(shape) <= 1 {
		b = append(b, '[')
		for i, f := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFloat(b, f)
		}
		return append(b, ']')
	}
	step := len(v) / shape[0]
	b = append(b, '[')
	for i := range shape[0] {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendArray(b, v[i*step:(i+1)*step], shape[1:])
	}
	return append(b, ']')
}
