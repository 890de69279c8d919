package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"gorun/engine/spec"
	"gorun/script"
)

// loadSpec evaluates a script held in memory.
func loadSpec(t testing.TB, src string, sets ...string) *spec.Spec {
	t.Helper()
	var ov []script.Override
	for _, s := range sets {
		o, err := script.ParseOverride(s)
		if err != nil {
			t.Fatal(err)
		}
		ov = append(ov, o)
	}
	s, err := script.Load("/t/train.star", script.WithFileReader(memFile(src)), script.WithOverrides(ov...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type memFile string

func (m memFile) ReadFile(path string) ([]byte, error) {
	if path == "/t/train.star" {
		return []byte(m), nil
	}
	return nil, os.ErrNotExist
}

func compile(t testing.TB, s *spec.Spec, devices int) *Plan {
	t.Helper()
	c := DefaultCluster()
	c.Devices = devices
	p, err := Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mnistScript is the tutorial's Net, with placeholders for tests to vary.
const mnistScript = `
model = nn.sequential(
    nn.conv2d(1, 10, kernel = 5, name = "conv1"),
    nn.maxpool2d(2),
    nn.relu(),
    nn.conv2d(10, 20, kernel = 5, name = "conv2"),
    nn.dropout2d(0.5),
    nn.maxpool2d(2),
    nn.relu(),
    nn.flatten(),
    nn.linear(320, 50, name = "fc1"),
    nn.relu(),
    nn.dropout(0.5),
    nn.linear(50, 10, name = "fc2"),
    nn.log_softmax(),
)
train(
    model = model,
    loss = "nll",
    data = data.mnist(split = "train"),
    eval = data.mnist(split = "test"),
    optimizer = optim.sgd(lr = 0.01, momentum = 0.5),
    batch_size = 64,
    epochs = 1,
    seed = 1234,
)
`

func TestShapeMismatchAtCompileTime(t *testing.T) {
	src := strings.Replace(mnistScript, `nn.linear(320, 50, name = "fc1")`, `nn.linear(300, 50, name = "fc1")`, 1)
	s := loadSpec(t, src)
	_, err := Compile(s, DefaultCluster())
	if err == nil {
		t.Fatal("no error for linear(300, 50) after a 320-wide flatten")
	}
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T is not a *CompileError: %v", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"/t/train.star:11:14", `linear "fc1"`, "320", "300", "[64 320]", "[50 300]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name, from, to, want string
	}{
		{"conv channels", `nn.conv2d(10, 20, kernel = 5, name = "conv2")`, `nn.conv2d(12, 20, kernel = 5, name = "conv2")`,
			`/t/train.star:6:14: conv2d "conv2": `},
		{"duplicate name", `name = "fc2"`, `name = "fc1"`, `name "fc1" is already used by the linear declared at /t/train.star:11:14`},
		{"wrong classes", `nn.linear(50, 10, name = "fc2")`, `nn.linear(50, 7, name = "fc2")`, `the model's output has shape [64 7], want [N 10]`},
		{"kernel too big", `nn.conv2d(1, 10, kernel = 5, name = "conv1")`, `nn.conv2d(1, 10, kernel = 29, name = "conv1")`, `/t/train.star:3:14: conv2d "conv1": conv2d: kernel 29×29 does not fit input 28×28`},
	}
	for _, c := range cases {
		s := loadSpec(t, strings.Replace(mnistScript, c.from, c.to, 1))
		_, err := Compile(s, DefaultCluster())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	s := loadSpec(t, mnistScript, "batch_size=1")
	c := DefaultCluster()
	c.Devices = 2
	if _, err := Compile(s, c); err == nil || !strings.Contains(err.Error(), "batch_size 1 is smaller than the 2 devices") {
		t.Errorf("batch smaller than devices: %v", err)
	}
}

var spaces = regexp.MustCompile(` +`)

func TestPlanDescribe(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 1)
	var b bytes.Buffer
	if err := p.Describe(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"parameters: 8 tensors, 21840 values",
		"conv1.weight [10 1 5 5]",
		"conv2d+maxpool2d+relu [64 1 28 28] [10 1 5 5] [10] [64 10 12 12] [64 10 12 12]i",
		"conv2d [64 10 12 12] [20 10 5 5] [20]",
		"conv2d_grad_weight",
		"conv2d+maxpool2d+relu_grad [64 10 12 12] [64 10 12 12]i [64 10 12 12] [64 1 28 28] [10 1 5 5] [10]",
		"sgd_step",
		"memory ",
	} {
		if !strings.Contains(spaces.ReplaceAllString(out, " "), want) { // columns as single spaces
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	// conv1's input needs no gradient.
	if strings.Count(out, "conv2d_grad_input") != 1 {
		t.Errorf("want exactly one conv2d_grad_input (conv2's):\n%s", out)
	}
}

// tinyScript is a small model over blobs (1×8×8 images, 4 classes).
const tinyScript = `
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
    data = data.synthetic(size = 512, shape = (1, 8, 8), classes = 4, noise = 1.0, seed = 3),
    eval = data.synthetic(size = 200, shape = (1, 8, 8), classes = 4, noise = 1.0, seed = 3, split = "test"),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.5),
    batch_size = 16,
    epochs = 2,
    seed = 7,
)
`

// TestSchedulePolicies: unequal shards still give every rank the same
// number of steps, as the uneven policy says.
func TestSchedulePolicies(t *testing.T) {
	shards := [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10, 11, 12, 13}} // 10 and 4 samples
	batch := []int{3, 3}
	cases := []struct {
		policy string
		steps  int
		rank1  string // rank 1's batches
	}{
		{"pad", 4, "[10 11 12] [13 10 11] [12 13 10] [11 12 13]"},
		{"drop", 1, "[10 11 12]"},
		{"zero", 4, "[10 11 12] [13] [] []"},
	}
	for _, c := range cases {
		sc := NewSchedule(shards, batch, c.policy)
		if sc.Steps != c.steps {
			t.Errorf("%s: %d steps, want %d", c.policy, sc.Steps, c.steps)
		}
		var got []string
		for s := 0; s < sc.Steps; s++ {
			got = append(got, fmt.Sprint(sc.Slice(1, s)))
		}
		if g := strings.Join(got, " "); g != c.rank1 {
			t.Errorf("%s: rank 1 feeds %s, want %s", c.policy, g, c.rank1)
		}
		if c.policy == "zero" && sc.Count(3) != 1 {
			t.Errorf("zero: the last step feeds %d samples, want 1 (rank 0's last)", sc.Count(3))
		}
	}
	// The default sharing: every sample once, each step's global batch
	// the next batch_size samples of one order.
	sh := batchShards(10, 4, nil, 3, 0, false)
	if fmt.Sprint(sh) != "[[0 1 4 5 8] [2 6 9] [3 7]]" {
		t.Errorf("batchShards(10, 4, 3 ranks) = %v", sh)
	}
}

// TestEvalSetMustFitTheModel: an eval set with other classes or another
// sample shape is refused when the Plan is compiled, before step 1.
func TestEvalSetMustFitTheModel(t *testing.T) {
	src := strings.Replace(tinyScript, `eval = data.synthetic(size = 200, shape = (1, 8, 8), classes = 4,`, `eval = data.synthetic(size = 200, shape = (1, 8, 8), classes = 16,`, 1)
	_, err := Compile(loadSpec(t, src), DefaultCluster())
	if err == nil || !strings.Contains(err.Error(), "eval set data.synthetic has samples of shape [1 8 8] in 16 classes, but the model is built for the training set's [1 8 8] in 4 classes") {
		t.Errorf("eval set with 16 classes: %v", err)
	}
	src = strings.Replace(tinyScript, `eval = data.synthetic(size = 200, shape = (1, 8, 8),`, `eval = data.synthetic(size = 200, shape = (1, 9, 9),`, 1)
	if _, err := Compile(loadSpec(t, src), DefaultCluster()); err == nil || !strings.Contains(err.Error(), "/t/train.star:") || !strings.Contains(err.Error(), "[1 9 9]") {
		t.Errorf("eval set of 9×9 samples: %v", err)
	}
}

// TestHugeShapesAreRefused: shapes whose size overflows, or that need more
// memory than the limit, are compile errors naming the layer and the
// figures — never an allocation that kills the process.
func TestHugeShapesAreRefused(t *testing.T) {
	for _, c := range []struct{ to, want string }{
		{`nn.linear(48, 1 << 62, name = "fc"), nn.linear(1 << 62, 4, name = "out")`, `linear "fc": fc.weight has shape [4611686018427387904 48]: more than 2⁴⁰ elements`},
		{`nn.linear(48, 1 << 24, name = "fc"), nn.linear(1 << 24, 4, name = "out")`, `the plan needs `},
	} {
		src := strings.Replace(tinyScript, `nn.linear(48, 4, name = "fc")`, c.to, 1)
		cl := DefaultCluster()
		cl.MemoryLimit = 1 << 30
		_, err := Compile(loadSpec(t, src), cl)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "/t/train.star:") {
			t.Errorf("%s: error %v, want it to contain %q", c.to, err, c.want)
		}
	}
	// Within the limit, the same cluster compiles.
	cl := DefaultCluster()
	cl.MemoryLimit = 1 << 30
	if _, err := Compile(loadSpec(t, tinyScript), cl); err != nil {
		t.Error(err)
	}
}
