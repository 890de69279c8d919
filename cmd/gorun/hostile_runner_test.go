package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorun/datasets"
)

// Tests for issue 29 (hostile input, round two) on the run folder, sample
// and the ranks of an MPI run.

// TestMPIFlagMismatch: mpirun giving --init to one rank only (an MPMD
// command line) stops every rank at start-up, naming the rank and the
// flag, instead of training from rank 0's weights as if --init had not
// been given.
func TestMPIFlagMismatch(t *testing.T) {
	bin := mpiGorun(t)
	script := writeScript(t, small)
	init := filepath.Join(t.TempDir(), "init")
	if code, stdout, stderr := gorun(t, script, "--set", "max_steps=2", "--out", init, "-q"); code != 0 {
		t.Fatalf("the run that makes the weights: exit %d\n%s%s", code, stdout, stderr)
	}
	weights := filepath.Join(init, "model.safetensors")
	cluster := mpiCluster(t, 1, "20s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", "--oversubscribe", "--allow-run-as-root",
		"-np", "1", bin, "--cluster", cluster, script, ":",
		"-np", "1", bin, "--cluster", cluster, "--init", weights, script)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ranks with different --init trained:\n%s", out)
	}
	t.Logf("%s", firstLines(string(out), 6))
	want := "rank 1 was started with --init " + weights + ", unlike rank 0: every process of the run must be given the same --init"
	if !bytes.Contains(out, []byte(want)) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(string(out), "done: ") {
		t.Errorf("a rank trained:\n%s", out)
	}
}

// tokenScript is a tiny sequence model over the bytes of text.txt that
// load()s part of its model from blocks.star.
const tokenScript = `load("blocks.star", "mix")
T = 8
x = data.input()
h = nn.embedding(256, 16, name = "wte")(x) + nn.embedding(T, 16, name = "wpe")(data.positions())
logits = nn.linear(16, 256, name = "head")(mix(h))
train(
    model = logits,
    loss = "cross_entropy",
    data = data.text("text.txt", seq_len = T),
    optimizer = optim.adam(lr = 0.01),
    batch_size = 16,
    epochs = 1,
    seed = 1,
)
`

const blocksTanh = "def mix(h):\n    return nn.tanh(h)\n"

