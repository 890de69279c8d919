package datasets

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// synthDataset returns s as a Dataset, normalized with mean 0 and std 1.
func synthDataset(t testing.TB, s synth) Dataset {
	t.Helper()
	dir := t.TempDir()
	writeSplit(t, dir, "train", s, false, false)
	d, err := MNIST("train", dir, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fillAll fills samples idx of d and returns the values and labels.
func fillAll(d Dataset, idx []int) ([]float32, []int32) {
	x := make([]float32, len(idx)*SampleSize(d))
	y := make([]int32, len(idx))
	d.Fill(idx, x, y)
	return x, y
}

// sameSamples checks that samples a of d and b of e are the same.
func sameSamples(t *testing.T, d Dataset, a []int, e Dataset, b []int) {
	t.Helper()
	xa, ya := fillAll(d, a)
	xb, yb := fillAll(e, b)
	if fmt.Sprint(ya) != fmt.Sprint(yb) {
		t.Fatalf("labels %v, want %v", yb, ya)
	}
	for i := range xa {
		if xa[i] != xb[i] {
			t.Fatalf("value %d: %v, want %v", i, xb[i], xa[i])
		}
	}
}

// foreign hides the concrete type of a Dataset, as a Dataset from another
// package would.
type foreign struct{ Dataset }

func TestSubset(t *testing.T) {
	d := synthDataset(t, newSynth(10, 3, 3))
	for _, base := range []Dataset{d, foreign{d}} {
		s := Subset(base, 4)
		if s.Len() != 4 || s.Name() != "mnist/train[:4]" {
			t.Errorf("Subset(4): Len %d Name %q", s.Len(), s.Name())
		}
		if !equalInts(s.SampleShape(), []int{1, 3, 3}) || s.NumClasses() != 10 {
			t.Errorf("Subset: shape %v classes %d", s.SampleShape(), s.NumClasses())
		}
		if got, want := fmt.Sprint(s.Labels()), fmt.Sprint(d.Labels()[:4]); got != want {
			t.Errorf("Subset labels %s, want %s", got, want)
		}
		sameSamples(t, d, []int{3, 0, 2}, s, []int{3, 0, 2})
		if ss := Subset(s, 2); ss.Len() != 2 || ss.Name() != "mnist/train[:2]" {
			t.Errorf("Subset of Subset: Len %d Name %q", ss.Len(), ss.Name())
		}
		expectPanic(t, "out of range [0, 4)", func() { fillAll(s, []int{4}) })
	}
	if Subset(d, 10) != d || Subset(d, 100) != d {
		t.Errorf("Subset(n >= Len) should return the dataset itself")
	}
	if Subset(d, 0).Len() != 0 {
		t.Errorf("Subset(0) not empty")
	}
	expectPanic(t, "negative size", func() { Subset(d, -1) })
}

func TestView(t *testing.T) {
	d := synthDataset(t, newSynth(10, 3, 3))
	for _, base := range []Dataset{d, foreign{d}} {
		idx := []int{9, 1, 1, 4}
		v, err := View(base, idx)
		if err != nil {
			t.Fatal(err)
		}
		idx[0] = 0 // View copied the list
		if v.Len() != 4 || v.Name() != "mnist/train[4 indices]" {
			t.Errorf("View: Len %d Name %q", v.Len(), v.Name())
		}
		all := d.Labels()
		if got, want := fmt.Sprint(v.Labels()), fmt.Sprint([]int32{all[9], all[1], all[1], all[4]}); got != want {
			t.Errorf("View labels %s, want %s", got, want)
		}
		sameSamples(t, d, []int{4, 9, 1}, v, []int{3, 0, 2})
		// A view of a view.
		vv, err := View(v, []int{3, 0})
		if err != nil {
			t.Fatal(err)
		}
		sameSamples(t, d, []int{4, 9}, vv, []int{0, 1})
		// A view of a subset, a subset of a view.
		vs, err := View(Subset(base, 5), []int{4, 2})
		if err != nil {
			t.Fatal(err)
		}
		sameSamples(t, d, []int{4, 2}, vs, []int{0, 1})
		sameSamples(t, d, []int{9, 1}, Subset(v, 2), []int{0, 1})
		expectPanic(t, "out of range [0, 4)", func() { fillAll(v, []int{4}) })
	}
	if _, err := View(d, []int{0, 10}); err == nil || !strings.Contains(err.Error(), "index 10 (position 1) out of range [0, 10)") {
		t.Errorf("View with a bad index: %v", err)
	}
	if _, err := View(Subset(d, 3), []int{3}); err == nil || !strings.Contains(err.Error(), "out of range [0, 3)") {
		t.Errorf("View of a subset with a bad index: %v", err)
	}
}

func TestFillPanics(t *testing.T) {
	d := synthDataset(t, newSynth(5, 2, 2))
	v, _ := View(d, []int{1, 2})
	for _, ds := range []Dataset{d, v} {
		expectPanic(t, "index -1 out of range", func() { fillAll(ds, []int{-1}) })
		expectPanic(t, "index 5 out of range", func() { fillAll(ds, []int{5}) })
		expectPanic(t, "need len(x) >= 8 and len(y) >= 2, got 7 and 2", func() {
			ds.Fill([]int{0, 1}, make([]float32, 7), make([]int32, 2))
		})
		expectPanic(t, "got 8 and 1", func() {
			ds.Fill([]int{0, 1}, make([]float32, 8), make([]int32, 1))
		})
	}
}

func expectPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic; want one with %q", want)
		} else if !strings.Contains(fmt.Sprint(r), want) {
			t.Errorf("panic %q; want one with %q", r, want)
		}
	}()
	f()
}

