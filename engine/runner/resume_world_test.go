package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumeAnotherWorld: allreduce's and a parameter server's state is
// rank 0's (the root's), the same on every rank, and each step's global
// batch is the same on any number of devices, so a checkpoint resumes on
// another device count — at an epoch's end or inside an epoch — and the
// run ends where an uninterrupted run on the new devices ends, and where
// one device's run ends (within float rounding: only the order of the
// sums differs). metrics.jsonl says where the run went on, from how many
// devices to how many.
func TestResumeAnotherWorld(t *testing.T) {
	sets := []string{"batch_size=24", "optimizer=optim.adamw(lr=0.01)"}
	_, one := trainSync(t, tinyScript, 1, RunOptions{}, sets...)
	p1 := compile(t, loadSpec(t, tinyScript, sets...), 1)
	for _, c := range []struct {
		sync      string
		stop      string // how the first run stops
		from, to  int
		wantSteps int
	}{
		{"sync.allreduce()", "epochs=1", 3, 2, 0},
		{"sync.allreduce()", "max_steps=5", 3, 2, 0},
		{"sync.allreduce(bucket_mb=0.0005, overlap=False)", "max_steps=7", 2, 4, 0},
		{"sync.allreduce()", "max_steps=30", 2, 1, 0},
		{"sync.parameter_server(root=0)", "max_steps=5", 2, 3, 0},
	} {
		name := c.sync + " " + c.stop
		all := append(sets, "sync="+c.sync)
		dir := t.TempDir()
		trainSync(t, tinyScript, c.from, RunOptions{Out: dir}, append(all, c.stop)...)
		pr, resumed := trainSync(t, tinyScript, c.to, RunOptions{Resume: dir}, all...)
		pw, whole := trainSync(t, tinyScript, c.to, RunOptions{}, all...)
		if resumed.Steps != whole.Steps {
			t.Errorf("%s, %d → %d devices: %d steps, an uninterrupted run %d", name, c.from, c.to, resumed.Steps, whole.Steps)
		}
		d, where := relDiff(namedParams(pr, resumed, 0), namedParams(pw, whole, 0))
		d1, where1 := relDiff(namedParams(pr, resumed, 0), namedParams(p1, one, 0))
		t.Logf("%s, %d → %d devices: %.2e from an uninterrupted run on %d (%s), %.2e from one device's (%s)", name, c.from, c.to, d, c.to, where, d1, where1)
		if d > 1e-5 || d1 > 1e-5 {
			t.Errorf("%s, %d → %d devices: %.2e from an uninterrupted run on %d (%s), %.2e from one device's (%s)", name, c.from, c.to, d, c.to, where, d1, where1)
		}
		var lines []map[string]any
		for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			if m["kind"] == "resume" {
				lines = append(lines, m)
			}
		}
		if len(lines) != 1 || lines[0]["from_devices"] != float64(c.from) || lines[0]["devices"] != float64(c.to) ||
			lines[0]["sync"] != lines[0]["from_sync"] || lines[0]["step"] == float64(0) {
			t.Errorf("%s, %d → %d devices: resume lines %v", name, c.from, c.to, lines)
		}
	}
}

// TestResumeAnotherWorldRefused: where every rank's parameters or
// optimizer state are its own (sync none, local SGD), a checkpoint made
// on another device count is refused, naming why; allreduce on another
// world still refuses another optimizer, model or sync setting, naming
// it as on the same world.
func TestResumeAnotherWorldRefused(t *testing.T) {
	sets := []string{"batch_size=24", "max_steps=3"}
	for _, c := range []struct {
		sync     string
		from, to int
		want     string
	}{
		{"sync.none()", 2, 3, "the checkpoint was made with 2 devices, this run has 3: under sync none every device trains a model of its own (its parameters and optimizer state saved by rank), which 3 devices cannot take over; resume on 2 devices"},
		{"sync.local_sgd(every=1)", 2, 1, "the checkpoint was made with 2 devices, this run has 1: under sync local_sgd every device keeps parameters of its own between averagings and optimizer state of its own throughout, which 1 device cannot take over; resume on 2 devices"},
	} {
		dir := t.TempDir()
		trainSync(t, tinyScript, c.from, RunOptions{Out: dir}, append(sets, "sync="+c.sync)...)
		_, err := Run(compile(t, loadSpec(t, tinyScript, "batch_size=24", "sync="+c.sync), c.to), RunOptions{Resume: dir})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s, %d → %d devices: %v", c.sync, c.from, c.to, err)
		}
		t.Logf("%s, %d → %d devices: %v", c.sync, c.from, c.to, err)
	}

	dir := t.TempDir()
	trainSync(t, tinyScript, 1, RunOptions{Out: dir}, sets...)
	for _, c := range []struct {
		set, want string
	}{
		{"optimizer.lr=0.2", "optimizer: lr was 0.1 in the checkpoint, is 0.2 now"},
		{"sync=sync.allreduce(bucket_mb=1)", "sync: bucket_mb was 25 in the checkpoint, is 1 now"},
	} {
		_, err := Run(compile(t, loadSpec(t, tinyScript, "batch_size=24", c.set), 2), RunOptions{Resume: dir})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s on 2 devices: %v", c.set, err)
		}
		t.Logf("--set %s on 2 devices: %v", c.set, err)
	}
	other := strings.Replace(tinyScript, "kernel = 3, padding = 1", "kernel = 3, padding = 1, stride = 1, bias = False", 1)
	_, err := Run(compile(t, loadSpec(t, other, "batch_size=24"), 3), RunOptions{Resume: dir})
	if err == nil || !strings.Contains(err.Error(), "layer conv (conv2d, ") {
		t.Errorf("another model on 3 devices: %v", err)
	}
	t.Logf("another model on 3 devices: %v", err)
}

// TestTrimMetricsKeepsResumes: a resumed run's metrics.jsonl keeps the
// resume lines of the steps its checkpoint covers, and drops those at or
// after it (a resume from the same checkpoint writes its own).
func TestTrimMetricsKeepsResumes(t *testing.T) {
	dir := t.TempDir()
	lines := `{"kind":"step","step":1,"epoch":1}
{"kind":"resume","step":1,"epoch":1,"devices":2,"from_devices":3}
{"kind":"step","step":2,"epoch":1}
{"kind":"resume","step":2,"epoch":1,"devices":1,"from_devices":2}
{"kind":"step","step":3,"epoch":1}
`
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := trimMetrics(dir, &progress{Step: 2}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
		got = append(got, fmt.Sprint(m["kind"], m["step"]))
	}
	if want := "[step1 resume1 step2]"; fmt.Sprint(got) != want {
		t.Errorf("trimmed to step 2: %v, want %s", got, want)
	}
}
