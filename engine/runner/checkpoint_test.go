package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"gorun/engine"
	"gorun/safetensors"
)

// dropoutScript is tinyScript with dropout, so that resuming must restore
// every rank's RNG state too.
var dropoutScript = strings.Replace(tinyScript, "nn.flatten(),", "nn.dropout2d(0.25), nn.flatten(), nn.dropout(0.25),", 1)

func runIn(t *testing.T, dir, resume string, devices int, sets ...string) *Result {
	t.Helper()
	p := compile(t, loadSpec(t, dropoutScript, sets...), devices)
	res, err := Run(p, RunOptions{Out: dir, Resume: resume})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// paramOf is parameter i of rank r's final parameters in res.
func paramOf(p *engine.Plan, res *Result, r, i int) []float32 {
	prog := p.Devices[r]
	b := prog.Params[i]
	return res.Params[r][b.Offset-prog.ParamArena.Offset:][:b.Elems()]
}

// TestResumeIsBitIdentical: a run stopped part-way and resumed ends with
// the parameters of an uninterrupted run, bit for bit.
func TestResumeIsBitIdentical(t *testing.T) {
	for _, c := range []struct {
		devices int
		sync    string
		stopAt  string
	}{
		{1, "sync.allreduce()", "max_steps=10"}, // inside epoch 1
		{1, "sync.allreduce()", "max_steps=32"}, // at the end of epoch 1
		{2, "sync.allreduce()", "max_steps=45"}, // inside epoch 2
		{2, "sync.parameter_server(root=1)", "max_steps=7"},
		{2, "sync.local_sgd(every=3)", "max_steps=20"},              // ranks hold their own parameters
		{2, "sync.zero(stage=2, bucket_mb=0.0005)", "max_steps=45"}, // each rank holds a shard of the optimizer state
		{3, "sync.fsdp()", "max_steps=10"},                          // and of the parameters
	} {
		sets := []string{"epochs=3", "sync=" + c.sync, "optimizer=optim.adam(lr=0.01)"}
		whole := runIn(t, t.TempDir(), "", c.devices, sets...)
		dir := t.TempDir()
		runIn(t, dir, "", c.devices, append(sets, c.stopAt)...)
		resumed := runIn(t, "", dir, c.devices, sets...)
		for r := range whole.Params {
			if d := maxRelDiff(whole.Params[r], resumed.Params[r]); d != 0 {
				t.Errorf("%d devices, %s, stopped at %s: rank %d's parameters differ from an uninterrupted run by %.2e",
					c.devices, c.sync, c.stopAt, r, d)
			}
		}
		// The resumed run's metrics cover every step once.
		steps := map[float64]int{}
		epochs := 0
		for _, rec := range readMetrics(t, filepath.Join(dir, MetricsFile)) {
			switch rec["kind"] {
			case "step":
				steps[rec["step"].(float64)]++
			case "epoch":
				epochs++
			}
		}
		if len(steps) != 96 || epochs != 3 {
			t.Errorf("%d devices, %s: resumed metrics have %d distinct steps and %d epoch lines, want 96 and 3", c.devices, c.sync, len(steps), epochs)
		}
		for s, n := range steps {
			if n != 1 {
				t.Errorf("step %v logged %d times", s, n)
			}
		}
	}
}

func TestCheckpointFiles(t *testing.T) {
	dir := t.TempDir()
	p := compile(t, loadSpec(t, dropoutScript, "epochs=4", "keep=2"), 1)
	res := runIn(t, dir, "", 1, "epochs=4", "keep=2")
	got, err := listCheckpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 96 || got[1] != 128 {
		t.Errorf("checkpoints at steps %v, want the last 2 of 4 epochs: [96 128]", got)
	}
	// The parameter file holds state_dict names and shapes, rank 0's values.
	f, err := safetensors.ReadFile(checkpointPath(dir, 128))
	if err != nil {
		t.Fatal(err)
	}
	if names := strings.Join(f.Names(), ","); names != "conv.bias,conv.weight,fc.bias,fc.weight" {
		t.Errorf("checkpoint tensors %s", names)
	}
	w, _ := f.Get("conv.weight")
	if len(w.Shape) != 4 || w.Shape[0] != 3 || w.Shape[1] != 1 || w.Shape[2] != 3 {
		t.Errorf("conv.weight shape %v", w.Shape)
	}
	for _, name := range []string{ModelFile, BestFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	model, err := safetensors.ReadFile(filepath.Join(dir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	mw, _ := model.Get("fc.weight")
	v, _ := mw.Float32s()
	if d := maxRelDiff(v, paramOf(p, res, 0, 2)); d != 0 || p.Graph.Params[2].Name != "fc.weight" {
		t.Errorf("model.safetensors differs from the final parameters")
	}

	// A checkpoint cut short (an earlier gorun's flat state file without
	// its parameters; a folder missing a file) is skipped: resuming uses
	// the newest complete one.
	st, err := os.ReadFile(statePath(checkpointPath(dir, 128)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath(legacyCheckpointPath(dir, 200)), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(checkpointDir(dir, 300), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath(checkpointPath(dir, 300)), st, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := listCheckpoints(dir); got[len(got)-1] != 128 {
		t.Errorf("an incomplete checkpoint counts: %v", got)
	}
}

func TestInitAndResumeErrors(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "", 1, "max_steps=3")
	model := filepath.Join(dir, ModelFile)

	// --init with the right file works and starts from those weights.
	p := compile(t, loadSpec(t, dropoutScript, "max_steps=1", "optimizer=optim.sgd(lr=1e-30)"), 1)
	res, err := Run(p, RunOptions{Init: model})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := safetensors.ReadFile(model)
	w, _ := f.Get("fc.weight")
	v, _ := w.Float32s()
	if d := maxRelDiff(v, paramOf(p, res, 0, 2)); d > 1e-6 {
		t.Errorf("--init: fc.weight differs from the file by %.2e", d)
	}

	// A model with another shape: the error names the parameter.
	other := strings.Replace(dropoutScript, "nn.conv2d(1, 3,", "nn.conv2d(1, 5,", 1)
	other = strings.Replace(other, "nn.linear(48, 4", "nn.linear(80, 4", 1)
	p = compile(t, loadSpec(t, other), 1)
	_, err = Run(p, RunOptions{Init: model})
	if err == nil || !strings.Contains(err.Error(), "parameter conv.weight: shape [3 1 3 3], the model has [5 1 3 3]") {
		t.Errorf("--init with other shapes: %v", err)
	}
	// Resuming with another device count under a strategy whose ranks
	// keep their own parameters is refused, naming both counts and why
	// (allreduce's resume there: TestResumeAnotherWorld).
	p = compile(t, loadSpec(t, dropoutScript, "sync=sync.none()"), 1)
	if _, err = Run(p, RunOptions{Out: filepath.Join(dir, "none")}); err != nil {
		t.Fatal(err)
	}
	p = compile(t, loadSpec(t, dropoutScript, "sync=sync.none()"), 2)
	_, err = Run(p, RunOptions{Resume: filepath.Join(dir, "none")})
	if err == nil || !strings.Contains(err.Error(), "made with 1 device, this run has 2: under sync none") {
		t.Errorf("--resume on 2 devices: %v", err)
	}
	p = compile(t, loadSpec(t, dropoutScript), 1)
	if _, err = Run(p, RunOptions{Resume: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no complete checkpoint") {
		t.Errorf("--resume of an empty folder: %v", err)
	}
}

// TestInterruptSavesAndResumes: an interrupt stops every rank after the
// same step and saves a checkpoint; resuming ends where an uninterrupted
// run ends.
func TestInterruptSavesAndResumes(t *testing.T) {
	for _, devices := range []int{1, 2} {
		sets := []string{"epochs=2"}
		whole := runIn(t, t.TempDir(), "", devices, sets...)
		dir := t.TempDir()
		p := compile(t, loadSpec(t, dropoutScript, sets...), devices)
		var stop atomic.Bool
		res, err := Run(p, RunOptions{Out: dir, Interrupt: &stop, OnStep: func(m StepMetrics) {
			if m.Step == 13 {
				stop.Store(true)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		// The request comes after step 13; step 14 is under way, and every
		// rank stops after it.
		if !res.Interrupted || res.Steps != 14 {
			t.Fatalf("%d devices: interrupted %v after %d steps, want after 14", devices, res.Interrupted, res.Steps)
		}
		if got, _ := listCheckpoints(dir); len(got) == 0 || got[len(got)-1] != 14 {
			t.Fatalf("%d devices: checkpoints %v, want one at step 14", devices, got)
		}
		resumed := runIn(t, "", dir, devices, sets...)
		for r := range whole.Params {
			if d := maxRelDiff(whole.Params[r], resumed.Params[r]); d != 0 {
				t.Errorf("%d devices: rank %d differs after interrupt and resume by %.2e", devices, r, d)
			}
		}
	}
}

// TestResumeRefusesAnotherPlan: resuming with another seed, optimizer or
// model is refused, naming what differs; more epochs are fine.
func TestResumeRefusesAnotherPlan(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "", 1, "epochs=2", "max_steps=40")
	another := strings.Replace(dropoutScript, "nn.dropout(0.25)", "nn.dropout(0.5)", 1)
	for _, c := range []struct{ src, set, want string }{
		{dropoutScript, "seed=8", `train settings: seed was 7 in the checkpoint, is 8 now`},
		{dropoutScript, "optimizer=optim.adam(lr=0.01)", `optimizer was sgd lr 0.1`},
		{another, "epochs=2", `(dropout, /t/train.star:`},
		{another, "epochs=2", `): p was 0.25 in the checkpoint, is 0.5 now`},
	} {
		p := compile(t, loadSpec(t, c.src, "epochs=2", c.set), 1)
		_, err := Run(p, RunOptions{Resume: dir})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "resume with the script and --set that made it") {
			t.Errorf("--resume with %s: %v, want %q", c.set, err, c.want)
		}
	}
	p := compile(t, loadSpec(t, dropoutScript, "epochs=3"), 1)
	if _, err := Run(p, RunOptions{Resume: dir}); err != nil {
		t.Errorf("--resume with more epochs: %v", err)
	}
}

// TestResumeFinishedRun: resuming a run that trained all its epochs is an
// error (it would only overwrite its summary), not a silent no-op.
func TestResumeFinishedRun(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "", 1, "epochs=1")
	before, err := os.ReadFile(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	p := compile(t, loadSpec(t, dropoutScript, "epochs=1"), 1)
	_, err = Run(p, RunOptions{Resume: dir})
	if err == nil || !strings.Contains(err.Error(), "the run finished its 1 epochs") {
		t.Errorf("resuming a finished run: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, MetricsFile)); string(after) != string(before) {
		t.Error("resuming a finished run changed its metrics")
	}
	// A run stopped by max_steps is finished for the same max_steps.
	dir = t.TempDir()
	runIn(t, dir, "", 1, "epochs=3", "max_steps=5")
	p = compile(t, loadSpec(t, dropoutScript, "epochs=3", "max_steps=5"), 1)
	if _, err = Run(p, RunOptions{Resume: dir}); err == nil || !strings.Contains(err.Error(), "the checkpoint is at step 5 and max_steps is 5") {
		t.Errorf("resuming at max_steps: %v", err)
	}
	p = compile(t, loadSpec(t, dropoutScript, "epochs=3", "max_steps=9"), 1)
	if res, err := Run(p, RunOptions{Resume: dir}); err != nil || res.Steps != 9 {
		t.Errorf("resuming with a higher max_steps: %v", err)
	}
}

// TestResumePassesOverDamagedCheckpoints: a newest checkpoint that is
// damaged, or lacks its state file, is passed over — saying so — for the
// newest one that reads whole.
func TestResumePassesOverDamagedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "", 1, "epochs=3", "max_steps=64") // checkpoints at 32 and 64
	newest := checkpointPath(dir, 64)
	if err := os.WriteFile(newest, []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A later parameter file without its state: an earlier gorun's crash
	// between the two.
	if err := os.WriteFile(legacyCheckpointPath(dir, 90), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	p := compile(t, loadSpec(t, dropoutScript, "epochs=3"), 1)
	res, err := Run(p, RunOptions{Resume: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"step-00000090.safetensors has no state file", "the checkpoint of step 64 is damaged", "falling back to step 32"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if res.Steps != 96 {
		t.Errorf("resumed from step 32 and ran to %d, want 96", res.Steps)
	}
}

// TestCheckpointWholeOrAbsent: a checkpoint whose write fails part-way (a
// full disk, injected through RunOptions.writeTensors after the state
// file and half the parameters) leaves nothing behind: the previous
// checkpoint is whole, no temporary or half-written file remains, and the
// run resumes from the previous one to the parameters of an uninterrupted
// run.
func TestCheckpointWholeOrAbsent(t *testing.T) {
	sets := []string{"epochs=3"}
	whole := runIn(t, t.TempDir(), "", 1, sets...)
	dir := t.TempDir()
	p := compile(t, loadSpec(t, dropoutScript, sets...), 1)
	full := func(path string, ts []safetensors.Tensor, meta map[string]string) error {
		if meta["step"] != "64" || filepath.Base(path) != ckptParams {
			return safetensors.WriteFile(path, ts, meta)
		}
		// The disk fills half-way through the parameters.
		if err := os.WriteFile(path, []byte("half a header"), 0o644); err != nil {
			return err
		}
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	_, err := Run(p, RunOptions{Out: dir, writeTensors: full})
	if err == nil || !strings.Contains(err.Error(), "checkpoint at step 64") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("a checkpoint write that failed: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, CheckpointDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "step-00000032" {
		t.Errorf("checkpoints/ holds %v after the failed write, want only the whole step-00000032", names)
	}
	for _, f := range []string{checkpointPath(dir, 32), statePath(checkpointPath(dir, 32))} {
		if _, err := safetensors.ReadFile(f); err != nil {
			t.Errorf("the previous checkpoint: %v", err)
		}
	}
	resumed := runIn(t, "", dir, 1, sets...)
	if d := maxRelDiff(whole.Params[0], resumed.Params[0]); d != 0 {
		t.Errorf("resumed from the checkpoint before the failed write, the parameters differ from an uninterrupted run by %.2e", d)
	}
}

// TestCheckpointReplace: a checkpoint of a step already saved replaces the
// old one whole; a replacement that fails leaves the old one as it was;
// TidyCheckpoints removes what an interrupted write left and puts back a
// checkpoint moved aside whose replacement never arrived.
func TestCheckpointReplace(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, CheckpointDir), 0o755); err != nil {
		t.Fatal(err)
	}
	fill := func(content string, failAt int) func(string) error {
		return func(tmp string) error {
			for i, name := range []string{ckptState, ckptParams} {
				if i == failAt {
					return errors.New("disk full")
				}
				if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o644); err != nil {
					return err
				}
			}
			return nil
		}
	}
	read := func(step int) string {
		a, _ := os.ReadFile(filepath.Join(checkpointDir(dir, step), ckptState))
		b, _ := os.ReadFile(filepath.Join(checkpointDir(dir, step), ckptParams))
		return string(a) + "+" + string(b)
	}
	listing := func() string {
		entries, _ := os.ReadDir(filepath.Join(dir, CheckpointDir))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	}
	if err := writeCheckpoint(dir, 5, fill("old", -1)); err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(dir, 5, fill("new", 1)); err == nil || read(5) != "old+old" || listing() != "step-00000005" {
		t.Errorf("a failed replacement: %v; the checkpoint holds %q, the folder %q; want the old one alone", err, read(5), listing())
	}
	if err := writeCheckpoint(dir, 5, fill("new", -1)); err != nil || read(5) != "new+new" || listing() != "step-00000005" {
		t.Errorf("a replacement: %v; the checkpoint holds %q, the folder %q; want the new one alone", err, read(5), listing())
	}

	// What a crash mid-write leaves.
	for _, name := range []string{".step-00000007.tmp-123", ".step-00000005.old-4", ".step-00000009.old-5"} {
		if err := os.MkdirAll(filepath.Join(dir, CheckpointDir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, CheckpointDir, name, ckptState), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := listCheckpoints(dir); len(got) != 1 || got[0] != 5 {
		t.Errorf("with temporary folders about, the checkpoints are %v, want [5]", got)
	}
	done, err := TidyCheckpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := listing(); got != "step-00000005 step-00000009" || len(done) != 3 {
		t.Errorf("after TidyCheckpoints (%q) the folder holds %q, want step-00000005 and the restored step-00000009", done, got)
	}
}
