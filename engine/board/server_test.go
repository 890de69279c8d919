package board

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// stepLine is a metrics.jsonl step line as engine/runner writes it.
func stepLine(step int) string {
	return fmt.Sprintf(`{"kind":"step","step":%d,"epoch":1,"loss":%g,"lr":0.01,"samples_per_s":%d,"comm_seconds":0.0001,"time":%g}`+"\n",
		step, 2.3/float64(step), 1000+step, 0.01*float64(step))
}

// makeRun writes a run folder as gorun leaves it: metrics.jsonl with
// steps step lines, run.json, and the script copy with its manifest.
func makeRun(t *testing.T, dir string, steps int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "script"), 0o755); err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	for s := 1; s <= steps; s++ {
		m.WriteString(stepLine(s))
	}
	m.WriteString(`{"kind":"epoch","epoch":1,"step":` + fmt.Sprint(steps) + `,"train_loss":0.9,"samples":300,"seconds":1.5,"train_seconds":1.2,"skipped_steps":0}` + "\n")
	m.WriteString(`{"kind":"eval","epoch":1,"step":` + fmt.Sprint(steps) + `,"accuracy":0.75,"loss":0.8,"samples":90}` + "\n")
	files := map[string]string{
		"metrics.jsonl":        m.String(),
		"run.json":             `{"script": "/home/u/train.star", "sets": ["epochs=2"], "copy": "script"}`,
		"script/manifest.json": `{"script": "/home/u/train.star", "files": [{"path": "/home/u/train.star", "copy": "train.star", "sha256": "00"}]}`,
		"script/train.star":    "train(epochs = 2)  # the script\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// get requests path of the board h and returns the response and its body.
func get(t *testing.T, h http.Handler, method, host, path string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:6006"+path, nil)
	if host != "" {
		req.Host = host
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func newTestBoard(t *testing.T) (*Board, string) {
	t.Helper()
	root := t.TempDir()
	makeRun(t, filepath.Join(root, "a"), 3)
	if err := os.Mkdir(filepath.Join(root, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	runs, _, err := Resolve([]string{filepath.Join(root, "a"), filepath.Join(root, "b")})
	if err != nil {
		t.Fatal(err)
	}
	return New(runs, Options{}), root
}

func TestBoardPage(t *testing.T) {
	b, _ := newTestBoard(t)
	for path, typ := range map[string]string{"/": "text/html", "/board.js": "text/javascript", "/board.css": "text/css", "/favicon.svg": "image/svg+xml"} {
		res, body := get(t, b, "GET", "", path)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), typ) || len(body) < 100 {
			t.Errorf("GET %s: %d %s, %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	res, body := get(t, b, "HEAD", "", "/board.js")
	if res.StatusCode != 200 || body != "" {
		t.Errorf("HEAD /board.js: %d, %d bytes", res.StatusCode, len(body))
	}
	for _, path := range []string{"/static/board.js", "/index.html", "/board.go", "/api", "/api/runs/0/metrics.jsonl"} {
		if res, _ := get(t, b, "GET", "", path); res.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, res.StatusCode)
		}
	}
}

// TestAssetsSelfContained: the page loads nothing from elsewhere (no CDN):
// no URL in the embedded files but the SVG namespace, and every file
// index.html names is one the board serves.
func TestAssetsSelfContained(t *testing.T) {
	urlRE := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"'<>)]*`)
	seen := 0
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		seen++
		if _, ok := assets[filepath.Base(path)]; !ok {
			t.Errorf("%s is embedded but not served", path)
		}
		b, _ := static.ReadFile(path)
		for _, u := range urlRE.FindAllString(string(b), -1) {
			if u != "http://www.w3.org/2000/svg" {
				t.Errorf("%s refers to %s: the page must load nothing from outside the board", path, u)
			}
		}
		return nil
	})
	if err != nil || seen != len(assets) {
		t.Fatalf("walked %d embedded files (%v), want %d", seen, err, len(assets))
	}
	html, _ := static.ReadFile("static/index.html")
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(html), -1) {
		if _, ok := assets[m[1]]; !ok {
			t.Errorf("index.html loads %s, which the board does not serve", m[1])
		}
	}
}

func TestBoardRunInfo(t *testing.T) {
	b, root := newTestBoard(t)
	res, body := get(t, b, "GET", "", "/api/runs")
	var list []runEntry
	if err := json.Unmarshal([]byte(body), &list); err != nil || res.StatusCode != 200 {
		t.Fatalf("/api/runs: %d %v\n%s", res.StatusCode, err, body)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[1].Index != 1 {
		t.Errorf("/api/runs: %+v", list)
	}

	_, body = get(t, b, "GET", "", "/api/runs/0")
	var info infoEntry
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(info.RunJSON), "epochs=2") || len(info.Script) != 1 || info.Script[0].Copy != "train.star" {
		t.Errorf("/api/runs/0: %s", body)
	}
	res, body = get(t, b, "GET", "", "/api/runs/0/script/0")
	if res.StatusCode != 200 || body != "train(epochs = 2)  # the script\n" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("/api/runs/0/script/0: %d %q", res.StatusCode, body)
	}

	_, body = get(t, b, "GET", "", "/api/runs/1")
	info = infoEntry{}
	json.Unmarshal([]byte(body), &info)
	if info.RunJSON != nil || !strings.Contains(info.RunJSONError, filepath.Join(root, "b", "run.json")) || !strings.Contains(info.ScriptError, "no copy of the script") {
		t.Errorf("/api/runs/1 (no run yet): %s", body)
	}

	for path, want := range map[string]string{
		"/api/runs/2":          `no run \"2\": the board follows runs 0 to 1`,
		"/api/runs/-1":         `no run \"-1\"`,
		"/api/runs/a":          `no run \"a\"`,
		"/api/runs/0/script/1": `no file \"1\" in the script copy of run a (it has 1)`,
		"/api/runs/1/script/0": `no copy of the script`,
	} {
		res, body := get(t, b, "GET", "", path)
		if res.StatusCode != 404 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %s, want 404 saying %s", path, res.StatusCode, body, want)
		}
	}
}

