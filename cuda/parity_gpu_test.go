//go:build cuda

package cuda

// Whole training runs on the cuda backend against the cpu backend: a GPT
// on token windows (data.tensors, with ignore_index targets, label
// smoothing, weight tying, AdamW with parameter groups, a warm-up then
// cosine schedule, gradient clipping and accumulation), a ResNet with
// batch norm on images (SGD with momentum, weight decay and Nesterov, a
// partial last batch), and a regression (float targets, mse). Every step
// runs from captured CUDA graphs past its first two. They need a GPU: here
// they compile and skip.

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// parityGPT is a 2-layer GPT whose training uses every optimizer feature
// the cuda backend must keep inside the captured step.
const parityGPT = `
V, T, D, H = 37, 12, 32, 4

def block(x):
    ln1 = nn.layernorm(D, name = "ln_1")
    attn = nn.multihead_attention(D, H, causal = True, name = "attn")
    ln2 = nn.layernorm(D, name = "ln_2")
    fc = nn.linear(D, 4 * D, name = "mlp.c_fc")
    proj = nn.linear(4 * D, D, name = "mlp.c_proj")
    x = x + attn(ln1(x))
    return x + proj(nn.gelu(fc(ln2(x)), approximate = "tanh"))

x = data.input()
wte = nn.embedding(V, D, init = "normal(0.02)", name = "wte")
h = wte(x) + nn.embedding(T, D, init = "normal(0.02)", name = "wpe")(data.positions())
for i in range(2):
    h = nn.module("h.%d" % i, block, h)
h = nn.layernorm(D, name = "ln_f")(h)
train(
    model = nn.linear(D, V, bias = False, tie = wte, name = "lm_head")(h),
    loss = nn.cross_entropy(label_smoothing = 0.1, ignore_index = -100),
    data = data.tensors("TOKENS", x = "x", y = "y"),
    optimizer = optim.adamw(lr = 3e-3, weight_decay = 0.1,
                            groups = [optim.group(["*.bias", "*ln_*", "wpe.*"], weight_decay = 0.0)]),
    schedule = sched.linear_warmup(4, then = sched.cosine()),
    clip_grad_norm = 0.5,
    batch_size = 10,
    accumulate = 2,
    epochs = 2,
    seed = 7,
)
`

// parityResNet is a small ResNet with batch norm on a synthetic image set
// whose size leaves a partial last batch.
const parityResNet = `
def block(x, cin, cout, stride):
    y = nn.relu(nn.batchnorm2d(cout, name = "bn1")(nn.conv2d(cin, cout, 3, stride = stride, padding = 1, bias = False, name = "conv1")(x)))
    y = nn.batchnorm2d(cout, name = "bn2")(nn.conv2d(cout, cout, 3, padding = 1, bias = False, name = "conv2")(y))
    if stride != 1 or cin != cout:
        x = nn.sequential(nn.conv2d(cin, cout, 1, stride = stride, bias = False), nn.batchnorm2d(cout), name = "downsample")(x)
    return nn.relu(y + x)

x = data.input()
h = nn.relu(nn.batchnorm2d(8, name = "bn1")(nn.conv2d(1, 8, 3, padding = 1, bias = False, name = "conv1")(x)))
h = nn.module("layer1.0", block, h, 8, 8, 1)
h = nn.module("layer2.0", block, h, 8, 16, 2)
h = nn.adaptive_avgpool2d(1)(h).flatten()
train(
    model = nn.linear(16, 10, name = "fc")(h),
    loss = "cross_entropy",
    data = data.synthetic(size = 300, shape = (1, 12, 12), classes = 10, seed = 5),
    eval = data.synthetic(size = 100, shape = (1, 12, 12), classes = 10, seed = 5, split = "test"),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.9, nesterov = True, weight_decay = 5e-4),
    schedule = sched.cosine(),
    batch_size = 32,
    epochs = 2,
    seed = 3,
)
`

