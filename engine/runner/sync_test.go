package runner

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/ops"
)

// trained runs tinyScript (no dropout) on the given devices and returns
// every rank's final parameters.
func trained(t *testing.T, devices int, sets ...string) [][]float32 {
	t.Helper()
	p := compile(t, loadSpec(t, tinyScript, sets...), devices)
	res, err := Run(p, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Params
}

// flatParams trains p and returns every rank's final parameters laid out
// as plan like lays them out.
func flatParams(t *testing.T, p, like *engine.Plan) [][]float32 {
	t.Helper()
	res, err := Run(p, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for r := range res.Params {
		named := namedParams(p, res, r)
		flat := make([]float32, like.ParamElems())
		for i, prm := range like.Graph.Params {
			copy(flat[like.ParamOffset(i):], named[prm.Name])
		}
		out = append(out, flat)
	}
	return out
}

// TestDataParallelEquivalence: N devices at global batch B end with the
// same parameters after 20 steps as one device at batch B, for all-reduce
// (mean), a parameter server and ZeRO (stage 2, stage 3) — also when B
// does not divide by N.
func TestDataParallelEquivalence(t *testing.T) {
	for _, batch := range []int{24, 22} {
		for _, sync := range []string{"sync.allreduce(op='mean')", "sync.allreduce(op='mean', bucket_mb=0.0005)", "sync.parameter_server(root=1)",
			"sync.zero(stage=2, bucket_mb=0.0005)", "sync.fsdp()"} {
			sets := []string{fmt.Sprintf("batch_size=%d", batch), "max_steps=20", "sync=" + sync}
			// In the flattened order of one device's allreduce: a sharded
			// plan lays its parameters out by its own buckets.
			p1 := compile(t, loadSpec(t, tinyScript, append(sets, "sync=sync.allreduce()")...), 1)
			one := flatParams(t, p1, p1)[0]
			for _, n := range []int{2, 3, 4} {
				ranks := flatParams(t, compile(t, loadSpec(t, tinyScript, sets...), n), p1)
				if d := maxRelDiff(one, ranks[0]); d > 1e-5 {
					t.Errorf("batch %d, %s, %d devices: max relative difference to one device %.2e", batch, sync, n, d)
				}
				for r := 1; r < n; r++ {
					if d := maxRelDiff(ranks[0], ranks[r]); d != 0 {
						t.Errorf("batch %d, %s, %d devices: rank %d differs from rank 0 by %.2e", batch, sync, n, r, d)
					}
				}
			}
		}
	}
}

// TestAllReduceSumIsNTimesMean: op="sum" without a scale is the classic
// average_gradients bug: the update is N times the mean's.
func TestAllReduceSumIsNTimesMean(t *testing.T) {
	init := trained(t, 1, "max_steps=1", "optimizer=optim.sgd(lr=1e-30)")[0] // the initial parameters, barely moved
	for _, n := range []int{2, 4} {
		mean := trained(t, n, "max_steps=1", "optimizer=optim.sgd(lr=0.01)", "batch_size=16", "sync=sync.allreduce(op='mean')")[0]
		sum := trained(t, n, "max_steps=1", "optimizer=optim.sgd(lr=0.01)", "batch_size=16", "sync=sync.allreduce(op='sum')")[0]
		var worst float64
		for i := range init {
			dm := float64(init[i] - mean[i])
			ds := float64(init[i] - sum[i])
			if math.Abs(dm) < 1e-4 {
				continue
			}
			worst = math.Max(worst, math.Abs(ds/dm-float64(n)))
		}
		if worst > 1e-2 {
			t.Errorf("%d devices: sum's update / mean's update is off from %d by up to %.3g", n, n, worst)
		}
	}
}

func TestLocalSGDAndNone(t *testing.T) {
	// local_sgd(every=5) after 20 steps: the last step averaged, so all
	// ranks agree; after 18 they do not.
	ranks := trained(t, 2, "max_steps=20", "sync=sync.local_sgd(every=5)")
	if d := maxRelDiff(ranks[0], ranks[1]); d != 0 {
		t.Errorf("local_sgd every 5, after 20 steps: ranks differ by %.2e", d)
	}
	ranks = trained(t, 2, "max_steps=18", "sync=sync.local_sgd(every=5)")
	if d := maxRelDiff(ranks[0], ranks[1]); d == 0 {
		t.Error("local_sgd every 5, after 18 steps: ranks are identical, want them apart since step 15")
	}
	ranks = trained(t, 2, "max_steps=5", "sync=sync.none()")
	if d := maxRelDiff(ranks[0], ranks[1]); d == 0 {
		t.Error("sync.none: replicas trained on different data ended identical")
	}
}

// TestBucketsOverlapBackward: with small buckets, each bucket's all-reduce
// sits right after the backward step that completes it, before the
// backward steps of earlier layers.
func TestBucketsOverlapBackward(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript, "sync=sync.allreduce(bucket_mb=0.01)"), 2)
	if len(p.Buckets) < 3 {
		t.Fatalf("%d buckets, want several with bucket_mb=0.01", len(p.Buckets))
	}
	prog := p.Devices[0]
	seen := 0
	for i, st := range prog.Steps {
		if st.Kind != engine.CollectiveStep {
			continue
		}
		b := p.Buckets[seen]
		seen++
		// The step before computes a gradient of this bucket.
		prev := prog.Steps[i-1]
		if prev.Kind != engine.KernelStep || prev.Phase != engine.PhaseBackward {
			t.Errorf("allreduce %s follows %s, want a backward step", st.Collective.Tag, prev.Op)
			continue
		}
		out := prev.Out[0]
		if out.View != prog.GradArena {
			t.Errorf("allreduce %s follows %s, which writes no gradient", st.Collective.Tag, prev.Op)
		}
		if seen < len(p.Buckets) {
			later := false
			for _, s2 := range prog.Steps[i+1:] {
				if s2.Phase == engine.PhaseBackward {
					later = true
				}
			}
			if !later {
				t.Errorf("bucket %d's allreduce comes after all of backward", seen-1)
			}
		}
		if st.Collective.Bytes != int64(b.Elems)*4 {
			t.Errorf("bucket %d moves %d bytes, want %d", seen-1, st.Collective.Bytes, b.Elems*4)
		}
	}
	if seen != len(p.Buckets) {
		t.Errorf("%d collectives for %d buckets", seen, len(p.Buckets))
	}
	// Buckets hold gradients in the order backward completes them.
	if first := p.Buckets[0].Params[0].Name; first != "fc2.weight" {
		t.Errorf("first bucket starts with %s, want fc2.weight", first)
	}
	var b strings.Builder
	if err := p.Describe(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "allreduce(sum)") || !strings.Contains(b.String(), "collectives move") {
		t.Errorf("plan does not show the collectives:\n%s", b.String())
	}
}