// TestBoardScriptCopyConfined: a manifest that names a file outside the
// script copy, or a link that leads out of it, reads nothing there.
func TestBoardScriptCopyConfined(t *testing.T) {
	b, root := newTestBoard(t)
	secret := filepath.Join(root, "secret.txt")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "a", "script")
	if err := os.Symlink(secret, filepath.Join(script, "link.star")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret.txt", filepath.Join(script, "rel.star")); err != nil {
		t.Fatal(err)
	}
	manifest := `{"files": [{"copy": "../../secret.txt"}, {"copy": "` + secret + `"}, {"copy": "link.star"}, {"copy": "rel.star"}, {"copy": "."}, {"copy": "train.star"}]}`
	if err := os.WriteFile(filepath.Join(script, "manifest.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 5; n++ {
		res, body := get(t, b, "GET", "", fmt.Sprintf("/api/runs/0/script/%d", n))
		if res.StatusCode != 404 || strings.Contains(body, "SECRET") {
			t.Errorf("file %d of the manifest: %d %s, want 404", n, res.StatusCode, body)
		}
	}
	if res, body := get(t, b, "GET", "", "/api/runs/0/script/5"); res.StatusCode != 200 || !strings.Contains(body, "the script") {
		t.Errorf("the script itself: %d %s", res.StatusCode, body)
	}
	for _, path := range []string{"/api/runs/0/script/..%2F..%2Fsecret.txt", "/../secret.txt", "/api/runs/0/../../secret.txt", "/%2e%2e/secret.txt"} {
		res, body := get(t, b, "GET", "", path)
		if res.StatusCode == 200 || strings.Contains(body, "SECRET") {
			t.Errorf("GET %s: %d %s", path, res.StatusCode, body)
		}
	}
}

