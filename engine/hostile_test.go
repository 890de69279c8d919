package engine

import (
	"gorun/datasets"
	"gorun/safetensors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Plan-level tests of hostile scripts (issue 29): each compiles a small
// script that a compiler without the check would accept.

// tokenScript is a small sequence model over data.text; tests replace TEXT
// by a file and vary the rest.
const tokenScript = `
x = data.input()
tok = nn.embedding(256, 8, name = "tok")
pos = nn.embedding(16, 8, name = "pos")
h = tok(x) + pos(data.positions())
train(
    model = nn.linear(8, 256, name = "head")(h),
    loss = "cross_entropy",
    data = data.text("TEXT", seq_len = 16, vocab = "bytes"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 4,
)
`

// textFile writes a small text and returns its path.
func textFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEmbeddingIdsBeyondTheTable: an embedding whose table is smaller than
// the ids it is given — byte tokens (256 ids) or data.positions() longer
// than the table — is refused, naming the layer, its line, the table and
// the ids; a table that holds them compiles.
func TestEmbeddingIdsBeyondTheTable(t *testing.T) {
	src := strings.Replace(tokenScript, "TEXT", textFile(t), 1)
	compile(t, loadSpec(t, src), 1)
	cases := []struct {
		from, to string
		want     []string
	}{
		{`nn.embedding(256, 8, name = "tok")`, `nn.embedding(10, 8, name = "tok")`,
			[]string{`/t/train.star:5:8: embedding "tok": its table has 10 rows (ids 0 … 9)`, "the token data's vocabulary has 256 ids (0 … 255)", "nn.embedding(256, 8)"}},
		{`nn.embedding(16, 8, name = "pos")`, `nn.embedding(10, 8, name = "pos")`,
			[]string{`/t/train.star:5:17: embedding "pos": its table has 10 rows (ids 0 … 9)`, "data.positions() gives ids 0 … 15 (windows of 16 tokens)", "nn.embedding(16, 8)"}},
	}
	for _, c := range cases {
		_, err := Compile(loadSpec(t, strings.Replace(src, c.from, c.to, 1)), DefaultCluster())
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to contain %q", c.to, err, want)
			}
		}
	}
	// A larger table than the ids need is PyTorch's business as usual.
	compile(t, loadSpec(t, strings.Replace(src, `nn.embedding(16, 8, name = "pos")`, `nn.embedding(20, 8, name = "pos")`, 1)), 1)
}

// bnScript trains a batchnorm1d on [N, C] (one value per channel per
// sample) with the default sharding; tests set batch_size and devices.
const bnScript = `
train(
    model = nn.sequential(nn.flatten(), nn.linear(4, 8, name = "fc"), nn.batchnorm1d(8, name = "bn"), nn.relu(),
                          nn.linear(8, 2, name = "out")),
    loss = "cross_entropy",
    data = data.synthetic(size = 64, shape = [1, 2, 2], classes = 2),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 4,
)
`

