package engine

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	_ "gorun/cuda/cudatarget" // "cuda" as a gorun without the backend knows it
	"gorun/engine/target"
	"gorun/ops"
)

// The engine's tests cannot import the cpu backend (it imports engine):
// they register a Target like its own — every op but the CUDA fusion
// cross_entropy_fused, linear_gelu, linear_grad_input_gelu and linear_grad_weight_bias, the host's memory and cores, the key help — as cmd/gorun's import of the backend does.
func init() { target.Register(cpuTarget()) }

// cudaFusions are the target fusions the real cpu backend declines.
var cudaFusions = map[ops.Op]string{ops.CrossEntropyFused: "a CUDA fusion", ops.LinearGELU: "a CUDA fusion",
	ops.LinearGradInputGELU: "a CUDA fusion", ops.LinearGradWeightBias: "a CUDA fusion"}

func cpuTarget() *target.Target {
	return &target.Target{
		Name:       "cpu",
		Supports:   func(op ops.Op) bool { return op != ops.Invalid && cudaFusions[op] == "" },
		Declines:   cudaFusions,
		Keys:       []target.Key{target.Bool("help", true, "false: no helping")},
		HostMemory: true,
		HostCores:  true,
	}
}

// withCPU registers t as the "cpu" Target for the rest of the test.
func withCPU(t *testing.T, tg *target.Target) {
	t.Helper()
	target.Register(tg)
	t.Cleanup(func() { target.Register(cpuTarget()) })
}

// steps lists a Plan's first device's steps, forward to update, then
// evaluation, by their printed op names.
func steps(p *Plan) []string {
	var out []string
	for _, st := range append(p.Devices[0].Steps, p.Devices[0].Eval...) {
		if st.Kind == KernelStep {
			out = append(out, st.OpName())
		}
	}
	return out
}

// TestFusionFollowsTheTarget: the compiler fuses a convolution, its max
// pooling and ReLU into one Conv2DPool only for a backend that runs
// Conv2DPool and its gradient; for one that declines them (the cuda
// backend does), or one this build lacks, the plan keeps the three ops,
// and its other fusions.
func TestFusionFollowsTheTarget(t *testing.T) {
	s := loadSpec(t, mnistScript)
	has := func(p *Plan, op string) bool { return strings.Contains(strings.Join(steps(p), " "), op) }
	if p := compile(t, s, 1); !has(p, "conv2d+maxpool2d+relu") || !has(p, "conv2d+maxpool2d+relu_grad") {
		t.Fatalf("cpu plan without the conv+pool fusion: %v", steps(p))
	}
	noPool := cpuTarget()
	noPool.Supports = func(op ops.Op) bool { return op != ops.Invalid && op != ops.Conv2DPool && op != ops.Conv2DPoolGrad }
	noPool.Declines = map[ops.Op]string{ops.Conv2DPool: "test", ops.Conv2DPoolGrad: "test"}
	noGrad := cpuTarget()
	noGrad.Supports = func(op ops.Op) bool { return op != ops.Invalid && op != ops.Conv2DPoolGrad }
	noGrad.Declines = map[ops.Op]string{ops.Conv2DPoolGrad: "test"}
	for name, tg := range map[string]*target.Target{"no Conv2DPool": noPool, "no Conv2DPoolGrad": noGrad} {
		withCPU(t, tg)
		p := compile(t, s, 1)
		if has(p, "conv2d+maxpool2d") || !has(p, "maxpool2d") {
			t.Errorf("%s: the plan fuses conv and pooling: %v", name, steps(p))
		}
		target.Register(cpuTarget())
	}
	c := DefaultCluster()
	c.Backend = "cuda" // known, not built: no fusion that needs the backend
	p, err := Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	if has(p, "conv2d+maxpool2d") {
		t.Errorf("cuda plan in a build without cuda fuses conv and pooling: %v", steps(p))
	}
}

