package runner

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/safetensors"
)

// namedParams is rank r's final parameters in res by name, wherever the
// plan keeps them (its arena, or the flattened layout of a sharded plan).
func namedParams(p *engine.Plan, res *Result, r int) map[string][]float32 {
	out := map[string][]float32{}
	for i, prm := range p.Graph.Params {
		out[prm.Name] = res.Params[r][p.ParamOffset(i):][:prm.Value.Elems()]
	}
	return out
}

// relDiff is the largest difference between two parameter sets, relative
// to each tensor's largest magnitude.
func relDiff(a, b map[string][]float32) (float64, string) {
	var worst float64
	var where string
	for name, x := range a {
		y := b[name]
		var d, m float64
		for i := range x {
			d = math.Max(d, math.Abs(float64(x[i])-float64(y[i])))
			m = math.Max(m, math.Abs(float64(y[i])))
		}
		if m > 0 {
			d /= m
		}
		if d > worst || where == "" {
			worst, where = d, name
		}
	}
	return worst, where
}

// trainSync trains src with sets on devices and returns the plan and its
// result.
func trainSync(t *testing.T, src string, devices int, opts RunOptions, sets ...string) (*engine.Plan, *Result) {
	t.Helper()
	p := compile(t, loadSpec(t, src, sets...), devices)
	res, err := Run(p, opts)
	if err != nil {
		t.Fatalf("%d devices %v: %v", devices, sets, err)
	}
	return p, res
}

// zeroModels are the models the sharded strategies are checked on: the
// tiny conv net, the MNIST Net (dropout) on synthetic 28×28 images, the
// ResNet with batch norm, and the GPT (layer norm, attention, a tied
// embedding), each with settings that exercise the optimizer's options.
func zeroModels(t *testing.T) []struct {
	name, src string
	sets      []string
} {
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("abcdefghijkkjihgfedcbaacegikbdfhjhhaakk", 30)), 0o644); err != nil {
		t.Fatal(err)
	}
	mnist := strings.NewReplacer(`data.mnist(split = "train")`, `data.synthetic(size = 96, shape = (1, 28, 28), classes = 10, seed = 5)`,
		`eval = data.mnist(split = "test"),`, "").Replace(mnistScript)
	return []struct {
		name, src string
		sets      []string
	}{
		{"tiny, sgd", tinyScript, []string{"max_steps=6", "batch_size=24", "optimizer=optim.sgd(lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True)"}},
		{"tiny, adamw, groups, clipping, schedule", tinyScript, []string{"max_steps=6", "batch_size=24",
			"optimizer=optim.adamw(lr=0.01, groups=[optim.group(['*.bias'], weight_decay=0.0, lr=0.02)])",
			"clip_grad_norm=0.05", "schedule=sched.linear_warmup(2, then=sched.cosine())"}},
		{"mnist net, sgd", mnist, []string{"max_steps=3", "batch_size=24"}},
		{"resnet, adamw", resnetScript, []string{"max_steps=3", "batch_size=12", "optimizer=optim.adamw(lr=0.01)"}},
		{"gpt, sgd, accumulate, clipping", strings.Replace(gptScript, "TEXT", text, 1), []string{"max_steps=4", "batch_size=12", "accumulate=2",
			"optimizer=optim.sgd(lr=0.1, momentum=0.9)", "clip_grad_norm=0.5"}},
	}
}

