//go:build mpi

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/engine/runner"
	"gorun/engine/target"
	"gorun/script"
)

// TestNCCLWorldJoin runs TestNCCLWorldJoinRank as 3 processes under
// mpirun (this test binary, built with -tags mpi): how a process of an
// NCCL run joins its world, without a GPU.
func TestNCCLWorldJoin(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		t.Skip("the launcher; TestNCCLWorldJoinRank is the rank")
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	cmd := exec.Command(path, "--allow-run-as-root", "--oversubscribe", "-np", "3",
		os.Args[0], "-test.run", "^TestNCCLWorldJoinRank$", "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "--- PASS: TestNCCLWorldJoinRank") != 3 {
		t.Fatalf("mpirun -np 3: %v\n%s", err, out)
	}
}

// TestNCCLWorldJoinRank is one process of TestNCCLWorldJoin: a cluster
// with transport nccl and no number of processes takes mpirun's 3, joins
// MPI, and — the launcher's local rank hidden — works out its host rank
// from the host names (all 3 on this host: its own rank).
func TestNCCLWorldJoinRank(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		t.Skip("runs under mpirun, started by TestNCCLWorldJoin")
	}
	rank, _ := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_RANK"))
	os.Unsetenv("OMPI_COMM_WORLD_LOCAL_RANK")
	c := ncclCluster(0)
	c.Timeout = 20 * time.Second
	detectLauncher(&c)
	w, err := placeProcess(&c, true)
	if err != nil {
		t.Fatal(err)
	}
	defer leaveMPI(nil)
	if w.procs != 3 || w.proc != rank || c.Processes != 3 || w.cross == nil {
		t.Fatalf("rank %d: world %+v, cluster.processes %d", rank, w, c.Processes)
	}
	if !w.hostRankSet || w.hostRank != rank {
		t.Errorf("rank %d: host rank %d (set %v), want %d", rank, w.hostRank, w.hostRankSet, rank)
	}
	fmt.Fprintf(os.Stderr, "rank %d of %d: host rank %d\n", w.proc, w.procs, w.hostRank)
}

// worldSeam is the cpu backend with a transport of its own ("worldfake",
// as cuda brings nccl) whose ConnectWorld bootstraps the way cuda's NCCL
// world does — every process's cards gathered, rank 0's 128-byte id
// shared — and then connects the devices through the cross communicator
// as the MPI transport would: the runner's WorldConnector seam across
// real processes, without a GPU.
type worldSeam struct {
	cpu.Backend
	calls []backend.World
	ids   [][]byte
	cards [][][]byte
}

func (b *worldSeam) Target() *target.Target {
	t := *cpu.Backend{}.Target()
	t.Name = "cpuworld"
	t.Transports = []target.Transport{{Name: "worldfake", Hint: "a test's"}}
	return &t
}

func (b *worldSeam) ConnectWorld(devs []backend.Device, w backend.World) ([]backend.Collectives, error) {
	b.calls = append(b.calls, w)
	card, err := comm.EncodeCard(64, fmt.Sprint(w.Ranks))
	if err != nil {
		return nil, err
	}
	cards, err := comm.GatherBytes(w.Cross, card, comm.Tag{Name: "cards"})
	if err != nil {
		return nil, err
	}
	id, err := comm.ShareBytes(w.Cross, comm.NCCLUniqueIDBytes, 0, func() ([]byte, error) {
		return bytes.Repeat([]byte{0x7f, 0x80, 0x00, 0x01}, comm.NCCLUniqueIDBytes/4), nil
	}, comm.Tag{Name: "id"})
	if err != nil {
		return nil, err
	}
	b.ids, b.cards = append(b.ids, id), append(b.cards, cards)
	g, err := comm.Open(len(devs), comm.Options{Timeout: w.Timeout}, w.Cross, w.Process)
	if err != nil {
		return nil, err
	}
	return b.Backend.Connect(devs, g.Ranks())
}