// TestFusionKey: cluster.fusion = false compiles the plan as the script
// wrote it (no fused step at all); the file and --set both set it.
func TestFusionKey(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte("[cluster]\nfusion = false\n"))
	if err != nil || !c.NoFusion {
		t.Fatalf("fusion = false: %+v, %v", c, err)
	}
	if _, err := ParseCluster("c.toml", []byte("[cluster]\nfusion = \"off\"\n")); err == nil || !strings.Contains(err.Error(), `c.toml:2: cluster.fusion: want true or false, found string "off"`) {
		t.Errorf("fusion = \"off\": %v", err)
	}
	c = DefaultCluster()
	if err := c.Set("cluster.fusion", "false"); err != nil || !c.NoFusion {
		t.Fatalf("Set cluster.fusion=false: %v", err)
	}
	p, err := Compile(loadSpec(t, resnetBlockScript), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range steps(p) {
		if strings.Contains(op, "+") {
			t.Errorf("fusion = false: fused step %s", op)
		}
	}
	fused := compile(t, loadSpec(t, resnetBlockScript), 1)
	if n := strings.Count(strings.Join(steps(fused), " "), "+"); n == 0 {
		t.Errorf("the block compiles without fused steps by default: %v", steps(fused))
	}
	var b bytes.Buffer
	if err := p.Describe(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "settings: cluster.fusion = false, cpu.help = true") {
		t.Errorf("plan output lacks the settings line:\n%s", b.String())
	}
}

// resnetBlockScript is a residual block: batch norms fused with their
// ReLU and the residual add, and the conv1+pool fusion.
const resnetBlockScript = `
def block(x):
    y = nn.relu(nn.batchnorm2d(4, name = "bn1")(nn.conv2d(4, 4, kernel = 3, padding = 1, name = "c1")(x)))
    y = nn.batchnorm2d(4, name = "bn2")(nn.conv2d(4, 4, kernel = 3, padding = 1, name = "c2")(y))
    return nn.relu(y + x)

x = data.input()
h = nn.relu(nn.maxpool2d(2)(nn.conv2d(1, 4, kernel = 3, padding = 1, name = "stem")(x)))
h = block(h)
out = nn.log_softmax()(nn.linear(64, 4, name = "fc")(nn.flatten()(h)))
train(
    model = out,
    loss = "nll",
    data = data.synthetic(size = 64, shape = (1, 8, 8), classes = 4, noise = 1.0, seed = 3),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 16,
    epochs = 1,
    seed = 7,
)
`

// TestCompileRefusesOpsTheTargetLacks: a plan with an op its backend
// does not run is refused at compile time, naming the op, the reason the
// backend gives and the layer with its script line.
func TestCompileRefusesOpsTheTargetLacks(t *testing.T) {
	tg := cpuTarget()
	tg.Supports = func(op ops.Op) bool { return op != ops.Invalid && op != ops.LogSoftmaxGrad }
	tg.Declines = map[ops.Op]string{ops.LogSoftmaxGrad: "not written yet"}
	withCPU(t, tg)
	_, err := Compile(loadSpec(t, mnistScript), DefaultCluster())
	want := `/t/train.star:15:19: log_softmax "12": backend "cpu" has no kernel for op log_softmax_grad: not written yet`
	if err == nil || err.Error() != want {
		t.Errorf("error %v\nwant  %s", err, want)
	}
}

// TestMemoryCheckFollowsTheTarget: a plan larger than this host is
// refused for a backend whose memory is the host's, not for one whose
// devices have their own (checked when they allocate).
func TestMemoryCheckFollowsTheTarget(t *testing.T) {
	if availableMemory() == 0 {
		t.Skip("SKIP: no MemAvailable in /proc/meminfo")
	}
	src := strings.Replace(tinyScript, `nn.linear(48, 4, name = "fc")`, `nn.linear(48, 1 << 34, name = "fc"), nn.linear(1 << 34, 4, name = "out")`, 1)
	s := loadSpec(t, src)
	if _, err := Compile(s, DefaultCluster()); err == nil || !strings.Contains(err.Error(), "more than the memory this machine has available") {
		t.Errorf("3 TiB plan on the host: %v", err)
	}
	own := cpuTarget()
	own.HostMemory = false
	withCPU(t, own)
	if _, err := Compile(s, DefaultCluster()); err != nil {
		t.Errorf("3 TiB plan on devices with their own memory: %v", err)
	}
}

