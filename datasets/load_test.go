package datasets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/engine/spec"
	"gorun/safetensors"
)

// transformSpec is an element of spec.Data's Transforms.
type transformSpec = struct {
	Kind          string
	Height, Width int
	Padding       int
	P             float64
}

// transformSpecs is a random crop (height, width, padding) then a flip.
func transformSpecs(crop [3]int, p float64) []transformSpec {
	return []transformSpec{
		{Kind: "random_crop", Height: crop[0], Width: crop[1], Padding: crop[2]},
		{Kind: "hflip", P: p},
	}
}

func TestLoadTensorsWithTransforms(t *testing.T) {
	dir := t.TempDir()
	px := make([]byte, 20*36)
	for i := range px {
		px[i] = byte(i%250 + 1)
	}
	lbl := make([]int64, 20)
	for i := range lbl {
		lbl[i] = int64(i % 3)
	}
	path := filepath.Join(dir, "d.safetensors")
	if err := safetensors.WriteFile(path, []safetensors.Tensor{
		safetensors.U8("images", []int{20, 1, 6, 6}, px), safetensors.I64("labels", []int{20}, lbl)}, nil); err != nil {
		t.Fatal(err)
	}
	d := &spec.Data{Kind: "tensors", Split: "train", File: path, X: "images", Y: "labels", Normalize: [2]float64{0.5, 0.5},
		Limit: 12, Transforms: transformSpecs([3]int{4, 4, 1}, 0.5), Pos: "train.star:3:5"}
	info, err := Describe(d)
	if err != nil || !slices.Equal(info.Sample, []int{1, 4, 4}) || info.Classes != 3 {
		t.Fatalf("Describe = %+v, %v", info, err)
	}
	ds, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := ds.(EpochDataset)
	if !ok {
		t.Fatalf("%s is no EpochDataset", ds.Name())
	}
	if ds.Len() != 12 || !slices.Equal(ds.SampleShape(), []int{1, 4, 4}) || ds.NumClasses() != 3 ||
		ds.Name() != "d.safetensors/train[:12]+random_crop(4, padding=1)+hflip(0.5)" {
		t.Errorf("%s: %d samples of %v, %d classes", ds.Name(), ds.Len(), ds.SampleShape(), ds.NumClasses())
	}
	// Unbound (evaluation): the centre crop, untransformed.
	x := make([]float32, 16)
	y := make([]int32, 1)
	ds.Fill([]int{7}, x, y)
	for r := range 4 {
		for c := range 4 {
			p := px[7*36+(r+1)*6+c+1]
			if want := (float32(p)/255 - 0.5) / 0.5; x[r*4+c] != want {
				t.Fatalf("centre crop (%d, %d) = %v, want %v", r, c, x[r*4+c], want)
			}
		}
	}
	// Bound: padding is black, (0 − 0.5)/0.5 = −1, and shows in some sample.
	e := a.Epoch(5, 1)
	xs := make([]float32, 12*16)
	e.Fill([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, xs, make([]int32, 12))
	if !slices.Contains(xs, -1) {
		t.Error("no padding value −1 in 12 randomly cropped samples")
	}

	// A transform that does not fit the samples: the error has the position.
	d.Transforms = transformSpecs([3]int{9, 4, 1}, 0.5)
	for _, f := range []func() error{
		func() error { _, err := Describe(d); return err },
		func() error { _, err := Load(d); return err },
	} {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "train.star:3:5: data.tensors") ||
			!strings.Contains(err.Error(), "the 9×4 crop is larger than the padded 8×8 sample") {
			t.Errorf("crop too large: %v", err)
		}
	}
}

func TestLoadFashionMNIST(t *testing.T) {
	if _, err := os.Stat(FashionMNISTDir); err != nil {
		t.Skipf("SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	d := &spec.Data{Kind: "fashion_mnist", Split: "test", Normalize: [2]float64{0.2860, 0.3530}, Limit: 50,
		Transforms: transformSpecs([3]int{28, 28, 4}, 0.5)}
	ds, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 50 || ds.Name() != "fashion-mnist/test[:50]+random_crop(28, padding=4)+hflip(0.5)" {
		t.Errorf("%s, %d samples", ds.Name(), ds.Len())
	}
}