// parityRegression is a small MLP on float targets of shape [3].
const parityRegression = `
x = data.input()
h = nn.tanh(nn.linear(5, 16, name = "fc1")(x))
train(
    model = nn.linear(16, 3, name = "fc2")(h),
    loss = "mse",
    data = data.tensors("REG", x = "x", y = "y"),
    optimizer = optim.adam(lr = 1e-2),
    clip_grad_norm = 1.0,
    batch_size = 16,
    epochs = 3,
    seed = 2,
)
`

// writeTensors writes a safetensors file of int32 or float32 arrays.
func writeTensors(t *testing.T, path string, ts map[string]any, shapes map[string][]int) {
	t.Helper()
	var out []safetensors.Tensor
	for name, v := range ts {
		var data []byte
		var dt safetensors.DType
		switch v := v.(type) {
		case []int32:
			dt = safetensors.DTypeI32
			for _, x := range v {
				data = binary.LittleEndian.AppendUint32(data, uint32(x))
			}
		case []float32:
			dt = safetensors.DTypeF32
			for _, x := range v {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(x))
			}
		}
		out = append(out, safetensors.Tensor{Name: name, DType: dt, Shape: shapes[name], Data: data})
	}
	if err := safetensors.WriteFile(path, out, nil); err != nil {
		t.Fatal(err)
	}
}

// parityData writes the GPT's token windows (next-token targets, every
// seventh target -100) and the regression's samples into dir.
func parityData(t *testing.T, dir string) (tokens, reg string) {
	const n, tt, v = 110, 12, 37
	x, y := make([]int32, n*tt), make([]int32, n*tt)
	seq := make([]int32, n*tt+1)
	s := uint32(1)
	for i := range seq {
		s = s*1664525 + 1013904223
		seq[i] = int32(s>>8) % v
		if i%5 == 0 && i > 0 {
			seq[i] = (seq[i-1] + 1) % v // something to learn
		}
	}
	for w := range n {
		for j := range tt {
			x[w*tt+j] = seq[w*tt+j]
			y[w*tt+j] = seq[w*tt+j+1]
			if (w*tt+j)%7 == 3 {
				y[w*tt+j] = -100
			}
		}
	}
	tokens = filepath.Join(dir, "tokens.safetensors")
	writeTensors(t, tokens, map[string]any{"x": x, "y": y}, map[string][]int{"x": {n, tt}, "y": {n, tt}})
	const m = 90
	rx, ry := make([]float32, m*5), make([]float32, m*3)
	for i := range m {
		for j := range 5 {
			rx[i*5+j] = float32(math.Sin(float64(i*5+j) * 0.37))
		}
		for j := range 3 {
			ry[i*3+j] = rx[i*5+j]*rx[i*5+j+1] - 0.5*rx[i*5+j+2]
		}
	}
	reg = filepath.Join(dir, "reg.safetensors")
	writeTensors(t, reg, map[string]any{"x": rx, "y": ry}, map[string][]int{"x": {m, 5}, "y": {m, 3}})
	return tokens, reg
}

// trainOn runs src (held in memory) on backend name and returns its step
// losses and its result.
func trainOn(t *testing.T, src, name string) ([]float64, *runner.Result) {
	t.Helper()
	s, err := script.Load("/p/train.star", script.WithFileReader(parityFile(src)))
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultCluster()
	if err := c.Set("cluster.backend", name); err != nil {
		t.Fatal(err)
	}
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var losses []float64
	res, err := runner.Run(p, runner.RunOptions{OnStep: func(m runner.StepMetrics) { losses = append(losses, m.Loss) }})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return losses, res
}

type parityFile string

func (f parityFile) ReadFile(path string) ([]byte, error) {
	if path == "/p/train.star" {
		return []byte(f), nil
	}
	return nil, os.ErrNotExist
}