// tokenRun writes tokenScript, blocks.star and text.txt into a folder and
// trains them into a run folder; it returns the script and the run folder.
func tokenRun(t *testing.T, sets ...string) (script, run string) {
	t.Helper()
	dir := t.TempDir()
	script = filepath.Join(dir, "train.star")
	writeFile(t, script, tokenScript)
	writeFile(t, filepath.Join(dir, "blocks.star"), blocksTanh)
	var text strings.Builder
	for i := 0; text.Len() < 3000; i++ {
		fmt.Fprintf(&text, "the quick brown fox %d jumps over the lazy dog; ", i%7)
	}
	writeFile(t, filepath.Join(dir, "text.txt"), text.String())
	run = filepath.Join(t.TempDir(), "run")
	args := []string{script, "--out", run, "-q"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	if code, stdout, stderr := gorun(t, args...); code != 0 {
		t.Fatalf("training the token model: exit %d\n%s%s", code, stdout, stderr)
	}
	return script, run
}

// TestSampleUsesTheScriptAsItRan: the run folder keeps the script and the
// files it loaded (script/), and gorun sample rebuilds the model from that
// copy: editing a loaded file after the run changes nothing it prints
// (it notes the change). A resume with an edited script keeps the earlier
// copy as script.1. A run folder without a copy (an earlier gorun's)
// refuses to sample once the script no longer builds the checkpoint's
// model, naming what changed, and samples when it does.
func TestSampleUsesTheScriptAsItRan(t *testing.T) {
	script, run := tokenRun(t, "max_steps=12")
	blocks := filepath.Join(filepath.Dir(script), "blocks.star")
	for name, want := range map[string]string{"train.star": tokenScript, "blocks.star": blocksTanh} {
		if b, err := os.ReadFile(filepath.Join(run, "script", name)); err != nil || string(b) != want {
			t.Errorf("the run folder's copy of %s: %v, %q", name, err, b)
		}
	}
	sample := func() (int, string, string) {
		return gorun(t, "sample", run, "--prompt", "the ", "--tokens", "40", "--temperature", "0")
	}
	code, want, stderr := sample()
	if code != 0 || !strings.HasPrefix(want, "the ") || len(want) < 40 {
		t.Fatalf("sample: exit %d, %q\n%s", code, want, stderr)
	}
	writeFile(t, blocks, "def mix(h):\n    return nn.sigmoid(h)\n")
	code, got, stderr := sample()
	if code != 0 || got != want {
		t.Errorf("after blocks.star changed, sample printed %q (exit %d), want what the trained model printed: %q\n%s", got, code, want, stderr)
	}
	if !strings.Contains(stderr, "sampling with the script as the run trained it") || !strings.Contains(stderr, blocks) {
		t.Errorf("sample does not note that %s changed since the run:\n%s", blocks, stderr)
	}

	// A FIFO where a loaded file was is noted, never opened (it would
	// wait for a writer for good).
	if err := os.Remove(blocks); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(blocks, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		code, got, stderr := sample()
		done <- fmt.Sprintf("exit %d: %q\n%s", code, got, stderr)
	}()
	select {
	case res := <-done:
		if !strings.HasPrefix(res, fmt.Sprintf("exit 0: %q", want)) || !strings.Contains(res, blocks+" (not a regular file)") {
			t.Errorf("with a FIFO in place of blocks.star: %s", res)
		}
	case <-time.After(time.Minute):
		t.Fatal("sample waits on a FIFO in place of a loaded file")
	}
	if err := os.Remove(blocks); err != nil {
		t.Fatal(err)
	}

	// A resume trains with the script it is given; the copy follows it,
	// the earlier one kept.
	writeFile(t, blocks, blocksTanh)
	writeFile(t, script, tokenScript+"# tuned\n")
	code, stdout, stderr := gorun(t, script, "--resume", run, "--set", "max_steps=14", "-q")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(run, "script.1", "train.star")); string(b) != tokenScript {
		t.Errorf("script.1/train.star holds %q, want the script the run began with", b)
	}
	if b, _ := os.ReadFile(filepath.Join(run, "script", "train.star")); string(b) != tokenScript+"# tuned\n" {
		t.Errorf("script/train.star holds %q, want the resumed run's script", b)
	}
	if !strings.Contains(stderr, "the script differs from the copy") || !strings.Contains(stderr, script) {
		t.Errorf("the resume does not say its script differs from the copy:\n%s", stderr)
	}

	// An earlier gorun's run folder: no copy, run.json without "copy".
	if err := os.RemoveAll(filepath.Join(run, "script")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(run, "run.json"), fmt.Sprintf("{\"script\": %q, \"sets\": [\"max_steps=14\"]}\n", script))
	writeFile(t, blocks, "def mix(h):\n    return nn.sigmoid(h)\n")
	code, got, stderr = sample()
	for _, want := range []string{script + " has changed since the run: it no longer builds the model of " + filepath.Join(run, "checkpoints", "step-00000014"), "forward step", "sigmoid", "restore the script"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("an earlier gorun's run folder, the script changed: exit %d, stdout %q, stderr lacks %q:\n%s", code, got, want, stderr)
		}
	}
	writeFile(t, blocks, blocksTanh)
	if code, _, stderr := sample(); code != 0 || strings.Contains(stderr, "changed") {
		t.Errorf("an earlier gorun's run folder, the script as it was: exit %d\n%s", code, stderr)
	}
}

