package engine

import (
	"math"
	"strings"
	"testing"
)

// blockScript builds a residual model with symbolic tensors; tests edit it.
const blockScript = `
def block(x, width):
    fc1 = nn.linear(width, width, name = "fc1")
    bn = nn.batchnorm1d(width, name = "bn")
    return nn.relu(bn(fc1(x)) + x)

x = data.input()
h = nn.relu(nn.linear(784, 32, name = "stem")(x.flatten()))
h = nn.module("layer1.0", block, h, 32)
shared = nn.linear(32, 32, name = "shared")
h = shared(nn.relu(shared(h)))
train(model = nn.linear(32, 10, name = "fc")(h), loss = "cross_entropy", data = data.mnist(limit = 256),
      optimizer = optim.sgd(lr = 0.1), batch_size = 16)
`

// TestSymbolicModel: names follow the nn.module scopes, a layer applied
// twice has one set of parameters (its gradient sums both uses), and
// shape errors name the layer and the script line of the call.
func TestSymbolicModel(t *testing.T) {
	p := compile(t, loadSpec(t, blockScript), 1)
	var names []string
	for _, prm := range p.Graph.Params {
		names = append(names, prm.Name)
	}
	want := "stem.weight stem.bias layer1.0.fc1.weight layer1.0.fc1.bias layer1.0.bn.weight layer1.0.bn.bias shared.weight shared.bias fc.weight fc.bias"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("parameters\n %s\nwant\n %s", got, want)
	}
	uses := 0
	for _, n := range p.Graph.Forward {
		if n.Op.String() == "linear" && n.In[1].Name == "shared.weight" {
			uses++
		}
	}
	if uses != 2 {
		t.Errorf("shared layer applied %d times in the graph, want 2", uses)
	}
	cases := []struct{ from, to, want string }{
		{`nn.linear(32, 10, name = "fc")`, `nn.linear(30, 10, name = "fc")`, `/t/train.star:12:45: linear "fc": linear: input has 32 features, weight expects 30`},
		{`bn = nn.batchnorm1d(width, name = "bn")`, `bn = nn.batchnorm1d(width + 1, name = "bn")`, `batchnorm1d "layer1.0.bn": input has 32 channels (shape [16 32]), the layer was declared with num_features 33`},
		{`return nn.relu(bn(fc1(x)) + x)`, `return nn.relu(bn(fc1(x)) + x.flatten().reshape(-1, 2, 16))`, `+: shapes [32] and [2 16] differ`},
		{`x.flatten()`, `x.reshape(-1, 7)`, `reshape: cannot view samples of shape [1 28 28] (784 values) as [7] (after the batch)`},
		{`name = "shared")`, `name = "fc")`, `name "fc" is already used by the linear declared at`},
	}
	for _, c := range cases {
		src := strings.Replace(blockScript, c.from, c.to, 1)
		_, err := Compile(loadSpec(t, src), DefaultCluster())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: error %v, want it to contain %q", c.from, c.to, err, c.want)
		}
	}
}

// TestInit: batch norm starts at weight 1, bias 0; init= sets a weight
// from PyTorch's schemes (checked by their statistics).
func TestInit(t *testing.T) {
	src := strings.NewReplacer(`nn.linear(784, 32, name = "stem")`, `nn.linear(784, 32, name = "stem", init = "kaiming_normal")`,
		`name = "shared")`, `name = "shared", init = "zeros")`,
		`nn.batchnorm1d(width, name = "bn")`, `nn.batchnorm1d(width, name = "bn", init = 0.5)`).Replace(blockScript)
	p := compile(t, loadSpec(t, src), 1)
	vals := p.InitialParams(1)
	prog := p.Devices[0]
	get := func(name string) []float32 {
		for i, prm := range p.Graph.Params {
			if prm.Name == name {
				b := prog.Params[i]
				return vals[b.Offset-prog.ParamArena.Offset:][:b.Elems()]
			}
		}
		t.Fatalf("no parameter %s", name)
		return nil
	}
	std := func(v []float32) float64 {
		var s, s2 float64
		for _, x := range v {
			s += float64(x)
			s2 += float64(x) * float64(x)
		}
		m := s / float64(len(v))
		return math.Sqrt(s2/float64(len(v)) - m*m)
	}
	if got, want := std(get("stem.weight")), math.Sqrt(2.0/32); math.Abs(got-want) > 0.05*want {
		t.Errorf("kaiming_normal (fan_out 32): std %.4f, want %.4f", got, want)
	}
	if got, want := std(get("fc.weight")), 1/math.Sqrt(32)/math.Sqrt(3); math.Abs(got-want) > 0.1*want {
		t.Errorf("default U(±1/√fan_in): std %.4f, want %.4f", got, want)
	}
	for name, want := range map[string]float32{"shared.weight": 0, "layer1.0.bn.weight": 0.5, "layer1.0.bn.bias": 0} {
		for _, x := range get(name) {
			if x != want {
				t.Fatalf("%s holds %v, want %v", name, x, want)
			}
		}
	}
	p = compile(t, loadSpec(t, blockScript), 1)
	vals = p.InitialParams(1)
	for _, x := range get("layer1.0.bn.weight") {
		if x != 1 {
			t.Fatalf("batch norm weight starts at %v, want 1", x)
		}
	}
}

// TestBroadcastBuffers: with batch norm on two devices, the Plan starts
// every training step with a broadcast of rank 0's running statistics
// (DDP's broadcast_buffers, the default), and not when it is turned off
// or on one device; evaluation broadcasts nothing.
func TestBroadcastBuffers(t *testing.T) {
	first := func(devices int, sets ...string) *Step {
		p := compile(t, loadSpec(t, blockScript, sets...), devices)
		for _, st := range p.Devices[0].Eval {
			if st.Kind == CollectiveStep {
				t.Errorf("evaluation has a collective: %s", st.Layer)
			}
		}
		return p.Devices[0].Steps[0]
	}
	st := first(2)
	if st.Kind != CollectiveStep || st.Collective.Kind != CollectiveBroadcast || st.Collective.Buffer != nil && st.Collective.Buffer.Name != "running statistics" {
		t.Errorf("first step on 2 devices is %s %s, want the broadcast of the running statistics", st.Op, st.Layer)
	}
	if st := first(2, "sync=sync.allreduce(broadcast_buffers=False)"); st.Kind == CollectiveStep {
		t.Errorf("broadcast_buffers=False still broadcasts: %s", st.Layer)
	}
	if st := first(1); st.Kind == CollectiveStep {
		t.Errorf("one device broadcasts: %s", st.Layer)
	}
}
