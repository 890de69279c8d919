package runner

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/datasets"
	"gorun/engine"
	"gorun/safetensors"
)

// gptScript is testdata/gen_gpt_golden.py's GPT: embeddings of tokens and
// positions, pre-norm blocks of causal multi-head attention and a GELU
// MLP, a tied output projection. TEXT is a file of 11 distinct characters.
const gptScript = `
V, T, D, H = 11, 6, 8, 2

def block(x):
    ln1 = nn.layernorm(D, name = "ln_1")
    attn = nn.multihead_attention(D, H, causal = True, name = "attn")
    ln2 = nn.layernorm(D, name = "ln_2")
    fc = nn.linear(D, 4 * D, name = "mlp.c_fc")
    proj = nn.linear(4 * D, D, name = "mlp.c_proj")
    x = x + attn(ln1(x))
    return x + proj(nn.gelu(fc(ln2(x)), approximate = "tanh"))

x = data.input()
wte = nn.embedding(V, D, name = "wte")
h = wte(x) + nn.embedding(T, D, name = "wpe")(data.positions())
for i in range(2):
    h = nn.module("h.%d" % i, block, h)
h = nn.layernorm(D, name = "ln_f")(h)
train(
    model = nn.linear(D, V, bias = False, tie = wte, name = "lm_head")(h),
    loss = "cross_entropy",
    data = data.text("TEXT", seq_len = T, vocab = "chars"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 3,
)
`

// tokenSet serves fixed token windows (x, y of n windows of t tokens).
type tokenSet struct {
	x, y  []int32
	t, v  int
	vocab datasets.Vocab
}

func (s *tokenSet) Name() string                           { return "tokens" }
func (s *tokenSet) Len() int                               { return len(s.x) / s.t }
func (s *tokenSet) SampleShape() []int                     { return []int{s.t} }
func (s *tokenSet) NumClasses() int                        { return s.v }
func (s *tokenSet) Labels() []int32                        { return nil }
func (s *tokenSet) Vocab() datasets.Vocab                  { return s.vocab }
func (s *tokenSet) Fill(idx []int, x []float32, y []int32) { panic("tokenSet: Fill") }
func (s *tokenSet) FillTokens(idx []int, x, y []int32) {
	for i, j := range idx {
		copy(x[i*s.t:(i+1)*s.t], s.x[j*s.t:(j+1)*s.t])
		copy(y[i*s.t:(i+1)*s.t], s.y[j*s.t:(j+1)*s.t])
	}
}

// TestGPTMatchesPyTorch compares the loss and every gradient of one batch
// of the GPT (attention built from primitives, weight tying) with PyTorch
// 1.13's nn.MultiheadAttention model (testdata/gen_gpt_golden.py); its
// state_dict names are gorun's, the tied lm_head.weight included.
func TestGPTMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/gpt_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		X, Y   []int32
		Params map[string]struct {
			Shape []int
			Data  []float32
		}
		StateDictKeys []string `json:"state_dict_keys"`
		Loss          float64
		Grads         map[string][]float64
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijk", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := compile(t, loadSpec(t, strings.Replace(gptScript, "TEXT", text, 1)), 1)
	var names []string
	for _, prm := range p.Graph.Params {
		names = append(names, prm.Name)
		names = append(names, prm.Aliases...)
	}
	want := slices.Clone(golden.StateDictKeys)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("state_dict names:\n gorun   %v\n PyTorch %v", names, want)
	}
	d, cd := testDevice(t, p, 0, 1)
	for name, v := range golden.Params {
		if err := setParam(d, name, v.Shape, v.Data); err != nil {
			t.Fatal(err)
		}
	}
	ds := &tokenSet{x: golden.X, y: golden.Y, t: 6, v: 11, vocab: datasets.Vocab{Kind: "bytes"}}
	feed(t, d, ds, []int{0, 1, 2})
	d.rc.LossScale = 1 / float64(3*6) // the runner's: samples × positions
	for _, st := range d.prog.Steps {
		if st.Phase == engine.PhaseUpdate {
			break
		}
		if err := d.exec(st); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustLoss(t, d); math.Abs(got-golden.Loss) > 1e-5*golden.Loss {
		t.Errorf("loss %.7f, PyTorch %.7f", got, golden.Loss)
	}
	for i, prm := range p.Graph.Params {
		g := golden.Grads[prm.Name]
		got := cd.Buf(d.prog.Grads[i]).Data
		var worst, scale float64
		for j := range g {
			worst = math.Max(worst, math.Abs(float64(got[j])-g[j]))
			scale = math.Max(scale, math.Abs(g[j]))
		}
		if len(got) != len(g) || worst > 1e-4*(1+scale) {
			t.Errorf("gradient of %s differs from PyTorch's by %.2e (largest %.2e)", prm.Name, worst, scale)
		}
	}
}

