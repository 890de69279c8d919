package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// netScript is a small MNIST model with everything evaluation changes:
// batch norm (running statistics), dropout2d and dropout (off).
const netScript = `
model = nn.sequential(
    nn.conv2d(1, 4, kernel = 5, name = "conv1"),
    nn.batchnorm2d(4, name = "bn1"),
    nn.relu(),
    nn.maxpool2d(2),
    nn.dropout2d(0.25),
    nn.flatten(),
    nn.linear(576, 16, name = "fc1"),
    nn.relu(),
    nn.dropout(0.5),
    nn.linear(16, 10, name = "fc2"),
    nn.log_softmax(),
)

train(
    model = model,
    loss = "nll",
    data = data.mnist(split = "train", limit = 640, normalize = (0.1307, 0.3081)),
    eval = data.mnist(split = "test", limit = TEST, normalize = (0.1307, 0.3081)),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 64,
    epochs = 1,
    seed = 7,
)
`

// testSamples is the size of the test set the run evaluates.
const testSamples = 300

// trained is one training of netScript, shared by the tests.
var trained struct {
	once sync.Once
	dir  string // the run folder
	res  *runner.Result
	plan *engine.Plan // the training Plan (batch 64, the eval set)
	err  error
}

// trainNet trains netScript into a run folder as gorun does (the
// run.json that cmd/gorun writes included) and returns the folder.
func trainNet(t testing.TB) string {
	t.Helper()
	trained.once.Do(func() {
		dir, err := os.MkdirTemp("", "model-test-")
		if err != nil {
			trained.err = err
			return
		}
		trained.dir = filepath.Join(dir, "run")
		path := filepath.Join(dir, "net.star")
		src := "TEST = " + itoa(testSamples) + "\n" + netScript
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			trained.err = err
			return
		}
		s, err := script.Load(path)
		if err != nil {
			trained.err = err
			return
		}
		p, err := engine.Compile(s, engine.DefaultCluster())
		if err != nil {
			trained.err = err
			return
		}
		trained.plan = p
		if trained.res, err = runner.Run(p, runner.RunOptions{Out: trained.dir}); err != nil {
			trained.err = err
			return
		}
		b, _ := json.Marshal(map[string]any{"script": path, "sets": []string{}})
		trained.err = os.WriteFile(filepath.Join(trained.dir, runInfoFile), b, 0o644)
	})
	if trained.err != nil {
		t.Fatal(trained.err)
	}
	return trained.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if trained.dir != "" {
		os.RemoveAll(filepath.Dir(trained.dir))
	}
	if mnistNet.weights != "" { // BenchmarkPredict's run
		os.RemoveAll(filepath.Dir(mnistNet.weights))
	}
	os.Exit(code)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// testSet is the run's test set: model inputs (normalised floats), raw
// pixels, labels.
func testSet(t testing.TB) (x []float32, raw []uint8, labels []int32) {
	t.Helper()
	ds, err := datasets.MNIST("test", "", 0.1307, 0.3081)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := datasets.MNIST("test", "", 0, 1) // v/255
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, testSamples)
	for i := range idx {
		idx[i] = i
	}
	x = make([]float32, testSamples*784)
	labels = make([]int32, testSamples)
	ds.Fill(idx, x, labels)
	v := make([]float32, testSamples*784)
	plain.Fill(idx, v, make([]int32, testSamples))
	raw = make([]uint8, len(v))
	for i, f := range v {
		raw[i] = uint8(math.Round(float64(f) * 255))
	}
	return x, raw, labels
}

