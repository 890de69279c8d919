package script

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarktest"
	"go.starlark.net/syntax"

	"gorun/engine/spec"
)

// errorText is what the CLI shows for err: a Starlark backtrace when there
// is one.
func errorText(err error) string {
	var ee *starlark.EvalError
	var se syntax.Error
	switch {
	case errors.As(err, &ee):
		return ee.Backtrace()
	case errors.As(err, &se):
		return se.Error()
	}
	return err.Error()
}

var wantRE = regexp.MustCompile(`(?m)^### "(.*)"$`)

// TestScripts runs every testdata/*.star script. A script with a
// `### "regexp"` line must fail with an error whose text (the backtrace
// for Starlark errors) matches the regexp; the others must succeed and
// may check values with assert.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.star")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test scripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			assert, err := starlarktest.LoadAssertModule()
			if err != nil {
				t.Fatal(err)
			}
			_, err = Load(file, WithPredeclared(assert), WithMaxSteps(1_000_000), WithMaxMemory(256<<20), withReporter(t))
			m := wantRE.FindSubmatch(src)
			if m == nil {
				if err != nil {
					t.Fatalf("unexpected error:\n%s", errorText(err))
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one matching %q", m[1])
			}
			re, rerr := regexp.Compile(string(m[1]))
			if rerr != nil {
				t.Fatalf("bad ### regexp: %v", rerr)
			}
			if got := errorText(err); !re.MatchString(got) {
				t.Errorf("error:\n%s\nwant match for %q", got, m[1])
			}
		})
	}
}

// withReporter makes assert.* failures in a script fail the test.
func withReporter(t *testing.T) Option {
	return func(o *options) {
		o.onThread = func(th *starlark.Thread) { starlarktest.SetReporter(th, t) }
	}
}

// memFS is a FileReader over a map, for scripts held in memory.
type memFS map[string]string

func (m memFS) ReadFile(path string) ([]byte, error) {
	if s, ok := m[path]; ok {
		return []byte(s), nil
	}
	return nil, &os.PathError{Op: "open", Path: path, Err: os.ErrNotExist}
}

const netScript = `
batch = 32

def halves(ctx):
    return [list(range(0, ctx.size // 2)), list(range(ctx.size // 2, ctx.size))]

model = nn.sequential(
    nn.conv2d(1, 10, kernel = 5, name = "conv1"),
    nn.relu(),
    nn.flatten(),
    nn.linear(5760, 10, name = "fc"),
    nn.log_softmax(),
)
train(
    model = model,
    loss = "nll",
    data = data.mnist(),
    optimizer = optim.sgd(lr = 0.01, momentum = 0.5),
    batch_size = batch,
)
`

func TestSpecValues(t *testing.T) {
	s, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": netScript}))
	if err != nil {
		t.Fatal(errorText(err))
	}
	if len(s.Model.Nodes) != 1 || s.Model.Nodes[0].Layer.Kind != spec.Sequential || len(s.Model.Nodes[0].Layer.Layers) != 5 {
		t.Fatalf("model = %+v", s.Model)
	}
	c := s.Model.Nodes[0].Layer.Layers[0]
	if c.Kind != spec.Conv2D || c.Name != "conv1" || c.Path != "conv1" || c.In != 1 || c.Out != 10 || c.Kernel != 5 || c.Stride != 1 || !c.Bias {
		t.Errorf("conv1 = %+v", c)
	}
	if c.Pos != "/w/train.star:8:14" {
		t.Errorf("conv1 declared at %q, want /w/train.star:8:14", c.Pos)
	}
	if s.Optimizer.Kind != "sgd" || s.Optimizer.LR != 0.01 || s.Optimizer.Momentum != 0.5 {
		t.Errorf("optimizer = %+v", s.Optimizer)
	}
	// Defaults.
	if s.Epochs != 1 || !s.Shuffle || s.Accumulate != 1 || s.Uneven != "pad" || s.Eval != nil {
		t.Errorf("defaults: epochs %d shuffle %v accumulate %d uneven %q eval %v", s.Epochs, s.Shuffle, s.Accumulate, s.Uneven, s.Eval)
	}
	if s.Sync.Kind != spec.SyncAllReduce || s.Sync.Op != "mean" || s.Sync.BucketMB != 25 || !s.Sync.Overlap {
		t.Errorf("default sync = %+v", s.Sync)
	}
	if s.Data.Normalize != [2]float64{0.1307, 0.3081} || s.Data.Split != "train" {
		t.Errorf("data = %+v", s.Data)
	}
	if s.BatchSize != 32 {
		t.Errorf("batch = %d", s.BatchSize)
	}
}

