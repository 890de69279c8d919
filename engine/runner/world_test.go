package runner

import (
	"slices"
	"sync"
	"testing"

	"gorun/comm"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/engine/target"
)

// worldBackend is the cpu backend with a transport of its own
// ("worldfake", as cuda brings nccl) and a ConnectWorld that records
// what the runner gives it and connects the devices through an
// in-process group of its own: the runner's WorldConnector seam, without
// a GPU.
type worldBackend struct {
	cpu.Backend
	mu    sync.Mutex
	calls []backend.World
}

func (b *worldBackend) Target() *target.Target {
	t := *cpu.Backend{}.Target()
	t.Name = "cpuworld"
	t.Transports = []target.Transport{{Name: "worldfake", Hint: "a test's"}}
	return &t
}

func (b *worldBackend) ConnectWorld(devs []backend.Device, w backend.World) ([]backend.Collectives, error) {
	b.mu.Lock()
	b.calls = append(b.calls, w)
	b.mu.Unlock()
	g, err := comm.NewInProc(len(devs), comm.Options{Timeout: w.Timeout})
	if err != nil {
		return nil, err
	}
	host := make([]comm.Communicator, len(devs))
	for i := range host {
		host[i] = g.Rank(i)
	}
	return b.Backend.Connect(devs, host)
}

var (
	worldOnce sync.Once
	worldBE   = &worldBackend{}
)

// TestWorldConnector: with a transport the backend brings, the runner
// connects through ConnectWorld — for a run of one device too (which
// otherwise connects nothing) — giving it the ranks, the world size and
// comm.timeout; the run's parameters are those of the in-process run, bit
// for bit. With the backend's transport not named, Connect is used.
func TestWorldConnector(t *testing.T) {
	worldOnce.Do(func() { backend.Register(worldBE) })
	s := loadSpec(t, tinyScript, "epochs=1")
	for _, devices := range []int{1, 2} {
		want, err := Run(compile(t, s, devices), RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := compileWith(t, s, devices, "cluster.backend=cpuworld", "cluster.transport=worldfake", "comm.timeout=7s")
		worldBE.calls = nil
		got, err := Run(p, RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(worldBE.calls) != 1 {
			t.Fatalf("%d devices: ConnectWorld called %d times", devices, len(worldBE.calls))
		}
		w := worldBE.calls[0]
		wantRanks := []int{0, 1}[:devices]
		if w.Transport != "worldfake" || w.Size != devices || w.Processes != 1 || w.Process != 0 || w.Devices != devices ||
			!slices.Equal(w.Ranks, wantRanks) || w.Cross != nil || w.Timeout.Seconds() != 7 {
			t.Errorf("%d devices: ConnectWorld got %+v", devices, w)
		}
		for r := range want.Params {
			if !slices.Equal(got.Params[r], want.Params[r]) {
				t.Errorf("%d devices: rank %d's parameters differ from the in-process run's", devices, r)
			}
		}
	}
	// The backend's own transport not named: no ConnectWorld.
	worldBE.calls = nil
	if _, err := Run(compileWith(t, s, 2, "cluster.backend=cpuworld"), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(worldBE.calls) != 0 {
		t.Errorf("transport inproc: ConnectWorld called %d times", len(worldBE.calls))
	}
}
