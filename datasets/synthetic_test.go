package datasets

import (
	"reflect"
	"testing"
)

func TestSynthetic(t *testing.T) {
	tr, err := Synthetic("train", 300, []int{1, 4, 4}, 3, 0.1, 7)
	if err != nil {
		t.Fatal(err)
	}
	te, err := Synthetic("test", 300, []int{1, 4, 4}, 3, 0.1, 7)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 300 || tr.NumClasses() != 3 || !reflect.DeepEqual(tr.SampleShape(), []int{1, 4, 4}) {
		t.Fatalf("train: len %d classes %d shape %v", tr.Len(), tr.NumClasses(), tr.SampleShape())
	}
	if reflect.DeepEqual(tr.Labels(), te.Labels()) {
		t.Error("train and test splits have the same labels")
	}
	// Same seed: same data; every class present.
	again, _ := Synthetic("train", 300, []int{1, 4, 4}, 3, 0.1, 7)
	x1, y1 := make([]float32, 16*2), make([]int32, 2)
	x2, y2 := make([]float32, 16*2), make([]int32, 2)
	tr.Fill([]int{5, 9}, x1, y1)
	again.Fill([]int{5, 9}, x2, y2)
	if !reflect.DeepEqual(x1, x2) || !reflect.DeepEqual(y1, y2) {
		t.Error("the same seed gave different data")
	}
	seen := map[int32]bool{}
	for _, y := range tr.Labels() {
		seen[y] = true
	}
	if len(seen) != 3 {
		t.Errorf("classes present: %v", seen)
	}
	// Samples of one class are close to each other (noise 0.1), so a
	// nearest-template rule separates them: same-class distance < other.
	x := make([]float32, 16*300)
	y := make([]int32, 300)
	idx := make([]int, 300)
	for i := range idx {
		idx[i] = i
	}
	tr.Fill(idx, x, y)
	dist := func(a, b int) float64 {
		var d float64
		for k := 0; k < 16; k++ {
			e := float64(x[a*16+k] - x[b*16+k])
			d += e * e
		}
		return d
	}
	for i := 1; i < 300; i++ {
		if y[i] == y[0] && dist(0, i) > 1 {
			t.Fatalf("samples 0 and %d share class %d but are %.2f apart", i, y[0], dist(0, i))
		}
	}
	for _, bad := range []struct {
		split   string
		n       int
		shape   []int
		classes int
	}{{"val", 1, []int{1}, 2}, {"train", 0, []int{1}, 2}, {"train", 1, []int{0}, 2}, {"train", 1, []int{1}, 1}} {
		if _, err := Synthetic(bad.split, bad.n, bad.shape, bad.classes, 1, 0); err == nil {
			t.Errorf("Synthetic(%q, %d, %v, %d): no error", bad.split, bad.n, bad.shape, bad.classes)
		}
	}
}