func TestOverrides(t *testing.T) {
	fs := memFS{"/w/train.star": netScript}
	cases := []struct {
		sets  []string
		check func(*spec.Spec) bool
	}{
		{[]string{"epochs=3"}, func(s *spec.Spec) bool { return s.Epochs == 3 }},
		{[]string{"batch_size=128", "seed=7"}, func(s *spec.Spec) bool { return s.BatchSize == 128 && s.Seed == 7 }},
		{[]string{"loss=cross_entropy"}, func(s *spec.Spec) bool { return s.Loss == "cross_entropy" }},
		{[]string{"shuffle=False"}, func(s *spec.Spec) bool { return !s.Shuffle }},
		{[]string{"optimizer.lr=0.5"}, func(s *spec.Spec) bool { return s.Optimizer.LR == 0.5 && s.Optimizer.Momentum == 0.5 }},
		{[]string{"optimizer=optim.adam(lr=0.002)"}, func(s *spec.Spec) bool { return s.Optimizer.Kind == "adam" && s.Optimizer.LR == 0.002 }},
		{[]string{"optimizer=optim.adam()", "optimizer.lr=0.1"}, func(s *spec.Spec) bool { return s.Optimizer.Kind == "adam" && s.Optimizer.LR == 0.1 }},
		{[]string{"eval=data.mnist(split='test')"}, func(s *spec.Spec) bool { return s.Eval != nil && s.Eval.Split == "test" }},
		{[]string{"data.limit=100"}, func(s *spec.Spec) bool { return s.Data.Limit == 100 }},
		{[]string{"sync=sync.local_sgd(every=4)"}, func(s *spec.Spec) bool { return s.Sync.Kind == spec.SyncLocalSGD && s.Sync.Every == 4 }},
		{[]string{"max_steps=10"}, func(s *spec.Spec) bool { return s.MaxSteps == 10 }},
		{[]string{"sync=sync.zero(stage=2)", "sync.stage=3"}, func(s *spec.Spec) bool {
			return s.Sync.Kind == spec.SyncZero && s.Sync.Stage == 3 && s.Sync.Prefetch == 1 && s.Sync.BucketMB == 25 && s.Sync.Overlap
		}},
		{[]string{"sync=sync.fsdp(bucket_mb=4, broadcast_buffers=False)"}, func(s *spec.Spec) bool {
			return s.Sync.Kind == spec.SyncZero && s.Sync.Stage == 3 && s.Sync.BucketMB == 4 && !s.Sync.BroadcastBuffers
		}},
		{[]string{"batch_size=batch * 2"}, func(s *spec.Spec) bool { return s.BatchSize == 64 }},
		{[]string{"partition=halves"}, func(s *spec.Spec) bool { return s.Partition != nil && strings.HasPrefix(s.Partition.Name, "halves") }},
	}
	for _, c := range cases {
		var ov []Override
		for _, s := range c.sets {
			o, err := ParseOverride(s)
			if err != nil {
				t.Fatal(err)
			}
			ov = append(ov, o)
		}
		s, err := Load("/w/train.star", WithFileReader(fs), WithOverrides(ov...))
		if err != nil {
			t.Errorf("--set %v: %s", c.sets, errorText(err))
			continue
		}
		if !c.check(s) {
			t.Errorf("--set %v: spec not as expected: %+v", c.sets, s)
		}
	}
}

