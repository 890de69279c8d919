//go:build mpi

package comm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The MPI tests run in two roles. Started by go test (no
// OMPI_COMM_WORLD_SIZE in the environment), TestMPI and TestMPITimeout
// start this same test binary under mpirun; there, TestMPIRank is one rank
// and checks every collective against a serial computation.

// underMPIRun reports whether this process was started by mpirun.
func underMPIRun() bool { return os.Getenv("OMPI_COMM_WORLD_SIZE") != "" }

// mpirun runs this test binary under mpirun with np processes, running
// only the test named run, with extra environment; it returns the
// combined output and the exit error. Without mpirun the test is skipped.
func mpirun(t *testing.T, np int, run string, testArgs ...string) (string, error) {
	t.Helper()
	path, err := lookMPIRun()
	if err != nil {
		t.Skip("SKIP: mpirun not found: install OpenMPI (Debian's openmpi-bin and libopenmpi-dev) to run the MPI tests")
	}
	return runMPI(path, []string{"--oversubscribe", "-np", fmt.Sprint(np)}, run, testArgs...)
}

// lookMPIRun finds mpirun.
func lookMPIRun() (string, error) { return exec.LookPath("mpirun") }

// runMPI runs this test binary's test run under mpirun (at path) with
// mpirun's arguments args (-np N and so on).
func runMPI(path string, args []string, run string, testArgs ...string) (string, error) {
	args = append(append([]string{"--allow-run-as-root"}, args...),
		os.Args[0], "-test.run", "^"+run+"$", "-test.count=1", "-test.v")
	cmd := exec.Command(path, append(args, testArgs...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMPI runs TestMPIRank on 2 and 3 processes.
func TestMPI(t *testing.T) {
	if underMPIRun() {
		t.Skip("the launcher; TestMPIRank is the rank")
	}
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			start := time.Now()
			out, err := mpirun(t, np, "TestMPIRank")
			if err != nil || strings.Count(out, "--- PASS: TestMPIRank") != np {
				t.Fatalf("mpirun -np %d: %v\n%s", np, err, out)
			}
			t.Logf("%d ranks passed in %v", np, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestMPITimeout: a rank that never joins a collective makes the watchdog
// abort the whole job, with a message naming the rank, its host, the
// collective, its tag and step, instead of a hang; while it waits,
// Pending names the collective.
func TestMPITimeout(t *testing.T) {
	if underMPIRun() {
		t.Skip("the launcher")
	}
	start := time.Now()
	out, err := mpirun(t, 2, "TestMPIRankLost")
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the job exited 0:\n%s", out)
	}
	host, _ := os.Hostname()
	for _, want := range []string{
		`rank 0 of 2 (host ` + host + `): comm: barrier "lost" at step 3 (MPI) timed out after 1s`,
		`rank 0 of 2 (host ` + host + `): pending: barrier "lost" at step 3`,
	} {
		if !strings.Contains(out, want) || !strings.Contains(out, "MPI_Abort") {
			t.Fatalf("output does not say %q:\n%s", want, out)
		}
	}
	if took > 20*time.Second {
		t.Errorf("took %v to abort", took)
	}
}

// TestMPIKilled: when a rank dies (SIGKILL) in the middle of collectives,
// mpirun ends the others at once and exits non-zero, naming the lost rank.
func TestMPIKilled(t *testing.T) {
	if underMPIRun() {
		t.Skip("the launcher")
	}
	start := time.Now()
	out, err := mpirun(t, 3, "TestMPIRankKilled")
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the job exited 0:\n%s", out)
	}
	if !strings.Contains(out, "rank 1") || !strings.Contains(out, "signal 9") {
		t.Fatalf("output does not name rank 1 and signal 9:\n%s", out)
	}
	if took > 20*time.Second {
		t.Errorf("took %v to end the job", took)
	}
}

// TestMPIRankKilled is rank 1 killing itself between all-reduces (run by
// TestMPIKilled).
func TestMPIRankKilled(t *testing.T) {
	if !underMPIRun() {
		t.Skip("runs under mpirun, started by TestMPIKilled")
	}
	c := initMPI(t)
	c.SetTimeout(30 * time.Second)
	buf := make([]float32, 1000)
	for step := range 1000 {
		if c.Rank() == 1 && step == 20 {
			p, _ := os.FindProcess(os.Getpid())
			p.Signal(os.Kill)
			time.Sleep(time.Minute)
		}
		if err := c.AllReduce(buf, Sum, Tag{Name: "grads", Step: step}); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("all steps done with a rank killed")
}

// TestMPIRankLost is rank 1 never arriving at a barrier (run by
// TestMPITimeout).
func TestMPIRankLost(t *testing.T) {
	if !underMPIRun() {
		t.Skip("runs under mpirun, started by TestMPITimeout")
	}
	c := initMPI(t)
	c.SetTimeout(time.Second)
	if err := c.Barrier(Tag{Name: "first", Step: 2}); err != nil {
		t.Fatal(err)
	}
	if call, _, ok := c.Pending(); ok {
		t.Errorf("Pending between collectives: %q", call)
	}
	if c.Rank() == 1 {
		time.Sleep(30 * time.Second) // lost
	}
	// Rank 0 says where it waits, as a signal handler would.
	go func() {
		time.Sleep(500 * time.Millisecond)
		if call, waited, ok := c.Pending(); ok && waited >= 400*time.Millisecond {
			fmt.Fprintf(os.Stderr, "%s: pending: %s\n", c.Who(), call)
		}
	}()
	c.Barrier(Tag{Name: "lost", Step: 3})
	t.Fatal("the barrier returned")
}

func initMPI(t *testing.T) *MPIComm {
	t.Helper()
	c, err := InitMPI()
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := InitMPI(); c2 != c || err != nil {
		t.Fatalf("second InitMPI: %p %v, want %p", c2, err, c)
	}
	return c
}

// rankInput is rank r's input of length l for case salt: small integers,
// so that sums are exact in any order, with a few -0s. Every rank can
// compute every rank's input.
func rankInput(r, l int, salt uint64) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r)+1000*uint64(l), salt))
	x := make([]float32, l)
	for i := range x {
		x[i] = float32(rng.IntN(201) - 100)
		if x[i] == 0 && rng.IntN(2) == 0 {
			x[i] = float32(math.Copysign(0, -1))
		}
	}
	return x
}

// serialReduce reduces every rank's input with op, as one process would.
func serialReduce(n, l int, salt uint64, op ReduceOp) []float32 {
	out := rankInput(0, l, salt)
	for r := 1; r < n; r++ {
		reduceInto(out, out, rankInput(r, l, salt), op)
	}
	if op == Mean {
		divide(out, n)
	}
	return out
}

// sameBits reports the first index where a and b differ bit for bit, or -1.
func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			return i
		}
	}
	return -1
}

