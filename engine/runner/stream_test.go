package runner

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorun/datasets"
	"gorun/safetensors"
)

// imageFolder writes train/ and test/ folders of RGB PNGs (varied sizes
// and contents, resized to 16×16 by the scripts) with 3 classes:
// perClass training and testPerClass test images each.
func imageFolder(t testing.TB, perClass, testPerClass int) string {
	t.Helper()
	dir := t.TempDir()
	for _, split := range []struct {
		name string
		n    int
	}{{"train", perClass}, {"test", testPerClass}} {
		for c := range 3 {
			cdir := filepath.Join(dir, split.name, fmt.Sprintf("class%d", c))
			if err := os.MkdirAll(cdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range split.n {
				img := image.NewNRGBA(image.Rect(0, 0, 18+i%4, 15+i%3))
				for j := range img.Pix {
					// Each class brighter in its own channel, plus noise.
					v := (j*37 + i*101 + len(split.name)*13) % 97
					if j%4 == c {
						v += 120
					}
					img.Pix[j] = byte(v)
				}
				var b bytes.Buffer
				if err := png.Encode(&b, img); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cdir, fmt.Sprintf("%03d.png", i)), b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

// imagesScript trains a small conv net on dir (16×16 RGB, normalized,
// random crops and flips), evaluating on its test split.
func imagesScript(dir string) string {
	return fmt.Sprintf(`
def images(split):
    return data.images(%q, split = split, size = 16, channels = 3,
                       normalize = ((0.5, 0.45, 0.4), (0.25, 0.25, 0.3)),
                       transforms = [data.random_crop(16, padding = 2), data.hflip(0.5)] if split == "train" else [])

train(
    model = nn.sequential(
        nn.conv2d(3, 4, kernel = 3, padding = 1, name = "conv"),
        nn.relu(),
        nn.maxpool2d(2),
        nn.flatten(),
        nn.linear(256, 3, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = images("train"),
    eval = images("test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 8,
    epochs = 2,
    seed = 11,
)
`, dir)
}

// goroutinesSettle waits (a few seconds at most) for the goroutine count
// to come down to n, and returns the count.
func goroutinesSettle(n int) int {
	for range 300 {
		if g := runtime.NumGoroutine(); g <= n {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
	return runtime.NumGoroutine()
}

// TestStreamedRunIsBitIdentical: the same image folder trained with its
// images decoded into memory and, under a memory_limit they do not fit,
// streamed from disk (training and eval sets both; part of the training
// set cached), on two devices with random transforms over two epochs,
// gives the same model.safetensors byte for byte and the same loss and
// eval lines. The streamed run says so once on Notices, its prefetchers
// are gone when it returns, and the cached run's steps never wait for
// data (data_wait_seconds 0).
func TestStreamedRunIsBitIdentical(t *testing.T) {
	// 750 training and 720 test images of 768 bytes; the plan takes 446 KiB.
	dir := imageFolder(t, 250, 240)
	src := imagesScript(dir)
	before := runtime.NumGoroutine()
	var mu sync.Mutex
	stats := map[string]datasets.PrefetchStats{} // by what, summed
	run := func(limit string) (string, string) {
		var keys []string
		if limit != "" {
			keys = append(keys, "cluster.memory_limit="+limit)
		}
		p := compileWith(t, loadSpec(t, src), 2, keys...)
		out := t.TempDir()
		var notes bytes.Buffer
		opts := RunOptions{Out: out, Notices: &notes, prefetchClosed: func(rank int, what string, st datasets.PrefetchStats) {
			mu.Lock()
			defer mu.Unlock()
			sum := stats[what]
			sum.Decoded, sum.Cached, sum.Misses = sum.Decoded+st.Decoded, sum.Cached+st.Cached, sum.Misses+st.Misses
			stats[what] = sum
		}}
		if _, err := Run(p, opts); err != nil {
			t.Fatal(err)
		}
		return out, notes.String()
	}
	cached, cachedNotes := run("")
	// 512 KiB: 682 images, less the prefetch's 2 devices × 3 steps × 4.
	streamed, notes := run("512KiB")
	if cachedNotes != "" {
		t.Errorf("the cached run's notices: %q", cachedNotes)
	}
	for _, want := range []string{
		"data.images: images:" + filepath.Base(dir) + "/train: 750 images decode to 562.5 KiB (768 bytes each), more than the cluster's memory_limit (512 KiB): streamed from disk: each device's samples decoded 3 steps (12 images) ahead by",
		"; the prefetch holds 9 KiB a device (18 KiB for the 2 devices), and the first 658 images (493.5 KiB) are kept once decoded\n",
		"data.images: images:" + filepath.Base(dir) + "/test: 720 images decode to 540 KiB",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notices %q lack %q", notes, want)
		}
	}
	if n := strings.Count(notes, "\n"); n != 2 {
		t.Errorf("%d notice lines, want one per streamed set (2)", n)
	}
	// Every sample fed was decoded ahead (none by the Gather that needed
	// it): 2 epochs of 750, 2 evaluations of 720; the second epoch found
	// most of its images in the cache.
	if st := stats["training data"]; st.Misses != 0 || st.Decoded+st.Cached != 1500 || st.Cached < 600 {
		t.Errorf("training data's prefetch: %+v; want 1500 samples decoded ahead or cached, over 600 from the cache, no miss", st)
	}
	if st := stats["evaluation data"]; st.Misses != 0 || st.Decoded+st.Cached != 1440 {
		t.Errorf("evaluation data's prefetch: %+v; want 1440 samples decoded ahead or cached, no miss", st)
	}
	a, err := os.ReadFile(filepath.Join(cached, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(streamed, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("model.safetensors of the streamed run differs from the cached run's")
	}
	strip := func(dir string) (string, int) {
		var out []string
		steps := 0
		for _, r := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			if r["kind"] == "step" {
				steps++
				if _, ok := r["data_wait_seconds"].(float64); !ok {
					t.Errorf("step line without data_wait_seconds: %v", r)
				}
				if dir == cached && r["data_wait_seconds"] != 0.0 {
					t.Errorf("cached data: step %v waited %v s for data", r["step"], r["data_wait_seconds"])
				}
			}
			if r["kind"] == "epoch" {
				if _, ok := r["data_wait_seconds"].(float64); !ok {
					t.Errorf("epoch line without data_wait_seconds: %v", r)
				}
			}
			for _, k := range []string{"time", "samples_per_s", "seconds", "train_seconds", "wall_seconds", "train_samples_per_s", "peak_rss_bytes", "comm_seconds", "data_wait_seconds"} {
				delete(r, k)
			}
			out = append(out, mustJSON(r))
		}
		return strings.Join(out, "\n"), steps
	}
	ma, steps := strip(cached)
	mb, _ := strip(streamed)
	if ma != mb {
		t.Errorf("the runs' metrics differ:\n%s\n---\n%s", ma, mb)
	}
	if steps != 188 {
		t.Errorf("%d steps, want 2 epochs × ⌈750/8⌉", steps)
	}
	if g := goroutinesSettle(before); g > before {
		t.Errorf("%d goroutines after the runs, %d before", g, before)
	}
}

// streamedSets are imageFolder's training and test sets as imagesScript
// reads them, streamed (a memory limit of one byte: nothing cached), their
// files read through readFile.
func streamedSets(t *testing.T, dir string, readFile func(string) ([]byte, error)) (train, eval datasets.Dataset) {
	t.Helper()
	c := datasets.ImagesConfig{Dir: dir, Split: "train", Height: 16, Width: 16, Channels: 3,
		Mean: []float64{0.5, 0.45, 0.4}, Std: []float64{0.25, 0.25, 0.3}, MemoryLimit: 1, ReadFile: readFile}
	tr, err := datasets.Images(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Split = "test"
	ev, err := datasets.Images(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := datasets.Streamed(tr); !ok {
		t.Fatal("not streamed")
	}
	return tr, ev
}

// TestDataWaitMeasured: data_wait_seconds measures, both ways, the time a
// step waits for streamed data. With decoding faster than the step (a
// 10ms step: OnStep sleeps; files decode in tens of microseconds) the
// mean wait of the steps after the first is under a tenth of the step
// time; with decoding slowed (a ReadFile hook that sleeps 10ms a file),
// each step waits for its batch: at least a quarter of the time its 8
// files take on the prefetch's goroutines. The epoch line's total is the
// sum of its steps'. The bounds are orders of magnitude apart (the
// machine is shared).
func TestDataWaitMeasured(t *testing.T) {
	dir := imageFolder(t, 16, 2)
	var slow atomic.Bool
	const delay = 10 * time.Millisecond
	readFile := func(path string) ([]byte, error) {
		if slow.Load() {
			time.Sleep(delay)
		}
		return datasets.ReadImageFile(path)
	}
	train, eval := streamedSets(t, dir, readFile)
	src := imagesScript(dir)
	run := func(step time.Duration) (first float64, rest []float64, epoch float64) {
		p := compile(t, loadSpec(t, src, "epochs=1"), 1)
		out := t.TempDir()
		opts := RunOptions{Out: out, Train: train, Eval: eval}
		if step > 0 {
			opts.OnStep = func(StepMetrics) { time.Sleep(step) }
		}
		if _, err := Run(p, opts); err != nil {
			t.Fatal(err)
		}
		for _, r := range readMetrics(t, filepath.Join(out, MetricsFile)) {
			switch r["kind"] {
			case "step":
				w := r["data_wait_seconds"].(float64)
				if r["step"] == 1.0 {
					first = w
				} else {
					rest = append(rest, w)
				}
			case "epoch":
				epoch = r["data_wait_seconds"].(float64)
			}
		}
		return first, rest, epoch
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}

	const step = 10 * time.Millisecond
	first, rest, epoch := run(step)
	if len(rest) != 5 {
		t.Fatalf("%d steps after the first, want 5 (48/8 − 1)", len(rest))
	}
	if m := mean(rest); m > step.Seconds()/10 {
		t.Errorf("decoding faster than the %v step: %.2gs waited per step after the first, want under a tenth of the step", step, m)
	}
	if sum := first + mean(rest)*5; epoch < sum*0.999-1e-9 || epoch > sum*1.001+1e-9 {
		t.Errorf("epoch line's data_wait_seconds %g, its steps' sum %g", epoch, sum)
	}
	t.Logf("fast decoding, %v step: first step waited %.3gs, the others %.3gs on average", step, first, mean(rest))

	slow.Store(true)
	workers := max(1, runtime.GOMAXPROCS(0))
	batchDecode := time.Duration(8/min(workers, 8)) * delay // 8 files a step
	first, rest, epoch = run(0)
	if m := mean(rest); m < batchDecode.Seconds()/4 {
		t.Errorf("decoding slowed to %v a file (%d goroutines): %.2gs waited per step after the first, want at least %.2gs", delay, workers, m, batchDecode.Seconds()/4)
	}
	if sum := first + mean(rest)*5; epoch < sum*0.999 || epoch > sum*1.001 {
		t.Errorf("epoch line's data_wait_seconds %g, its steps' sum %g", epoch, sum)
	}
	t.Logf("decoding slowed to %v a file: first step waited %.3gs, the others %.3gs on average", delay, first, mean(rest))
}

// TestStreamStopsOnErrorAndInterrupt: a file that cannot be decoded in the
// middle of a streamed epoch stops the run with an error naming it and
// the step; an interrupt stops it after the step under way, and resuming
// it (streamed from the middle of the epoch, every sample decoded ahead)
// ends with the parameters of a run never stopped; in every case no
// prefetch goroutine is left behind.
func TestStreamStopsOnErrorAndInterrupt(t *testing.T) {
	dir := imageFolder(t, 16, 2)
	src := imagesScript(dir)
	before := runtime.NumGoroutine()
	readFile := func(path string) ([]byte, error) {
		time.Sleep(time.Millisecond) // workers busy when the run stops
		return datasets.ReadImageFile(path)
	}

	// Interrupted after step 2.
	train, eval := streamedSets(t, dir, readFile)
	var stop atomic.Bool
	p := compile(t, loadSpec(t, src), 2)
	out := t.TempDir()
	res, err := Run(p, RunOptions{Out: out, Train: train, Eval: eval, Interrupt: &stop,
		OnStep: func(s StepMetrics) { stop.Store(s.Step >= 2) }})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Steps > 3 {
		t.Errorf("interrupted after %d steps (%v), want 3 (the stop asked for at step 2 is agreed at step 3)", res.Steps, res.Interrupted)
	}
	if g := goroutinesSettle(before); g > before {
		t.Errorf("interrupted: %d goroutines left, %d before", g, before)
	}
	var misses atomic.Int64
	count := func(_ int, _ string, st datasets.PrefetchStats) { misses.Add(st.Misses) }
	if _, err := Run(compile(t, loadSpec(t, src), 2), RunOptions{Resume: out, Train: train, Eval: eval, prefetchClosed: count}); err != nil {
		t.Fatal(err)
	}
	whole := t.TempDir()
	if _, err := Run(compile(t, loadSpec(t, src), 2), RunOptions{Out: whole, Train: train, Eval: eval, prefetchClosed: count}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(out, ModelFile))
	b, _ := os.ReadFile(filepath.Join(whole, ModelFile))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("resumed streamed run: model.safetensors differs from a run never stopped")
	}
	if n := misses.Load(); n != 0 {
		t.Errorf("%d samples not decoded ahead", n)
	}

	// A file broken after the listing: the run stops at the step that
	// needs it.
	train, eval = streamedSets(t, dir, readFile)
	bad := filepath.Join(dir, "train", "class1", "005.png")
	if err := os.WriteFile(bad, []byte("\x89PNG\r\n\x1a\nbroken"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = compile(t, loadSpec(t, src), 2)
	_, err = Run(p, RunOptions{Out: t.TempDir(), Train: train, Eval: eval})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "training data: ") {
		t.Errorf("a broken file mid-epoch: %v", err)
	}
	if g := goroutinesSettle(before); g > before {
		t.Errorf("after an error: %d goroutines left, %d before", g, before)
	}
}

// TestEvaluatorOutputsStreamed: the evaluation pass outside training
// (Evaluator.Outputs, behind package model) gives a streamed set's
// outputs bit for bit as the cached set's.
func TestEvaluatorOutputsStreamed(t *testing.T) {
	dir := imageFolder(t, 8, 12)
	s := loadSpec(t, imagesScript(dir), "epochs=1")
	p := compile(t, s, 1)
	out := t.TempDir()
	if _, err := Run(p, RunOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, ModelFile)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEvaluator(p, 0, path, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cached, err := datasets.Load(s.Eval)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := datasets.Load(s.Eval, datasets.WithMemoryLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := datasets.Streamed(streamed); !ok {
		t.Fatal("not streamed")
	}
	want, err := e.Outputs(cached, 5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Outputs(streamed, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 36*3 || !slices.Equal(got, want) {
		t.Errorf("streamed eval outputs (%d values) differ from the cached set's (%d)", len(got), len(want))
	}
}