// TestTrainingParity trains each model on the cpu and the cuda backend
// from the same initial parameters and data order: every step's loss and
// the final parameters must agree (relative 1e-4 for the GPT and the
// regression; 1e-3 for the ResNet, whose batch statistics are summed in
// another order).
func TestTrainingParity(t *testing.T) {
	needGPU(t)
	tokens, reg := parityData(t, t.TempDir())
	for _, c := range []struct {
		name, src string
		tol       float64
	}{
		{"gpt", strings.ReplaceAll(parityGPT, "TOKENS", tokens), 1e-4},
		{"resnet", parityResNet, 1e-3},
		{"regression", strings.ReplaceAll(parityRegression, "REG", reg), 1e-4},
	} {
		t.Run(c.name, func(t *testing.T) {
			lc, rc := trainOn(t, c.src, "cpu")
			lg, rg := trainOn(t, c.src, "cuda")
			worst := 0.0
			if len(lc) != len(lg) || len(lc) == 0 {
				worst = math.Inf(1)
			}
			for i := range min(len(lc), len(lg)) {
				d := math.Abs(lc[i]-lg[i]) / max(math.Abs(lc[i]), 1e-12)
				if math.IsNaN(d) {
					d = math.Inf(1)
				}
				worst = max(worst, d)
			}
			params := 0.0
			if len(rc.Params) > 0 && len(rg.Params) > 0 {
				params = relErr(rg.Params[0], rc.Params[0])
			}
			ok := worst <= c.tol && params <= 10*c.tol && !math.IsNaN(params)
			jsonLine(map[string]any{"check": "parity", "model": c.name, "steps": len(lg), "max_rel_loss_diff": worst,
				"params_rel_err": params, "test_accuracy_cpu": rc.TestAccuracy, "test_accuracy_cuda": rg.TestAccuracy, "ok": ok})
			if !ok {
				t.Errorf("%s: cuda's losses differ from cpu's by %g (relative; %d and %d steps), final parameters by %g", c.name, worst, len(lg), len(lc), params)
			}
		})
	}
}

// TestDeferredVerdictsMatchSync trains on the cuda backend with each
// step's verdict kept on the GPU (backend.Deferrer: MarkStep's halt flag,
// the update launched without a wait, the loss read a step later) and
// with the synchronous read (RunOptions.SyncVerdicts): every step's loss
// and the final parameters must be the same bits; a diverging run (a
// learning rate of 1e30) must stop with the same error on both.
func TestDeferredVerdictsMatchSync(t *testing.T) {
	needGPU(t)
	tokens, _ := parityData(t, t.TempDir())
	gpt := strings.ReplaceAll(parityGPT, "TOKENS", tokens)
	for _, c := range []struct{ name, src string }{
		{"gpt", gpt},
		{"resnet", parityResNet},
		{"gpt_diverging", strings.Replace(gpt, "lr = 3e-3", "lr = 1e30", 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(sync bool) ([]float64, *runner.Result, error) {
				s, err := script.Load("/p/train.star", script.WithFileReader(parityFile(c.src)))
				if err != nil {
					t.Fatal(err)
				}
				cl := engine.DefaultCluster()
				if err := cl.Set("cluster.backend", "cuda"); err != nil {
					t.Fatal(err)
				}
				p, err := engine.Compile(s, cl)
				if err != nil {
					t.Fatal(err)
				}
				var losses []float64
				res, err := runner.Run(p, runner.RunOptions{SyncVerdicts: sync, OnStep: func(m runner.StepMetrics) { losses = append(losses, m.Loss) }})
				return losses, res, err
			}
			ld, rd, ed := run(false)
			ls, rsy, es := run(true)
			same := len(ld) == len(ls) && (ed == nil) == (es == nil)
			for i := range min(len(ld), len(ls)) {
				same = same && math.Float64bits(ld[i]) == math.Float64bits(ls[i])
			}
			if ed != nil && es != nil {
				same = same && ed.Error() == es.Error()
			}
			if rd != nil && rsy != nil {
				for r := range rsy.Params {
					for i := range rsy.Params[r] {
						same = same && math.Float32bits(rd.Params[r][i]) == math.Float32bits(rsy.Params[r][i])
					}
				}
			}
			jsonLine(map[string]any{"check": "deferred_verdicts", "model": c.name, "steps": len(ld), "sync_steps": len(ls),
				"error": fmt.Sprint(ed), "ok": same})
			if !same {
				t.Errorf("%s: deferred %d steps (error %v), synchronous %d (error %v): losses, parameters or errors differ", c.name, len(ld), ed, len(ls), es)
			}
		})
	}
}
