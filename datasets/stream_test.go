package datasets

import (
	"errors"
	"image"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// colorFolder writes perClass RGB PNGs of varied sizes and contents into
// each of classes class folders of dir.
func colorFolder(t testing.TB, dir string, classes, perClass int) {
	t.Helper()
	for c := range classes {
		if err := os.MkdirAll(filepath.Join(dir, "c"+strconv.Itoa(c)), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range perClass {
			img := image.NewNRGBA(image.Rect(0, 0, 11+i%5, 9+i%3))
			for j := range img.Pix {
				img.Pix[j] = byte(j*31 + i*17 + c*71 + (j*j)%13)
			}
			if err := writePNG(filepath.Join(dir, "c"+strconv.Itoa(c), fmtIndex(i)+".png"), img); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// streamConfig is a 3×8×8 set of colorFolder's, normalized; memory, when
// > 0, is its memory limit.
func streamConfig(dir string, memory int64) ImagesConfig {
	return ImagesConfig{Dir: dir, Split: "train", Channels: 3, Height: 8, Width: 8,
		Mean: []float64{0.5, 0.4, 0.3}, Std: []float64{0.2, 0.25, 0.3}, MemoryLimit: memory}
}

// fillBatches fills ds's samples idx in batches of b and returns the values
// and labels.
func fillBatches(ds Dataset, idx []int, b int) ([]float32, []int32) {
	per := SampleSize(ds)
	x, y := make([]float32, len(idx)*per), make([]int32, len(idx))
	for lo := 0; lo < len(idx); lo += b {
		hi := min(lo+b, len(idx))
		ds.Fill(idx[lo:hi], x[lo*per:hi*per], y[lo:hi])
	}
	return x, y
}

// settle waits (up to a few seconds) for the goroutine count to come back
// to at most n, and reports the count.
func settle(n int) int {
	for range 200 {
		if g := runtime.NumGoroutine(); g <= n {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
	return runtime.NumGoroutine()
}

// TestStreamedEqualsCached: a set over its memory limit is streamed (the
// cached path is not taken), and gives the cached set's floats and labels
// bit for bit — filled directly, through a Prefetcher in a shuffled order
// with repeats, and with transforms — while the Prefetcher decodes every
// sample ahead (no Fill decodes for itself) and keeps the first samples
// that fit once decoded.
func TestStreamedEqualsCached(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 3, 20)
	cached, err := Images(streamConfig(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Streamed(cached); ok {
		t.Fatal("a 11 KiB set streamed under the default budget")
	}
	// 60 samples of 192 bytes: room for 25 of them, 5 kept for the prefetch.
	c := streamConfig(dir, 25*192)
	c.Prefetch = 5
	streamed, err := Images(c)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := Streamed(streamed)
	if !ok || streamed.(*imageSet).pixels != nil {
		t.Fatal("a set over its memory limit was decoded into memory")
	}
	if info.Samples != 60 || info.SampleBytes != 192 || info.Decoded != 60*192 || info.Budget != 25*192 || info.Cached != 20 || info.Prefetch != 5 {
		t.Errorf("StreamInfo %+v", info)
	}
	if s := info.String(); !strings.Contains(s, "60 images decode to 11.2 KiB (192 bytes each), more than the cluster's memory_limit (4.7 KiB)") {
		t.Errorf("StreamInfo.String() = %q", s)
	}
	if !slices.Equal(streamed.Labels(), cached.Labels()) || !slices.Equal(ClassNames(streamed), ClassNames(cached)) ||
		Metadata(streamed)[MetaImage] != Metadata(cached)[MetaImage] {
		t.Fatal("labels, class names or metadata differ")
	}
	all := make([]int, 60)
	for i := range all {
		all[i] = i
	}
	wantX, wantY := fillBatches(cached, all, 7)
	gotX, gotY := fillBatches(streamed, all, 7)
	if !slices.Equal(gotX, wantX) || !slices.Equal(gotY, wantY) {
		t.Fatal("streamed samples filled directly differ from the cached ones")
	}

	order := []int{5, 59, 0, 0, 33, 21, 2, 58, 40, 5, 19, 20, 1, 44, 44, 30, 3, 7, 8, 9, 10, 11, 50}
	wantX, wantY = fillBatches(cached, order, 4)
	for pass := range 2 {
		p, err := Prefetch(streamed, order, PrefetchOptions{Window: 5, Workers: 3})
		if err != nil || p == nil {
			t.Fatalf("Prefetch: %v, %v", p, err)
		}
		gotX, gotY = fillBatches(p.Dataset(), order, 4)
		p.Close()
		if !slices.Equal(gotX, wantX) || !slices.Equal(gotY, wantY) {
			t.Fatalf("pass %d: prefetched samples differ from the cached ones", pass)
		}
		st := p.Stats()
		if st.Misses != 0 || st.Decoded+st.Cached != int64(len(order)) || p.Err() != nil {
			t.Errorf("pass %d: stats %+v, error %v: want every sample decoded ahead, none missed", pass, st, p.Err())
		}
		// The samples below 20 are cached since the direct fill.
		below := 0
		for _, k := range order {
			if k < 20 {
				below++
			}
		}
		if st.Cached != int64(below) {
			t.Errorf("pass %d: %d samples from the cache, want the %d below 20", pass, st.Cached, below)
		}
	}

	// Transforms apply above the stream as above the cached set, and
	// prefetching sees through a view.
	ts := []Transform{mustT(RandomCrop(6, 6, 2)), mustT(HFlip(0.5))}
	pads := []float32{NormalizedZero(0.5, 0.2), NormalizedZero(0.4, 0.25), NormalizedZero(0.3, 0.3)}
	for _, pick := range [][]int{nil, {9, 3, 3, 50, 41, 0}} {
		base, sbase := cached, streamed
		if pick != nil {
			base, _ = View(cached, pick)
			sbase, _ = View(streamed, pick)
		}
		ac, err := AugmentChannels(base, pads, ts)
		if err != nil {
			t.Fatal(err)
		}
		as, err := AugmentChannels(sbase, pads, ts)
		if err != nil {
			t.Fatal(err)
		}
		ord := []int{0, 1, 2, 3, 4, 5, 5, 4}
		if pick == nil {
			ord = order
		}
		wx, wy := fillBatches(ac.Epoch(7, 2), ord, 3)
		p, err := Prefetch(as.Epoch(7, 2), ord, PrefetchOptions{Window: 4})
		if err != nil {
			t.Fatal(err)
		}
		gx, gy := fillBatches(p.Dataset(), ord, 3)
		p.Close()
		if !slices.Equal(gx, wx) || !slices.Equal(gy, wy) {
			t.Errorf("view %v: transformed streamed samples differ from the cached ones", pick)
		}
		if st := p.Stats(); st.Misses != 0 {
			t.Errorf("view %v: %d misses", pick, st.Misses)
		}
	}

	// A set that is not streamed has nothing to prefetch; an order out of
	// range is refused.
	if p, err := Prefetch(cached, order, PrefetchOptions{Window: 2}); p != nil || err != nil {
		t.Errorf("Prefetch of a cached set: %v, %v", p, err)
	}
	if _, err := Prefetch(streamed, []int{0, 60}, PrefetchOptions{Window: 2}); err == nil || !strings.Contains(err.Error(), "sample 60 (position 1) out of range [0, 60)") {
		t.Errorf("order out of range: %v", err)
	}
}

func mustT(t Transform, err error) Transform {
	if err != nil {
		panic(err)
	}
	return t
}

// TestPrefetchOutOfOrder: samples asked for out of the order given are
// decoded by the Fill (counted as misses, their time as waiting) and
// still right; the order goes on where it was.
func TestPrefetchOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 2, 10)
	cached, _ := Images(streamConfig(dir, 0))
	streamed, err := Images(streamConfig(dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Prefetch(streamed, []int{1, 2, 3, 4}, PrefetchOptions{Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ask := []int{1, 7, 2, 3, 19, 4}
	wx, wy := fillBatches(cached, ask, 2)
	gx, gy := fillBatches(p.Dataset(), ask, 2)
	if !slices.Equal(gx, wx) || !slices.Equal(gy, wy) {
		t.Fatal("samples differ")
	}
	if st := p.Stats(); st.Misses != 2 || st.Decoded != 4 || st.Waited <= 0 {
		t.Errorf("stats %+v: want 2 misses, 4 decoded ahead, some waiting", st)
	}
}

// TestPrefetchBoundedAndStopped: the goroutines decode at most Window
// samples ahead of the Fill calls (counted by the reads of a ReadFile
// hook), and Close stops them — while they wait for room, and while they
// are in the middle of a slow read — leaving no goroutine behind.
func TestPrefetchBoundedAndStopped(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 2, 30)
	before := runtime.NumGoroutine()
	var reads atomic.Int64
	var slow atomic.Bool
	c := streamConfig(dir, 1)
	c.ReadFile = func(path string) ([]byte, error) {
		reads.Add(1)
		if slow.Load() {
			time.Sleep(50 * time.Millisecond)
		}
		return ReadImageFile(path)
	}
	ds, err := Images(c)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]int, 60)
	for i := range order {
		order[i] = 59 - i
	}
	p, err := Prefetch(ds, order, PrefetchOptions{Window: 6, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	// reached waits (up to 5s) for n reads, then a while for more.
	reached := func(n int64) int64 {
		for i := 0; i < 500 && reads.Load() < n; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		return reads.Load()
	}
	if n := reached(6); n != 6 {
		t.Errorf("%d files read ahead of no Fill, want the window's 6", n)
	}
	fillBatches(p.Dataset(), order[:10], 5)
	if n := reached(16); n != 16 {
		t.Errorf("%d files read after 10 samples were filled, want 16", n)
	}
	if g := runtime.NumGoroutine(); g < before+4 {
		t.Errorf("%d goroutines with 4 workers, %d before", g, before)
	}
	p.Close()
	if g := settle(before); g > before {
		t.Errorf("%d goroutines after Close, %d before", g, before)
	}

	// Closed while the workers are in slow reads.
	slow.Store(true)
	p, err = Prefetch(ds, order, PrefetchOptions{Window: 8, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	t0 := time.Now()
	p.Close()
	if dt := time.Since(t0); dt > 2*time.Second {
		t.Errorf("Close took %v with reads of 50ms under way", dt)
	}
	p.Close() // twice is harmless
	if g := settle(before); g > before {
		t.Errorf("%d goroutines after Close in slow reads, %d before", g, before)
	}
}

// TestPrefetchError: a file that cannot be decoded in the middle of a
// streamed epoch is Err, naming the file; the Fill does not panic, the
// sample is zero bytes, and the other samples are right.
func TestPrefetchError(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 2, 5)
	bad := filepath.Join(dir, "c1", fmtIndex(2)+".png")
	ds, err := Images(streamConfig(dir, 1)) // listed with the good file
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("\x89PNG\r\n\x1a\nbroken"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Prefetch(ds, []int{0, 7, 1}, PrefetchOptions{Window: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, _ := fillBatches(p.Dataset(), []int{0, 7, 1}, 3)
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Err() = %v, want it to name %s", err, bad)
	}
	per := 192
	zero := ds.(*imageSet).luts
	for j, v := range x[per : 2*per] {
		if v != zero[j/64][0] {
			t.Fatalf("the bad sample's value %d is %v, want a zero pixel's %v", j, v, zero[j/64][0])
		}
	}
	// A Fill without a Prefetcher panics naming the file.
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), bad) {
			t.Errorf("Fill of the bad sample: recovered %v", v)
		}
	}()
	ds.Fill([]int{7}, make([]float32, per), make([]int32, 1))
}

// TestPrefetchWaited: Waited measures the time Fill spends waiting for
// samples, both ways: with decoding slowed (a ReadFile hook that sleeps)
// the Fill calls wait about as long as the decoding takes; with decoding
// faster than the work between Fill calls, they wait for almost nothing
// after the first batch. The bounds compare orders of magnitude (the
// machine is shared).
func TestPrefetchWaited(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 2, 20)
	const delay = 20 * time.Millisecond
	var slow atomic.Bool
	c := streamConfig(dir, 1)
	c.ReadFile = func(path string) ([]byte, error) {
		if slow.Load() {
			time.Sleep(delay)
		}
		return ReadImageFile(path)
	}
	ds, err := Images(c)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]int, 40)
	for i := range order {
		order[i] = i
	}
	const batch = 4
	run := func(step time.Duration) (first, rest time.Duration) {
		p, err := Prefetch(ds, order, PrefetchOptions{Window: 3 * batch, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		x, y := make([]float32, batch*192), make([]int32, batch)
		for lo := 0; lo < len(order); lo += batch {
			w0 := p.Waited()
			p.Dataset().Fill(order[lo:lo+batch], x, y)
			if lo == 0 {
				first = p.Waited() - w0
			}
			time.Sleep(step) // the step
		}
		return first, p.Waited() - first
	}
	// Slow decoding (2 goroutines, 20ms a file: 40ms a batch), a fast
	// step: the 9 batches after the first wait about 9 × 40ms.
	slow.Store(true)
	_, rest := run(time.Millisecond)
	if rest < 9*delay {
		t.Errorf("decoding slowed to %v a file: the Fill calls after the first waited %v in all, want at least %v", delay, rest, 9*delay)
	}
	// Fast decoding (microseconds a file), a 20ms step: the batches after
	// the first wait under a tenth of a step on average.
	slow.Store(false)
	_, rest = run(20 * time.Millisecond)
	if mean := rest / 9; mean > 2*time.Millisecond {
		t.Errorf("decoding faster than the step: %v waited per batch after the first, want under 2ms (a tenth of the step)", mean)
	}
	t.Logf("fast decoding: %v waited per batch after the first", rest/9)
}

// TestWriteImageFolderRefusesStreamed: a streamed set has no pixels in
// memory to write.
func TestWriteImageFolderRefusesStreamed(t *testing.T) {
	dir := t.TempDir()
	colorFolder(t, dir, 1, 2)
	ds, err := Images(streamConfig(dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteImageFolder(ds, t.TempDir(), []string{"c0"}, 0); err == nil {
		t.Error("WriteImageFolder wrote a streamed set")
	} else if errors.Is(err, os.ErrNotExist) {
		t.Errorf("unexpected error %v", err)
	}
}
