package model

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"gorun/engine"
	"gorun/engine/runner"
	"gorun/script"
)

// mnistNet is a Model of scripts/examples/mnist.star (PyTorch's tutorial
// Net) with the weights of one training step, for benchmarks.
var mnistNet struct {
	once    sync.Once
	weights string
	err     error
}

func loadMNISTNet(b *testing.B, opts ...Option) *Model {
	b.Helper()
	const path = "../scripts/examples/mnist.star"
	mnistNet.once.Do(func() {
		var ov []script.Override
		for _, s := range []string{"data=data.mnist(split='train', limit=64)", "eval=None", "max_steps=1", "epochs=1"} {
			o, err := script.ParseOverride(s)
			if err != nil {
				mnistNet.err = err
				return
			}
			ov = append(ov, o)
		}
		s, err := script.Load(path, script.WithOverrides(ov...))
		if err != nil {
			mnistNet.err = err
			return
		}
		p, err := engine.Compile(s, engine.DefaultCluster())
		if err != nil {
			mnistNet.err = err
			return
		}
		dir, err := os.MkdirTemp("", "model-bench-")
		if err != nil {
			mnistNet.err = err
			return
		}
		if _, err := runner.Run(p, runner.RunOptions{Out: dir}); err != nil {
			mnistNet.err = err
			return
		}
		mnistNet.weights = filepath.Join(dir, modelFile)
	})
	if mnistNet.err != nil {
		b.Fatal(mnistNet.err)
	}
	m, err := LoadScript(path, mnistNet.weights, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkPredict measures Predict's throughput on the MNIST Net:
// serial requests of 1 and of 64 samples, and 32 concurrent callers of 1
// sample each (joined into batches).
//
//	go test ./model -run '^$' -bench Predict -benchtime 2s
func BenchmarkPredict(b *testing.B) {
	x, _, _ := testSet(b)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		n    int
	}{{"batch1", 1}, {"batch64", 64}} {
		b.Run(c.name, func(b *testing.B) {
			m := loadMNISTNet(b)
			in := dense([]int{c.n, 1, 28, 28}, x[:c.n*784])
			b.ResetTimer()
			for range b.N {
				if _, err := m.Predict(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*c.n)/b.Elapsed().Seconds(), "samples/s")
		})
	}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"concurrent32x1", nil},
		{"concurrent32x1/delay1ms", []Option{WithMaxDelay(time.Millisecond)}},
		{"concurrent32x1/1arena", []Option{WithArenas(1)}},
		{"concurrent32x1/1arena-delay1ms", []Option{WithArenas(1), WithMaxDelay(time.Millisecond)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := loadMNISTNet(b, c.opts...)
			in := dense([]int{1, 28, 28}, x[:784])
			b.SetParallelism(32 / max(1, testingProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := m.Predict(ctx, in); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
			st := m.Stats()
			b.ReportMetric(float64(st.Samples)/float64(max(st.Batches, 1)), "samples/batch")
		})
	}
}

// testingProcs is GOMAXPROCS, by which RunParallel multiplies its
// parallelism.
func testingProcs() int { return runtime.GOMAXPROCS(0) }