// TestBatchNormOneValuePerChannel: every batch in which a device would
// compute batch statistics over one value per channel is refused, as
// PyTorch refuses it — a full batch's share (3 samples over 2 devices
// gives rank 1 one, as the 1/1 split), a batch of 1, and the last,
// partial batches of the default sharding or a partition strategy's
// shards — naming the layer, the batch and the rank; SyncBatchNorm counts
// every device's samples, so 1 + 1 trains.
func TestBatchNormOneValuePerChannel(t *testing.T) {
	compileErr := func(devices int, sets ...string) error {
		c := DefaultCluster()
		c.Devices = devices
		_, err := Compile(loadSpec(t, bnScript, sets...), c)
		return err
	}
	for _, c := range []struct {
		devices int
		sets    []string
		want    string // "" compiles
	}{
		{2, []string{"batch_size=3"}, `/t/train.star:3:85: batchnorm1d "bn": rank 1 takes 1 sample of every batch (batch_size 3 over 2 devices: 2 + 1), which gives it 1 value per channel in training, and PyTorch refuses this ("Expected more than 1 value per channel when training"): use a batch_size of at least 4`},
		{2, []string{"batch_size=2"}, `rank 0 takes 1 sample of every batch (batch_size 2 over 2 devices: 1 + 1)`},
		{1, []string{"batch_size=1"}, `batchnorm1d "bn": batch_size 1 gives it 1 value per channel in training`},
		{2, []string{"batch_size=4"}, ""},
		{1, []string{"batch_size=2"}, ""},
	} {
		err := compileErr(c.devices, c.sets...)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d devices, %v: error %v, want %q", c.devices, c.sets, err, c.want)
		}
	}
	sync := strings.Replace(bnScript, `nn.batchnorm1d(8, name = "bn")`, `nn.batchnorm1d(8, name = "bn", sync = True)`, 1)
	c := DefaultCluster()
	c.Devices = 2
	if _, err := Compile(loadSpec(t, sync, "batch_size=2"), c); err != nil {
		t.Errorf("SyncBatchNorm over 1 + 1 samples: %v", err)
	}

	// The last batch: n samples in batches of 4 over 2 devices.
	p := compile(t, loadSpec(t, bnScript), 2)
	ps := compile(t, loadSpec(t, sync), 2)
	for _, c := range []struct {
		plan *Plan
		n    int
		want string
	}{
		{p, 9, `/t/train.star:3:85: batchnorm1d "bn": epoch 2, batch 3 of 3: rank 0 feeds 1 sample (the batch's 1 shared out as 1 + 0), 1 value per channel in training, and PyTorch refuses this`},
		{p, 10, `rank 0 feeds 1 sample (the batch's 2 shared out as 1 + 1)`},
		{p, 11, `rank 1 feeds 1 sample (the batch's 3 shared out as 2 + 1)`},
		{p, 12, ""},
		{ps, 9, `epoch 2, batch 3 of 3: the devices feed 1 sample in all`},
		{ps, 10, ""},
	} {
		ds, err := datasets.Synthetic("train", c.n, []int{1, 2, 2}, 2, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		shards, policy, err := c.plan.Shards(1, ds)
		if err != nil {
			t.Fatal(err)
		}
		err = c.plan.CheckBatches(1, NewSchedule(shards, c.plan.LocalBatch, policy))
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d samples: error %v, want %q", c.n, err, c.want)
		}
	}
	if err := p.CheckBatches(0, NewSchedule(batchShards(9, 4, nil, 2, 0, false), p.LocalBatch, "zero")); err == nil || !strings.Contains(err.Error(), "the data's size leaves this last batch") {
		t.Errorf("the hint for the default sharding: %v", err)
	}

	// Evaluation: without running statistics it uses batch statistics too.
	if err := p.CheckEvalBatches("test", 5); err != nil {
		t.Errorf("evaluation with running statistics: %v", err)
	}
	noStats := compile(t, loadSpec(t, strings.Replace(bnScript, `name = "bn")`, `name = "bn", track_running_stats = False)`, 1)), 2)
	for n, want := range map[int]string{
		5: `batchnorm1d "bn": evaluating test (5 samples): rank 0's last batch holds 1 sample (its 3 in batches of 2), 1 value per channel for batch statistics (track_running_stats = False)`,
		8: "",
	} {
		err := noStats.CheckEvalBatches("test", n)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("evaluating %d samples: error %v, want %q", n, err, want)
		}
	}

	// A partition strategy's uneven shards: rank 0's 5 samples in
	// batches of 2 leave it 1 at the third batch, unless dropped.
	part := strings.Replace(bnScript, "train(", `
def halves(ctx):
    return [list(range(5)), list(range(5, ctx.size))]

train(partition = halves, uneven = UNEVEN,`, 1)
	for _, c := range []struct{ uneven, want string }{
		{"zero", `batch 3 of 30: rank 0 feeds 1 sample (the batch's 3 shared out as 1 + 2), 1 value per channel in training, and PyTorch refuses this ("Expected more than 1 value per channel when training"): partition halves`},
		{"pad", `epoch 1, batch 30 of 30: rank 1 feeds 1 sample (the batch's 3 shared out as 2 + 1)`},
		{"drop", ""},
	} {
		p := compile(t, loadSpec(t, strings.Replace(part, "UNEVEN", `"`+c.uneven+`"`, 1)), 2)
		ds, err := datasets.Synthetic("train", 64, []int{1, 2, 2}, 2, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		shards, policy, err := p.Shards(0, ds)
		if err != nil {
			t.Fatal(err)
		}
		err = p.CheckBatches(0, NewSchedule(shards, p.LocalBatch, policy))
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("uneven = %q: error %v, want %q", c.uneven, err, c.want)
		}
	}
}