// TestSampleFlags: --temperature must be finite and not negative (0 is
// greedy), --tokens at most runner.MaxSampleTokens: usage errors (exit 2)
// naming the flag, before any model is built.
func TestSampleFlags(t *testing.T) {
	run := t.TempDir()
	for _, c := range []struct{ args, want string }{
		{"--temperature NaN", "--temperature NaN: want a finite number, 0 (greedy: the likeliest token) or more"},
		{"--temperature +Inf", "--temperature +Inf: want a finite number"},
		{"--temperature -1", "--temperature -1: want a finite number"},
		{"--tokens 1000000000", "--tokens 1000000000: want 1 to 1000000"},
		{"--tokens 0", "--tokens 0: want 1 to 1000000"},
	} {
		args := append([]string{"sample", run, "--prompt", "a"}, strings.Fields(c.args)...)
		code, stdout, stderr := gorun(t, args...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("gorun sample %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// TestSampleStreamsAndStops: gorun sample prints each token as it is made
// (text arrives long before a million tokens are done), and SIGINT or
// SIGTERM stops it promptly with 130 or 143, what it printed staying
// printed. Greedy sampling (--temperature 0) is the same for any seed.
func TestSampleStreamsAndStops(t *testing.T) {
	bin := buildGorun(t)
	_, run := tokenRun(t, "max_steps=12")
	_, a, _ := gorun(t, "sample", run, "--prompt", "the ", "--tokens", "30", "--temperature", "0", "--seed", "1")
	_, b, _ := gorun(t, "sample", run, "--prompt", "the ", "--tokens", "30", "--temperature", "0", "--seed", "2")
	if a != b || len(a) < 30 {
		t.Errorf("greedy sampling differs with the seed: %q, %q", a, b)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		name string
	}{{syscall.SIGINT, 130, "SIGINT"}, {syscall.SIGTERM, 143, "SIGTERM"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, "sample", run, "--prompt", "the ", "--tokens", "1000000")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		pr, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var printed []byte
		buf := make([]byte, 4096)
		for len(printed) < 100 {
			n, err := pr.Read(buf)
			printed = append(printed, buf[:n]...)
			if err != nil {
				t.Fatalf("stdout ended after %q: %v\n%s", printed, err, stderr.String())
			}
		}
		sent := time.Now()
		if err := cmd.Process.Signal(c.sig); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(pr)
		err = cmd.Wait()
		took := time.Since(sent)
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		all := string(printed) + string(rest)
		if code != c.code || !strings.Contains(stderr.String(), "interrupted by "+c.name+" after ") || !strings.HasPrefix(all, "the ") {
			t.Errorf("%s: exit %d (want %d), %d bytes printed, stderr:\n%s", c.name, code, c.code, len(all), stderr.String())
		}
		if took > 5*time.Second {
			t.Errorf("%s: sample took %v to stop", c.name, took)
		}
	}
}

// TestStreamDecoder: bytes written token by token come out as the whole
// text decodes at once (Vocab.Decode): UTF-8 characters split across
// tokens whole, each run of invalid bytes one U+FFFD.
func TestStreamDecoder(t *testing.T) {
	vocab, err := datasets.ParseVocab("bytes")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "é", "€", "𝄞", "\xff", "\xe2\x82", "\xed\xa0\x80", "\uFFFD", " "}
	for i := 0; i < 500; i++ {
		var text []byte
		for j := rng.IntN(12); j >= 0; j-- {
			text = append(text, pieces[rng.IntN(len(pieces))]...)
		}
		var ids []int32
		var got bytes.Buffer
		dec := streamDecoder{vocab: vocab, w: &got}
		for _, c := range text {
			ids = append(ids, int32(c))
			if err := dec.write(int32(c)); err != nil {
				t.Fatal(err)
			}
		}
		if err := dec.end(); err != nil {
			t.Fatal(err)
		}
		if want := vocab.Decode(ids) + "\n"; got.String() != want {
			t.Fatalf("%q streamed as %q, decoded whole as %q", text, got.String(), want)
		}
	}
}

// TestRunFolderTidiesInterruptedWrites: what an interrupted checkpoint or
// script copy leaves (temporary folders; a checkpoint moved aside whose
// replacement never arrived) is tidied when a run takes the folder, and
// --overwrite removes the copies of the old run's script.
func TestRunFolderTidiesInterruptedWrites(t *testing.T) {
	script := writeScript(t, small)
	out := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := gorun(t, script, "--set", "epochs=2", "--set", "max_steps=15", "--out", out, "-q"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, stderr)
	}
	ckpts := filepath.Join(out, "checkpoints")
	// The checkpoint of step 15 moved aside for a replacement that a crash
	// cut short, and that replacement's temporary folder.
	if err := os.Rename(filepath.Join(ckpts, "step-00000015"), filepath.Join(ckpts, ".step-00000015.old-7")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(ckpts, ".step-00000015.tmp-8", "state.safetensors"), filepath.Join(out, ".script.tmp-9", "train.star")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, "partial")
	}
	code, _, stderr := gorun(t, script, "--set", "epochs=2", "--resume", out, "-q")
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"restored " + filepath.Join(ckpts, "step-00000015"), "removed " + filepath.Join(ckpts, ".step-00000015.tmp-8"), filepath.Join(out, ".script.tmp-9")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the resume's stderr lacks %q:\n%s", want, stderr)
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	// Resumed at step 15, the run trained steps 16 to 20: 150 samples.
	if !strings.Contains(string(b), `"samples":150,"steps":20`) {
		t.Errorf("the resume did not go on from the restored checkpoint of step 15:\n%s", b)
	}
	entries, _ := os.ReadDir(ckpts)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("%s is still in checkpoints/", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(out, ".script.tmp-9")); !os.IsNotExist(err) {
		t.Errorf("the script copy's temporary folder is still there: %v", err)
	}
	if err := os.Mkdir(filepath.Join(out, "script.1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gorun(t, script, "--set", "epochs=1", "--out", out, "--overwrite", "-q"); code != 0 {
		t.Fatalf("--overwrite: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "script.1")); !os.IsNotExist(err) {
		t.Errorf("--overwrite left the old run's script.1: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "script", "train.star")); err != nil || string(b) != small {
		t.Errorf("after --overwrite, script/train.star: %v, %q", err, b)
	}
}