// TestBackendTables: a registered backend's table is decoded into
// Settings by its Target's keys, checked as the other keys are, and read
// back with the defaults filled in (BackendSettings).
func TestBackendTables(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte("[cluster]\nbackend = \"cuda\"\n\n[cuda]\neager = true\nnccl = \"/opt/nccl/libnccl.so.2\"\n\n[cpu]\nhelp = false\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"cuda.eager": true, "cuda.nccl": "/opt/nccl/libnccl.so.2", "cpu.help": false}
	if !reflect.DeepEqual(c.Settings, want) {
		t.Errorf("settings %v, want %v", c.Settings, want)
	}
	if got, want := c.BackendSettings(), map[string]any{"eager": true, "cublas": "", "nccl": "/opt/nccl/libnccl.so.2", "tf32": false, "cublaslt": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("cuda's settings %v, want %v", got, want)
	}
	if dc := DefaultCluster(); !reflect.DeepEqual(dc.BackendSettings(), map[string]any{"help": true}) {
		t.Errorf("cpu's default settings %v", dc.BackendSettings())
	}
	for src, want := range map[string]string{
		"[cpu]\nhelp = \"no\"\n":                      `c.toml:2: cpu.help: want true or false, found string "no"`,
		"[cpu]\nhlep = false\n":                       `c.toml:2: cpu.hlep: unknown key; did you mean "cpu.help"?`,
		"[cuda]\neager = true\n[cpu]\neager = true\n": `c.toml:4: cpu.eager: unknown key; did you mean "cuda.eager"?`,
		"cpu = 1\n":             "c.toml:1: cpu: want a table [cpu], found integer 1",
		"[cuda]\ncublas = 3\n":  `c.toml:2: cuda.cublas: want the path of a file, such as "/usr/lib/x86_64-linux-gnu/libcublas.so.12", found integer 3`,
		"[gpu]\neager = true\n": `c.toml:1: gpu: unknown key`,
	} {
		if _, err := ParseCluster("c.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", src, err, want)
		}
	}
	// Set takes a backend's keys, strings unquoted, and copies Settings.
	c = DefaultCluster()
	if err := c.Set("cuda.cublas", "/opt/lib/libcublas.so.12"); err != nil || c.Settings["cuda.cublas"] != "/opt/lib/libcublas.so.12" {
		t.Fatalf("Set cuda.cublas: %v, %v", err, c.Settings)
	}
	d := c
	if err := d.Set("cpu.help", "false"); err != nil || d.Settings["cpu.help"] != false {
		t.Fatalf("Set cpu.help: %v, %v", err, d.Settings)
	}
	if _, ok := c.Settings["cpu.help"]; ok {
		t.Error("Set changed the Settings of a copy of the cluster")
	}
	for key, want := range map[string]string{
		"cpu.help":   `cpu.help: "maybe" is not a TOML value`,
		"cpu.helps":  `cpu.helps: unknown cluster key; did you mean "cpu.help"?`,
		"cuda":       "cuda: is a table: set one of its keys, e.g. cuda.eager",
		"cuda.eagre": `did you mean "cuda.eager"?`,
	} {
		if err := d.Set(key, "maybe"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set(%s, maybe): %v, want %q", key, err, want)
		}
	}
	if err := d.Set("cpu.help", "1"); err == nil || err.Error() != "cpu.help: want true or false, found integer 1" {
		t.Errorf("Set(cpu.help, 1): %v", err)
	}
	if !IsClusterKey("cpu.help") || !IsClusterKey("cuda.nccl") || IsClusterKey("gpu.eager") {
		t.Error("IsClusterKey of backend keys")
	}
}

// TestTransportsComeWithTheirBackend: a transport a backend brings (nccl,
// with cuda) needs that backend, and says how to get it when the build
// lacks it.
func TestTransportsComeWithTheirBackend(t *testing.T) {
	if _, err := ParseCluster("c.toml", []byte("[cluster]\nbackend = \"cuda\"\ntransport = \"nccl\"\n")); err != nil {
		t.Error(err)
	}
	_, err := ParseCluster("c.toml", []byte("[cluster]\ntransport = \"nccl\"\n"))
	if err == nil || !strings.Contains(err.Error(), `c.toml:2: cluster.transport: "nccl" needs backend "cuda", got backend "cpu"`) {
		t.Errorf("nccl on cpu: %v", err)
	}
	_, err = ParseCluster("c.toml", []byte("[cluster]\nprocesses = 2\n"))
	if err == nil || !strings.Contains(err.Error(), `use "mpi" (or "nccl" with backend "cuda")`) {
		t.Errorf("inproc across processes: %v", err)
	}
}