// TestParameterServerPlan: gradients are reduced to the root, only the
// root steps the optimizer, and it broadcasts the parameters back.
func TestParameterServerPlan(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript, "sync=sync.parameter_server(root=1)"), 3)
	for r, prog := range p.Devices {
		var kinds []string
		updates := 0
		for _, st := range prog.Steps {
			if st.Kind == engine.CollectiveStep {
				kinds = append(kinds, fmt.Sprintf("%s root %d", st.Collective.Kind, st.Collective.Root))
			}
			if st.Op == ops.SGDStep {
				updates++
			}
		}
		if want := "reduce root 1,broadcast root 1"; strings.Join(kinds, ",") != want {
			t.Errorf("rank %d collectives %q, want %q", r, strings.Join(kinds, ","), want)
		}
		if (r == 1) != (updates == 8) || (r != 1 && updates != 0) {
			t.Errorf("rank %d has %d optimizer steps", r, updates)
		}
	}
	if _, err := engine.Compile(loadSpec(t, mnistScript, "sync=sync.parameter_server(root=3)"), engine.Cluster{Backend: "cpu", Transport: "inproc", Devices: 3, Algorithm: "auto", Timeout: 1}); err == nil ||
		!strings.Contains(err.Error(), "root 3 is not a rank (the world has 3 devices)") {
		t.Errorf("root out of range: %v", err)
	}
}

// TestRankFailuresDoNotHang: a rank that skips a collective is caught as
// a mismatch at once; a rank that stalls makes the others fail after the
// cluster's timeout, with an error naming the collective, the step and the
// rank that did not arrive.
func TestRankFailuresDoNotHang(t *testing.T) {
	for _, overlap := range []string{"True", "False"} {
		c := engine.DefaultCluster()
		c.Devices = 2
		c.Timeout = 200 * time.Millisecond
		p, err := engine.Compile(loadSpec(t, tinyScript, "sync=sync.allreduce(overlap="+overlap+")"), c)
		if err != nil {
			t.Fatal(err)
		}
		// Rank 1 skips its gradient all-reduce.
		var steps []*engine.Step
		for _, st := range p.Devices[1].Steps {
			if st.Kind != engine.CollectiveStep {
				steps = append(steps, st)
			}
		}
		p.Devices[1].Steps = steps
		_, err = Run(p, RunOptions{})
		if err == nil {
			t.Fatal("a run with a rank skipping a collective succeeded")
		}
		for _, want := range []string{"mismatched collectives", `rank 0 called allreduce "bucket 0" at step 1`, "rank 1 called"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("overlap=%s: error %q does not mention %q", overlap, err, want)
			}
		}

		// Rank 0 stalls after step 1 for longer than the timeout.
		p, err = engine.Compile(loadSpec(t, tinyScript, "sync=sync.allreduce(overlap="+overlap+")"), c)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = Run(p, RunOptions{OnStep: func(m StepMetrics) {
			if m.Step == 1 {
				time.Sleep(600 * time.Millisecond)
			}
		}})
		if err == nil {
			t.Fatal("a run with a stalled rank succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the failure took %v", d)
		}
		for _, want := range []string{"rank 1: ", "timed out after 200ms waiting for rank 0", "at step 2"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("overlap=%s: error %q does not mention %q", overlap, err, want)
			}
		}
	}
}

