package runner

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorun/engine"
)

// namedParams is rank r's final parameters in res by name, wherever the
// plan keeps them (its arena, or the flattened layout of a sharded plan).
func namedParams(p *engine.Plan, res *Result, r int) map[string][]float32 {
	prog := p.Devices[r]
	out := map[string][]float32{}
	for i, prm := range p.Graph.Params {
		off := prog.Params[i].Offset - prog.ParamArena.Offset
		if p.Sharding != nil {
			off = p.Sharding.ParamAt[i]
		}
		out[prm.Name] = res.Params[r][off:][:prm.Value.Elems()]
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
		{"gpt, sgd, accumulate", strings.Replace(gptScript, "TEXT", text, 1), []string{"max_steps=4", "batch_size=12", "accumulate=2",
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
			for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2)", "sync.zero(stage=2, bucket_mb=0.0005)", "sync.zero(stage=1, bucket_mb=0.0005, overlap=False)"} {
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