func TestBoardRefusesRequests(t *testing.T) {
	b, _ := newTestBoard(t)
	for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS"} {
		res, body := get(t, b, m, "", "/api/runs")
		if res.StatusCode != 405 || res.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(body, m) {
			t.Errorf("%s /api/runs: %d %s", m, res.StatusCode, body)
		}
	}
	for host, want := range map[string]int{
		"evil.example": 403, "evil.example:6006": 403, "127.0.0.1.nip.io:6006": 403,
		"localhost:6006": 200, "LOCALHOST": 200, "127.0.0.1:6006": 200, "[::1]:6006": 200, "10.1.2.3": 200,
	} {
		if res, _ := get(t, b, "GET", host, "/api/runs"); res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
	named := New(b.runs, Options{Hosts: []string{"box.lan"}})
	if res, _ := get(t, named, "GET", "box.lan:6006", "/api/runs"); res.StatusCode != 200 {
		t.Errorf("Host box.lan given in Options.Hosts: %d", res.StatusCode)
	}
}

// event is one server-sent event; a comment line has the name ":".
type event struct{ name, data string }

// readEvents parses the event stream of r until it ends.
func readEvents(r io.Reader) <-chan event {
	ch := make(chan event, 1000)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 4<<20)
		var e event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.data != "" {
					ch <- e
				}
				e = event{}
			case strings.HasPrefix(line, ":"):
				ch <- event{name: ":", data: line}
			case strings.HasPrefix(line, "event: "):
				e.name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				e.data = line[len("data: "):]
			}
		}
	}()
	return ch
}

// waitEvent returns the events up to the first for which match holds, or
// fails the test after 10 s.
func waitEvent(t *testing.T, ch <-chan event, what string, match func(e event) bool) []event {
	t.Helper()
	var seen []event
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %s; it sent %v", what, seen)
			}
			seen = append(seen, e)
			if match(e) {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %s within 10 s; the stream sent %v", what, seen)
		}
	}
}

func is(name string, run int, contains string) func(e event) bool {
	return func(e event) bool {
		return e.name == name && strings.Contains(e.data, fmt.Sprintf(`"run":%d,`, run)) && strings.Contains(e.data, contains)
	}
}

