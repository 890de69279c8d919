//go:build cuda

package cuda

// GPU checks of the NCCL world (transport = "nccl", nccl_world.go): a
// world of one rank through ncclGetUniqueId and ncclCommInitRank and
// every collective on it, two ranks on one GPU refused before NCCL sees
// them, and a rank whose peer never joins failing within comm.timeout.
// NCCL refuses two ranks on one GPU, so a world of several ranks needs
// several GPUs: on a machine of one GPU these are the checks there are.
// gpucheck/run.sh runs them on their own (-test.run '^TestNCCLWorld'),
// the timeout last: it leaves NCCL's init waiting on a thread.

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
)

// worldDevice opens device index with one buffer x of elems floats and
// another, part, of elems floats.
func worldDevice(t *testing.T, index, elems int) (backend.Device, *engine.Program) {
	t.Helper()
	b := newProg()
	b.f("x", false, elems)
	b.f("part", false, elems)
	prog := b.done()
	d, err := Backend{}.Open(index, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Load(prog); err != nil {
		t.Fatal(err)
	}
	return d, prog
}

// TestNCCLWorldOneRank: a world of one process and one GPU takes the
// cross-process path (ncclGetUniqueId, ncclCommInitRank) and every
// collective runs on it: over one rank each leaves the data as it was,
// and reduce-scatter and all-gather move it between the two buffers.
func TestNCCLWorldOneRank(t *testing.T) {
	needGPU(t)
	const elems = 1000
	d, prog := worldDevice(t, 0, elems)
	x, part := prog.Buffers[0], prog.Buffers[1]
	start := time.Now()
	colls, err := Backend{}.ConnectWorld([]backend.Device{d}, backend.World{Transport: "nccl", Processes: 1,
		Ranks: []int{0}, Size: 1, Devices: 1, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	setup := time.Since(start)
	c, ok := colls[0].(*ncclColl)
	if !ok || c.g.size != 1 || c.g.first != 0 {
		t.Fatalf("got %T %+v", colls[0], colls[0])
	}
	r := rand.New(rand.NewPCG(21, 22))
	vals := randSlice(r, elems)
	up := func(b *engine.Buffer, v []float32) {
		if err := d.UploadF32(b, 0, v); err != nil {
			t.Fatal(err)
		}
	}
	tag := comm.Tag{Name: "test"}
	var failed []string
	expect := func(what string, b *engine.Buffer, want []float32) {
		if got := download(t, d, b, elems); !slices.Equal(got, want) {
			failed = append(failed, what)
			t.Errorf("%s: got %v…, want %v…", what, got[:4], want[:4])
		}
	}
	up(x, vals)
	for _, op := range []comm.ReduceOp{comm.Sum, comm.Mean, comm.Max} {
		if err := c.AllReduce(x, 100, 800, op, tag); err != nil {
			t.Fatal(err)
		}
		expect("allreduce "+op.String(), x, vals)
	}
	if err := c.Reduce(x, 0, elems, 0, comm.Mean, tag); err != nil {
		t.Fatal(err)
	}
	expect("reduce", x, vals)
	if err := c.Broadcast(x, 0, elems, 0, tag); err != nil {
		t.Fatal(err)
	}
	expect("broadcast", x, vals)
	up(part, make([]float32, elems))
	if err := c.ReduceScatter(x, 0, elems, part, 0, comm.Sum, tag); err != nil {
		t.Fatal(err)
	}
	expect("reduce_scatter", part, vals)
	other := randSlice(r, elems)
	up(part, other)
	if err := c.AllGather(x, 0, elems, part, 0, tag); err != nil {
		t.Fatal(err)
	}
	expect("all_gather", x, other)
	jsonLine(map[string]any{"check": "nccl_world", "kind": "one rank: ncclGetUniqueId, ncclCommInitRank, every collective",
		"nccl": c.g.lib.path, "setup_seconds": setup.Seconds(), "failed": failed, "ok": len(failed) == 0})
}

// TestNCCLWorldSameGPU: two ranks on one GPU (two devices of a process
// whose indices wrap onto GPU 0) are refused before NCCL, naming both
// ranks, the host and the GPU.
func TestNCCLWorldSameGPU(t *testing.T) {
	needGPU(t)
	n, err := numGPUs()
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := worldDevice(t, 0, 16)
	d1, _ := worldDevice(t, n, 16) // GPU 0 again
	_, err = Backend{}.ConnectWorld([]backend.Device{d0, d1}, backend.World{Transport: "nccl", Processes: 1,
		Ranks: []int{0, 1}, Size: 2, Devices: 2, Timeout: 30 * time.Second})
	ok := err != nil && strings.Contains(err.Error(), "are on the same GPU") &&
		strings.Contains(err.Error(), "rank 0 (process 0, local rank 0 on host ") && strings.Contains(err.Error(), "and rank 1 (process 0")
	jsonLine(map[string]any{"check": "nccl_world", "kind": "two ranks on one GPU refused", "error": errString(err), "ok": ok})
	if !ok {
		t.Errorf("two ranks on GPU 0: %v", err)
	}
}

// TestNCCLWorldTimeout: rank 0 of a world of two whose rank 1 never joins
// fails within comm.timeout (3 s here), naming itself and the timeout,
// instead of waiting in ncclCommInitRank for ever. Run it last: NCCL's
// init stays behind on its thread.
func TestNCCLWorldTimeout(t *testing.T) {
	needGPU(t)
	d, _ := worldDevice(t, 0, 16)
	start := time.Now()
	_, err := Backend{}.ConnectWorld([]backend.Device{d}, backend.World{Transport: "nccl", Processes: 2,
		Ranks: []int{0}, Size: 2, Devices: 1, Timeout: 3 * time.Second})
	took := time.Since(start)
	ok := err != nil && strings.Contains(err.Error(), "ncclCommInitRank did not finish within comm.timeout (3s): some rank of the 2 never joined it") &&
		took < 10*time.Second
	jsonLine(map[string]any{"check": "nccl_world", "kind": "a rank that never joins: bounded by comm.timeout",
		"seconds": took.Seconds(), "error": errString(err), "ok": ok})
	if !ok {
		t.Errorf("after %v: %v", took, err)
	}
}

// errString is err's text for a JSON line, cut at 600 bytes.
func errString(err error) string {
	if err == nil {
		return ""
	}
	if s := err.Error(); len(s) > 600 {
		return s[:600] + "…"
	}
	return err.Error()
}