// TestZeroMatchesAllReduce: ZeRO stages 1 and 2 end with allreduce's
// parameters on 1 to 4 devices — to the bit on 1 and 2 (a sum of two is
// the same either way round), within 1e-6 of each tensor's largest value
// on 3 and 4 (the reduce-scatter sums in another order) — with SGD
// momentum and AdamW, parameter groups, clipping, a schedule and
// accumulation, whole buckets and buckets smaller than a layer, on the
// MNIST Net, the ResNet and the GPT; parameter counts do not divide by 3
// or 4, so blocks are padded.
func TestZeroMatchesAllReduce(t *testing.T) {
	for _, m := range zeroModels(t) {
		for _, n := range []int{1, 2, 3, 4} {
			pa, ra := trainSync(t, m.src, n, RunOptions{}, append(m.sets, "sync=sync.allreduce()")...)
			want := namedParams(pa, ra, 0)
			for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2)", "sync.zero(stage=2, bucket_mb=0.0005)", "sync.zero(stage=1, bucket_mb=0.0005, overlap=False)",
				"sync.zero(stage=3)", "sync.fsdp(prefetch=0, overlap=False)"} {
				pz, rz := trainSync(t, m.src, n, RunOptions{}, append(m.sets, "sync="+sync)...)
				var worst float64
				for r := 0; r < n; r++ {
					d, where := relDiff(namedParams(pz, rz, r), want)
					worst = math.Max(worst, d)
					// Clipping's norm sums each rank's blocks first: not to the bit.
					exact := n <= 2 && !strings.Contains(m.name, "clipping")
					if d > 1e-6 || (exact && d != 0) {
						t.Errorf("%s, %s, %d devices, rank %d: %s differs from allreduce's by %.2e", m.name, sync, n, r, where, d)
					}
				}
				// The evaluation (tiny has an eval set) runs on the same
				// parameters: stage 3 gathers them for it.
				if strings.HasPrefix(m.name, "tiny") && math.IsNaN(ra.TestLoss) {
					t.Errorf("%s: no evaluation ran", m.name)
				}
				if !math.IsNaN(ra.TestLoss) && (rz.TestAccuracy != ra.TestAccuracy || math.Abs(rz.TestLoss-ra.TestLoss) > 1e-5*math.Abs(ra.TestLoss)) {
					t.Errorf("%s, %s, %d devices: test accuracy %v, loss %v; allreduce's %v, %v", m.name, sync, n, rz.TestAccuracy, rz.TestLoss, ra.TestAccuracy, ra.TestLoss)
				}
				t.Logf("%s, %s, %d devices: max relative difference %.2e", m.name, sync, n, worst)
			}
		}
	}
}

// TestZeroNonFinite: a NaN in one rank's data stops a sharded run as it
// stops allreduce's, naming the input batch on that rank; with
// on_nonfinite = "skip" the same steps are skipped and the run ends with
// allreduce's parameters.
func TestZeroNonFinite(t *testing.T) {
	sets := []string{"eval=None", "shuffle=False", "batch_size=16"}
	for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2, bucket_mb=0.01)"} {
		p := compile(t, loadSpec(t, mnistScript, append(sets, "sync="+sync)...), 2)
		_, err := Run(p, RunOptions{Train: &nanSet{*newMNISTLike(64)}})
		if err == nil || !strings.Contains(err.Error(), "rank 0: epoch 1 step 1: non-finite values") || !strings.Contains(err.Error(), "first in the input batch") {
			t.Errorf("%s: a NaN in rank 0's data: %v", sync, err)
		}
	}
	skip := append(sets, "on_nonfinite='skip'")
	run := func(sync string) (*engine.Plan, *Result, string) {
		p := compile(t, loadSpec(t, mnistScript, append(skip, "sync="+sync)...), 2)
		var log strings.Builder
		res, err := Run(p, RunOptions{Train: &nanSet{*newMNISTLike(64)}, Log: &log})
		if err != nil {
			t.Fatalf("%s: %v", sync, err)
		}
		return p, res, log.String()
	}
	pa, ra, loga := run("sync.allreduce()")
	for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2, bucket_mb=0.01)"} {
		pz, rz, logz := run(sync)
		if strings.Count(logz, "update skipped") != strings.Count(loga, "update skipped") || !strings.Contains(logz, "epoch 1 step 1: non-finite") {
			t.Errorf("%s skipped other steps than allreduce:\n%s\nallreduce:\n%s", sync, logz, loga)
		}
		if d, where := relDiff(namedParams(pz, rz, 1), namedParams(pa, ra, 1)); d != 0 {
			t.Errorf("%s: %s differs from allreduce's by %.2e after a skipped step", sync, where, d)
		}
	}
}

// mlpScript is a stack of equal linear layers: many buckets of about one
// layer each, so that the buckets being reduced at a time are a small
// part of the model.
const mlpScript = `
layers = [nn.flatten(), nn.linear(64, 48, name = "in")]
for i in range(12):
    layers += [nn.relu(), nn.linear(48, 48, name = "h%d" % i)]
layers += [nn.relu(), nn.linear(48, 4, name = "out"), nn.log_softmax()]
train(
    model = nn.sequential(*layers),
    loss = "nll",
    data = data.synthetic(size = 64, shape = (1, 8, 8), classes = 4, seed = 3),
    optimizer = optim.adam(lr = 0.001),
    batch_size = 8,
    max_steps = 2,
)
`

