package scripts_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"gorun/datasets"
	"gorun/datasets/torchrand"
	"gorun/engine"
	"gorun/engine/spec"
	"gorun/script"
	"gorun/scripts"
)

// trainScript is a minimal training script whose partition is the
// expression PARTITION, with every strategy of partition.star in scope.
const trainScript = `
load("partition.star", "strided", "strided_with", "contiguous", "fractions", "stratified", "weighted")

train(
    model = nn.sequential(nn.flatten(), nn.linear(4, 3)),
    loss = "cross_entropy",
    data = data.synthetic(size = SIZE, shape = (4,), classes = 3),
    optimizer = optim.sgd(lr = 0.1),
    partition = PARTITION,
    batch_size = 8,
)
`

// loadSpec loads the training script with the given partition expression
// and dataset size from memory; load("partition.star") finds the library
// embedded in the gorun binary (scripts.Library).
func loadSpec(tb testing.TB, partition string, size int) *spec.Spec {
	tb.Helper()
	src := strings.NewReplacer("PARTITION", partition, "SIZE", strconv.Itoa(size)).Replace(trainScript)
	fsys := fstest.MapFS{"train.star": {Data: []byte(src)}}
	s, err := script.Load("train.star", script.WithFileReader(fsys), script.WithLibrary(scripts.Library))
	if err != nil {
		tb.Fatalf("loading a script with partition = %s: %v", partition, err)
	}
	if s.Partition == nil {
		tb.Fatalf("partition = %s: no partition in the Spec", partition)
	}
	return s
}

// strategy returns the partition function the expression gives.
func strategy(tb testing.TB, partition string) func(spec.PartitionContext) ([][]int, bool, error) {
	tb.Helper()
	return loadSpec(tb, partition, 16).Partition.Fn
}

// shardsOf runs a strategy, failing the test on an error.
func shardsOf(tb testing.TB, partition string, ctx spec.PartitionContext) ([][]int, bool) {
	tb.Helper()
	shards, pad, err := strategy(tb, partition)(ctx)
	if err != nil {
		tb.Fatalf("%s(%+v): %v", partition, ctx, err)
	}
	return shards, pad
}

