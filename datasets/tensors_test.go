package datasets

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/safetensors"
)

// writeSafetensors writes tensors to dir/name and returns the path.
func writeSafetensors(t *testing.T, dir, name string, tensors ...safetensors.Tensor) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := safetensors.WriteFile(p, tensors, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTensorsSafetensors(t *testing.T) {
	dir := t.TempDir()
	xs := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // 3 samples of 1×2×2
	x64 := make([]float64, len(xs))
	x8 := make([]byte, len(xs))
	for i, v := range xs {
		x64[i] = float64(v)
		x8[i] = byte(v * 20)
	}
	labels := []int64{2, 0, 1}
	want := []int32{2, 0, 1}
	shape := []int{3, 1, 2, 2}
	for _, tc := range []struct {
		name string
		x, y safetensors.Tensor
		want func(i int) float32 // value i before normalization
	}{
		{"f32 i64", safetensors.F32("images", shape, xs), safetensors.I64("labels", []int{3}, labels), func(i int) float32 { return xs[i] }},
		{"f64 i32", safetensors.F64("images", shape, x64), safetensors.I32("labels", []int{3}, want), func(i int) float32 { return xs[i] }},
		{"u8 u8", safetensors.U8("images", shape, x8), safetensors.U8("labels", []int{3}, []byte{2, 0, 1}), func(i int) float32 { return float32(x8[i]) / 255 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeSafetensors(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".safetensors", tc.x, tc.y,
				safetensors.F32("other", []int{1}, []float32{1}))
			src := TensorsSource{File: p, X: "images", Y: "labels"}
			for _, norm := range [][2]float64{{0, 1}, {0.5, 2}} {
				d, err := Tensors(src, "test", 0, norm[0], norm[1])
				if err != nil {
					t.Fatal(err)
				}
				if d.Name() != filepath.Base(p)+"/test" || d.Len() != 3 || d.NumClasses() != 3 ||
					!slices.Equal(d.SampleShape(), []int{1, 2, 2}) || !slices.Equal(d.Labels(), want) {
					t.Fatalf("%s: %d samples of %v, %d classes, labels %v", d.Name(), d.Len(), d.SampleShape(), d.NumClasses(), d.Labels())
				}
				x, y := fillAll(d, []int{2, 0})
				if !slices.Equal(y, []int32{1, 2}) {
					t.Errorf("labels %v", y)
				}
				for j, v := range x {
					i := (8 + j) % 12
					if w := (tc.want(i) - float32(norm[0])) / float32(norm[1]); v != w {
						t.Fatalf("normalize %v: value %d = %v, want %v", norm, j, v, w)
					}
				}
			}
			// classes = 10: more classes than labels show.
			d, err := Tensors(src, "train", 10, 0, 1)
			if err != nil || d.NumClasses() != 10 {
				t.Errorf("classes 10: %v, %v", d, err)
			}
			shape, classes, _, _, err := TensorsInfo(src, 0)
			if err != nil || !slices.Equal(shape, []int{1, 2, 2}) || classes != 3 {
				t.Errorf("TensorsInfo = %v, %d, %v", shape, classes, err)
			}
		})
	}
}

func TestTensorsNPYPair(t *testing.T) {
	dir := t.TempDir()
	xp, yp := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	writeFile(t, xp, npyBytes(1, "<f4", false, []int{2, 3}, f32Bytes(1, 2, 3, 4, 5, 6)))
	writeFile(t, yp, npyBytes(1, "<i8", false, []int{2}, i64Bytes(1, 0)))
	src := TensorsSource{X: xp, Y: yp}
	d, err := Tensors(src, "train", 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != "x.npy+y.npy/train" || !slices.Equal(d.SampleShape(), []int{3}) || d.NumClasses() != 2 {
		t.Errorf("%s: %v, %d classes", d.Name(), d.SampleShape(), d.NumClasses())
	}
	x, y := fillAll(d, []int{1, 0})
	if !slices.Equal(x, []float32{4, 5, 6, 1, 2, 3}) || !slices.Equal(y, []int32{0, 1}) {
		t.Errorf("Fill: %v %v", x, y)
	}
	// TensorsInfo reads only the samples' header: a truncated data part
	// is still caught, by the file's length.
	shape, classes, _, _, err := TensorsInfo(src, 0)
	if err != nil || !slices.Equal(shape, []int{3}) || classes != 2 {
		t.Errorf("TensorsInfo = %v, %d, %v", shape, classes, err)
	}
	b, _ := os.ReadFile(xp)
	writeFile(t, xp, b[:len(b)-1])
	if _, _, _, _, err := TensorsInfo(src, 0); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("TensorsInfo of a truncated file: %v", err)
	}
}

func TestTensorsErrors(t *testing.T) {
	dir := t.TempDir()
	x := safetensors.F32("images", []int{2, 2}, []float32{1, 2, 3, 4})
	y := safetensors.I64("labels", []int{2}, []int64{0, 1})
	nan := safetensors.F32("images", []int{2, 2}, []float32{1, 2, float32(math.NaN()), 4})
	inf := safetensors.F64("images", []int{2, 2}, []float64{1, math.Inf(-1), 3, 4})
	big := safetensors.F64("images", []int{2, 2}, []float64{1, 1e300, 3, 4})
	tests := []struct {
		name    string
		tensors []safetensors.Tensor
		classes int
		message []string
	}{
		{"missing x", []safetensors.Tensor{y, safetensors.F32("pixels", []int{2, 2}, []float32{1, 2, 3, 4})}, 0,
			[]string{`has no tensor "images" (the samples, x); it holds 2 tensors: "labels", "pixels"`}},
		{"missing y", []safetensors.Tensor{x}, 0, []string{`has no tensor "labels" (the labels, y); it holds 1 tensors: "images"`}},
		{"x dtype", []safetensors.Tensor{{Name: "images", DType: safetensors.DTypeF16, Shape: []int{2, 1}, Data: []byte{0, 60, 0, 64}}, y}, 0,
			[]string{`tensor "images": samples of dtype float16 (F16): want float32, float64 or uint8 (or int64/int32 token ids)`}},
		{"token ids without token targets", []safetensors.Tensor{safetensors.I32("images", []int{2, 1}, []int32{1, 2}), y}, 0,
			[]string{`tensor "images": integer samples (token ids) of shape [2 1] need integer targets of the same shape`}},
		{"float targets with classes", []safetensors.Tensor{x, safetensors.F32("labels", []int{2}, []float32{0, 1})}, 3,
			[]string{`tensor "labels" holds float targets (regression), which have no classes; drop classes = 3`}},
		{"y shape", []safetensors.Tensor{x, safetensors.I64("labels", []int{2, 1}, []int64{0, 1})}, 0,
			[]string{"labels of shape [2 1]: want one label per sample, shape [N]"}},
		{"x rank 1", []safetensors.Tensor{safetensors.F32("images", []int{2}, []float32{1, 2}), y}, 0,
			[]string{"samples of shape [2]: want the sample dimension first"}},
		{"no samples", []safetensors.Tensor{safetensors.F32("images", []int{0, 3}, nil), safetensors.I64("labels", []int{0}, nil)}, 0,
			[]string{"shape [0 3] holds no samples"}},
		{"count mismatch", []safetensors.Tensor{x, safetensors.I64("labels", []int{3}, []int64{0, 1, 1})}, 0,
			[]string{`tensor "images" holds 2 samples but`, `tensor "labels" holds 3 labels`}},
		{"negative label too small", []safetensors.Tensor{x, safetensors.I64("labels", []int{2}, []int64{0, -1 << 40})}, 0,
			[]string{`tensor "labels": label -1099511627776 of sample 1 is negative and too small`}},
		{"label out of range", []safetensors.Tensor{x, safetensors.I32("labels", []int{2}, []int32{0, 5})}, 4,
			[]string{`tensor "labels": label 5 of sample 1 is out of range [0, 4) (classes = 4)`}},
		{"huge label", []safetensors.Tensor{x, safetensors.I64("labels", []int{2}, []int64{0, 1 << 40})}, 0,
			[]string{"label 1099511627776 of sample 1 is too large"}},
		{"NaN", []safetensors.Tensor{nan, y}, 0, []string{`tensor "images": sample 1 holds NaN at element 0: every value must be finite`}},
		{"Inf", []safetensors.Tensor{inf, y}, 0, []string{`sample 0 holds -Inf at element 1`}},
		{"beyond float32", []safetensors.Tensor{big, y}, 0, []string{"sample 0 holds 1e+300 at element 1: beyond float32's range"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeSafetensors(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".safetensors", tc.tensors...)
			_, err := Tensors(TensorsSource{File: p, X: "images", Y: "labels"}, "train", tc.classes, 0, 1)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, m := range append(tc.message, p) {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message lacks %q", m)
				}
			}
		})
	}

	// A truncated safetensors file.
	p := writeSafetensors(t, dir, "whole.safetensors", x, y)
	b, _ := os.ReadFile(p)
	writeFile(t, p, b[:len(b)-5])
	if _, err := Tensors(TensorsSource{File: p, X: "images", Y: "labels"}, "train", 0, 0, 1); err == nil ||
		!strings.Contains(err.Error(), p) {
		t.Errorf("truncated file: %v, want an error naming %s", err, p)
	} else {
		t.Log(err)
	}
	// Arguments.
	good := writeSafetensors(t, dir, "good.safetensors", x, y)
	for _, tc := range []struct {
		split     string
		mean, std float64
		classes   int
		message   string
	}{
		{"valid", 0, 1, 0, `unknown split "valid"`},
		{"train", 0, 0, 0, "std 0 must be a positive finite number"},
		{"train", math.NaN(), 1, 0, "mean NaN is not a finite number"},
		{"train", 0, 1e-45, 0, "normalization gives"},
		{"train", 0, 1, -1, "classes -1 is negative"},
	} {
		_, err := Tensors(TensorsSource{File: good, X: "images", Y: "labels"}, tc.split, tc.classes, tc.mean, tc.std)
		if err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%+v: got %v, want %q", tc, err, tc.message)
		}
	}
	// A missing .npy file.
	_, err := Tensors(TensorsSource{X: filepath.Join(dir, "nope.npy"), Y: filepath.Join(dir, "y.npy")}, "train", 0, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "nope.npy") || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing .npy: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// TestTensorsRegression: float targets make a Regression dataset whose