// TestGPTDevicesAgree: the GPT on data.text trains to the same losses
// and parameters on 1, 2 and 3 devices (no dropout), with a warm-up
// schedule and gradient accumulation. (SGD: the key part of in_proj_bias
// has a gradient of rounding noise only — softmax ignores a constant added
// to every score of a row — which Adam's normalisation turns into steps
// of ±lr that differ with the summation order.)
func TestGPTDevicesAgree(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijkkjihgfedcbaacegikbdfhjhhaakk", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(gptScript, "TEXT", text, 1)
	run := func(devices int, sets ...string) ([]float64, []float32) {
		return stepLosses(t, src, devices, append([]string{"max_steps=6", "batch_size=6",
			"optimizer=optim.sgd(lr=0.1, momentum=0.9)", "schedule=sched.linear_warmup(3, then=sched.cosine())"}, sets...)...)
	}
	for _, c := range []struct {
		devices int
		sets    []string
	}{{2, nil}, {3, nil}, {2, []string{"accumulate=2"}}} {
		oneLoss, oneParams := run(1, c.sets...)
		loss, params := run(c.devices, c.sets...)
		if d := maxRelDiff64(oneLoss, loss); d > 1e-5 {
			t.Errorf("%d devices %v: losses differ from one device's by %.2e\n one %v\n got %v", c.devices, c.sets, d, oneLoss, loss)
		}
		if d := maxRelDiff(oneParams, params); d > 1e-5 {
			t.Errorf("%d devices %v: parameters differ from one device's by %.2e", c.devices, c.sets, d)
		}
	}
}

// TestIgnoreIndexMatchesPyTorch trains one step on token windows from
// data.tensors whose targets include -100, with ignore_index = -100, from
// the parameters of testdata/gen_ignore_golden.py: the step's loss is
// PyTorch's cross_entropy(ignore_index=-100), the mean over the kept
// targets — on one device and on two (the count is the global batch's).
// Without ignore_index the plan is refused, naming the target.
func TestIgnoreIndexMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/ignore_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		X, Y    []int64
		N, T, V int
		Params  map[string]struct {
			Shape []int
			Data  []float32
		}
		Loss float64
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, init := filepath.Join(dir, "tokens.safetensors"), filepath.Join(dir, "init.safetensors")
	if err := safetensors.WriteFile(data, []safetensors.Tensor{safetensors.I64("x", []int{g.N, g.T}, g.X), safetensors.I64("y", []int{g.N, g.T}, g.Y)}, nil); err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for name, p := range g.Params {
		ts = append(ts, safetensors.F32(name, p.Shape, p.Data))
	}
	if err := safetensors.WriteFile(init, ts, nil); err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(`
x = data.input()
logits = nn.linear(4, 7, name = "fc")(nn.embedding(7, 4, name = "emb")(x))
train(model = logits, loss = "cross_entropy", ignore_index = -100, data = data.tensors("DATA", x = "x", y = "y"),
      optimizer = optim.sgd(lr = 0.1), batch_size = 6, max_steps = 1, shuffle = False)
`, "DATA", data)
	for _, devices := range []int{1, 2} {
		out := t.TempDir()
		p := compile(t, loadSpec(t, src), devices)
		if _, err := Run(p, RunOptions{Out: out, Init: init}); err != nil {
			t.Fatal(err)
		}
		for _, m := range readMetrics(t, filepath.Join(out, MetricsFile)) {
			if m["kind"] == "step" {
				if got := m["loss"].(float64); math.Abs(got-g.Loss) > 1e-5*g.Loss {
					t.Errorf("%d devices: loss %.7f, PyTorch %.7f", devices, got, g.Loss)
				}
			}
		}
	}
	if _, err := compileErr(loadSpec(t, strings.Replace(src, "ignore_index = -100, ", "", 1)), 1); err == nil ||
		!strings.Contains(err.Error(), "has the target -100: class targets are 0 … classes − 1, and no ignore_index is set; set ignore_index = -100") {
		t.Errorf("targets of -100 without ignore_index: %v", err)
	}
}
