package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gorunWithin is gorun, failing the test when the command has not
// returned after d: a hang fails instead of stalling the suite.
func gorunWithin(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		c, o, e := gorun(t, args...)
		done <- result{c, o, e}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(d):
		t.Fatalf("gorun %s: still running after %v", strings.Join(args, " "), d)
		return 0, "", ""
	}
}

// TestPlotHostileValues: `gorun plot` on losses of ±1e308 (it used to
// spin forever), on null losses (said on stderr) and on an empty metrics
// file (refused by name), each in bounded time.
func TestPlotHostileValues(t *testing.T) {
	for _, tc := range []struct {
		name, text   string
		code         int
		stdout, note string
	}{
		{"huge", `{"kind":"step","step":1,"loss":1e308}` + "\n" + `{"kind":"step","step":2,"loss":-1e308}` + "\n", 0, "loss_steps.png", ""},
		{"nulls", `{"kind":"step","step":1,"loss":2}` + "\n" + `{"kind":"step","step":2,"loss":null}` + "\n" + `{"kind":"step","step":3,"loss":1}` + "\n",
			0, "loss_steps.png", `gorun: plot: run "nulls" (`},
		{"empty", "", 1, "", `run "empty" (`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := gorunWithin(t, 30*time.Second, "plot", dir)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.note) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, %q on stdout and %q on stderr", code, stdout, stderr, tc.code, tc.stdout, tc.note)
			}
			if strings.Contains(stderr, "goroutine") {
				t.Errorf("a Go stack on stderr: %s", stderr)
			}
		})
	}
}
