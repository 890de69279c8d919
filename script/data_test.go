package script

import (
	"reflect"
	"testing"

	"gorun/engine/spec"
)

const dataScript = `
train(
    model = nn.sequential(nn.flatten(), nn.linear(3072, 10, name = "fc")),
    loss = "nll",
    data = data.tensors("sets/cifar.safetensors", x = "train_x", y = "train_y", normalize = (0.5, 0.25),
                        limit = 500, transforms = [data.random_crop(32, padding = 4), data.hflip()]),
    eval = data.tensors(x = "sets/x.npy", y = "/abs/y.npy", split = "test", classes = 10),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 32,
)
`

// TestDataSpec checks the spec.Data the new data builtins produce: paths
// relative to the script, defaults, transforms; and that --set rebuilds
// a value without resolving its paths again.
func TestDataSpec(t *testing.T) {
	fs := memFS{"/w/train.star": dataScript}
	for _, sets := range [][]string{nil, {"data.limit=7"}} {
		var ov []Override
		for _, s := range sets {
			o, err := ParseOverride(s)
			if err != nil {
				t.Fatal(err)
			}
			ov = append(ov, o)
		}
		s, err := Load("/w/train.star", WithFileReader(fs), WithOverrides(ov...))
		if err != nil {
			t.Fatal(errorText(err))
		}
		d := s.Data
		limit := 500
		if sets != nil {
			limit = 7
		}
		if d.Kind != "tensors" || d.File != "/w/sets/cifar.safetensors" || d.X != "train_x" || d.Y != "train_y" ||
			d.Normalize != [2]float64{0.5, 0.25} || d.Limit != limit || d.Classes != 0 || d.Split != "train" {
			t.Errorf("--set %v: data = %+v", sets, d)
		}
		want := []transformSpec{{Kind: "random_crop", Height: 32, Width: 32, Padding: 4}, {Kind: "hflip", P: 0.5}}
		if !reflect.DeepEqual([]transformSpec(d.Transforms), want) {
			t.Errorf("transforms = %+v, want %+v", d.Transforms, want)
		}
		e := s.Eval
		if e.File != "" || e.X != "/w/sets/x.npy" || e.Y != "/abs/y.npy" || e.Classes != 10 || e.Split != "test" ||
			e.Normalize != [2]float64{0, 1} || e.Transforms != nil {
			t.Errorf("eval = %+v", e)
		}
	}

	// data.fashion_mnist's defaults; data.tensors' default keys.
	s, err := Load("/w/f.star", WithFileReader(memFS{"/w/f.star": `
train(model = nn.sequential(nn.flatten(), nn.linear(784, 10)), loss = "nll",
      data = data.fashion_mnist(dir = "fm", transforms = [data.random_crop((26, 27))]),
      eval = data.tensors("t.safetensors"),
      optimizer = optim.sgd(lr = 0.1), batch_size = 8)
`}))
	if err != nil {
		t.Fatal(errorText(err))
	}
	want := spec.Data{Kind: "fashion_mnist", Split: "train", Dir: "/w/fm", Normalize: [2]float64{0.2860, 0.3530}, Pos: s.Data.Pos}
	want.Transforms = append(want.Transforms, transformSpec{Kind: "random_crop", Height: 26, Width: 27})
	if !reflect.DeepEqual(s.Data, want) {
		t.Errorf("fashion_mnist = %+v, want %+v", s.Data, want)
	}
	if e := s.Eval; e.File != "/w/t.safetensors" || e.X != "images" || e.Y != "labels" {
		t.Errorf("tensors defaults: %+v", e)
	}
}

// TestDataImagesCSVSpec checks the spec.Data of data.images and data.csv:
// paths relative to the script, defaults, sizes, per-channel
// normalization, columns; --set rebuilds them.
func TestDataImagesCSVSpec(t *testing.T) {
	fs := memFS{"/w/train.star": `
train(
    model = nn.sequential(nn.flatten(), nn.linear(3 * 32 * 24, 4, name = "fc")),
    loss = "cross_entropy",
    data = data.images("pics", size = (32, 24), normalize = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                       transforms = [data.hflip()]),
    eval = data.images("pics", size = 8, channels = 1, normalize = (0.5, 0.25), split = "test", seed = 3,
                       test_fraction = 0.1, limit = 9),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 32,
)
`, "/w/csv.star": `
train(
    model = nn.sequential(nn.linear(2, 1, name = "fc")),
    loss = "mse",
    data = data.csv("tables/t.csv", y = "price", x = ["a", "b"], task = "regression", test_file = "/abs/test.csv"),
    eval = data.csv("tables/t.csv", y = "kind", x = "a", normalize = None, classes = 3, split = "test"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
)
`}
	for _, sets := range [][]string{nil, {"data.size=(16, 12)"}} {
		var ov []Override
		for _, s := range sets {
			o, err := ParseOverride(s)
			if err != nil {
				t.Fatal(err)
			}
			ov = append(ov, o)
		}
		s, err := Load("/w/train.star", WithFileReader(fs), WithOverrides(ov...))
		if err != nil {
			t.Fatal(errorText(err))
		}
		d, e := s.Data, s.Eval
		size := [2]int{32, 24}
		if sets != nil {
			size = [2]int{16, 12}
		}
		if d.Kind != "images" || d.Dir != "/w/pics" || d.ImageSize != size || d.Channels != 3 || d.Split != "train" ||
			d.TestFraction != 0.2 || d.Seed != 0 || !reflect.DeepEqual(d.ChannelMean, []float64{0.485, 0.456, 0.406}) ||
			!reflect.DeepEqual(d.ChannelStd, []float64{0.229, 0.224, 0.225}) || len(d.Transforms) != 1 {
			t.Errorf("--set %v: data = %+v", sets, d)
		}
		if e.Dir != "/w/pics" || e.ImageSize != [2]int{8, 8} || e.Channels != 1 || e.Split != "test" || e.Seed != 3 ||
			e.TestFraction != 0.1 || e.Limit != 9 || !reflect.DeepEqual(e.ChannelMean, []float64{0.5}) || !reflect.DeepEqual(e.ChannelStd, []float64{0.25}) {
			t.Errorf("eval = %+v", e)
		}
	}
	s, err := Load("/w/csv.star", WithFileReader(fs))
	if err != nil {
		t.Fatal(errorText(err))
	}
	d, e := s.Data, s.Eval
	if d.Kind != "csv" || d.File != "/w/tables/t.csv" || d.Y != "price" || !reflect.DeepEqual(d.Columns, []string{"a", "b"}) ||
		!d.Regression || !d.Standardize || d.TestFile != "/abs/test.csv" || d.TestFraction != 0.2 || d.Split != "train" {
		t.Errorf("csv data = %+v", d)
	}
	if e.Regression || e.Standardize || !reflect.DeepEqual(e.Columns, []string{"a"}) || e.Classes != 3 || e.Split != "test" || e.TestFile != "" {
		t.Errorf("csv eval = %+v", e)
	}
}
