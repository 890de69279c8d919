package runner

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"gorun/datasets"
)

// BenchmarkStreamResNet measures data.images streamed from disk under
// scripts/examples/resnet_images.star's ResNet (one device, batch 64):
// Fashion-MNIST's first 600 training images of each class written out as
// PNGs (6,000 files, 28×28 grey) and read as a streamed set with nothing
// cached (a memory limit of one byte):
//
//	go test -bench StreamResNet -run '^$' -benchtime 1x ./engine/runner
//
// It reports
//
//   - decode_images/s: the streamed decode throughput, a Prefetcher
//     (3 batches of 64 ahead, one goroutine per core) filled batch after
//     batch with no training;
//   - step_ms, wait_ms/step and wait_fraction: a training run of 40 steps
//     on the streamed set, its mean step time and mean data_wait_seconds
//     over the steps after the first (the first decodes its batch while
//     it waits), and their ratio; first_wait_ms the first step's;
//   - samples/s and cached_samples/s: that run's speed and, right after,
//     the same run's on the images decoded into memory first.
func BenchmarkStreamResNet(b *testing.B) {
	if _, err := os.Stat(fashionDir); err != nil {
		b.Skip("SKIP: Fashion-MNIST not found; install dataset-fashion-mnist")
	}
	src, err := os.ReadFile("../../scripts/examples/resnet_images.star")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	names := []string{"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"}
	for split, per := range map[string]int{"train": 600, "test": 10} {
		ds, err := datasets.FashionMNIST(split, fashionDir, datasets.FashionMNISTMean, datasets.FashionMNISTStd)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := datasets.WriteImageFolder(ds, filepath.Join(dir, split), names, per); err != nil {
			b.Fatal(err)
		}
	}
	const batch, steps = 64, 40
	s := loadSpec(b, string(src), "data.dir="+strconv.Quote(dir), "eval=None", "batch_size="+strconv.Itoa(batch),
		"max_steps="+strconv.Itoa(steps), "epochs=1")
	p := compile(b, s, 1)
	streamed, err := datasets.Load(&s.Data, datasets.WithMemoryLimit(1))
	if err != nil {
		b.Fatal(err)
	}
	info, ok := datasets.Streamed(streamed)
	if !ok || info.Cached != 0 {
		b.Fatalf("not streamed (%v) or cached (%+v)", ok, info)
	}
	cached, err := datasets.Load(&s.Data)
	if err != nil {
		b.Fatal(err)
	}

	var decodeRate, stepMS, waitMS, firstMS, streamedSpeed, cachedSpeed float64
	rounds := 0
	for b.Loop() {
		rounds++
		// Decode throughput: the Prefetcher alone.
		all := make([]int, streamed.Len())
		for i := range all {
			all[i] = i
		}
		t0 := time.Now()
		pf, err := datasets.Prefetch(streamed, all, datasets.PrefetchOptions{Window: 3 * batch})
		if err != nil {
			b.Fatal(err)
		}
		x, y := make([]float32, batch*datasets.SampleSize(streamed)), make([]int32, batch)
		for lo := 0; lo+batch <= len(all); lo += batch {
			pf.Dataset().Fill(all[lo:lo+batch], x, y)
		}
		pf.Close()
		decodeRate += float64(len(all)/batch*batch) / time.Since(t0).Seconds()

		// Training on the streamed set, then on the cached one.
		for _, c := range []struct {
			ds    datasets.Dataset
			speed *float64
		}{{streamed, &streamedSpeed}, {cached, &cachedSpeed}} {
			var t1, t2, wait, step float64
			_, err := Run(p, RunOptions{Train: c.ds, OnStep: func(m StepMetrics) {
				switch {
				case m.Step == 1:
					firstMS += 1000 * m.DataWaitSeconds * boolF(c.ds == streamed)
					t1 = m.Time
				default:
					wait += m.DataWaitSeconds
					step += float64(m.Samples) / m.SamplesPerS
					t2 = m.Time
				}
			}})
			if err != nil {
				b.Fatal(err)
			}
			*c.speed += float64((steps-1)*batch) / (t2 - t1)
			if c.ds == streamed {
				stepMS += 1000 * step / (steps - 1)
				waitMS += 1000 * wait / (steps - 1)
			}
		}
	}
	r := float64(rounds)
	b.ReportMetric(decodeRate/r, "decode_images/s")
	b.ReportMetric(stepMS/r, "step_ms")
	b.ReportMetric(waitMS/r, "wait_ms/step")
	b.ReportMetric(waitMS/stepMS, "wait_fraction")
	b.ReportMetric(firstMS/r, "first_wait_ms")
	b.ReportMetric(streamedSpeed/r, "samples/s")
	b.ReportMetric(cachedSpeed/r, "cached_samples/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cores")
}

func boolF(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