// engineOutputs are the training engine's evaluation outputs on ds (the
// run's test set when nil): the training Plan (batch 64) fed through the
// device's Gather as evaluation during the run feeds it, in batches of
// batch samples (0: the Plan's 64).
func engineOutputs(t testing.TB, ds datasets.Dataset, batch int) []float32 {
	t.Helper()
	dir := trainNet(t)
	path := filepath.Join(dir, modelFile)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEvaluator(trained.plan, 0, path, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if ds == nil {
		if ds, err = datasets.Load(trained.plan.Spec.Eval); err != nil {
			t.Fatal(err)
		}
	}
	out, err := e.Outputs(ds, batch)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func loadNet(t testing.TB, opts ...Option) *Model {
	t.Helper()
	m, err := Load(trainNet(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func dense(shape []int, v any) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// sameBits reports the first sample whose outputs differ from want's in
// any bit, or -1.
func sameBits(got, want []float32, per int) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i / per
		}
	}
	return -1
}

// TestPredictEqualsEngineEval: Predict's outputs on the test set are the
// training engine's evaluation outputs bit for bit, for the same batches:
// the set as normalised floats or as raw uint8 pixels in one request
// (batches of 64, as the run evaluated it), one sample per request (the
// engine evaluating each sample alone), in batches of 7 on 2 arenas; and
// their accuracy is the one the run's last evaluation reported.
func TestPredictEqualsEngineEval(t *testing.T) {
	want := engineOutputs(t, nil, 0)
	x, raw, labels := testSet(t)
	ctx := context.Background()
	check := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d outputs, want %d", name, len(got), len(want))
		}
		if i := sameBits(got, want, 10); i >= 0 {
			t.Errorf("%s: sample %d: outputs %v, the engine's evaluation gives %v", name, i, got[i*10:i*10+10], want[i*10:i*10+10])
		}
	}
	m := loadNet(t, WithMaxDelay(0))
	out, err := m.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, x))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal([]int(out.Shape()), []int{testSamples, 10}) {
		t.Fatalf("output shape %v, want [%d 10]", out.Shape(), testSamples)
	}
	check("float32 batch", out.Data().([]float32), want)

	out, err = m.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, raw))
	if err != nil {
		t.Fatal(err)
	}
	check("uint8 pixels", out.Data().([]float32), want)

	ds, err := datasets.Load(trained.plan.Spec.Eval)
	if err != nil {
		t.Fatal(err)
	}
	for i := range testSamples {
		o, err := m.Predict(ctx, dense([]int{1, 28, 28}, x[i*784:(i+1)*784]))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal([]int(o.Shape()), []int{10}) {
			t.Fatalf("one sample: output shape %v, want [10]", o.Shape())
		}
		alone, err := datasets.View(ds, []int{i})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("sample %d alone", i), o.Data().([]float32), engineOutputs(t, alone, 1))
	}

	m7 := loadNet(t, WithMaxBatch(7), WithArenas(2))
	out, err = m7.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, x))
	if err != nil {
		t.Fatal(err)
	}
	check("batches of 7 on 2 arenas", out.Data().([]float32), engineOutputs(t, ds, 7))

	correct := 0
	out, err = m.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, x))
	if err != nil {
		t.Fatal(err)
	}
	probs, err := m.Probabilities(out)
	if err != nil {
		t.Fatal(err)
	}
	p, o := probs.Data().([]float32), out.Data().([]float32)
	for i, y := range labels {
		best := 0
		var sum float64
		for c := range 10 {
			if o[i*10+c] > o[i*10+best] {
				best = c
			}
			sum += float64(p[i*10+c])
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("sample %d: probabilities sum to %v", i, sum)
		}
		if int32(best) == y {
			correct++
		}
	}
	if acc := float64(correct) / testSamples; acc != trained.res.TestAccuracy {
		t.Errorf("accuracy of Predict's outputs %v, the run's evaluation reported %v", acc, trained.res.TestAccuracy)
	}
	if trained.res.TestAccuracy < 0.3 {
		t.Errorf("test accuracy %v: the model did not learn, the comparison proves little", trained.res.TestAccuracy)
	}
}

// TestEvalIsNotTraining: the outputs are evaluation's (running statistics,
// no dropout), not a training-mode forward's: the run's batch norm
// statistics moved away from their initial values, and dropout would
// make two Predicts of one input differ.
func TestEvalIsNotTraining(t *testing.T) {
	trainNet(t)
	f, err := safetensors.ReadFile(filepath.Join(trained.dir, modelFile))
	if err != nil {
		t.Fatal(err)
	}
	rv, ok := f.Get("bn1.running_var")
	if !ok {
		t.Fatal("no bn1.running_var in model.safetensors")
	}
	v, _ := rv.Float32s()
	if v[0] == 1 {
		t.Errorf("bn1.running_var %v: still the initial 1, the test would not see batch statistics used instead", v)
	}
	x, _, _ := testSet(t)
	m := loadNet(t)
	a, err := m.Predict(context.Background(), dense([]int{64, 1, 28, 28}, x[:64*784]))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Predict(context.Background(), dense([]int{64, 1, 28, 28}, x[:64*784]))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(a.Data().([]float32), b.Data().([]float32), 10); i >= 0 {
		t.Errorf("two Predicts of the same batch differ at sample %d: dropout is on", i)
	}
}

// TestConcurrent: 32 goroutines predict overlapping slices of the test set
// at once (run it under -race); each answer is the serial one (to the last
// bits a batch of another size may change). In the first round the arenas
// are held busy until all 32 requests wait, so that they are joined into
// batches whatever the scheduler does; the other rounds run free.
func TestConcurrent(t *testing.T) {
	x, _, _ := testSet(t)
	const arenas = 2
	m := loadNet(t, WithArenas(arenas))
	ctx := context.Background()
	serial, err := m.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, x))
	if err != nil {
		t.Fatal(err)
	}
	want := serial.Data().([]float32)
	before := m.Stats()

	// Hold every arena with a task until the first round has queued.
	release := make(chan struct{})
	held := make(chan error, arenas)
	for range arenas {
		r := &request{ctx: ctx, n: 1, task: func(*runner.Evaluator) error { <-release; return nil }}
		if err := m.b.submit(r); err != nil {
			t.Fatal(err)
		}
		go func() { held <- m.b.wait(r) }()
	}
	const callers, rounds = 32, 6
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				lo := (c*7 + r*13) % testSamples
				n := min(1+(c+r)%9, testSamples-lo)
				out, err := m.Predict(ctx, dense([]int{n, 1, 28, 28}, x[lo*784:(lo+n)*784]))
				if err != nil {
					t.Errorf("caller %d round %d: %v", c, r, err)
					return
				}
				got := out.Data().([]float32)
				for i := range got {
					if d := math.Abs(float64(got[i] - want[lo*10+i])); d > 1e-5 {
						t.Errorf("caller %d round %d: sample %d output %d is %v, serially %v", c, r, lo+i/10, i%10, got[i], want[lo*10+i])
						return
					}
				}
			}
		}()
	}
	waitQueued(t, m, callers)
	close(release)
	for range arenas {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	st := m.Stats()
	if n := st.Requests - before.Requests; n != callers*rounds {
		t.Errorf("%d requests counted, want %d", n, callers*rounds)
	}
	if st.Joined == before.Joined {
		t.Errorf("no batch joined two of 32 queued requests (stats %+v)", st)
	}
	t.Logf("%d requests in %d batches, %d joined", st.Requests-before.Requests, st.Batches-before.Batches, st.Joined-before.Joined)
}