// FillTargets copies targets of the per-sample shape ([1] for y of shape
// [N]); limits keep it a Regression.
func TestTensorsRegression(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reg.safetensors")
	xs := safetensors.F32("images", []int{3, 2}, []float32{1, 2, 3, 4, 5, 6})
	for _, c := range []struct {
		y     safetensors.Tensor
		shape []int
	}{
		{safetensors.F32("labels", []int{3}, []float32{0.5, -1, 2}), []int{1}},
		{safetensors.F64("labels", []int{3, 2}, []float64{1, 2, 3, 4, 5, 6}), []int{2}},
	} {
		if err := safetensors.WriteFile(path, []safetensors.Tensor{xs, c.y}, nil); err != nil {
			t.Fatal(err)
		}
		src := TensorsSource{File: path, X: "images", Y: "labels"}
		shape, classes, target, _, err := TensorsInfo(src, 0)
		if err != nil || classes != 0 || !slices.Equal(shape, []int{2}) || !slices.Equal(target, c.shape) {
			t.Fatalf("TensorsInfo = %v %d %v %v", shape, classes, target, err)
		}
		ds, err := Tensors(src, "train", 0, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := Subset(ds, 2).(Regression)
		if !ok {
			t.Fatalf("%T is not a Regression", ds)
		}
		tn := c.shape[0]
		x, y := make([]float32, 4), make([]float32, 2*tn)
		r.FillTargets([]int{1, 0}, x, y)
		want, _ := c.y.Float32s()
		if c.y.DType == safetensors.DTypeF64 {
			f, _ := c.y.Float64s()
			want = []float32{float32(f[0]), float32(f[1]), float32(f[2]), float32(f[3])}
		}
		if !slices.Equal(x, []float32{3, 4, 1, 2}) || !slices.Equal(y, append(append([]float32(nil), want[tn:2*tn]...), want[:tn]...)) {
			t.Errorf("FillTargets: x %v y %v", x, y)
		}
	}
}