func TestOverrideErrors(t *testing.T) {
	fs := memFS{"/w/train.star": netScript}
	cases := []struct{ set, want string }{
		{"epoch=3", `--set epoch: train() has no parameter "epoch"`},
		{"epochs=0", `epochs must be in [1, 1000000], got 0`},
		{"epochs=many", `train: for parameter "epochs": got string, want int`},
		{"optimizer.rate=1", `--set optimizer.rate: optim.sgd has no parameter "rate" (it has lr, momentum, dampening, weight_decay, nesterov, groups)`},
		{"eval.split=test", `--set eval.split: the script gives no eval to change`},
		{"model.name=x", `--set model.name: model is a layer, which has no fields to set`},
		{"optimizer=optim.sgd(lr=", `--set optimizer=optim.sgd(lr=: the value is not a Starlark expression (column 14: got end of file`},
		{"optimizer.lr=-2", `optim.sgd: lr must be positive, got -2`},
		// Values that do not parse are errors about the flag, unless a
		// plain word; words that parse but do not evaluate are strings.
		{"epochs=1+", `--set epochs=1+: the value is not a Starlark expression (column 3: got end of file, want primary expression)`},
		{"epochs=", `--set epochs=: no value`},
		{"loss=cross entropy", `--set loss=cross entropy: the value is not a Starlark expression`},
		{"epochs=foo+1", `--set epochs=foo+1: --set epochs:1:1: undefined: foo`},
		{"loss=cross-entropy", `train: loss must be "nll", "cross_entropy" or "mse", got "cross-entropy"`},
		{"optimizer.lr=float('nan')", `--set optimizer.lr: optim.sgd: for parameter "lr": got nan, want a finite number`},
		{"sync=sync.zero(stage=5)", `sync.zero: stage must be 1 (shard the optimizer state), 2 (also the gradients) or 3 (also the parameters), got 5`},
	}
	for _, c := range cases {
		o, err := ParseOverride(c.set)
		if err == nil {
			_, err = Load("/w/train.star", WithFileReader(fs), WithOverrides(o))
		}
		if err == nil {
			t.Errorf("--set %s: no error, want %q", c.set, c.want)
			continue
		}
		if got := errorText(err); !strings.Contains(got, c.want) {
			t.Errorf("--set %s: error %q, want it to contain %q", c.set, got, c.want)
		}
	}
	if _, err := ParseOverride("noequals"); err == nil {
		t.Error("ParseOverride(noequals): no error")
	}
}

// TestLoadResolution checks load() order: the script's folder, then
// GORUN_PATH folders, then the library shipped with gorun.
func TestLoadResolution(t *testing.T) {
	main := `
load("lib.star", "who")
load("only_path.star", "p")
load("only_library.star", "q")
train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1), epochs = who + p + q)
`
	fs := memFS{
		"/w/train.star":      main,
		"/w/lib.star":        "who = 1",
		"/p1/lib.star":       "who = 100",
		"/p1/only_path.star": "p = 10",
		"/p2/only_path.star": "p = 1000",
	}
	lib := fstest.MapFS{
		"lib.star":          {Data: []byte("who = 10000")},
		"only_library.star": {Data: []byte("q = 20")},
	}
	s, err := Load("/w/train.star", WithFileReader(fs), WithSearchPath("/p1", "/p2"), WithLibrary(lib))
	if err != nil {
		t.Fatal(errorText(err))
	}
	if s.Epochs != 31 {
		t.Errorf("epochs = %d, want 1 (script folder) + 10 (first GORUN_PATH) + 20 (library)", s.Epochs)
	}
	want := []string{"lib.star -> /w/lib.star", "only_path.star -> /p1/only_path.star", "only_library.star -> <gorun>/only_library.star"}
	if strings.Join(s.Loads, "|") != strings.Join(want, "|") {
		t.Errorf("loads = %q, want %q", s.Loads, want)
	}
}

func TestLoadCycle(t *testing.T) {
	fs := memFS{
		"/w/train.star": `load("a.star", "x")`,
		"/w/a.star":     `load("b.star", "y")` + "\nx = 1",
		"/w/b.star":     `load("a.star", "x")` + "\ny = 1",
	}
	_, err := Load("/w/train.star", WithFileReader(fs))
	if err == nil || !strings.Contains(errorText(err), "load cycle") {
		t.Fatalf("err = %v, want a load cycle", err)
	}
}