func TestBoardEventStream(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	makeRun(t, a, 3)
	runs, notes, err := Resolve([]string{a, b})
	if err != nil || len(notes) != 1 {
		t.Fatalf("Resolve: %v %v", notes, err)
	}
	srv := httptest.NewServer(New(runs, Options{Poll: 20 * time.Millisecond, Heartbeat: 200 * time.Millisecond}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/api/events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	ch := readEvents(res.Body)

	first := waitEvent(t, ch, "hello", func(e event) bool { return e.name == "hello" })
	if len(first) != 1 || first[0].data != `{"runs":2}` {
		t.Fatalf("the stream opens with %v, want hello first", first)
	}
	seen := waitEvent(t, ch, "run a's lines", is("lines", 0, `"step":3`))
	var lines struct {
		Lines []map[string]any `json:"lines"`
	}
	if err := json.Unmarshal([]byte(seen[len(seen)-1].data), &lines); err != nil || len(lines.Lines) != 5 || lines.Lines[4]["kind"] != "eval" {
		t.Fatalf("run a's lines: %v %s", err, seen[len(seen)-1].data)
	}
	waitEvent(t, ch, "run b's state", is("state", 1, `"state":"no-folder"`))

	// Steps appended, the last one in two writes.
	appendTo(t, filepath.Join(a, "metrics.jsonl"), stepLine(4)+stepLine(5)[:20])
	seen = waitEvent(t, ch, "step 4", is("lines", 0, `"step":4`))
	if strings.Contains(seen[len(seen)-1].data, `"step":5`) {
		t.Fatal("half of step 5's line was sent")
	}
	appendTo(t, filepath.Join(a, "metrics.jsonl"), stepLine(5)[20:])
	waitEvent(t, ch, "step 5", is("lines", 0, `"step":5`))

	// Run b starts after the board did.
	if err := os.Mkdir(b, 0o755); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ch, "run b waiting", is("state", 1, `"state":"waiting"`))
	appendTo(t, filepath.Join(b, "metrics.jsonl"), stepLine(1)+"not json\n"+"[1,2]\n")
	seen = waitEvent(t, ch, "run b's first line", is("lines", 1, `"step":1`))
	waitEvent(t, ch, "run b's bad lines", is("state", 1, "2 line(s)"))

	// Run a resumed: its metrics.jsonl rewritten and renamed into place.
	tmp := filepath.Join(a, "metrics.jsonl.tmp")
	if err := os.WriteFile(tmp, []byte(stepLine(1)+stepLine(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a, "metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
	seen = waitEvent(t, ch, "run a's reset", is("reset", 0, `"why":"replaced"`))
	seen = waitEvent(t, ch, "run a's lines again", is("lines", 0, `"step":2`))
	if !strings.Contains(seen[len(seen)-1].data, `"step":1`) {
		t.Errorf("after a reset the lines start again from the first: %s", seen[len(seen)-1].data)
	}

	// Run b's folder removed.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ch, "run b's reset", is("reset", 1, `"why":"removed"`))
	waitEvent(t, ch, "run b gone", is("state", 1, `"state":"no-folder"`))
	waitEvent(t, ch, "a heartbeat", func(e event) bool { return e.name == ":" })
}

func TestBoardStreamLimit(t *testing.T) {
	b, _ := newTestBoard(t)
	b = New(b.runs, Options{MaxStreams: 1})
	srv := httptest.NewServer(b)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	waitEvent(t, readEvents(res.Body), "hello", func(e event) bool { return e.name == "hello" })
	req2, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	res2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res2.Body)
	res2.Body.Close()
	if res2.StatusCode != 503 || !strings.Contains(string(body), "1 event streams at most") {
		t.Errorf("a second stream: %d %s", res2.StatusCode, body)
	}
}

// TestServeShutdown: when its context ends, Serve ends the event streams
// and returns.
func TestServeShutdown(t *testing.T) {
	b, _ := newTestBoard(t)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, b) }()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", "http://"+ln.Addr().String()+"/api/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	ch := readEvents(res.Body)
	waitEvent(t, ch, "hello", func(e event) bool { return e.name == "hello" })
	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve after its context ended: %v", err)
		}
	case <-time.After(ShutdownTimeout + 2*time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutting down with an open stream took %v", d)
	}
	for range ch { // the stream ends
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("the board still accepts connections after Serve returned")
	}
}

func TestListenAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, err = Listen(addr)
	if err == nil || !strings.Contains(err.Error(), addr+" is in use") {
		t.Fatalf("Listen on a port in use: %v", err)
	}
	if _, err := Listen("127.0.0.1:99999"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:99999") {
		t.Errorf("Listen on a bad port: %v", err)
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"x/run", "y/run", "solo"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	metrics := filepath.Join(root, "solo", "metrics.jsonl")
	if err := os.WriteFile(metrics, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runs, notes, err := Resolve([]string{filepath.Join(root, "x/run"), filepath.Join(root, "y/run"), metrics, filepath.Join(root, "later")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "x/run y/run solo later" || runs[2].Dir != filepath.Join(root, "solo") {
		t.Errorf("names %v, dirs %v", names, runs)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], filepath.Join(root, "later")+" does not exist yet") {
		t.Errorf("notes: %q", notes)
	}
	for args, want := range map[string]string{
		filepath.Join(root, "no/such/run"):                                 "run folder " + filepath.Join(root, "no/such/run") + ": no such folder, nor its parent " + filepath.Join(root, "no/such"),
		filepath.Join(root, "x/run") + "|" + filepath.Join(root, "x/run/"): "is given twice",
	} {
		_, _, err := Resolve(strings.Split(args, "|"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%s): %v, want %q", args, err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Resolve([]string{filepath.Join(root, "file")}); err == nil || !strings.Contains(err.Error(), "is a file, not a run folder") {
		t.Errorf("a file: %v", err)
	}
	if _, _, err := Resolve(nil); err == nil {
		t.Error("no run folders: no error")
	}
}