// TestNothingToTrain: a model without trainable parameters, and an
// optim.group pattern that applies to no parameter, are refused, naming
// the model's layers, the pattern and the parameters.
func TestNothingToTrain(t *testing.T) {
	noParams := `
train(
    model = nn.sequential(nn.flatten(), nn.log_softmax()),
    loss = "nll",
    data = data.synthetic(size = 64, shape = [1, 10], classes = 10),
    optimizer = optim.sgd(lr = 0.1),
)
`
	_, err := Compile(loadSpec(t, noParams), DefaultCluster())
	if want := "/t/train.star:2:6: train: the model has no trainable parameters (its layers: flatten \"0\", log_softmax \"1\"): training would change nothing"; err == nil || err.Error() != want {
		t.Errorf("a model without parameters: %v, want %q", err, want)
	}
	for _, c := range []struct{ groups, want string }{
		{`[optim.group("*.bais", weight_decay = 0)]`, `--set optimizer:1:43: optim.group: pattern "*.bais" matches no parameter of the model; its parameters are conv1.weight, conv1.bias, conv2.weight, conv2.bias, fc1.weight, fc1.bias, … (8 in all)`},
		{`[optim.group(["*.bias", "fc3.*"], weight_decay = 0)]`, `optim.group: pattern "fc3.*" matches no parameter of the model`},
		{`[optim.group("*", lr = 0.1), optim.group("*.bias", weight_decay = 0)]`, `--set optimizer:1:71: optim.group: pattern "*.bias" matches only parameters an earlier group takes (conv1.bias, conv2.bias, fc1.bias, fc2.bias, by the group at --set optimizer:1:43)`},
		{`[optim.group("*.bias", weight_decay = 0), optim.group("fc*", lr = 0.1)]`, ""},
	} {
		s := loadSpec(t, mnistScript, "optimizer=optim.sgd(lr = 0.01, groups = "+c.groups+")")
		_, err := Compile(s, DefaultCluster())
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("groups %s: error %v, want %q", c.groups, err, c.want)
		}
	}
}

// TestNegativeClassLabels: class labels below 0 compile only as the loss's
// ignore_index, and the error otherwise says what ignore_index is.
func TestNegativeClassLabels(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data.safetensors")
	if err := safetensors.WriteFile(file, []safetensors.Tensor{safetensors.F32("x", []int{4, 2}, make([]float32, 8)),
		safetensors.I64("y", []int{4}, []int64{0, -100, 1, -100})}, nil); err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(`
train(
    model = nn.sequential(nn.flatten(), nn.linear(2, 2, name = "fc")),
    loss = "cross_entropy",
    data = data.tensors("DATA", x = "x", y = "y"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 2,
)
`, "DATA", file, 1)
	for _, c := range []struct {
		sets []string
		want string
	}{
		{nil, "/t/train.star:5:24: data.tensors: sample 1 has the target -100: class targets are 0 … classes − 1, and no ignore_index is set; set ignore_index = -100 (train's or the loss's) to skip such targets"},
		{[]string{"ignore_index=-1"}, "/t/train.star:5:24: data.tensors: sample 1 has the target -100: class targets are 0 … classes − 1, and the loss skips only its ignore_index, -1"},
		{[]string{"ignore_index=-100"}, ""},
		{[]string{"loss=nn.cross_entropy(ignore_index = -100)"}, ""},
	} {
		_, err := Compile(loadSpec(t, src, c.sets...), DefaultCluster())
		if (c.want == "") != (err == nil) || err != nil && err.Error() != c.want {
			t.Errorf("%v: error %v, want %q", c.sets, err, c.want)
		}
	}
}

