package runner

import (
	"fmt"
	"math"
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

// TestZeroMatchesAllReduce: ZeRO stages 1 and 2 end with allreduce's
// parameters on 1 to 4 devices, with SGD momentum and AdamW, whole
// buckets and buckets smaller than a layer.
func TestZeroMatchesAllReduce(t *testing.T) {
	for _, opt := range []string{"optim.sgd(lr=0.1, momentum=0.9, weight_decay=1e-3)", "optim.adamw(lr=0.01)"} {
		for _, n := range []int{1, 2, 3, 4} {
			sets := []string{"max_steps=6", "batch_size=24", "optimizer=" + opt}
			pa, ra := trainSync(t, tinyScript, n, RunOptions{}, append(sets, "sync=sync.allreduce()")...)
			want := namedParams(pa, ra, 0)
			for _, sync := range []string{"sync.zero(stage=1)", "sync.zero(stage=2)", "sync.zero(stage=2, bucket_mb=0.0002)", "sync.zero(stage=1, bucket_mb=0.0002, overlap=False)"} {
				pz, rz := trainSync(t, tinyScript, n, RunOptions{}, append(sets, "sync="+sync)...)
				for r := 0; r < n; r++ {
					got := namedParams(pz, rz, r)
					d, where := relDiff(got, want)
					t.Logf("%s, %s, %d devices, rank %d: max relative difference %.2e (%s)", opt, sync, n, r, d, where)
					if d > 1e-6 || (n <= 2 && d != 0) {
						t.Errorf("%s, %s, %d devices, rank %d: %s differs from allreduce's by %.2e", opt, sync, n, r, where, d)
					}
				}
			}
		}
	}
	_ = fmt.Sprint
}