// TestTwoDeviceStepAllocatesNothing: a training step on two devices, with
// its overlapped gradient all-reduce and the loss all-reduce, and with
// rank 0 running rank 1's gradient steps (helping, forced), allocates
// nothing (on either rank).
func TestTwoDeviceStepAllocatesNothing(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 2)
	g, err := comm.NewInProc(2, comm.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ds := newMNISTLike(256)
	var devs []*worker
	var bdevs []backend.Device
	var host []comm.Communicator
	var data []backend.Data
	for r := range p.Devices {
		d, _ := testDevice(t, p, r, 1)
		d.host = g.Rank(r)
		devs, bdevs, host = append(devs, d), append(bdevs, d.dev), append(host, d.host)
		dd, err := d.dev.LoadData(ds)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, dd)
	}
	colls, err := cpu.Backend{}.Connect(bdevs, host)
	if err != nil {
		t.Fatal(err)
	}
	if setupHelping(devs) == nil {
		t.Fatal("two CPU devices do not help each other")
	}
	check := forceHelping(t)
	for r, d := range devs {
		d.coll = colls[r]
		d.tail = tailStart(d.prog.Steps)
		d.startAsync()
		defer d.stopAsync()
	}
	shards, _, err := p.Shards(0, ds)
	if err != nil {
		t.Fatal(err)
	}
	sc := engine.NewSchedule(shards, p.LocalBatch, "zero")
	step := func(d *worker, s int) error {
		idx := sc.Slice(d.rank, s%sc.Steps)
		d.dev.SetBatch(len(idx))
		if err := d.dev.Gather(data[d.rank], idx, d.prog.Input, d.prog.Target); err != nil {
			return err
		}
		d.rc.LossScale = 1.0 / 64
		d.rc.Step = s + 1
		if err := d.runStep(true, true); err != nil {
			return err
		}
		l, err := d.readLoss()
		if err != nil {
			return err
		}
		_, _, err = d.sum2(l, 0, "loss", s+1)
		return err
	}
	const runs = 20
	done := make(chan error, 1)
	go func() {
		for s := 0; s < runs+2; s++ {
			if err := step(devs[1], s); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	s := 0
	if err := step(devs[0], s); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(runs, func() {
		s++
		if err := step(devs[0], s); err != nil {
			t.Fatal(err)
		}
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("a two-device training step allocates %.1f times", allocs)
	}
	check()
	if devs[0].lend.helped == 0 {
		t.Error("rank 0 ran none of rank 1's steps")
	}
}

func TestSplitBatch(t *testing.T) {
	cases := []struct {
		total   int
		weights []float64
		n       int
		want    string
	}{
		{64, nil, 3, "[22 21 21]"},
		{7, nil, 4, "[2 2 2 1]"},
		{64, []float64{1, 3}, 2, "[16 48]"},
		{10, []float64{1, 1, 1}, 3, "[4 3 3]"},
		{100, []float64{0.5, 0.3, 0.2}, 3, "[50 30 20]"},
		{5, []float64{2, 1}, 2, "[3 2]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(engine.SplitBatch(c.total, c.weights, c.n)); got != c.want {
			t.Errorf("engine.SplitBatch(%d, %v, %d) = %s, want %s", c.total, c.weights, c.n, got, c.want)
		}
	}
}

// TestWeightedDevices: with cluster weights, each device's share of the
// global batch follows its weight, training still equals one device, and a
// share of zero is refused at compile time.
func TestWeightedDevices(t *testing.T) {
	c := engine.DefaultCluster()
	c.Devices, c.Weights = 2, []float64{1, 3}
	s := loadSpec(t, tinyScript, "max_steps=20")
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.LocalBatch) != "[4 12]" || p.MaxBatch != 12 {
		t.Fatalf("local batches %v (max %d), want [4 12]", p.LocalBatch, p.MaxBatch)
	}
	res, err := Run(p, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one := trained(t, 1, "max_steps=20")[0]
	if d := maxRelDiff(one, res.Params[1]); d > 1e-5 {
		t.Errorf("weighted devices differ from one device by %.2e", d)
	}
	c.Weights = []float64{1, 100}
	if _, err := engine.Compile(loadSpec(t, tinyScript), c); err == nil || !strings.Contains(err.Error(), "gives rank 0 no samples") {
		t.Errorf("a zero share: %v", err)
	}
}

// TestAccumulateAcrossDevices: two devices accumulating 3 micro-batches of
// a global 8 per optimizer step (collectives only after the third) equal
// one device stepping on batches of 24.
func TestAccumulateAcrossDevices(t *testing.T) {
	one := trained(t, 1, "batch_size=24", "max_steps=10")[0]
	two := trained(t, 2, "batch_size=8", "accumulate=3", "max_steps=10")
	if d := maxRelDiff(one, two[0]); d > 1e-5 {
		t.Errorf("2 devices × accumulate 3 × 8 vs one device × 24: max relative difference %.2e", d)
	}
}

func TestInitFollowsPyTorch(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 1)
	init := p.InitialParams(5)
	for i, prm := range p.Graph.Params {
		bound := 1 / math.Sqrt(float64(prm.FanIn))
		var sq float64
		b := p.Devices[0].Params[i]
		vals := init[b.Offset-p.Devices[0].ParamArena.Offset:][:b.Elems()]
		for _, v := range vals {
			if math.Abs(float64(v)) > bound {
				t.Fatalf("%s: %g outside ±1/√fan_in = ±%g", prm.Name, v, bound)
			}
			sq += float64(v) * float64(v)
		}
		n := float64(len(vals))
		// U(-b, b) has variance b²/3; allow for sampling error.
		if got, want := sq/n, bound*bound/3; n >= 250 && math.Abs(got-want) > 0.2*want {
			t.Errorf("%s: variance %.3g, want about %.3g", prm.Name, got, want)
		}
	}
	if fan := p.Graph.Params[2].FanIn; p.Graph.Params[2].Name != "conv2.weight" || fan != 250 {
		t.Errorf("conv2.weight fan-in %d, want 10·5·5 = 250", fan)
	}
}

// TestUnevenShardsTrain: with shards of 100 and 30 samples, every policy
// trains to the end without a hang, "zero" feeding empty micro-batches.
func TestUnevenShardsTrain(t *testing.T) {
	src := strings.Replace(tinyScript, "    batch_size = 16,", `    batch_size = 20,
    partition = lambda ctx: [list(range(0, 100)), list(range(100, 130))],`, 1)
	for _, policy := range []string{"pad", "drop", "zero"} {
		p := compile(t, loadSpec(t, src, "uneven="+policy, "epochs=1"), 2)
		res, err := Run(p, RunOptions{})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		want := map[string]int{"pad": 10, "drop": 3, "zero": 10}[policy]
		if res.Steps != want || math.IsNaN(res.FinalLoss) {
			t.Errorf("%s: %d steps (want %d), final loss %v", policy, res.Steps, want, res.FinalLoss)
		}
		if d := maxRelDiff(res.Params[0], res.Params[1]); d != 0 {
			t.Errorf("%s: replicas differ by %.2e", policy, d)
		}
	}
}

// TestTailStart: the collectives after the last backward step (the last
// bucket's, here) run on the device's own goroutine; those that overlap
// backward stay on the collective goroutine.
func TestTailStart(t *testing.T) {
	for _, c := range []struct {
		sets    []string
		devices int
	}{
		{nil, 2},
		{[]string{"sync=sync.allreduce(bucket_mb=0.01)"}, 2},
		{[]string{"sync=sync.parameter_server(root=1)"}, 2},
		{nil, 1},
	} {
		prog := compile(t, loadSpec(t, mnistScript, c.sets...), c.devices).Devices[0]
		tail := tailStart(prog.Steps)
		lastBackward := -1
		for i, st := range prog.Steps {
			if st.Phase == engine.PhaseBackward {
				lastBackward = i
			}
		}
		if tail != lastBackward+1 {
			t.Errorf("%v, %d devices: tail starts at step %d, want %d (right after the last backward step)", c.sets, c.devices, tail, lastBackward+1)
		}
		syncs := 0
		for i, st := range prog.Steps {
			if st.Phase == engine.PhaseSync {
				syncs++
				if i < tail && i > lastBackward {
					t.Errorf("%v: sync step %d after backward is not in the tail", c.sets, i)
				}
			}
		}
		if c.devices > 1 && syncs == 0 {
			t.Errorf("%v: no sync step", c.sets)
		}
	}
}