// TestZeroMemory: the arenas a CPU device allocates for fp32 Adam hold,
// per device, 16Ψ bytes of parameters, gradients and optimizer state with
// allreduce, 8Ψ + 8Ψ/N with stage 1, 4Ψ + 12Ψ/N with stage 2 and 16Ψ/N
// with stage 3 — plus the padding of the blocks, the alignment of the
// buffers, and the memory stage 2 and 3 reuse for the buckets being
// reduced and the layers gathered, which must stay a few buckets' worth;
// the arenas are smaller than allreduce's by the difference. The plan's
// figures are the allocated ones, and each stage's collectives send what
// allreduce's do (stage 3: 1.5 times).
func TestZeroMemory(t *testing.T) {
	for _, n := range []int{2, 4} {
		ar := compile(t, loadSpec(t, mlpScript), n)
		psi := int64(ar.NumParam)
		arBytes := allocated(t, ar, 0)
		for _, c := range []struct {
			sync  string
			want  int64 // params + grads + state, bytes
			ratio float64
		}{
			{"sync.allreduce(bucket_mb=0.01)", 16 * psi, 1},
			{"sync.zero(stage=1, bucket_mb=0.01)", 8*psi + 8*psi/int64(n), 1},
			{"sync.zero(stage=2, bucket_mb=0.01)", 4*psi + 12*psi/int64(n), 1},
			// Stage 3 gathers every layer before its forward steps, and
			// again before the backward steps that read it: all but the
			// first layer's weights (its input has no gradient).
			{"sync.zero(stage=3)", 16 * psi / int64(n), 1.5 - float64(64*48+48)/float64(2*psi)},
		} {
			p := compile(t, loadSpec(t, mlpScript, "sync="+c.sync), n)
			prog := p.Devices[0]
			m := prog.Memory()
			if got := allocated(t, p, 0); got != prog.MemoryBytes() || m.Total() != got {
				t.Errorf("%s on %d: the plan says %d bytes (by kind %d), the device allocated %d", c.sync, n, prog.MemoryBytes(), m.Total(), got)
			}
			held := m.Params + m.Grads + m.State
			// Padding: at most N-1 values a bucket, in parameters,
			// gradients and two kinds of state; alignment: 64 bytes a
			// buffer.
			slack := int64(len(p.Buckets)*(n-1)*4*4) + int64(64*(len(prog.StateShards)+6))
			reused := m.InFlightGrads + m.InFlightParams
			if held < c.want || held > c.want+reused+slack {
				t.Errorf("%s on %d devices: parameters, gradients and optimizer state take %d bytes, want %d (Ψ = %d) + up to %d reused + %d padding",
					c.sync, n, held, c.want, psi, reused, slack)
			}
			var largest int64 // bytes of the largest bucket
			for _, b := range p.Buckets {
				largest = max(largest, int64(b.Elems+b.Pad)*4)
			}
			if m.InFlightGrads > 3*largest || m.InFlightParams > 3*largest {
				t.Errorf("%s on %d devices: %d bytes reused for buckets being reduced and %d for layers gathered, more than 3 of the largest bucket (%d)",
					c.sync, n, m.InFlightGrads, m.InFlightParams, 3*largest)
			}
			saved := arBytes - allocated(t, p, 0)
			if want := 16*psi - c.want; saved < want-reused-slack || saved > want+slack {
				t.Errorf("%s on %d devices: the arena is %d bytes smaller than allreduce's, want about %d", c.sync, n, saved, want)
			}
			sent := func(pl *engine.Plan) (all int64) {
				for _, v := range pl.Devices[0].Traffic(n, 1) {
					all += v
				}
				return all
			}
			if r := float64(sent(p)) / float64(sent(ar)); math.Abs(r-c.ratio) > 0.01 {
				t.Errorf("%s on %d devices: sends %.3f× allreduce's traffic, want %.2f×", c.sync, n, r, c.ratio)
			}
			t.Logf("%s on %d devices: Ψ = %d; params %d (%d reused), grads %d (%d reused), state %d: %d bytes (formula %d); arena %d, allreduce's %d; traffic %.3f×",
				c.sync, n, psi, m.Params, m.InFlightParams, m.Grads, m.InFlightGrads, m.State, held, c.want, allocated(t, p, 0), arBytes, float64(sent(p))/float64(sent(ar)))
		}
	}
}

