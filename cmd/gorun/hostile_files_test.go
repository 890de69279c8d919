package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests for issue 29 (hostile input, round two) on files a user names.

// mkfifo makes a named pipe, which no one writes, at path.
func mkfifo(t *testing.T, path string) string {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return path
}

// TestNonRegularFiles: a FIFO with no writer given as the script, a
// load()ed file, --cluster, --init, a --resume checkpoint, data.text,
// data.tensors (.npy and .safetensors), data.mnist(dir = ...), a run
// folder's metrics (gorun plot) or run.json (gorun sample), and /dev/zero
// as data.text, are refused at once, naming the file and what it is,
// exit 1. Before, each blocked forever in open(2) (or, for /dev/zero, ate
// the machine's memory).
func TestNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := mkfifo(t, filepath.Join(dir, "pipe"))
	const fifoIs = " is a named pipe (FIFO), not a regular file"
	script := writeScript(t, small)
	withData := func(name, data string) string {
		p := filepath.Join(dir, name+".star")
		writeFile(t, p, strings.Replace(small, `data = data.synthetic(size = 300, shape = (1, 8, 8), classes = 3, noise = 0.5),`, "data = "+data+",", 1))
		return p
	}
	// A script that loads a FIFO.
	mkfifo(t, filepath.Join(dir, "lib.star"))
	loads := filepath.Join(dir, "loads.star")
	writeFile(t, loads, `load("lib.star", "x")`+"\n"+small)
	// A resumable run folder whose newest checkpoint is a FIFO.
	resume := filepath.Join(dir, "resume")
	if err := os.MkdirAll(filepath.Join(resume, "checkpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(resume, "checkpoints", "step-00000010.safetensors"))
	mkfifo(t, filepath.Join(resume, "checkpoints", "step-00000010.state.safetensors"))
	// Run folders whose metrics.jsonl and run.json are FIFOs.
	plotDir, sampleDir := filepath.Join(dir, "plot"), filepath.Join(dir, "sample")
	for _, d := range []string{plotDir, sampleDir, filepath.Join(dir, "mnist")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkfifo(t, filepath.Join(plotDir, "metrics.jsonl"))
	mkfifo(t, filepath.Join(sampleDir, "run.json"))
	mkfifo(t, filepath.Join(dir, "mnist", "train-images-idx3-ubyte"))
	npy := mkfifo(t, filepath.Join(dir, "x.npy"))
	mnist := filepath.Join(dir, "mnist.star")
	writeFile(t, mnist, `train(model = nn.sequential(nn.flatten(), nn.linear(784, 10)), loss = "cross_entropy",
    data = data.mnist(dir = "mnist"), optimizer = optim.sgd(lr = 0.1), batch_size = 10)`)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"script", []string{"plan", fifo}, "gorun: reading script: " + fifo + fifoIs},
		{"load", []string{"plan", loads}, `load("lib.star"): ` + filepath.Join(dir, "lib.star") + fifoIs},
		{"cluster", []string{"plan", script, "--cluster", fifo}, "gorun: cluster file: " + fifo + fifoIs},
		{"init", []string{script, "--init", fifo, "-q"}, fifo + fifoIs},
		{"resume", []string{script, "--resume", resume, "-q"}, filepath.Join(resume, "checkpoints", "step-00000010.safetensors") + fifoIs},
		{"data.text", []string{"plan", withData("text", `data.text("`+fifo+`", seq_len = 4)`)}, "data.text: " + fifo + fifoIs},
		{"data.text /dev/zero", []string{"plan", withData("zero", `data.text("/dev/zero", seq_len = 4)`)}, "data.text: /dev/zero is a character device, not a regular file"},
		{"npy", []string{"plan", withData("npy", `data.tensors(x = "`+npy+`", y = "`+npy+`")`)}, "data.tensors: datasets: x.npy+x.npy: " + npy + fifoIs},
		{"safetensors", []string{"plan", withData("st", `data.tensors("`+fifo+`")`)}, "safetensors: " + fifo + fifoIs},
		{"mnist dir", []string{mnist, "-q"}, "data.mnist: datasets: mnist/train: " + filepath.Join(dir, "mnist", "train-images-idx3-ubyte") + fifoIs},
		{"plot", []string{"plot", plotDir}, "gorun: plot: " + filepath.Join(plotDir, "metrics.jsonl") + fifoIs},
		{"sample", []string{"sample", sampleDir, "--prompt", "a"}, filepath.Join(sampleDir, "run.json") + fifoIs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, _, stderr := gorunWithin(t, 20*time.Second, c.args...)
			if code != 1 || !strings.Contains(stderr, c.want) {
				t.Errorf("gorun %s: exit %d, stderr:\n%s\nwant exit 1 and %q", strings.Join(c.args, " "), code, stderr, c.want)
			}
			if strings.Contains(stderr, "goroutine ") {
				t.Errorf("a Go stack:\n%s", stderr)
			}
			t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
		})
	}
}

