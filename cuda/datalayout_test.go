//go:build cuda

package cuda

import (
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
)

// floatTargets is a Regression of n samples of per values and targets of
// tshape, value i·100+j for sample i's j-th (targets negated), so a
// gather that mixes samples up or offsets a row shows.
type floatTargets struct {
	n, per int
	tshape []int
}

func (s *floatTargets) Name() string       { return "float targets" }
func (s *floatTargets) Len() int           { return s.n }
func (s *floatTargets) SampleShape() []int { return []int{s.per} }
func (s *floatTargets) TargetShape() []int { return s.tshape }
func (s *floatTargets) NumClasses() int    { return 0 }
func (s *floatTargets) Labels() []int32    { return nil }
func (s *floatTargets) tsize() int {
	t := 1
	for _, v := range s.tshape {
		t *= v
	}
	return t
}
func (s *floatTargets) Fill(idx []int, x []float32, _ []int32) { s.FillTargets(idx, x, nil) }
func (s *floatTargets) FillTargets(idx []int, x, y []float32) {
	t := s.tsize()
	for i, k := range idx {
		for j := range s.per {
			x[i*s.per+j] = float32(k*100 + j)
		}
		for j := 0; j < t && y != nil; j++ {
			y[i*t+j] = -float32(k*100 + j)
		}
	}
}

// textTokens is data.text's dataset over a short byte text: windows of 7.
func textTokens(t *testing.T) datasets.Tokens {
	t.Helper()
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog; ", 9))
	ds, err := datasets.Text("fox.txt", text, 7, "bytes", "train", 0.1)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestResidentLayout: each data kind is held as the CPU backend's Gather
// fills it (token windows and their next tokens as int32, float targets
// of any shape, one class label per sample), and a dataset that does not
// fit the model's input or target is refused naming it and saying what
// each holds.
func TestResidentLayout(t *testing.T) {
	classes, err := datasets.Synthetic("train", 13, []int{1, 3, 5}, 4, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	tokens := textTokens(t)
	reg := &floatTargets{n: 11, per: 5, tshape: []int{2, 3}}
	for _, c := range []struct {
		ds   datasets.Dataset
		want dataLayout
	}{
		{classes, dataLayout{kind: classData, per: 15, tper: 1}},
		{tokens, dataLayout{kind: tokenData, per: 7, tper: 7}},
		{reg, dataLayout{kind: regressionData, per: 5, tper: 6}},
		{datasets.Subset(tokens, 3), dataLayout{kind: tokenData, per: 7, tper: 7}},
	} {
		if got := residentLayout(c.ds); got != c.want {
			t.Errorf("%s: layout %+v, want %+v", c.ds.Name(), got, c.want)
		}
	}

	buf := func(dt engine.DType, shape ...int) *engine.Buffer {
		return &engine.Buffer{Name: "b", DType: dt, Max: shape, Batched: true}
	}
	f32, i32 := engine.Float32, engine.Int32
	for _, c := range []struct {
		l             dataLayout
		input, target *engine.Buffer
		err           string // "" when it fits
	}{
		{residentLayout(classes), buf(f32, 8, 1, 3, 5), buf(i32, 8), ""},
		{residentLayout(tokens), buf(i32, 8, 7), buf(i32, 8, 7), ""},
		{residentLayout(reg), buf(f32, 4, 5), buf(f32, 4, 2, 3), ""},
		{residentLayout(classes), buf(i32, 8, 15), buf(i32, 8), "has no token ids, the model's input takes them"},
		{residentLayout(tokens), buf(f32, 8, 7), buf(i32, 8, 7), "holds token ids, the model's input takes float values"},
		{residentLayout(classes), buf(f32, 8, 15), buf(f32, 8, 1), "has class labels, the model's target takes float values"},
		{residentLayout(reg), buf(f32, 4, 5), buf(i32, 4), "has float targets (regression), the model's target takes class labels"},
		{residentLayout(tokens), buf(i32, 8, 6), buf(i32, 8, 6), "has samples of 7 values, the input takes 6"},
		{residentLayout(reg), buf(f32, 4, 5), buf(f32, 4, 5), "has targets of 6 values, the model's target takes 5"},
	} {
		err := c.l.checkGather("DATA", c.input, c.target)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v: %v", c.l, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.HasPrefix(err.Error(), "DATA ")):
			t.Errorf("%+v into %s %v / %s %v: error %v, want one naming DATA with %q", c.l, c.input.DType, c.input.Max, c.target.DType, c.target.Max, err, c.err)
		}
	}
}

// TestGatherEveryDataKind gathers batches of each data kind (class
// labels, token windows, float targets of shape [2, 3]) on the GPU and on
// the CPU backend, a full and a partial batch with repeated and
// out-of-order samples: the inputs and targets must be the same bits.
func TestGatherEveryDataKind(t *testing.T) {
	needGPU(t)
	classes, err := datasets.Synthetic("train", 13, []int{1, 3, 5}, 4, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range []datasets.Dataset{classes, textTokens(t), &floatTargets{n: 11, per: 5, tshape: []int{2, 3}}} {
		l := residentLayout(ds)
		const nb = 6
		b := newProg()
		var input, target *engine.Buffer
		switch l.kind {
		case tokenData:
			input, target = b.i("input", 256, true, nb, l.per), b.i("target", 256, true, nb, l.tper)
		case regressionData:
			input, target = b.f("input", true, nb, l.per), b.f("target", true, nb, 2, 3)
		default:
			input, target = b.f("input", true, nb, 1, 3, 5), b.i("target", 4, true, nb)
		}
		pr := loadPair(t, b, backend.Options{}, 3)
		var worst float64
		for _, idx := range [][]int{{4, 0, 9, 4, 1, 2}, {ds.Len() - 1, 3, 3}} {
			var got [2][]float32
			for j, d := range []backend.Device{pr.gpu, pr.cpu} {
				data, err := d.LoadData(ds)
				if err != nil {
					t.Fatalf("%s: %v", ds.Name(), err)
				}
				d.SetBatch(len(idx))
				if err := d.Gather(data, idx, input, target); err != nil {
					t.Fatalf("%s: %v", ds.Name(), err)
				}
				got[j] = append(download(t, d, input, liveElems(input, len(idx))), download(t, d, target, liveElems(target, len(idx)))...)
				if f, ok := data.(backend.Freer); ok {
					f.Free()
				}
			}
			for k := range got[1] {
				if got[0][k] != got[1][k] {
					worst = 1
				}
			}
		}
		ok := worst == 0
		jsonLine(map[string]any{"check": "gather", "data": ds.Name(), "kind": int(l.kind), "ok": ok})
		if !ok {
			t.Errorf("%s: the GPU's batches differ from the CPU backend's", ds.Name())
		}
	}
}