// allocated loads rank r's Program of p on a CPU device and returns the
// bytes its arena holds.
func allocated(t *testing.T, p *engine.Plan, r int) int64 {
	t.Helper()
	dev, err := cpu.Backend{}.Open(r, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := dev.Load(p.Devices[r]); err != nil {
		t.Fatal(err)
	}
	return dev.(*cpu.Device).ArenaBytes()
}

// TestZeroCheckpointsAreAllReduces: a sharded run's checkpoint holds the
// tensors allreduce's holds — the same parameters in model.safetensors,
// the same whole optimizer state in state.safetensors, under the same
// names — to the bit on 2 devices, within 1e-6 on 3.
func TestZeroCheckpointsAreAllReduces(t *testing.T) {
	sets := []string{"max_steps=5", "batch_size=24", "optimizer=optim.adamw(lr=0.01)"}
	for _, n := range []int{2, 3} {
		ref := t.TempDir()
		trainSync(t, tinyScript, n, RunOptions{Out: ref}, append(sets, "sync=sync.allreduce()")...)
		for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2, bucket_mb=0.0005)", "sync.fsdp()"} {
			dir := t.TempDir()
			trainSync(t, tinyScript, n, RunOptions{Out: dir}, append(sets, "sync="+sync)...)
			for _, file := range []string{ckptParams, ckptState} {
				want := readTensors(t, filepath.Join(checkpointDir(ref, 5), file), "/rng")
				got := readTensors(t, filepath.Join(checkpointDir(dir, 5), file), "/rng")
				if len(got) != len(want) || len(want) == 0 {
					t.Errorf("%s, %d devices: %s holds %d tensors, allreduce's %d", sync, n, file, len(got), len(want))
				}
				if d, where := relDiff(got, want); d > 1e-6 || (n == 2 && d != 0) {
					t.Errorf("%s, %d devices: %s: %s differs from allreduce's by %.2e", sync, n, file, where, d)
				}
			}
		}
	}
}

// readTensors reads a safetensors file's float tensors by name, but those
// whose names hold skip.
func readTensors(t *testing.T, path, skip string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, name := range f.Names() {
		if strings.Contains(name, skip) {
			continue
		}
		tn, _ := f.Get(name)
		v, err := tn.Float32s()
		if err != nil {
			t.Fatalf("%s: %s: %v", path, name, err)
		}
		out[name] = v
	}
	return out
}

// TestZeroResumesAcross: a checkpoint of a sharded run does not depend on
// the world: a stage-2 run stopped inside an epoch resumes on another
// number of devices, as stage 1, or as plain allreduce, and allreduce's
// and stage 1's checkpoints resume as stage 2 elsewhere; each ends where
// an uninterrupted run of the resuming kind ends (each step's global
// batch is the same on any number of devices, so within float rounding).
func TestZeroResumesAcross(t *testing.T) {
	sets := []string{"batch_size=24", "optimizer=optim.adamw(lr=0.01)"}
	for _, c := range []struct {
		from  string
		fromN int
		to    string
		toN   int
	}{
		{"sync.zero(stage=2, bucket_mb=0.0005)", 2, "sync.zero(stage=2, bucket_mb=0.0005)", 3},
		{"sync.zero(stage=2, bucket_mb=0.0005)", 2, "sync.zero(stage=1)", 4},
		{"sync.zero(stage=2, bucket_mb=0.0005)", 2, "sync.allreduce()", 2},
		{"sync.zero(stage=2, bucket_mb=0.0005)", 3, "sync.allreduce()", 1},
		{"sync.allreduce()", 2, "sync.zero(stage=2)", 3},
		{"sync.zero(stage=1)", 4, "sync.zero(stage=2, bucket_mb=0.0005)", 2},
		{"sync.zero(stage=2, bucket_mb=0.0005)", 2, "sync.fsdp()", 3},
		{"sync.fsdp()", 3, "sync.zero(stage=2)", 2},
		{"sync.fsdp()", 4, "sync.allreduce()", 4},
		{"sync.allreduce()", 2, "sync.zero(stage=3, prefetch=0)", 4},
	} {
		dir := t.TempDir()
		trainSync(t, tinyScript, c.fromN, RunOptions{Out: dir}, append(sets, "max_steps=5", "sync="+c.from)...)
		pr, resumed := trainSync(t, tinyScript, c.toN, RunOptions{Resume: dir}, append(sets, "max_steps=10", "sync="+c.to)...)
		pw, whole := trainSync(t, tinyScript, c.toN, RunOptions{}, append(sets, "max_steps=10", "sync="+c.to)...)
		if resumed.Steps != 10 {
			t.Errorf("%s on %d → %s on %d: %d steps, want 10", c.from, c.fromN, c.to, c.toN, resumed.Steps)
		}
		d, where := relDiff(namedParams(pr, resumed, 0), namedParams(pw, whole, 0))
		t.Logf("%s on %d → %s on %d: %.2e from an uninterrupted run (%s)", c.from, c.fromN, c.to, c.toN, d, where)
		if d > 1e-6 {
			t.Errorf("%s on %d → %s on %d: %s differs from an uninterrupted run by %.2e", c.from, c.fromN, c.to, c.toN, where, d)
		}
	}
	// A sharded run refuses another strategy's checkpoints (allreduce's
	// own on another world: TestResumeAnotherWorld).
	dir := t.TempDir()
	trainSync(t, tinyScript, 2, RunOptions{Out: dir}, append(sets, "max_steps=5", "sync=sync.local_sgd(every=2)")...)
	if _, err := Run(compile(t, loadSpec(t, tinyScript, append(sets, "max_steps=10", "sync=sync.zero(stage=1)")...), 2), RunOptions{Resume: dir}); err == nil || !strings.Contains(err.Error(), "made with sync local_sgd, the script now says zero") {
		t.Errorf("zero resuming local_sgd's: %v", err)
	}
}

