package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildGorun builds this command into a temporary folder, once per test,
// before any strategy file the test uses exists.
func buildGorun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds gorun; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build gorun with")
	}
	bin := filepath.Join(t.TempDir(), "gorun")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// gorunResult is what one run of the binary printed and its exit status.
type gorunResult struct {
	code           int
	stdout, stderr string
}

// runGorun runs bin with args in dir, GORUN_PATH set to path.
func runGorun(t *testing.T, bin, dir, path string, args ...string) gorunResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORUN_PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GORUN_PATH="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := gorunResult{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gorun %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("gorun %s: still running after 2 minutes", strings.Join(args, " "))
	}
	return res
}

func writeFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// trainSrc is a small training script that loads STRATEGY from
// my_partition.star.
const trainSrc = `load("my_partition.star", "STRATEGY")

train(
    model = nn.sequential(nn.flatten(), nn.linear(16, 4, name = "fc")),
    loss = "cross_entropy",
    data = data.synthetic(size = 64, shape = (1, 4, 4), classes = 4),
    optimizer = optim.sgd(lr = 0.1),
    partition = STRATEGY,
    batch_size = 8,
)
`

// strategies are new partition strategies, written after gorun is built.
const strategies = `
def reversed_strided(ctx):
    """Rank r takes every world-th sample from the end, going backwards."""
    last = ctx.size - 1
    return [list(range(last - r, -1, -ctx.world)) for r in range(ctx.world)]

def overlapping(ctx):
    """Wrong: sample 2 goes to both ranks."""
    return [[0, 1, 2], [2, 3]] + [[] for _ in range(ctx.world - 2)]

def spin(ctx):
    """Wrong: never returns."""
    while True:
        pass
`

// TestNewStrategyFromGorunPath checks that a gorun built before a
// strategy file existed loads it through GORUN_PATH, trains with it on two
// devices, and reports a strategy's wrong shards and endless loops.
func TestNewStrategyFromGorunPath(t *testing.T) {
	bin := buildGorun(t)
	lib, work := t.TempDir(), t.TempDir()
	lib, _ = filepath.EvalSymlinks(lib)
	writeFile(t, filepath.Join(lib, "my_partition.star"), strategies)
	script := func(strategy string) string {
		name := strategy + ".star"
		writeFile(t, filepath.Join(work, name), strings.ReplaceAll(trainSrc, "STRATEGY", strategy))
		return name
	}

	t.Run("trains", func(t *testing.T) {
		s := script("reversed_strided")
		res := runGorun(t, bin, work, lib, s, "--devices", "2", "--set", "max_steps=5", "-q")
		if res.code != 0 {
			t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		res = runGorun(t, bin, work, lib, "plan", s, "--devices", "2")
		want := "load my_partition.star -> " + filepath.Join(lib, "my_partition.star")
		if res.code != 0 || !strings.Contains(res.stdout, want) {
			t.Fatalf("plan (exit %d) does not say %q:\n%s%s", res.code, want, res.stdout, res.stderr)
		}
		if !strings.Contains(res.stdout, "partition reversed_strided (") {
			t.Errorf("plan does not name the strategy:\n%s", res.stdout)
		}
	})

	t.Run("duplicate index", func(t *testing.T) {
		res := runGorun(t, bin, work, lib, script("overlapping"), "--devices", "2", "--set", "max_steps=5", "-q")
		if res.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
		}
		for _, want := range []string{"partition overlapping (", "my_partition.star", "rank 1", "index 2 is also in rank 0's shard"} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, res.stderr)
			}
		}
	})

	t.Run("endless loop", func(t *testing.T) {
		// The default limit of 100 million Starlark steps ends it.
		res := runGorun(t, bin, work, lib, script("spin"), "--devices", "2", "--set", "max_steps=5", "-q")
		if res.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
		}
		for _, want := range []string{"too many steps", "my_partition.star", "in spin"} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, res.stderr)
			}
		}
	})
}
