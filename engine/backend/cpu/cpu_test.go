package cpu_test

import (
	"strings"
	"testing"

	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/ops"
	"gorun/script"
)

type memFile string

func (m memFile) ReadFile(string) ([]byte, error) { return []byte(m), nil }

// TestExecForRefusesOwnSteps: a device runs another's kernel steps whose
// result does not depend on who runs them (gradients), and refuses those
// that draw random numbers (dropout), update their inputs (the
// optimizer) or are not kernels — whatever the step's op, decided when
// the program is loaded.
func TestExecForRefusesOwnSteps(t *testing.T) {
	const src = `
train(
    model = nn.sequential(nn.flatten(), nn.linear(16, 8, name = "fc1"), nn.dropout(0.5), nn.linear(8, 4, name = "fc2")),
    loss = "cross_entropy",
    data = data.synthetic(size = 64, shape = (1, 4, 4), classes = 4, noise = 1.0, seed = 1),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
)
`
	s, err := script.Load("/t/train.star", script.WithFileReader(memFile(src)))
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultCluster()
	c.Devices = 2
	p, err := engine.Compile(s, c)
	if err != nil {
		t.Fatal(err)
	}
	var devs [2]backend.Device
	for i, prog := range p.Devices {
		if devs[i], err = (cpu.Backend{}).Open(i, backend.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := devs[i].Load(prog); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
	}
	helper := devs[1].(backend.Helper)
	if !helper.CanHelp(devs[0]) {
		t.Fatal("cpu:1 cannot help cpu:0")
	}
	rc := &backend.RunCtx{LossScale: 1, Step: 1, First: true, Last: true}
	devs[0].SetBatch(p.LocalBatch[0])
	var lent, refused int
	for _, st := range p.Devices[0].Steps {
		err := helper.ExecFor(devs[0], st, rc)
		d := ops.Lookup(st.Op)
		own := st.Kind != engine.KernelStep || st.Phase == engine.PhaseUpdate || d.Random || d.InPlace
		switch {
		case own && err == nil:
			t.Errorf("step %d (%s %s) ran on another device", st.ID, st.Op, st.Layer)
		case own && !strings.Contains(err.Error(), "must run on its own device"):
			t.Errorf("step %d (%s): %v", st.ID, st.Op, err)
		case own:
			refused++
		case err != nil:
			t.Errorf("step %d (%s %s): %v", st.ID, st.Op, st.Layer, err)
		default:
			lent++
		}
	}
	if lent == 0 || refused == 0 {
		t.Errorf("%d steps lent, %d refused: want some of each", lent, refused)
	}
}
