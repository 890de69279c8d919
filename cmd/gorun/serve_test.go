package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"gorun/model"
)

var serveURLRE = regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/`)

// trainSmall trains the small script into a run folder.
func trainSmall(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	if code, stdout, stderr := gorun(t, writeScript(t, small), "--set", "epochs=1", "--out", out, "-q"); code != 0 {
		t.Fatalf("training: exit %d\n%s\n%s", code, stdout, stderr)
	}
	return out
}

// sampleJSON is one sample of the small model's [1 8 8] as JSON, and
// its values.
func sampleJSON() (string, []float32) {
	v := make([]float32, 64)
	s := make([]string, 64)
	for i := range v {
		v[i] = float32(math.Sin(float64(i))) / 3
		s[i] = strconv.FormatFloat(float64(v[i]), 'g', -1, 32)
	}
	return "[" + strings.Join(s, ",") + "]", v
}

// outputsOf are the "outputs" of an answer's first prediction.
func outputsOf(t *testing.T, b []byte) []float32 {
	t.Helper()
	var raw struct {
		Predictions []struct{ Outputs []json.Number }
	}
	if err := json.Unmarshal(b, &raw); err != nil || len(raw.Predictions) != 1 {
		t.Fatalf("answer %s: %v", b, err)
	}
	var out []float32
	for _, n := range raw.Predictions[0].Outputs {
		f, err := strconv.ParseFloat(string(n), 32)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, float32(f))
	}
	return out
}

// TestServeCommand: gorun serve prints its address and the model, answers
// /healthz and /v1/predict (Predict's outputs, bit for bit) and stops
// when its context ends.
func TestServeCommand(t *testing.T) {
	run := trainSmall(t)
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- serveModel(ctx, []string{run, "--addr", "127.0.0.1:0", "--max-batch", "8", "--timeout", "5s"}, &stdout, &stderr)
	}()
	var url string
	for deadline := time.Now().Add(20 * time.Second); url == ""; {
		select {
		case err := <-done:
			t.Fatalf("gorun serve ended: %v\n%s%s", err, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		url = serveURLRE.FindString(stdout.String())
		if time.Now().After(deadline) {
			t.Fatalf("gorun serve printed no address in 20 s:\n%s", stdout.String())
		}
	}
	want := "gorun serve: " + run + ": a classifier of 3 classes, samples [1 8 8]; batches of up to 8\n"
	if !strings.HasPrefix(stdout.String(), want) || !strings.Contains(stdout.String(), "(POST /v1/predict, GET /healthz, GET /metrics; Ctrl-C stops)") {
		t.Errorf("stdout %q; want it to start %q", stdout.String(), want)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Get(url + "healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"input_shape":[1,8,8]`) || !strings.Contains(string(b), `"kind":"classifier"`) {
		t.Errorf("/healthz: %d %s", res.StatusCode, b)
	}
	body, x := sampleJSON()
	res, err = client.Post(url+"v1/predict", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("/v1/predict: %d %s", res.StatusCode, b)
	}
	got := outputsOf(t, b)
	m, err := model.Load(run)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Predict(ctx, tensor.New(tensor.WithShape(1, 1, 8, 8), tensor.WithBacking(x)))
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range out.Data().([]float32) {
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("outputs %v; Predict's %v", got, out.Data())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gorun serve after its context ended: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gorun serve did not stop within 20 s")
	}
	if !strings.HasSuffix(stdout.String(), "gorun serve: stopping: answering the 0 request(s) under way\ngorun serve: stopped\n") {
		t.Errorf("stdout: %q", stdout.String())
	}
}

func TestServeCommandErrors(t *testing.T) {
	run := trainSmall(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	missing := filepath.Join(t.TempDir(), "no-run")
	notRun := t.TempDir()
	file := filepath.Join(notRun, "f.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	free := "127.0.0.1:0"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve"}, 2, "serve needs exactly one RUN_DIR (the --out of a run), got 0 arguments"},
		{[]string{"serve", run, run}, 2, "got 2 arguments"},
		{[]string{"serve", "--addr", free, missing}, 1, missing + ": no such run folder"},
		{[]string{"serve", "--addr", free, file}, 1, file + " is a file, not a run folder"},
		{[]string{"serve", "--addr", free, notRun}, 1, notRun + " is not a run folder: it has no run.json"},
		{[]string{"serve", "--addr", busy.Addr().String(), run}, 1, "--addr " + busy.Addr().String() + " is in use (another gorun serve?): stop it, or choose another port"},
		{[]string{"serve", "--addr", "8080", run}, 2, "--addr 8080: want HOST:PORT"},
		{[]string{"serve", "--max-body", "ten", run}, 2, "--max-body ten: want a size such as 10MiB or a number of bytes"},
		{[]string{"serve", "--max-body", "0", run}, 2, "--max-body 0: want a size"},
		{[]string{"serve", "--max-batch", "0", run}, 2, "--max-batch 0: want at least 1"},
		{[]string{"serve", "--timeout", "0s", run}, 2, "--timeout 0s: want more than 0"},
		{[]string{"serve", "--max-queue", "-1", run}, 2, "--max-queue -1: want 0 or more"},
		{[]string{"serve", "--addr", free, "--weights", file, run}, 1, "f.txt"},
		{[]string{"serve", "--port", "1", run}, 2, "flag provided but not defined: -port"},
	} {
		code, _, stderr := gorunWithin(t, 30*time.Second, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("gorun %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(c.args, " "), code, stderr, c.code, c.want)
		}
	}
	if code, stdout, _ := gorun(t, "help"); code != 0 || !strings.Contains(stdout, "gorun serve [--addr HOST:PORT] RUN_DIR") {
		t.Errorf("gorun help: exit %d, lacks gorun serve:\n%s", code, stdout)
	}
	if n, err := parseSize("10MiB"); n != 10<<20 || err != nil {
		t.Errorf("parseSize(10MiB) = %d, %v", n, err)
	}
	if n, err := parseSize("512 KB"); n != 512000 || err != nil {
		t.Errorf("parseSize(512 KB) = %d, %v", n, err)
	}
}

// TestServeCommandSIGTERM: the binary, sent SIGTERM while a request is
// under way (its body half sent), answers that request in full and exits
// with status 0.
func TestServeCommandSIGTERM(t *testing.T) {
	bin := buildGorun(t)
	run := trainSmall(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", run)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(out)
	var addr string
	for addr == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("gorun serve printed no address (%v); stderr %s", err, stderr.String())
		}
		if m := serveURLRE.FindStringSubmatch(line); m != nil {
			addr = m[1]
		}
	}
	body, _ := sampleJSON()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body[:len(body)/2])
	// Wait until the server counts the request under way.
	client := &http.Client{Timeout: 5 * time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(b), "\ngorun_serve_in_flight_requests 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request is not under way after 20 s:\n%s", b)
		}
	}
	client.CloseIdleConnections()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	line, _ := r.ReadString('\n')
	if line != "gorun serve: stopping: answering the 1 request(s) under way\n" {
		t.Errorf("after SIGTERM gorun serve printed %q", line)
	}
	io.WriteString(conn, body[len(body)/2:])
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request under way got no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || len(outputsOf(t, b)) != 3 {
		t.Errorf("the request under way: %d %s", res.StatusCode, b)
	}
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Errorf("gorun serve after SIGTERM: %v; stderr %s", err, stderr.String())
	}
	if string(rest) != "gorun serve: stopped\n" {
		t.Errorf("stdout after the answer: %q", rest)
	}
}
