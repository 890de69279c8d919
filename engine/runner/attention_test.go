package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/ops"
)

// attnScript is a small GPT whose windows (T = 70) span two of the CPU
// attention kernel's tiles of query rows, with three heads of 8. FUSED is
// nn.multihead_attention's fused argument; DROPOUT its dropout.
const attnScript = `
V, T, D, H = 11, 70, 24, 3

def block(x):
    ln1 = nn.layernorm(D, name = "ln_1")
    attn = nn.multihead_attention(D, H, causal = True, dropout = DROPOUT, fused = FUSED, name = "attn")
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
    loss = "cross_entropy",
    data = data.text("TEXT", seq_len = T, vocab = "chars"),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.9),
    batch_size = 3,
    max_steps = 4,
)
`

// attnSrc returns attnScript over a text file in a temporary folder.
func attnSrc(t *testing.T, fused bool, dropout string) string {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijkkjihgfedcbaacegikbdfhjhhaakk", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	f := "False"
	if fused {
		f = "True"
	}
	return strings.NewReplacer("TEXT", text, "FUSED", f, "DROPOUT", dropout).Replace(attnScript)
}

// countOp counts the steps of p's first Program that run op.
func countOp(p *engine.Plan, op ops.Op) int {
	n := 0
	for _, st := range p.Devices[0].Steps {
		if st.Kind == engine.KernelStep && st.Op == op {
			n++
		}
	}
	return n
}

// TestFusedAttentionTrainsAsUnfused trains the GPT four steps (SGD with
// momentum: see TestGPTDevicesAgree on Adam and in_proj_bias) with nn.multihead_attention lowered to the fused ops.Attention (the
// default) and with fused = False (batched products and a softmax over
// the T×T weights): the step losses agree to 1e-5. The fused plan holds
// one attention and one attention_grad per block and needs less memory;
// fused = False, cluster.fusion = false and attention dropout each give
// the unfused plan.
func TestFusedAttentionTrainsAsUnfused(t *testing.T) {
	fused := compile(t, loadSpec(t, attnSrc(t, true, "0.0")), 1)
	unfused := compile(t, loadSpec(t, attnSrc(t, false, "0.0")), 1)
	if n, m := countOp(fused, ops.Attention), countOp(fused, ops.AttentionGrad); n != 2 || m != 2 {
		t.Errorf("fused plan: %d attention and %d attention_grad steps, want 2 and 2", n, m)
	}
	for name, p := range map[string]*engine.Plan{
		"fused = False":         unfused,
		"cluster.fusion=false":  compileWith(t, loadSpec(t, attnSrc(t, true, "0.0")), 1, "cluster.fusion=false"),
		"attention dropout 0.1": compile(t, loadSpec(t, attnSrc(t, true, "0.1")), 1),
	} {
		if n := countOp(p, ops.Attention) + countOp(p, ops.AttentionGrad); n != 0 {
			t.Errorf("%s: the plan holds %d fused attention steps, want none", name, n)
		}
		if countOp(p, ops.Softmax) != 2 {
			t.Errorf("%s: the plan holds %d softmax steps, want the unfused path's 2", name, countOp(p, ops.Softmax))
		}
	}
	fm, um := fused.Devices[0].MemoryBytes(), unfused.Devices[0].MemoryBytes()
	t.Logf("memory: fused %d bytes, unfused %d bytes (%.2f×)", fm, um, float64(um)/float64(fm))
	if fm >= um {
		t.Errorf("fused plan needs %d bytes, the unfused one %d: want less", fm, um)
	}

	fl, fp := stepLosses(t, attnSrc(t, true, "0.0"), 1)
	ul, up := stepLosses(t, attnSrc(t, false, "0.0"), 1)
	if len(fl) != 4 || len(ul) != 4 {
		t.Fatalf("step losses: fused %v, unfused %v: want 4 each", fl, ul)
	}
	t.Logf("losses fused %v\n unfused %v", fl, ul)
	if d := maxRelDiff64(fl, ul); d > 1e-5 {
		t.Errorf("losses differ by %.2e (relative)\n fused   %v\n unfused %v", d, fl, ul)
	}
	if d := maxRelDiff(fp, up); d > 1e-4 {
		t.Errorf("parameters after 4 steps differ by %.2e (relative)", d)
	}
}

