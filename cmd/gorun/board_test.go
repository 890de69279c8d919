package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var boardURLRE = regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)

// boardRuns is two run folders: one with a step line, one not made yet.
func boardRuns(t *testing.T) (a, b string) {
	t.Helper()
	root := t.TempDir()
	a, b = filepath.Join(root, "a"), filepath.Join(root, "b")
	if err := os.Mkdir(a, 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"kind":"step","step":1,"epoch":1,"loss":2.3,"lr":0.01,"samples_per_s":1000,"comm_seconds":0,"time":0.1}` + "\n"
	if err := os.WriteFile(filepath.Join(a, "metrics.jsonl"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestBoardCommandServesAndStops(t *testing.T) {
	a, b := boardRuns(t)
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serveBoard(ctx, []string{"--addr", "127.0.0.1:0", "--poll", "50ms", a, b}, &stdout, &stderr)
	}()
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == ""; {
		select {
		case err := <-done:
			t.Fatalf("gorun board ended: %v\n%s%s", err, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		url = boardURLRE.FindString(stdout.String())
		if time.Now().After(deadline) {
			t.Fatalf("gorun board printed no address in 10 s:\n%s", stdout.String())
		}
	}
	if !strings.Contains(stdout.String(), "gorun board: a, b at "+url) {
		t.Errorf("stdout: %q", stdout.String())
	}
	if want := b + " does not exist yet"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Get(url + "api/runs")
	if err != nil {
		t.Fatal(err)
	}
	var runs []struct{ Name, Dir string }
	err = json.NewDecoder(res.Body).Decode(&runs)
	res.Body.Close()
	if err != nil || len(runs) != 2 || runs[0].Name != "a" || runs[1].Dir != b {
		t.Fatalf("/api/runs: %v %+v", err, runs)
	}
	// An open event stream does not hold the shutdown up.
	res, err = client.Get(url + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "retry:") {
		t.Fatalf("the event stream opens with %q (%v)", line, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gorun board after its context ended: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("gorun board did not stop within 8 s")
	}
	if !strings.HasSuffix(stdout.String(), "gorun board: stopped\n") {
		t.Errorf("stdout: %q", stdout.String())
	}
}

func TestBoardCommandErrors(t *testing.T) {
	a, _ := boardRuns(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	missing := filepath.Join(t.TempDir(), "no", "such", "run")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"board"}, 2, "board needs at least one run folder"},
		{[]string{"board", missing}, 1, "run folder " + missing + ": no such folder, nor its parent " + filepath.Dir(missing)},
		{[]string{"board", filepath.Join(a, "metrics.jsonl"), a}, 1, "is given twice"},
		{[]string{"board", "--addr", busy.Addr().String(), a}, 1, "--addr " + busy.Addr().String() + " is in use (another gorun board, or TensorBoard?)"},
		{[]string{"board", "--addr", "6006", a}, 2, "--addr 6006: want HOST:PORT"},
		{[]string{"board", "--poll", "1ns", a}, 2, "--poll 1ns: want between 10ms and 1m"},
		{[]string{"board", "--port", "1", a}, 2, "flag provided but not defined: -port"},
	} {
		code, _, stderr := gorun(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("gorun %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(c.args, " "), code, stderr, c.code, c.want)
		}
	}
	if code, stdout, _ := gorun(t, "help"); code != 0 || !strings.Contains(stdout, "gorun board [--addr HOST:PORT] RUN_DIR...") {
		t.Errorf("gorun help: exit %d, lacks gorun board:\n%s", code, stdout)
	}
}

// TestBoardCommandSignals: the binary stops gracefully on SIGINT and on
// SIGTERM, an event stream open, with exit status 0.
func TestBoardCommandSignals(t *testing.T) {
	bin := buildGorun(t)
	a, _ := boardRuns(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, "board", "--addr", "127.0.0.1:0", a)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		url := boardURLRE.FindString(line)
		if url == "" {
			cmd.Process.Kill()
			cmd.Wait()
			cancel()
			t.Fatalf("gorun board printed %q, no address; stderr %s", line, stderr.String())
		}
		res, err := http.Get(url + "api/events")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cmd.Process.Signal(sig)
		rest, _ := io.ReadAll(r)
		err = cmd.Wait()
		res.Body.Close()
		cancel()
		if err != nil || !strings.Contains(string(rest), "gorun board: stopped") {
			t.Errorf("after %v: %v, stdout %q, stderr %q", sig, err, rest, stderr.String())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stopping on %v took %v", sig, d)
		}
	}
}