func TestFillAllocatesNothing(t *testing.T) {
	d := synthDataset(t, newSynth(100, 28, 28))
	v, err := View(d, []int{5, 7, 99, 0})
	if err != nil {
		t.Fatal(err)
	}
	vf, err := View(foreign{d}, []int{5, 7, 99, 0})
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{3, 1, 2, 0}
	x := make([]float32, len(idx)*784)
	y := make([]int32, len(idx))
	for _, ds := range []Dataset{d, Subset(d, 10), v, vf, Subset(foreign{d}, 10)} {
		if a := testing.AllocsPerRun(100, func() { ds.Fill(idx, x, y) }); a != 0 {
			t.Errorf("%s (%T): Fill allocates %v times per call", ds.Name(), ds, a)
		}
	}
}

// BenchmarkFill fills a batch of 64 random samples, from the real MNIST
// training set when it is available, else from synthetic data of its size.
func BenchmarkFill(b *testing.B) {
	var d Dataset
	if dir, err := MNISTDefaultDir(); err == nil {
		if d, err = MNIST("train", dir, MNISTMean, MNISTStd); err != nil {
			b.Fatal(err)
		}
	} else {
		d = synthDataset(b, newSynth(60000, 28, 28))
	}
	const batch = 64
	S := SampleSize(d)
	x := make([]float32, batch*S)
	y := make([]int32, batch)
	rng := rand.New(rand.NewPCG(1, 2))
	// Precomputed random batches, so the benchmark times Fill only.
	idx := make([]int, 1024*batch)
	for i := range idx {
		idx[i] = rng.IntN(d.Len())
	}
	b.SetBytes(batch * int64(S) * 4)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Fill(idx[i*batch:(i+1)*batch], x, y)
		i = (i + 1) % 1024
	}
}

func TestFillConcurrent(t *testing.T) {
	d := synthDataset(t, newSynth(50, 5, 5))
	v, err := View(d, []int{49, 0, 7, 7, 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range []Dataset{d, v} {
		idx := []int{4, 3, 2, 1, 0}
		wantX, wantY := fillAll(ds, idx)
		done := make(chan error)
		for range 4 {
			go func() {
				x, y := make([]float32, len(wantX)), make([]int32, len(wantY))
				for range 100 {
					ds.Fill(idx, x, y)
					if fmt.Sprint(x, y) != fmt.Sprint(wantX, wantY) {
						done <- fmt.Errorf("%s: concurrent Fill gave different samples", ds.Name())
						return
					}
				}
				done <- nil
			}()
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
}