// checkCover checks that the shards hold every index of [0, n) exactly
// once.
func checkCover(t *testing.T, what string, shards [][]int, n int) {
	t.Helper()
	seen := make([]int, n)
	for r, sh := range shards {
		for _, x := range sh {
			if x < 0 || x >= n {
				t.Fatalf("%s: rank %d has index %d, out of [0, %d)", what, r, x, n)
			}
			seen[x]++
		}
	}
	for x, c := range seen {
		if c != 1 {
			t.Fatalf("%s: index %d appears %d times, want once", what, x, c)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// emptyIfNil makes nil and empty shards compare equal.
func emptyIfNil(shards [][]int) [][]int {
	out := make([][]int, len(shards))
	for i, s := range shards {
		out[i] = append([]int{}, s...)
	}
	return out
}

// TestStridedMatchesDistributedSampler compares strided and strided_with
// with the index lists of torch.utils.data.DistributedSampler in PyTorch
// 1.13 (testdata/gen_strided_golden.py).
func TestStridedMatchesDistributedSampler(t *testing.T) {
	var golden struct {
		Cases []struct {
			N, World, Epoch int
			Seed            int64
			Shuffle         bool
			DropLast        bool `json:"drop_last"`
			Shards          [][]int
		}
	}
	readJSON(t, "testdata/strided_golden.json", &golden)
	if len(golden.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	for _, c := range golden.Cases {
		exprs := []string{fmt.Sprintf("strided_with(shuffle = %s, drop_last = %s)", pyBool(c.Shuffle), pyBool(c.DropLast))}
		if c.Shuffle && !c.DropLast {
			exprs = append(exprs, "strided")
		}
		for _, expr := range exprs {
			ctx := spec.PartitionContext{Size: c.N, World: c.World, Epoch: c.Epoch, Seed: c.Seed}
			shards, pad := shardsOf(t, expr, ctx)
			if !reflect.DeepEqual(emptyIfNil(shards), emptyIfNil(c.Shards)) {
				t.Errorf("%s, n %d, world %d, seed %d, epoch %d: shards differ from DistributedSampler's\n got %v\nwant %v",
					expr, c.N, c.World, c.Seed, c.Epoch, shards, c.Shards)
			}
			if wantPad := !c.DropLast && c.N%c.World != 0; pad != wantPad {
				t.Errorf("%s, n %d, world %d: pad = %v, want %v", expr, c.N, c.World, pad, wantPad)
			}
		}
	}
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// TestFractionsMatchesDataPartitioner compares fractions with the
// tutorial's DataPartitioner run in CPython (testdata/gen_fractions_golden.py).
func TestFractionsMatchesDataPartitioner(t *testing.T) {
	var golden struct {
		Cases []struct {
			N, World int
			Sizes    []float64
			Seed     int64
			Shards   [][]int
		}
	}
	readJSON(t, "testdata/fractions_golden.json", &golden)
	if len(golden.Cases) == 0 {
		t.Fatal("no golden cases")
	}
	for _, c := range golden.Cases {
		sizes := "None"
		if c.Sizes != nil {
			var fs []string
			for _, f := range c.Sizes {
				fs = append(fs, strconv.FormatFloat(f, 'g', -1, 64)) // round-trips exactly
			}
			sizes = "[" + strings.Join(fs, ", ") + "]"
		}
		expr := fmt.Sprintf("fractions(sizes = %s, seed = %d)", sizes, c.Seed)
		for _, epoch := range []int{0, 3} { // the same every epoch
			shards, pad := shardsOf(t, expr, spec.PartitionContext{Size: c.N, World: c.World, Epoch: epoch, Seed: 99})
			if pad || !reflect.DeepEqual(emptyIfNil(shards), emptyIfNil(c.Shards)) {
				t.Errorf("%s, n %d, world %d, epoch %d: differs from DataPartitioner (pad %v)\n got %v\nwant %v",
					expr, c.N, c.World, epoch, pad, shards, c.Shards)
			}
		}
	}
}

// TestFractionsSeedNone checks that seed = None takes the run's seed.
func TestFractionsSeedNone(t *testing.T) {
	ctx := spec.PartitionContext{Size: 50, World: 2, Seed: 1234}
	a, _ := shardsOf(t, "fractions(seed = None)", ctx)
	b, _ := shardsOf(t, "fractions()", ctx)
	ctx.Seed = 7
	c, _ := shardsOf(t, "fractions(seed = None)", ctx)
	if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a, c) {
		t.Errorf("seed = None should follow the run's seed (1234 by default)")
	}
}

// TestFractionsErrors checks the messages for bad sizes.
func TestFractionsErrors(t *testing.T) {
	_, _, err := strategy(t, "fractions([0.5, 0.25, 0.25])")(spec.PartitionContext{Size: 10, World: 2})
	if err == nil || !strings.Contains(err.Error(), "3 sizes") || !strings.Contains(err.Error(), "world of 2 ranks") {
		t.Errorf("3 sizes for 2 ranks: got error %v, want one naming both", err)
	}
	for expr, want := range map[string]string{
		"fractions([0.7, 0.7])":  "more than 1",
		"fractions([-0.1, 0.5])": "≥ 0",
		"fractions(0.5)":         "non-empty list",
	} {
		src := strings.NewReplacer("PARTITION", expr, "SIZE", "16").Replace(trainScript)
		_, err := script.Load("train.star", script.WithFileReader(fstest.MapFS{"train.star": {Data: []byte(src)}}),
			script.WithLibrary(scripts.Library))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got error %v, want %q", expr, err, want)
		}
	}
}

// TestShuffleRNGMatchesPython checks shuffle(n, seed, rng = "python")
// against random.Random(seed).shuffle (the golden file of
// datasets/torchrand, seeds 0, 1, 1234, 2**40+5 among them).
func TestShuffleRNGMatchesPython(t *testing.T) {
	var golden struct {
		Shuffles []struct {
			N    int
			Seed string
			Perm []int
		}
	}
	readJSON(t, "../datasets/torchrand/testdata/pyrandom_golden.json", &golden)
	if len(golden.Shuffles) == 0 {
		t.Fatal("no golden cases")
	}
	// A strategy that returns the shuffle as rank 0's shard.
	for _, c := range golden.Shuffles {
		expr := fmt.Sprintf(`lambda ctx: [shuffle(ctx.size, %s, rng = "python")]`, c.Seed)
		shards, _ := shardsOf(t, expr, spec.PartitionContext{Size: c.N, World: 1})
		if !reflect.DeepEqual(emptyIfNil(shards), emptyIfNil([][]int{c.Perm})) {
			t.Errorf("shuffle(%d, %s, rng = \"python\") differs from Python's", c.N, c.Seed)
		}
	}
	_, _, err := strategy(t, `lambda ctx: [shuffle(3, 0, rng = "numpy")]`)(spec.PartitionContext{Size: 3, World: 1})
	if err == nil || !strings.Contains(err.Error(), `rng must be "torch" or "python"`) {
		t.Errorf("rng = \"numpy\": got %v", err)
	}
}

// TestContiguous checks the blocks: in order, sizes differing by at most
// one, the larger ones first.
func TestContiguous(t *testing.T) {
	for _, c := range []struct{ n, world int }{{10, 2}, {10, 3}, {7, 4}, {2, 5}, {1000, 8}} {
		shards, pad := shardsOf(t, "contiguous", spec.PartitionContext{Size: c.n, World: c.world, Epoch: 2, Seed: 5})
		what := fmt.Sprintf("contiguous n %d world %d", c.n, c.world)
		if pad || len(shards) != c.world {
			t.Fatalf("%s: %d shards, pad %v", what, len(shards), pad)
		}
		start := 0
		for r, sh := range shards {
			want := c.n / c.world
			if r < c.n%c.world {
				want++
			}
			if len(sh) != want {
				t.Errorf("%s: rank %d has %d samples, want %d", what, r, len(sh), want)
			}
			for i, x := range sh {
				if x != start+i {
					t.Fatalf("%s: rank %d, position %d: %d, want %d", what, r, i, x, start+i)
				}
			}
			start += len(sh)
		}
		checkCover(t, what, shards, c.n)
	}
}

// imbalancedLabels returns n labels of the given classes, class c about
// (c+1) times as frequent as class 0, in a scrambled order.
func imbalancedLabels(n, classes int) []int32 {
	labels := make([]int32, n)
	perm := torchrand.RandPerm(n, 99)
	w := classes * (classes + 1) / 2
	for i, p := range perm {
		acc, c := 0, 0
		for c = 0; c < classes-1; c++ {
			acc += c + 1
			if i*w < acc*n {
				break
			}
		}
		labels[p] = int32(c)
	}
	return labels
}

// TestStratified checks that every rank's count of every label is within
// one of the ideal (count / world), that the shards cover every sample
// once, and that each rank feeds its samples in the epoch's shuffled order.
func TestStratified(t *testing.T) {
	for _, c := range []struct{ n, world, classes, epoch int }{
		{100, 3, 4, 0}, {1001, 4, 10, 3}, {5, 8, 2, 1}, {60000, 8, 10, 0},
	} {
		labels := imbalancedLabels(c.n, c.classes)
		ctx := spec.PartitionContext{Size: c.n, World: c.world, Epoch: c.epoch, Seed: 1234, Labels: labels}
		shards, pad := shardsOf(t, "stratified", ctx)
		what := fmt.Sprintf("stratified n %d world %d classes %d", c.n, c.world, c.classes)
		if pad || len(shards) != c.world {
			t.Fatalf("%s: %d shards, pad %v", what, len(shards), pad)
		}
		checkCover(t, what, shards, c.n)
		total := make([]int, c.classes)
		for _, y := range labels {
			total[y]++
		}
		pos := make([]int, c.n) // position of each sample in the epoch's order
		for i, x := range torchrand.RandPerm(c.n, uint64(1234+c.epoch)) {
			pos[x] = i
		}
		for r, sh := range shards {
			hist := make([]int, c.classes)
			for i, x := range sh {
				hist[labels[x]]++
				if i > 0 && pos[x] < pos[sh[i-1]] {
					t.Fatalf("%s: rank %d's shard is not in the epoch's shuffled order at position %d", what, r, i)
				}
			}
			for y, got := range hist {
				ideal := float64(total[y]) / float64(c.world)
				if math.Abs(float64(got)-ideal) >= 1 {
					t.Errorf("%s: rank %d has %d of label %d, ideal %.2f", what, r, got, y, ideal)
				}
			}
		}
	}
	_, _, err := strategy(t, "stratified")(spec.PartitionContext{Size: 10, World: 2})
	if err == nil || !strings.Contains(err.Error(), "no labels") {
		t.Errorf("stratified without labels: got %v", err)
	}
}

// TestWeighted checks that shard sizes are within one of their quota and
// add up to the dataset, and that the shards are consecutive blocks of the
// epoch's torch.randperm.
func TestWeighted(t *testing.T) {
	for _, c := range []struct {
		n, world, epoch int
		weights         []float64
	}{
		{1000, 2, 0, []float64{1, 3}},
		{1001, 3, 3, []float64{0.5, 0.25, 0.25}},
		{10, 4, 1, []float64{1, 1, 1, 0}},
		{7, 3, 0, nil},
		{60000, 8, 2, []float64{1, 2, 3, 4, 5, 6, 7, 8.5}},
		{3, 3, 0, []float64{1, 1, 1}}, // equal remainders: lower ranks first
	} {
		ctx := spec.PartitionContext{Size: c.n, World: c.world, Epoch: c.epoch, Seed: 1234, Weights: c.weights}
		shards, pad := shardsOf(t, "weighted", ctx)
		what := fmt.Sprintf("weighted n %d weights %v", c.n, c.weights)
		if pad || len(shards) != c.world {
			t.Fatalf("%s: %d shards, pad %v", what, len(shards), pad)
		}
		checkCover(t, what, shards, c.n)
		w := c.weights
		if w == nil {
			w = slices.Repeat([]float64{1}, c.world)
		}
		var sum float64
		for _, x := range w {
			sum += x
		}
		for r, sh := range shards {
			quota := float64(c.n) * w[r] / sum
			if math.Abs(float64(len(sh))-quota) >= 1 {
				t.Errorf("%s: rank %d has %d samples, quota %.2f", what, r, len(sh), quota)
			}
		}
		if got, want := slices.Concat(shards...), torchrand.RandPerm(c.n, uint64(1234+c.epoch)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the shards are not blocks of torch.randperm(n) seeded with seed + epoch", what)
		}
	}
	_, _, err := strategy(t, "weighted")(spec.PartitionContext{Size: 10, World: 2, Weights: []float64{1, 2, 3}})
	if err == nil || !strings.Contains(err.Error(), "3 weights for a world of 2") {
		t.Errorf("3 weights for 2 ranks: got %v", err)
	}
}

// TestStrategiesPassEngineChecks runs each strategy through the engine:
// Plan.Shards calls it and validates the result as a training run does.
func TestStrategiesPassEngineChecks(t *testing.T) {
	for _, expr := range []string{
		"strided", "strided_with(drop_last = True)", "strided_with(shuffle = False)",
		"contiguous", "fractions()", "stratified", "weighted",
	} {
		for _, world := range []int{1, 2, 3, 8} {
			s := loadSpec(t, expr, 101)
			c := engine.DefaultCluster()
			c.Devices = world
			if expr == "weighted" && world == 3 {
				c.Weights = []float64{1, 0.5, 2}
			}
			plan, err := engine.Compile(s, c)
			if err != nil {
				t.Fatalf("%s, world %d: %v", expr, world, err)
			}
			ds, err := datasets.Load(&s.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, epoch := range []int{0, 1} {
				shards, _, err := plan.Shards(epoch, ds)
				if err != nil {
					t.Errorf("%s, world %d, epoch %d: %v", expr, world, epoch, err)
				} else if len(shards) != world {
					t.Errorf("%s, world %d: %d shards", expr, world, len(shards))
				}
			}
		}
	}
}

// TestExamples compiles every scripts/examples/partition_*.star for two
// devices (the weighted one also with clusters/weighted2.toml) and runs its
// strategy on an MNIST-sized context, so that the examples never rot.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/partition_*.star")
	if err != nil || len(files) < 5 {
		t.Fatalf("want the five partition examples, found %v (%v)", files, err)
	}
	weighted, err := engine.LoadCluster("clusters/weighted2.toml")
	if err != nil {
		t.Fatal(err)
	}
	if weighted.Devices != 2 || !reflect.DeepEqual(weighted.Weights, []float64{1, 3}) {
		t.Fatalf("clusters/weighted2.toml: %d devices, weights %v", weighted.Devices, weighted.Weights)
	}
	labels := imbalancedLabels(60000, 10)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s, err := script.Load(file, script.WithLibrary(scripts.Library))
			if err != nil {
				t.Fatal(err)
			}
			if s.Partition == nil {
				t.Fatal("no partition")
			}
			if len(s.Loads) != 1 || !strings.HasSuffix(s.Loads[0], "<gorun>/partition.star") {
				t.Errorf("loads %v, want partition.star from the library", s.Loads)
			}
			clusters := []engine.Cluster{engine.DefaultCluster()}
			clusters[0].Devices = 2
			if strings.Contains(file, "weighted") {
				clusters = append(clusters, weighted)
			}
			for _, c := range clusters {
				if _, err := engine.Compile(s, c); err != nil {
					t.Fatalf("compiling for %d devices: %v", c.Devices, err)
				}
				ctx := spec.PartitionContext{Size: 60000, World: 2, Seed: s.Seed, Labels: labels, Weights: c.Weights}
				shards, _, err := s.Partition.Fn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(shards) != 2 || len(shards[0])+len(shards[1]) < 59999 {
					t.Errorf("weights %v: shard sizes %d and %d", c.Weights, len(shards[0]), len(shards[1]))
				}
				if c.Weights != nil && (len(shards[0]) != 15000 || len(shards[1]) != 45000) {
					t.Errorf("weights %v: shard sizes %d and %d, want 15000 and 45000", c.Weights, len(shards[0]), len(shards[1]))
				}
			}
		})
	}
}

// BenchmarkPartition1M partitions 1,000,000 samples (10 labels) for 8
// ranks with each strategy, through script.Load and spec.Partition.Fn as
// the engine calls it (the conversion of the result to Go included).
func BenchmarkPartition1M(b *testing.B) {
	const n, world = 1_000_000, 8
	labels := make([]int32, n)
	for i, x := range torchrand.RandPerm(n, 7) {
		labels[x] = int32(i % 10)
	}
	weights := []float64{1, 1, 2, 2, 3, 3, 4, 4}
	for _, expr := range []string{"strided", "contiguous", "fractions()", "stratified", "weighted"} {
		b.Run(expr, func(b *testing.B) {
			fn := strategy(b, expr)
			ctx := spec.PartitionContext{Size: n, World: world, Seed: 1234, Labels: labels, Weights: weights}
			for b.Loop() {
				shards, _, err := fn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(shards) != world {
					b.Fatalf("%d shards", len(shards))
				}
				ctx.Epoch++
			}
		})
	}
}
