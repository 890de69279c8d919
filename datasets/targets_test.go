package datasets

import (
	"slices"
	"strings"
	"testing"

	"gorun/engine/spec"
	"gorun/safetensors"
)

// TestNegativeTargets: class labels and token targets below 0 are kept
// (a loss's ignore_index may skip them) and reported by Negatives and
// Describe; Kept counts the others; CheckNegatives refuses those that
// are not the ignore_index, saying what ignore_index is.
func TestNegativeTargets(t *testing.T) {
	dir := t.TempDir()
	x := safetensors.F32("images", []int{5, 2}, make([]float32, 10))
	labels := writeSafetensors(t, dir, "labels.safetensors", x, safetensors.I64("labels", []int{5}, []int64{0, -3, 1, -3, -100}))
	tokens := writeSafetensors(t, dir, "tokens.safetensors", safetensors.I64("images", []int{2, 3}, []int64{1, 2, 3, 4, 5, 6}),
		safetensors.I64("labels", []int{2, 3}, []int64{2, 3, -100, -100, -100, -100}))
	want := map[string][]Negative{labels: {{-3, 1}, {-100, 4}}, tokens: {{-100, 0}}}
	kept := map[string]int{labels: 4, tokens: 2}
	for _, file := range []string{labels, tokens} {
		src := TensorsSource{File: file, X: "images", Y: "labels"}
		ds, err := Tensors(src, "train", 0, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := Negatives(ds); !slices.Equal(got, want[file]) {
			t.Errorf("%s: Negatives %v, want %v", ds.Name(), got, want[file])
		}
		info, err := Describe(&spec.Data{Kind: "tensors", File: file, X: "images", Y: "labels"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(info.Negatives, want[file]) {
			t.Errorf("%s: Describe's Negatives %v, want %v", ds.Name(), info.Negatives, want[file])
		}
		if got := Kept(ds, nil, -100); got != kept[file] {
			t.Errorf("%s: Kept %d, want %d", ds.Name(), got, kept[file])
		}
	}
	ds, err := Tensors(TensorsSource{File: labels, X: "images", Y: "labels"}, "train", 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ds.NumClasses() != 2 {
		t.Errorf("classes %d, want 2 (the largest label + 1)", ds.NumClasses())
	}
	if got := Kept(ds, nil, -3); got != 3 {
		t.Errorf("Kept(-3) %d, want 3", got)
	}
	if got := Kept(ds, []int{1, 2, 3}, -3); got != 1 {
		t.Errorf("Kept(-3) of samples 1-3: %d, want 1", got)
	}
	all := writeSafetensors(t, dir, "all.safetensors", x, safetensors.I64("labels", []int{5}, []int64{-100, -100, -100, -100, -100}))
	if _, err := Tensors(TensorsSource{File: all, X: "images", Y: "labels"}, "train", 0, 0, 1); err == nil || !strings.Contains(err.Error(), "every label is below 0, so none says how many classes there are: give classes = N") {
		t.Errorf("every label below 0, no classes: %v", err)
	}
	negs := Negatives(ds)
	minus3, minus100 := -3, -100
	for _, c := range []struct {
		ignore *int
		want   string
	}{
		{nil, "y.npy: sample 1 has the target -3: class targets are 0 … classes − 1, and no ignore_index is set; set ignore_index = -3 (train's or the loss's) to skip such targets"},
		{&minus3, "y.npy: sample 4 has the target -100: class targets are 0 … classes − 1, and the loss skips only its ignore_index, -3"},
		{&minus100, "y.npy: sample 1 has the target -3: class targets are 0 … classes − 1, and the loss skips only its ignore_index, -100"},
	} {
		if err := CheckNegatives("y.npy", negs, c.ignore); err == nil || err.Error() != c.want {
			t.Errorf("ignore %v: %v, want %q", c.ignore, err, c.want)
		}
	}
	if err := CheckNegatives("y.npy", negs[:1], &minus3); err != nil {
		t.Errorf("only the ignore_index below 0: %v", err)
	}
	if err := CheckNegatives("y.npy", nil, nil); err != nil {
		t.Errorf("no negative targets: %v", err)
	}
}
