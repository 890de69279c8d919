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