func TestTrainInLoadedFile(t *testing.T) {
	fs := memFS{
		"/w/train.star": `load("a.star", "x")`,
		"/w/a.star":     `x = train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1))`,
	}
	_, err := Load("/w/train.star", WithFileReader(fs))
	if err == nil || !strings.Contains(errorText(err), "only the main script may call train") {
		t.Fatalf("err = %v", err)
	}
}

func TestPartitionCall(t *testing.T) {
	fs := memFS{"/w/train.star": `
def halves(ctx):
    h = ctx.size // ctx.world
    return [list(range(r * h, (r + 1) * h)) for r in range(ctx.world)]

def by_label(ctx):
    return [[i for i, y in enumerate(ctx.labels) if y % ctx.world == r] for r in range(ctx.world)]

def spin(ctx):
    while True:
        pass

train(model = nn.linear(784, 10), loss = "nll", data = data.mnist(), optimizer = optim.sgd(lr = 0.1), partition = PART)
`}
	for _, c := range []struct {
		part, want string
		labels     []int32
		err        string
	}{
		{part: "halves", want: "[[0 1 2] [3 4 5]]"},
		{part: "by_label", labels: []int32{0, 1, 2, 3, 4, 5}, want: "[[0 2 4] [1 3 5]]"},
		{part: "spin", err: "too many steps"},
	} {
		src := strings.Replace(fs["/w/train.star"], "PART", c.part, 1)
		s, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": src}), WithMaxSteps(100_000))
		if err != nil {
			t.Fatal(errorText(err))
		}
		if s.Partition == nil || !strings.HasPrefix(s.Partition.Name, c.part+" (/w/train.star:") {
			t.Fatalf("partition = %+v", s.Partition)
		}
		shards, _, err := s.Partition.Fn(spec.PartitionContext{Size: 6, World: 2, Labels: c.labels})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", c.part, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.part, errorText(err))
		}
		if got := strings.Join(strings.Fields(strings.Trim(strings.ReplaceAll(fmtShards(shards), "\n", " "), " ")), " "); got != c.want {
			t.Errorf("%s: shards = %s, want %s", c.part, got, c.want)
		}
	}
}

func fmtShards(s [][]int) string {
	var b strings.Builder
	b.WriteString("[")
	for i, sh := range s {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("[")
		for j, x := range sh {
			if j > 0 {
				b.WriteString(" ")
			}
			b.WriteString(strings.TrimSpace(strings.Repeat(" ", 0) + itoa(x)))
		}
		b.WriteString("]")
	}
	b.WriteString("]")
	return b.String()
}

func itoa(x int) string { return starlark.MakeInt(x).String() }

// TestPartitionArity: train() accepts the strategies gorun can call with
// one context argument and refuses the others, naming the function.
func TestPartitionArity(t *testing.T) {
	cases := []struct{ def, want string }{
		{"def p(ctx):\n    return [list(range(ctx.size))]\n", ""},
		{"def p(ctx, extra = 1):\n    return [list(range(ctx.size))]\n", ""},
		{"def p(*args):\n    return [list(range(args[0].size))]\n", ""},
		{"def p(ctx = None):\n    return [list(range(ctx.size))]\n", ""},
		{"p = lambda ctx: [list(range(ctx.size))]\n", ""},
		{"def p():\n    return [[0]]\n", "takes 0 arguments without defaults"},
		{"def p(a, b):\n    return [[0]]\n", "takes 2 arguments without defaults"},
		{"def p(ctx, *, k):\n    return [[0]]\n", "keyword-only parameter k without a default"},
	}
	for _, c := range cases {
		src := c.def + `train(model = nn.linear(4, 2), loss = "mse", data = data.synthetic(size = 8, shape = (4,), classes = 2, noise = 0.1, seed = 1, split = "train"),
      optimizer = optim.sgd(lr = 0.1), batch_size = 4, epochs = 1, seed = 1, partition = p)
`
		dir := t.TempDir()
		file := filepath.Join(dir, "p.star")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Load(file)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.def, err)
		case c.want == "" && s.Partition == nil:
			t.Errorf("%q: no partition in the spec", c.def)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: error %v, want one containing %q", c.def, err, c.want)
		}
	}
}