// TestNCCLWorldSeam runs TestNCCLWorldSeamRank as 2 processes of 2
// devices under mpirun.
func TestNCCLWorldSeam(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		t.Skip("the launcher; TestNCCLWorldSeamRank is the rank")
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	cmd := exec.Command(path, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		os.Args[0], "-test.run", "^TestNCCLWorldSeamRank$", "-test.count=1", "-test.v")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Count(string(out), "--- PASS: TestNCCLWorldSeamRank") != 2 {
		t.Fatalf("mpirun -np 2: %v\n%s", err, out)
	}
}

// TestNCCLWorldSeamRank is one process of TestNCCLWorldSeam: a run of 2
// processes × 2 devices through a backend's own transport gets, in
// ConnectWorld, this process's index, the global ranks of its devices,
// the world size, the cross communicator and comm.timeout; every
// process learns every process's card and rank 0's id; and the run ends
// with the parameters of the same run over transport "mpi", bit for bit.
func TestNCCLWorldSeamRank(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		t.Skip("runs under mpirun, started by TestNCCLWorldSeam")
	}
	seam := &worldSeam{}
	backend.Register(seam)
	src := `train(
    model = nn.sequential(nn.flatten(), nn.linear(16, 8, name = "fc1"), nn.relu(), nn.linear(8, 3, name = "fc2"), nn.log_softmax()),
    loss = "nll",
    data = data.synthetic(size = 256, shape = (1, 4, 4), classes = 3, noise = 1.0, seed = 5),
    optimizer = optim.sgd(lr = 0.1, momentum = 0.5),
    batch_size = 16,
    epochs = 1,
    seed = 9,
)
`
	path := filepath.Join(t.TempDir(), "seam.star")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := script.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer leaveMPI(nil)
	run := func(transport string) [][]float32 {
		c := engine.DefaultCluster()
		c.Backend, c.Transport, c.Devices, c.Processes, c.Timeout = "cpuworld", transport, 2, 2, 20*time.Second
		w, err := placeProcess(&c, true)
		if err != nil {
			t.Fatal(err)
		}
		p, err := engine.CompileProcess(s, c, w.proc)
		if err != nil {
			t.Fatal(err)
		}
		res, err := runner.Run(p, runner.RunOptions{Cross: w.cross})
		if err != nil {
			t.Fatalf("transport %s: %v", transport, err)
		}
		return res.Params
	}
	want := run("mpi")
	if len(seam.calls) != 0 {
		t.Fatalf("transport mpi: ConnectWorld called")
	}
	got := run("worldfake")
	rank := mpiWorld.Rank()
	if len(seam.calls) != 1 {
		t.Fatalf("transport worldfake: ConnectWorld called %d times", len(seam.calls))
	}
	w := seam.calls[0]
	if w.Transport != "worldfake" || w.Process != rank || w.Processes != 2 || w.Size != 4 || w.Devices != 2 ||
		!slices.Equal(w.Ranks, []int{2 * rank, 2*rank + 1}) || w.Cross == nil || w.Timeout != 20*time.Second {
		t.Errorf("process %d: ConnectWorld got %+v", rank, w)
	}
	if !bytes.Equal(seam.ids[0], bytes.Repeat([]byte{0x7f, 0x80, 0x00, 0x01}, 32)) {
		t.Errorf("process %d: id % x", rank, seam.ids[0])
	}
	for p, card := range seam.cards[0] {
		if f, err := comm.DecodeCard(card, 1); err != nil || f[0] != fmt.Sprint([]int{2 * p, 2*p + 1}) {
			t.Errorf("process %d: card %d is %q %v", rank, p, f, err)
		}
	}
	for r := range want {
		if !slices.Equal(got[r], want[r]) {
			t.Errorf("process %d, local rank %d: parameters differ from transport mpi's", rank, r)
		}
	}
}