// charsScript trains a one-layer model on the characters of train.txt (5
// of them: " abcd") and evaluates it on the test half of EVAL.
const charsScript = `
x = data.input()
h = nn.embedding(5, 8, name = "wte")(x)
train(
    model = nn.linear(8, 5, name = "head")(h),
    loss = "cross_entropy",
    data = data.text("train.txt", seq_len = 4, vocab = "chars"),
    eval = data.text("EVAL", seq_len = 4, vocab = "chars", split = "test", test_fraction = 0.5),
    optimizer = optim.sgd(lr = 0.5),
    batch_size = 4,
    epochs = 1,
    seed = 1,
)
`

// TestEvalTextVocab: the vocabulary is part of the model. An eval text with
// characters the training text lacks is refused before step 1, naming
// them (before, `gorun plan` accepted it and training reported a
// meaningless test accuracy); one whose characters are a few of the
// training text's is read with the model's ids, so that its test loss is
// that of the same windows in a file holding every character (before, its
// own vocabulary gave its characters other ids, or other classes). A
// gorun sample prompt outside the vocabulary names all its characters
// (before, only the first).
func TestEvalTextVocab(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "train.txt"), strings.Repeat("abcd ", 40))
	// Test halves alike; the first file lacks " " altogether.
	test := strings.Repeat("dcba", 10) + "d"
	writeFile(t, filepath.Join(dir, "few.txt"), strings.Repeat("abcd", 10)+test)
	writeFile(t, filepath.Join(dir, "all.txt"), strings.Repeat("ab d", 10)+test)
	writeFile(t, filepath.Join(dir, "other.txt"), strings.Repeat("abcd ", 8)+strings.Repeat("abce\n", 8)+"a")
	script := func(eval string) string {
		p := filepath.Join(dir, eval+".star")
		writeFile(t, p, strings.Replace(charsScript, "EVAL", eval, 1))
		return p
	}

	code, _, stderr := gorun(t, "plan", script("other.txt"))
	want := `data.text: datasets: ` + filepath.Join(dir, "other.txt") + `: the test split has 2 characters (16 in all) outside the model's vocabulary, the 5 characters of its training text: '\n' (8 times), 'e' (8 times)`
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("eval text with other characters: exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr, want)
	}

	var losses []float64
	for _, eval := range []string{"few.txt", "all.txt"} {
		out := filepath.Join(dir, "out-"+eval)
		code, stdout, stderr := gorun(t, script(eval), "-q", "--out", out)
		if code != 0 {
			t.Fatalf("eval %s: exit %d\n%s%s", eval, code, stdout, stderr)
		}
		_, loss := lastEvalLoss(t, out)
		losses = append(losses, loss)
	}
	if losses[0] != losses[1] {
		t.Errorf("test loss %v on few.txt, %v on all.txt: the same windows, want the same loss", losses[0], losses[1])
	}

	// A prompt is held to the same vocabulary.
	code, _, stderr = gorun(t, "sample", filepath.Join(dir, "out-all.txt"), "--prompt", "a€bz€", "--tokens", "2")
	want = `--prompt: 2 characters (3 in all) outside the model's vocabulary, the 5 characters of its training text: '€' (2 times), 'z' (1 time)`
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("sample: exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr, want)
	}
}

// TestSignalDuringOneOperation: SIGTERM while the script is inside one
// Starlark operation that runs for seconds (int() of a 3,000,000-digit
// string, quadratic in Go's math/big) ends gorun a quarter of a second
// later (more on a busy machine), with status 143 and a line naming the
// script, instead of once the operation ends (12 s for a doubling of a
// 4 GiB list).
func TestSignalDuringOneOperation(t *testing.T) {
	bin := buildGorun(t)
	script := writeScript(t, "print(\"started\")\nx = int(\"9\" * 3000000)\n"+small)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "plan", script)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	out := bufio.NewReader(pr)
	if line, err := out.ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	time.Sleep(200 * time.Millisecond) // inside int()
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	took := time.Since(sent)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	want := "gorun: " + script + ": stopped: interrupted by SIGTERM, and one operation under way did not end within 250ms\n"
	if code != 143 || !strings.HasSuffix(string(rest), want) {
		t.Errorf("exit %d, output:\n%s\nwant exit 143 and, last, %q", code, rest, want)
	}
	if took > 3*time.Second {
		t.Errorf("gorun took %v to stop after SIGTERM", took)
	}
	t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
}