// TestZeroMemoryLimit: with cluster.memory_limit between what stage 3
// needs and what allreduce needs, allreduce is refused at compile time,
// naming the limit, and stage 3 trains.
func TestZeroMemoryLimit(t *testing.T) {
	const n = 4
	need := func(sync string) int64 {
		var all int64
		for _, prog := range compile(t, loadSpec(t, mlpScript, "sync="+sync), n).Devices {
			all += prog.MemoryBytes()
		}
		return all
	}
	ar, z3 := need("sync.allreduce(bucket_mb=0.01)"), need("sync.zero(stage=3)")
	if z3 >= ar {
		t.Fatalf("stage 3 needs %d bytes, allreduce %d", z3, ar)
	}
	kib := (ar + z3) / 2 / 1024
	limit := fmt.Sprintf("cluster.memory_limit=%dKiB", kib)
	_, err := engine.Compile(loadSpec(t, mlpScript, "sync=sync.allreduce(bucket_mb=0.01)"), clusterOf(t, n, limit))
	if err == nil || !strings.Contains(err.Error(), "more than the cluster's memory_limit") {
		t.Fatalf("allreduce under a limit of %d KiB (it needs %d bytes): %v", kib, ar, err)
	}
	p, err := engine.Compile(loadSpec(t, mlpScript, "sync=sync.zero(stage=3)"), clusterOf(t, n, limit))
	if err != nil {
		t.Fatalf("stage 3 (%d bytes) under a limit of %d KiB: %v", z3, kib, err)
	}
	res, err := Run(p, RunOptions{})
	if err != nil || res.Steps != 2 || math.IsNaN(res.FinalLoss) {
		t.Fatalf("stage 3 under the limit: %v, %+v", err, res)
	}
	t.Logf("%d devices: allreduce needs %d bytes, stage 3 %d; limit %d KiB", n, ar, z3, kib)
}

// clusterOf is the default cluster of n devices with keys set as --set
// sets them.
func clusterOf(t *testing.T, n int, keys ...string) engine.Cluster {
	t.Helper()
	c := engine.DefaultCluster()
	c.Devices = n
	for _, kv := range keys {
		k, v, _ := strings.Cut(kv, "=")
		if err := c.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestZeroReusedMemory: stage 2's bucket gradients and stage 3's gathered
// layers take memory in turns — the memory they share is less than half
// of theirs together — while reduce-scatters and prefetched gathers run
// on the collective goroutine; the steps that reuse a collective's memory
// wait for it, so the run is race-free (make test runs this under the
// race detector) and ends with allreduce's parameters.
func TestZeroReusedMemory(t *testing.T) {
	sets := []string{"max_steps=3", "optimizer=optim.sgd(lr=0.1, momentum=0.9)"}
	for _, n := range []int{2, 3} {
		pa, ra := trainSync(t, mlpScript, n, RunOptions{}, append(sets, "sync=sync.allreduce()")...)
		for _, sync := range []string{"sync.zero(stage=2, bucket_mb=0.005)", "sync.fsdp(prefetch=2)"} {
			pz, rz := trainSync(t, mlpScript, n, RunOptions{}, append(sets, "sync="+sync)...)
			var whole int64 // what the buckets take one after another
			for _, b := range pz.Buckets {
				whole += int64(b.Elems+b.Pad) * 4
			}
			m := pz.Devices[0].Memory()
			if m.InFlightGrads == 0 || 2*m.InFlightGrads >= whole || (pz.Sharding.Params && 2*m.InFlightParams >= whole) {
				t.Errorf("%s on %d: %d bytes for buckets being reduced and %d for layers gathered, not less than half the %d of them all",
					sync, n, m.InFlightGrads, m.InFlightParams, whole)
			}
			if d, where := relDiff(namedParams(pz, rz, n-1), namedParams(pa, ra, 0)); d > 1e-6 {
				t.Errorf("%s on %d: %s differs from allreduce's by %.2e", sync, n, where, d)
			}
		}
	}
}