// convScript is a small convolutional model for resume tests; tests vary
// its layers.
const convScript = `
train(
    model = nn.sequential(
        nn.conv2d(1, 4, kernel = 3, name = "conv1"),
        nn.dropout(0.5),
        nn.adaptive_avgpool2d(1),
        nn.flatten(),
        nn.linear(4, 10, name = "fc"),
    ),
    loss = "cross_entropy",
    data = data.mnist(),
    optimizer = optim.sgd(lr = 0.01),
    batch_size = 8,
)
`

// TestResumeRefusalNamesTheChange: a checkpoint of another model or
// settings is refused naming what changed — the layer, its kind and line,
// the attribute or tensor with its value then and now, or the setting —
// for keys by meaning and for legacy keys (which print every field of
// ops.Attrs, never shown whole).
func TestResumeRefusalNamesTheChange(t *testing.T) {
	p := compile(t, loadSpec(t, convScript), 1)
	key := p.ResumeKey()
	legacy, err := p.resumeKey(LegacyStepKey, nil, p.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	const fix = ": resume with the script and --set that made it"
	for _, c := range []struct {
		from, to string
		sets     []string
		want     string
	}{
		{`kernel = 3, name = "conv1"`, `kernel = 3, stride = 2, name = "conv1"`, nil,
			`layer conv1 (conv2d, /t/train.star:4:18): stride was 1 in the checkpoint, is 2 now` + fix},
		{`nn.dropout(0.5)`, `nn.dropout(0.25)`, nil,
			`layer 1 (dropout, /t/train.star:5:19): p was 0.5 in the checkpoint, is 0.25 now` + fix},
		{`nn.conv2d(1, 4, kernel = 3, name = "conv1")`, `nn.conv2d(1, 6, kernel = 3, name = "conv1")`, []string{"model=" + `nn.sequential(nn.conv2d(1, 6, kernel = 3, name = "conv1"), nn.dropout(0.5), nn.adaptive_avgpool2d(1), nn.flatten(), nn.linear(6, 10, name = "fc"))`},
			`layer conv1 (conv2d, --set model:1:24): its weight was [4 1 3 3] in the checkpoint, is [6 1 3 3] now` + fix},
		{`nn.dropout(0.5),`, `nn.dropout(0.5), nn.relu(),`, nil,
			`the model changed at forward step 3: the checkpoint's computes global_avgpool2d there, this one relu of layer 2 (relu, /t/train.star:5:33) (layers added, removed or replaced?)` + fix},
		{"", "", []string{"optimizer=optim.sgd(lr = 0.02)"},
			`optimizer: lr was 0.01 in the checkpoint, is 0.02 now` + fix},
		{"", "", []string{"optimizer=optim.adam()"},
			`optimizer was sgd lr 0.01 momentum 0 dampening 0 weight_decay 0 nesterov false betas (0, 0) eps 0 in the checkpoint, is adam lr 0.001`},
		{"", "", []string{"batch_size=16"},
			`train settings: batch_size was 8 in the checkpoint, is 16 now` + fix},
	} {
		q := compile(t, loadSpec(t, strings.Replace(convScript, c.from, c.to, 1), c.sets...), 1)
		for _, k := range []struct {
			format string
			key    []PlanStep
		}{{ResumeKeyFormat, key}, {"", legacy}} {
			err := q.CheckResumeKey(k.format, k.key)
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Padding:") || len(err.Error()) > 300 {
				t.Errorf("%s %v, key format %q: error\n%v\nwant\n%s", c.to, c.sets, k.format, err, c.want)
			}
		}
	}
}
