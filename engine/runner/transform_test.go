package runner

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"gorun/datasets"
	"gorun/safetensors"
)

// recorder wraps a training set with transforms and records, for every
// (epoch, sample) a device fills, the transformed sample.
type recorder struct {
	datasets.EpochDataset
	mu   sync.Mutex
	seen map[[2]int][]float32
	bad  []string
}

func (r *recorder) Epoch(seed int64, epoch int) datasets.Dataset {
	return &recordFill{Dataset: r.EpochDataset.Epoch(seed, epoch), r: r, epoch: epoch}
}

type recordFill struct {
	datasets.Dataset
	r     *recorder
	epoch int
}

func (f *recordFill) Fill(idx []int, x []float32, y []int32) {
	f.Dataset.Fill(idx, x, y)
	per := datasets.SampleSize(f)
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	for i, k := range idx {
		v := slices.Clone(x[i*per : (i+1)*per])
		key := [2]int{f.epoch, k}
		if old, ok := f.r.seen[key]; ok && !slices.Equal(old, v) {
			f.r.bad = append(f.r.bad, fmt.Sprintf("epoch %d sample %d filled twice, differently", f.epoch, k))
		}
		f.r.seen[key] = v
	}
}

// TestTransformsSameOnAnyDeviceCount: with random transforms, one device
// and two devices see every sample of every epoch transformed the same
// way, and the transforms change from epoch to epoch.
func TestTransformsSameOnAnyDeviceCount(t *testing.T) {
	dir := t.TempDir()
	const n = 96
	px := make([]byte, n*64)
	for i := range px {
		px[i] = byte(i*7%251 + 1)
	}
	lbl := make([]int64, n)
	for i := range lbl {
		lbl[i] = int64(i % 4)
	}
	path := filepath.Join(dir, "blobs.safetensors")
	if err := safetensors.WriteFile(path, []safetensors.Tensor{
		safetensors.U8("images", []int{n, 1, 8, 8}, px), safetensors.I64("labels", []int{n}, lbl)}, nil); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`
train(
    model = nn.sequential(
        nn.conv2d(1, 3, kernel = 3, padding = 1, name = "conv"),
        nn.relu(),
        nn.maxpool2d(2),
        nn.flatten(),
        nn.linear(48, 4, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.tensors(%q, normalize = (0.5, 0.5), transforms = [data.random_crop(8, padding = 2), data.hflip(0.5)]),
    optimizer = optim.sgd(lr = 0.05),
    batch_size = 16,
    epochs = 2,
    seed = 7,
)
`, path)
	run := func(devices int) *recorder {
		s := loadSpec(t, src)
		ds, err := datasets.Load(&s.Data)
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{EpochDataset: ds.(datasets.EpochDataset), seen: map[[2]int][]float32{}}
		if _, err := Run(compile(t, s, devices), RunOptions{Train: rec}); err != nil {
			t.Fatal(err)
		}
		for _, b := range rec.bad {
			t.Error(b)
		}
		return rec
	}
	one, two := run(1), run(2)
	if len(one.seen) != 2*n {
		t.Fatalf("one device filled %d (epoch, sample) pairs, want %d", len(one.seen), 2*n)
	}
	if len(two.seen) != len(one.seen) {
		t.Fatalf("two devices filled %d (epoch, sample) pairs, one device %d", len(two.seen), len(one.seen))
	}
	changed := 0
	for key, v := range one.seen {
		if !slices.Equal(two.seen[key], v) {
			t.Fatalf("epoch %d, sample %d: two devices see another transform than one", key[0], key[1])
		}
		if key[0] == 0 && !slices.Equal(one.seen[[2]int{1, key[1]}], v) {
			changed++
		}
	}
	if changed < n/2 {
		t.Errorf("only %d of %d samples transformed differently in epochs 1 and 2", changed, n)
	}
}