// TestMPIRank is one rank: it checks every collective against a serial
// computation of the same inputs, for lengths 0, 1, 7, 1000 and 1<<16.
// Only checks fail the test (t.Errorf), so every rank makes the same
// calls whatever fails; a collective error is fatal (the watchdog ends a
// rank left waiting).
func TestMPIRank(t *testing.T) {
	if !underMPIRun() {
		t.Skip("runs under mpirun, started by TestMPI")
	}
	c := initMPI(t)
	c.SetTimeout(60 * time.Second)
	r, n := c.Rank(), c.Size()
	if er, es, _, ok := EnvWorld(); !ok || er != r || es != n {
		t.Errorf("EnvWorld = %d, %d, %v; MPI says rank %d of %d", er, es, ok, r, n)
	}
	if !MPIAvailable() {
		t.Error("MPIAvailable() = false in an mpi build")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	check := func(what string, got, want []float32) {
		t.Helper()
		if i := sameBits(got, want); i >= 0 {
			if len(got) != len(want) {
				t.Errorf("rank %d of %d: %s: %d floats, want %d", r, n, what, len(got), len(want))
			} else {
				t.Errorf("rank %d of %d: %s: [%d] = %v, want %v", r, n, what, i, got[i], want[i])
			}
		}
	}
	ops := []ReduceOp{Sum, Mean, Max, Min}
	salt := uint64(0)
	for _, l := range []int{0, 1, 7, 1000, 1 << 16} {
		step := func() Tag { salt++; return Tag{Name: fmt.Sprintf("len %d", l), Step: int(salt)} }

		for _, op := range ops {
			tag := step()
			buf := rankInput(r, l, salt)
			must(c.AllReduce(buf, op, tag))
			check(fmt.Sprintf("allreduce %v len %d", op, l), buf, serialReduce(n, l, salt, op))
		}
		for _, root := range []int{0, n - 1} {
			tag := step()
			buf := rankInput(r, l, salt)
			must(c.Broadcast(buf, root, tag))
			check(fmt.Sprintf("broadcast root %d len %d", root, l), buf, rankInput(root, l, salt))

			for _, op := range ops {
				tag := step()
				buf := rankInput(r, l, salt)
				must(c.Reduce(buf, root, op, tag))
				want := rankInput(r, l, salt) // others: unchanged
				if r == root {
					want = serialReduce(n, l, salt, op)
				}
				check(fmt.Sprintf("reduce %v root %d len %d", op, root, l), buf, want)
			}
		}
		for _, inplace := range []bool{false, true} {
			tag := step()
			var want []float32
			for k := range n {
				want = append(want, rankInput(k, l, salt)...)
			}
			recv := make([]float32, n*l)
			for i := range recv {
				recv[i] = 12345
			}
			send := rankInput(r, l, salt)
			if inplace {
				send = recv[r*l : (r+1)*l]
				copy(send, rankInput(r, l, salt))
			}
			must(c.AllGather(send, recv, tag))
			check(fmt.Sprintf("allgather len %d in place %v", l, inplace), recv, want)
		}
		for _, op := range ops {
			for _, inplace := range []bool{false, true} {
				tag := step()
				send := rankInput(r, n*l, salt)
				orig := append([]float32(nil), send...)
				recv := make([]float32, l)
				if inplace {
					recv = send[r*l : (r+1)*l]
				}
				must(c.ReduceScatter(send, recv, op, tag))
				check(fmt.Sprintf("reducescatter %v len %d in place %v", op, l, inplace), recv, serialReduce(n, n*l, salt, op)[r*l:(r+1)*l])
				if !inplace {
					check("reducescatter's send", send, orig)
				}
			}
		}
		must(c.Barrier(step()))

		// Real numbers: every rank ends with the same bits, close to the
		// exact sum.
		if l > 0 {
			salt++
			rng := rand.New(rand.NewPCG(uint64(r), salt))
			buf := make([]float32, l)
			exact := make([]float64, l)
			for k := range n {
				g := rand.New(rand.NewPCG(uint64(k), salt))
				for i := range exact {
					v := float32(g.NormFloat64())
					exact[i] += float64(v)
					if k == r {
						buf[i] = v
					}
				}
			}
			_ = rng
			must(c.AllReduce(buf, Sum, Tag{Name: "reals", Step: int(salt)}))
			all := make([]float32, n*l)
			must(c.AllGather(buf, all, Tag{Name: "compare", Step: int(salt)}))
			for k := range n {
				check(fmt.Sprintf("real allreduce len %d: rank %d's result", l, k), all[k*l:(k+1)*l], buf)
			}
			for i := range exact {
				if d := math.Abs(float64(buf[i]) - exact[i]); d > 1e-5*(1+math.Abs(exact[i])) {
					t.Errorf("real allreduce len %d: [%d] = %v, exact %v", l, i, buf[i], exact[i])
					break
				}
			}
		}
	}

	// NaN wins in Max and Min, as with the in-process collectives.
	for _, op := range []ReduceOp{Max, Min} {
		buf := make([]float32, n)
		buf[r] = float32(math.NaN())
		must(c.AllReduce(buf, op, Tag{Name: "nan"}))
		for i, v := range buf {
			if v == v {
				t.Errorf("%v with a NaN at [%d] gave %v", op, i, v)
			}
		}
	}

	// Invalid calls fail on every rank alike, before MPI sees them.
	bad := []struct {
		name string
		err  error
		want string
	}{
		{"allgather", c.AllGather(make([]float32, 2), make([]float32, 2*n+1), Tag{Name: "bad"}), "recv has"},
		{"reducescatter", c.ReduceScatter(make([]float32, 3*n), make([]float32, 2), Sum, Tag{Name: "bad"}), "send has"},
		{"broadcast", c.Broadcast(nil, n, Tag{Name: "bad"}), "root"},
		{"reduce", c.Reduce(nil, 0, ReduceOp(9), Tag{Name: "bad"}), "invalid"},
	}
	for _, b := range bad {
		var e *Error
		if !errors.Is(b.err, ErrInvalid) || !errors.As(b.err, &e) || e.Op != b.name || !strings.Contains(b.err.Error(), b.want) {
			t.Errorf("%s: error %v, want ErrInvalid mentioning %q", b.name, b.err, b.want)
		}
	}

	// Go keeps its own signals: a nil dereference is still a recoverable
	// panic after MPI_Init.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		var p *int
		_ = *p
	}()

	must(c.Barrier(Tag{Name: "end"}))
}

// TestMain finalizes MPI in the processes that initialised it.
func TestMain(m *testing.M) {
	code := m.Run()
	if mpiComm != nil {
		if err := mpiComm.Finalize(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
