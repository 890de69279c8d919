package datasets

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// rampSet is n samples of shape [c h w] whose values are all distinct
// and non-zero: value j of sample i is 1 + i·size + j.
func rampSet(t *testing.T, n, c, h, w int) Dataset {
	t.Helper()
	size := c * h * w
	s := &floatSet{name: "ramp", shape: []int{c, h, w}, classes: 3, size: size,
		x: make([]float32, n*size), labels: make([]int32, n)}
	for i := range s.x {
		s.x[i] = float32(1 + i)
	}
	for i := range s.labels {
		s.labels[i] = int32(i % 3)
	}
	return s
}

func mustTransforms(t *testing.T, ts ...func() (Transform, error)) []Transform {
	t.Helper()
	var out []Transform
	for _, f := range ts {
		tr, err := f()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tr)
	}
	return out
}

func cropT(h, w, p int) func() (Transform, error) {
	return func() (Transform, error) { return RandomCrop(h, w, p) }
}

func flipT(p float64) func() (Transform, error) {
	return func() (Transform, error) { return HFlip(p) }
}

func mustAugment(t *testing.T, d Dataset, pad float32, ts []Transform) *Augmented {
	t.Helper()
	a, err := Augment(d, pad, ts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAugmentIndependentOfBatch: a sample's transform at an epoch does not
// depend on the other indices of the Fill call, their order, or the
// device (dataset value) that fills it; it does depend on the epoch.
func TestAugmentIndependentOfBatch(t *testing.T) {
	base := rampSet(t, 40, 3, 6, 5)
	ts := mustTransforms(t, cropT(6, 5, 2), flipT(0.5))
	one := mustAugment(t, base, -1, ts).Epoch(11, 3)
	other := mustAugment(t, base, -1, ts).Epoch(11, 3) // another device's copy
	per := SampleSize(one)
	all := make([]int, 40)
	for i := range all {
		all[i] = i
	}
	xa, ya := fillAll(one, all)
	// The samples in another order, in batches of 7, through the other copy.
	perm := []int{39, 3, 17, 0, 22, 8, 31, 12, 5, 27, 19, 36, 1, 14, 25, 9, 33, 6, 20, 38,
		2, 16, 29, 11, 24, 7, 35, 18, 4, 30, 13, 26, 10, 37, 21, 15, 32, 23, 34, 28}
	for lo := 0; lo < len(perm); lo += 7 {
		b := perm[lo:min(lo+7, len(perm))]
		xb, yb := fillAll(other, b)
		for i, k := range b {
			if !slices.Equal(xb[i*per:(i+1)*per], xa[k*per:(k+1)*per]) || yb[i] != ya[k] {
				t.Fatalf("sample %d differs when filled with %v", k, b)
			}
		}
	}
	// Another epoch, or another seed, transforms the samples differently.
	for _, d := range []Dataset{mustAugment(t, base, -1, ts).Epoch(11, 4), mustAugment(t, base, -1, ts).Epoch(12, 3)} {
		xc, yc := fillAll(d, all)
		if !slices.Equal(yc, ya) {
			t.Errorf("%s: labels changed", d.Name())
		}
		same := 0
		for k := range all {
			if slices.Equal(xc[k*per:(k+1)*per], xa[k*per:(k+1)*per]) {
				same++
			}
		}
		if same > 10 {
			t.Errorf("%d of 40 samples transformed identically in another epoch or seed", same)
		}
	}
	// Every sample is transformed, and some are flipped, some not.
	flips := 0
	for k := range all {
		if isFlipOfCrop(xa[k*per:(k+1)*per], base, k, 6, 5, 2, -1) {
			flips++
		}
	}
	if flips < 8 || flips > 32 {
		t.Errorf("%d of 40 samples flipped with p = 0.5", flips)
	}
}

// isFlipOfCrop reports whether got is a flipped crop (padding p, value
// pad) of sample k of base, at some offset.
func isFlipOfCrop(got []float32, base Dataset, k, h, w, p int, pad float32) bool {
	x, _ := fillAll(base, []int{k})
	shape := base.SampleShape()
	H, W := shape[1], shape[2]
	planes := len(x) / (H * W)
	buf := make([]float32, len(got))
	for top := 0; top <= H+2*p-h; top++ {
		for left := 0; left <= W+2*p-w; left++ {
			crop(x, buf, planes, H, W, h, w, top-p, left-p, []float32{pad})
			hflip(buf, w)
			if slices.Equal(buf, got) {
				return true
			}
		}
	}
	return false
}

func TestCropKeepsShape(t *testing.T) {
	base := rampSet(t, 20, 2, 7, 9)
	a := mustAugment(t, base, 0, mustTransforms(t, cropT(7, 9, 3)))
	if !slices.Equal(a.SampleShape(), []int{2, 7, 9}) {
		t.Fatalf("shape %v", a.SampleShape())
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	x, _ := fillAll(a.Epoch(1, 0), all)
	ref, _ := fillAll(base, all)
	per := 2 * 7 * 9
	moved := 0
	for k := range all {
		got := x[k*per : (k+1)*per]
		if !slices.Equal(got, ref[k*per:(k+1)*per]) {
			moved++
		}
		// Every value is either padding (0) or a value of the sample, in
		// the same relative order (a shifted window).
		src := ref[k*per : (k+1)*per]
		for _, v := range got {
			if v != 0 && !slices.Contains(src, v) {
				t.Fatalf("sample %d: value %v is not from the sample", k, v)
			}
		}
		if !isCrop(got, src, 2, 7, 9, 7, 9, 3) {
			t.Fatalf("sample %d is no crop of the padded sample", k)
		}
	}
	if moved < 15 {
		t.Errorf("only %d of 20 samples moved by random_crop(padding=3)", moved)
	}
	// A smaller crop changes the shape; unbound, it is the centre crop.
	c := mustAugment(t, base, 0, mustTransforms(t, cropT(3, 5, 0)))
	if !slices.Equal(c.SampleShape(), []int{2, 3, 5}) {
		t.Fatalf("shape %v", c.SampleShape())
	}
	x, _ = fillAll(c, []int{4})
	want := make([]float32, 2*3*5)
	crop(ref[4*per:5*per], want, 2, 7, 9, 3, 5, 2, 2, []float32{0})
	if !slices.Equal(x, want) {
		t.Errorf("centre crop %v, want %v", x, want)
	}
}

// isCrop reports whether got is an h×w window of src (planes of H×W)
// padded by p zeros.
func isCrop(got, src []float32, planes, H, W, h, w, p int) bool {
	buf := make([]float32, len(got))
	for top := 0; top <= H+2*p-h; top++ {
		for left := 0; left <= W+2*p-w; left++ {
			crop(src, buf, planes, H, W, h, w, top-p, left-p, []float32{0})
			if slices.Equal(buf, got) {
				return true
			}
		}
	}
	return false
}

func TestCropByHand(t *testing.T) {
	// One 2×3 plane, padding 1, window 2×3 at offset (-1, 1).
	src := []float32{1, 2, 3, 4, 5, 6}
	dst := make([]float32, 6)
	crop(src, dst, 1, 2, 3, 2, 3, -1, 1, []float32{-9})
	if want := []float32{-9, -9, -9, 2, 3, -9}; !slices.Equal(dst, want) {
		t.Errorf("crop = %v, want %v", dst, want)
	}
	crop(src, dst, 1, 2, 3, 2, 3, 0, 0, []float32{-9})
	if !slices.Equal(dst, src) {
		t.Errorf("crop at 0, 0 = %v", dst)
	}
	crop(src, dst, 1, 2, 3, 2, 3, 1, -1, []float32{0})
	if want := []float32{0, 4, 5, 0, 0, 0}; !slices.Equal(dst, want) {
		t.Errorf("crop = %v, want %v", dst, want)
	}
}

func TestFlip(t *testing.T) {
	base := rampSet(t, 10, 3, 4, 5)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	ref, _ := fillAll(base, all)
	// Flip twice is the identity; p = 1 flips every sample.
	v := slices.Clone(ref)
	hflip(v, 5)
	if slices.Equal(v, ref) {
		t.Fatal("hflip changed nothing")
	}
	if v[0] != ref[4] || v[4] != ref[0] || v[5] != ref[9] {
		t.Errorf("hflip rows: %v", v[:10])
	}
	hflip(v, 5)
	if !slices.Equal(v, ref) {
		t.Error("flipping twice is not the identity")
	}
	always := mustAugment(t, base, 0, mustTransforms(t, flipT(1), flipT(1))).Epoch(5, 2)
	x, _ := fillAll(always, all)
	if !slices.Equal(x, ref) {
		t.Error("hflip(1) twice is not the identity")
	}
	once := mustAugment(t, base, 0, mustTransforms(t, flipT(1))).Epoch(5, 2)
	x, _ = fillAll(once, all)
	w := slices.Clone(ref)
	hflip(w, 5)
	if !slices.Equal(x, w) {
		t.Error("hflip(1) does not flip every sample")
	}
	// p = 0, and padding-free full-size crops, are the identity.
	for _, ts := range [][]Transform{
		mustTransforms(t, flipT(0)),
		mustTransforms(t, cropT(4, 5, 0), flipT(0)),
	} {
		for epoch := range 3 {
			x, _ := fillAll(mustAugment(t, base, 0, ts).Epoch(9, epoch), all)
			if !slices.Equal(x, ref) {
				t.Errorf("%v, epoch %d: not the identity", ts, epoch)
			}
		}
	}
}

// TestAugmentUnbound: before Epoch, an Augmented dataset (the evaluation
// set) gives its samples untransformed.
func TestAugmentUnbound(t *testing.T) {
	base := rampSet(t, 12, 1, 4, 4)
	a := mustAugment(t, base, 0, mustTransforms(t, cropT(4, 4, 2), flipT(1)))
	all := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	x, y := fillAll(a, all)
	rx, ry := fillAll(base, all)
	if !slices.Equal(x, rx) || !slices.Equal(y, ry) {
		t.Error("the unbound dataset transforms its samples")
	}
	if a.Name() != "ramp+random_crop(4, padding=2)+hflip(1)" {
		t.Errorf("Name() = %q", a.Name())
	}
	if a.Len() != 12 || a.NumClasses() != 3 || !slices.Equal(a.Labels(), base.Labels()) {
		t.Error("Len, NumClasses or Labels differ from the base dataset's")
	}
	// Padding takes the given value.
	b := mustAugment(t, base, -7, mustTransforms(t, cropT(4, 4, 4))).Epoch(1, 1)
	x, _ = fillAll(b, all)
	if !slices.Contains(x, -7) {
		t.Error("no padding value in 12 samples padded by 4")
	}
}

func TestAugmentErrors(t *testing.T) {
	for _, tc := range []struct {
		f    func() (Transform, error)
		want string
	}{
		{cropT(0, 3, 0), "random_crop: size 0×3: want a positive height and width"},
		{cropT(3, 3, -1), "random_crop: padding -1"},
		{flipT(1.5), "hflip: probability 1.5: want a number from 0 to 1"},
		{flipT(-0.1), "hflip: probability -0.1"},
	} {
		if _, err := tc.f(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	flat, err := Synthetic("train", 4, []int{10}, 2, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Augment(flat, 0, mustTransforms(t, flipT(0.5))); err == nil ||
		!strings.Contains(err.Error(), "hflip(0.5) needs samples of at least 2 dimensions ([..., height, width]), got shape [10]") {
		t.Errorf("flat samples: %v", err)
	}
	img := rampSet(t, 2, 1, 4, 4)
	if _, err := Augment(img, 0, mustTransforms(t, cropT(9, 4, 2))); err == nil ||
		!strings.Contains(err.Error(), "ramp: random_crop((9, 4), padding=2): the 9×4 crop is larger than the padded 8×8 sample") {
		t.Errorf("crop too large: %v", err)
	}
}

func TestAugmentConcurrentAndAllocs(t *testing.T) {
	base := rampSet(t, 64, 3, 8, 8)
	a := mustAugment(t, base, 0, mustTransforms(t, cropT(8, 8, 2), flipT(0.5))).Epoch(3, 1)
	per := SampleSize(a)
	all := make([]int, 64)
	for i := range all {
		all[i] = i
	}
	want, _ := fillAll(a, all)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]float32, 8*per)
			y := make([]int32, 8)
			for rep := 0; rep < 50; rep++ {
				idx := all[g*8 : g*8+8]
				a.Fill(idx, x, y)
				if !slices.Equal(x, want[g*8*per:(g*8+8)*per]) {
					errs <- fmt.Sprintf("goroutine %d, rep %d: samples differ", g, rep)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	x := make([]float32, 16*per)
	y := make([]int32, 16)
	if n := testing.AllocsPerRun(100, func() { a.Fill(all[:16], x, y) }); n > 0.1 {
		t.Errorf("Fill allocates %.1f times a call", n)
	}
	expectPanic(t, "Fill: 16 samples need", func() { a.Fill(all[:16], x[:10], y) })
}