// waitQueued waits until the model's queue holds n requests.
func waitQueued(t *testing.T, m *Model, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		m.b.mu.Lock()
		queued := len(m.b.queue)
		m.b.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued after 10s, want %d", queued, n)
		}
	}
}

// TestCancel: a cancelled context ends Predict promptly, whether it was
// cancelled before the call or while the request waited behind a long
// one; the model keeps serving.
func TestCancel(t *testing.T) {
	x, _, _ := testSet(t)
	m := loadNet(t, WithArenas(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Predict(ctx, dense([]int{1, 28, 28}, x[:784])); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v, want context.Canceled", err)
	}
	// A long request holds the only arena; the second waits behind it.
	big := make([]float32, 0, 40*testSamples*784)
	for range 40 {
		big = append(big, x...)
	}
	longDone := make(chan error, 1)
	go func() {
		_, err := m.Predict(context.Background(), dense([]int{40 * testSamples, 1, 28, 28}, big))
		longDone <- err
	}()
	waitQueued(t, m, 1)
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Predict(ctx, dense([]int{1, 28, 28}, x[:784]))
		done <- err
	}()
	waitQueued(t, m, 2)
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while queued: %v, want context.Canceled", err)
		}
		if d := time.Since(t0); d > 100*time.Millisecond {
			t.Errorf("Predict returned %v after its context was cancelled", d)
		}
	case err := <-longDone:
		t.Fatalf("the long request finished first (%v): the test proves nothing; make it longer", err)
	}
	if err := <-longDone; err != nil {
		t.Fatal(err)
	}
	// A long request cancelled mid-way.
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		_, err := m.Predict(ctx, dense([]int{40 * testSamples, 1, 28, 28}, big))
		longDone <- err
	}()
	waitQueued(t, m, 1)
	t0 = time.Now()
	cancel()
	if err := <-longDone; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled mid-request: %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Errorf("Predict returned %v after its context was cancelled mid-request", d)
	}
	if _, err := m.Predict(context.Background(), dense([]int{1, 28, 28}, x[:784])); err != nil {
		t.Errorf("after the cancellations: %v", err)
	}
}

// TestBatchStatistics: batch norm without running statistics normalises
// with each batch's own statistics in evaluation too, so requests are
// never joined and run in the batches the engine's evaluation uses: the
// outputs equal the engine's bit for bit, and a lone sample differs from
// the same sample in a batch.
func TestBatchStatistics(t *testing.T) {
	trainNet(t)
	var info struct{ Script string }
	b, _ := os.ReadFile(filepath.Join(trained.dir, runInfoFile))
	json.Unmarshal(b, &info)
	src, err := os.ReadFile(info.Script)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bn.star")
	os.WriteFile(path, []byte(strings.Replace(string(src), `nn.batchnorm2d(4, name = "bn1")`, `nn.batchnorm2d(4, track_running_stats = False, name = "bn1")`, 1)), 0o644)
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Compile(s, engine.DefaultCluster())
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if _, err := runner.Run(p, runner.RunOptions{Out: run}); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(run, modelFile)
	f, err := safetensors.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	e, err := runner.NewEvaluator(p, 0, weights, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.BatchDependent() {
		t.Fatal("a model with batch statistics in evaluation is not BatchDependent")
	}
	ds, err := datasets.Load(p.Spec.Eval)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Outputs(ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadScript(path, weights, WithArenas(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, _, _ := testSet(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	outs := make([]*tensor.Dense, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := m.Predict(ctx, dense([]int{testSamples, 1, 28, 28}, x))
			if err != nil {
				t.Error(err)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	for _, out := range outs {
		if out == nil {
			return
		}
		if i := sameBits(out.Data().([]float32), want, 10); i >= 0 {
			t.Errorf("sample %d: Predict differs from the engine's evaluation in batches of 64", i)
		}
	}
	if st := m.Stats(); st.Joined != 0 {
		t.Errorf("%d batches joined requests of a batch-dependent model", st.Joined)
	}
	pair, err := m.Predict(ctx, dense([]int{2, 1, 28, 28}, x[:2*784]))
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(pair.Data().([]float32), want[:20], 10); i < 0 {
		t.Error("two samples alone give what they give in a batch of 64: the batch statistics are not the batch's")
	}
}