// TestFusedAttentionDevicesAgree: the fused attention trains to the same
// losses on one device and on two.
func TestFusedAttentionDevicesAgree(t *testing.T) {
	src := attnSrc(t, true, "0.0")
	one, _ := stepLosses(t, src, 1, "batch_size=4")
	two, _ := stepLosses(t, src, 2, "batch_size=4")
	if d := maxRelDiff64(one, two); d > 1e-5 {
		t.Errorf("losses on 2 devices differ from one device's by %.2e\n one %v\n two %v", d, one, two)
	}
}

// patternScript writes attention out with nn.matmul, a transpose and a
// causal softmax, two heads of 8 over windows of T = TT tokens.
const patternScript = `
V, T, D, H = 11, TT, 16, 2

x = data.input()
h = nn.embedding(V, D, init = "normal(0.02)", name = "wte")(x) + nn.embedding(T, D, init = "normal(0.02)", name = "wpe")(data.positions())
def heads(y):
    return y.reshape(T, H, D // H).transpose(1, 2)    # [N, H, T, dh]
q, k, v = heads(nn.linear(D, D, name = "q")(h)), heads(nn.linear(D, D, name = "k")(h)), heads(nn.linear(D, D, name = "v")(h))
w = nn.softmax(causal = True)(nn.matmul(q, k.transpose(2, 3)))
a = nn.matmul(w, v).transpose(1, 2).reshape(T, D)
h = h + nn.linear(D, D, name = "proj")(a)
train(
    model = nn.linear(D, V, name = "head")(nn.layernorm(D, name = "ln")(h)),
    loss = "cross_entropy",
    data = data.text("TEXT", seq_len = T, vocab = "chars"),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.9),
    batch_size = 3,
    max_steps = 4,
)
`

// TestAttentionPatternFused: a script's own attention (nn.matmul of q and
// a transposed k, a causal softmax, nn.matmul with v) compiles into one
// attention_heads step (no softmax, no T×T value), and trains to the same
// losses as the plan with cluster.fusion = false: bit for bit when T fits
// one tile of the CPU kernel (T 40), within 1e-5 beyond (T 70).
func TestAttentionPatternFused(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijkkjihgfedcbaacegikbdfhjhhaakk", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []string{"40", "70"} {
		src := strings.NewReplacer("TEXT", text, "TT", tt).Replace(patternScript)
		fused := compile(t, loadSpec(t, src), 1)
		unfused := compileWith(t, loadSpec(t, src), 1, "cluster.fusion=false")
		if n, m := countOp(fused, ops.AttentionHeads), countOp(fused, ops.AttentionHeadsGrad); n != 1 || m != 1 || countOp(fused, ops.Softmax) != 0 {
			t.Errorf("T %s: fused plan: %d attention_heads, %d attention_heads_grad, %d softmax steps; want 1, 1, 0", tt, n, m, countOp(fused, ops.Softmax))
		}
		if countOp(unfused, ops.AttentionHeads) != 0 || countOp(unfused, ops.Softmax) != 1 {
			t.Errorf("T %s: cluster.fusion=false: want the unfused steps", tt)
		}
		t.Logf("T %s: memory fused %d bytes, unfused %d", tt, fused.Devices[0].MemoryBytes(), unfused.Devices[0].MemoryBytes())
		fl, fp := stepLosses(t, src, 1)
		var ul []float64
		var up []float32
		{
			dir := t.TempDir()
			res, err := Run(unfused, RunOptions{Out: dir})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
				if m["kind"] == "step" {
					ul = append(ul, m["loss"].(float64))
				}
			}
			up = res.Params[0]
		}
		t.Logf("T %s: losses fused %v\n unfused %v", tt, fl, ul)
		d, dp := maxRelDiff64(fl, ul), maxRelDiff(fp, up)
		if len(fl) != 4 || d > 1e-5 || dp > 1e-4 {
			t.Errorf("T %s: %d steps; losses differ by %.2e, parameters by %.2e", tt, len(fl), d, dp)
		}
		if tt == "40" && (d != 0 || dp != 0) {
			t.Errorf("T %s (one tile): losses differ by %.2e, parameters by %.2e: want the same bits", tt, d, dp)
		}
	}
}
