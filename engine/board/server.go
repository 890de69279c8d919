package board

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"gorun/datasets/userfile"
	"gorun/engine/localhttp"
)

//go:embed static
var static embed.FS

// assets are the files of static/ the board serves, with their types.
// Nothing else of static/ is served, and no request names a file.
var assets = map[string]string{
	"index.html":  "text/html; charset=utf-8",
	"board.js":    "text/javascript; charset=utf-8",
	"board.css":   "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// Files of a run folder the board reads besides metrics.jsonl (written by
// cmd/gorun: run.json, and the copy of the script in script/ with its
// manifest).
const (
	runInfoFile    = "run.json"
	scriptCopyDir  = "script"
	manifestFile   = "manifest.json"
	maxInfoBytes   = 1 << 20 // run.json, manifest.json
	maxScriptBytes = 4 << 20 // one file of the script copy
)

// Options tunes a Board; the zero value is the defaults.
type Options struct {
	// Poll is how often each stream looks at the runs' metrics.jsonl
	// (default 500ms).
	Poll time.Duration
	// Heartbeat is the longest a stream stays silent: a comment line then
	// tells a client (and a proxy) that the board is there (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client (default 10s): a client
	// that stops reading is dropped.
	WriteTimeout time.Duration
	// MaxStreams is the most event streams served at once (default 32);
	// more are refused with 503.
	MaxStreams int
	// Hosts are host names that requests may name besides IP addresses
	// and localhost: the host of a --addr given by name.
	Hosts []string
}

func (o *Options) defaults() {
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 32
	}
}

// Board is the dashboard's HTTP handler. Its routes:
//
//	GET /                          the page
//	GET /board.js, /board.css,     what the page needs, embedded
//	    /favicon.svg
//	GET /api/runs                  the runs: [{"index", "name", "dir"}]
//	GET /api/runs/{i}              run i's settings: run.json and the
//	                               files of its script copy
//	GET /api/runs/{i}/script/{n}   file n of run i's script copy (text)
//	GET /api/events                the event stream (text/event-stream)
//
// The event stream sends, for every connection from the start of each
// metrics.jsonl: "hello" ({"runs": N}) first, then "lines" ({"run": i,
// "lines": [line objects as metrics.jsonl holds them]}), "reset" ({"run":
// i, "why": …}: forget run i's lines, they start again) and "state"
// ({"run": i, "state": "live" | "waiting" | "no-folder" | "error",
// "detail": …}) as they happen. A Board holds no state between requests.
type Board struct {
	runs    []Run
	opts    Options
	mux     *http.ServeMux
	streams chan struct{} // one token per event stream served
}

// New returns the Board of runs.
func New(runs []Run, opts Options) *Board {
	opts.defaults()
	b := &Board{runs: runs, opts: opts, mux: http.NewServeMux(), streams: make(chan struct{}, opts.MaxStreams)}
	b.mux.HandleFunc("/{$}", b.asset("index.html"))
	for name := range assets {
		if name != "index.html" {
			b.mux.HandleFunc("/"+name, b.asset(name))
		}
	}
	b.mux.HandleFunc("/api/runs", b.runList)
	b.mux.HandleFunc("/api/runs/{i}", b.runInfo)
	b.mux.HandleFunc("/api/runs/{i}/script/{n}", b.scriptFile)
	b.mux.HandleFunc("/api/events", b.events)
	b.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, fmt.Sprintf("%s: the board has no such page", r.URL.Path))
	})
	return b
}

// ServeHTTP answers GET and HEAD requests for a host it knows.
func (b *Board) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if !b.hostAllowed(r.Host) {
		httpError(w, http.StatusForbidden, fmt.Sprintf("host %q: the board answers requests for localhost or an IP address of this machine only", r.Host))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		httpError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s: the board only answers GET and HEAD", r.Method))
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(b.opts.WriteTimeout))
	b.mux.ServeHTTP(w, r)
}

// hostAllowed says whether a request's Host names the board: an IP
// address, localhost, or one of Options.Hosts. A page of another site
// whose name was made to resolve to this machine (DNS rebinding) is
// refused.
func (b *Board) hostAllowed(host string) bool {
	return localhttp.HostAllowed(host, b.opts.Hosts)
}

func (b *Board) asset(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := static.ReadFile("static/" + name)
		if err != nil { // not reached: the names are those embedded
			httpError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", assets[name])
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		if r.Method != http.MethodHead {
			w.Write(data)
		}
	}
}

// httpError answers {"error": msg}.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Write(append(b, '\n'))
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// run returns the run a request's {i} names, or answers 404.
func (b *Board) run(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.PathValue("i")
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(b.runs) {
		httpError(w, http.StatusNotFound, fmt.Sprintf("no run %q: the board follows runs 0 to %d", s, len(b.runs)-1))
		return 0, false
	}
	return i, true
}

// runEntry is a run in /api/runs.
type runEntry struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	Dir   string `json:"dir"`
}

func (b *Board) runList(w http.ResponseWriter, r *http.Request) {
	list := make([]runEntry, len(b.runs))
	for i, run := range b.runs {
		list[i] = runEntry{Index: i, Name: run.Name, Dir: run.Dir}
	}
	writeJSON(w, list)
}

// manifest is what the board reads of script/manifest.json (written by
// cmd/gorun/scriptcopy.go).
type manifest struct {
	Script string `json:"script"`
	Files  []struct {
		Path   string `json:"path"`
		Copy   string `json:"copy"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

// readManifest reads run dir's script/manifest.json.
func readManifest(dir string) (*manifest, error) {
	path := filepath.Join(dir, scriptCopyDir, manifestFile)
	b, err := userfile.ReadFile(path, maxInfoBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no copy of the script (a run that has not started, or one from before gorun kept it)", path)
	}
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &m, nil
}

// infoEntry is /api/runs/{i}.
type infoEntry struct {
	runEntry
	// RunJSON is run.json as the run wrote it; RunJSONError says why it
	// is not there.
	RunJSON      json.RawMessage `json:"run_json,omitempty"`
	RunJSONError string          `json:"run_json_error,omitempty"`
	// Script lists the files of the script copy; ScriptError says why
	// there are none.
	Script      []scriptEntry `json:"script,omitempty"`
	ScriptError string        `json:"script_error,omitempty"`
}

// scriptEntry is one file of a run's script copy.
type scriptEntry struct {
	Index  int    `json:"index"`
	Path   string `json:"path"` // where the run read it
	Copy   string `json:"copy"` // inside script/
	SHA256 string `json:"sha256"`
}

func (b *Board) runInfo(w http.ResponseWriter, r *http.Request) {
	i, ok := b.run(w, r)
	if !ok {
		return
	}
	run := b.runs[i]
	e := infoEntry{runEntry: runEntry{Index: i, Name: run.Name, Dir: run.Dir}}
	path := filepath.Join(run.Dir, runInfoFile)
	data, err := userfile.ReadFile(path, maxInfoBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.RunJSONError = fmt.Sprintf("%s: not written yet (a run writes it as its first step begins)", path)
	case err != nil:
		e.RunJSONError = err.Error()
	case !json.Valid(data):
		e.RunJSONError = fmt.Sprintf("%s is not JSON", path)
	default:
		e.RunJSON = data
	}
	if m, err := readManifest(run.Dir); err != nil {
		e.ScriptError = err.Error()
	} else {
		for n, f := range m.Files {
			e.Script = append(e.Script, scriptEntry{Index: n, Path: f.Path, Copy: f.Copy, SHA256: f.SHA256})
		}
	}
	writeJSON(w, e)
}

// scriptFile serves file n of run i's script copy: the manifest's entry n,
// opened inside the run's script/ folder (os.Root: neither "..", an
// absolute path nor a symbolic link leads out of it), a regular file of
// at most maxScriptBytes.
func (b *Board) scriptFile(w http.ResponseWriter, r *http.Request) {
	i, ok := b.run(w, r)
	if !ok {
		return
	}
	dir := b.runs[i].Dir
	m, err := readManifest(dir)
	if err != nil {
		httpError(w, http.StatusNotFound, err.Error())
		return
	}
	s := r.PathValue("n")
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= len(m.Files) {
		httpError(w, http.StatusNotFound, fmt.Sprintf("no file %q in the script copy of run %s (it has %d)", s, b.runs[i].Name, len(m.Files)))
		return
	}
	data, err := readCopy(filepath.Join(dir, scriptCopyDir), m.Files[n].Copy)
	if err != nil {
		httpError(w, http.StatusNotFound, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	if r.Method != http.MethodHead {
		w.Write(data)
	}
}

// readCopy reads the file name (slash-separated, from the manifest) inside
// the folder root.
func readCopy(root, name string) ([]byte, error) {
	where := filepath.Join(root, filepath.FromSlash(name))
	if !filepath.IsLocal(filepath.FromSlash(name)) {
		return nil, fmt.Errorf("%s: the manifest names %q, which is not inside the script copy", filepath.Join(root, manifestFile), name)
	}
	rt, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	// O_NONBLOCK: a named pipe put there does not block the open.
	f, err := rt.OpenFile(filepath.FromSlash(name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", where, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &userfile.NotRegularError{Path: where, Mode: st.Mode()}
	}
	if st.Size() > maxScriptBytes {
		return nil, &userfile.TooLargeError{Path: where, Size: st.Size(), Limit: maxScriptBytes}
	}
	return io.ReadAll(io.LimitReader(f, maxScriptBytes))
}

// stream is one client's event stream.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
	last    time.Time // of the last write
}

// send writes one event; data is one line of JSON.
func (s *stream) send(event string, data []byte) error {
	s.buf.Reset()
	if event != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(event)
		s.buf.WriteByte('\n')
	}
	s.buf.WriteString("data: ")
	s.buf.Write(data)
	s.buf.WriteString("\n\n")
	return s.raw(s.buf.Bytes())
}

// raw writes b as it is and flushes it.
func (s *stream) raw(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	s.last = time.Now()
	return s.rc.Flush()
}

// follower is one run as a stream follows it.
type follower struct {
	index int
	dir   string
	tail  *Tail
	state string // as last sent
	bad   int    // lines left out for not being JSON objects
}

func (b *Board) events(w http.ResponseWriter, r *http.Request) {
	select {
	case b.streams <- struct{}{}:
		defer func() { <-b.streams }()
	default:
		httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("the board serves %d event streams at most; close another page of it", b.opts.MaxStreams))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	s := &stream{w: w, rc: http.NewResponseController(w), timeout: b.opts.WriteTimeout}
	if err := s.raw([]byte("retry: 2000\n\n")); err != nil {
		return
	}
	if err := s.send("hello", fmt.Appendf(nil, `{"runs":%d}`, len(b.runs))); err != nil {
		return
	}
	fols := make([]*follower, len(b.runs))
	for i, run := range b.runs {
		fols[i] = &follower{index: i, dir: run.Dir, tail: NewTail(filepath.Join(run.Dir, MetricsFile))}
	}
	tick := time.NewTicker(b.opts.Poll)
	defer tick.Stop()
	ctx := r.Context()
	for {
		for _, f := range fols {
			if err := b.pump(ctx, s, f); err != nil {
				return // the client went away, or the board is stopping
			}
		}
		if time.Since(s.last) >= b.opts.Heartbeat {
			if err := s.raw([]byte(": ping\n\n")); err != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// pump sends what is new in one run's metrics.jsonl.
func (b *Board) pump(ctx context.Context, s *stream, f *follower) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		u, err := f.tail.Poll()
		state, detail := "live", ""
		switch {
		case err != nil:
			state, detail = "error", err.Error()
		case !u.Exists:
			if st, err := os.Stat(f.dir); err == nil && st.IsDir() {
				state, detail = "waiting", fmt.Sprintf("no %s in %s yet", MetricsFile, f.dir)
			} else {
				state, detail = "no-folder", fmt.Sprintf("%s: no such folder (yet, or any more)", f.dir)
			}
		}
		if u.Reset {
			f.bad = 0
			if err := s.send("reset", fmt.Appendf(nil, `{"run":%d,"why":%q}`, f.index, u.Why)); err != nil {
				return err
			}
		}
		if len(u.Lines) > 0 {
			var buf bytes.Buffer
			fmt.Fprintf(&buf, `{"run":%d,"lines":[`, f.index)
			n := 0
			for _, line := range u.Lines {
				// Compact checks the line and takes out any whitespace (a
				// carriage return would end the event's data line).
				mark := buf.Len()
				if n > 0 {
					buf.WriteByte(',')
				}
				if line[0] != '{' || json.Compact(&buf, line) != nil {
					buf.Truncate(mark)
					f.bad++
					continue
				}
				n++
			}
			buf.WriteString("]}")
			if n > 0 {
				if err := s.send("lines", buf.Bytes()); err != nil {
					return err
				}
			}
		}
		f.bad += u.Skipped
		if state == "live" && f.bad > 0 {
			detail = fmt.Sprintf("%d line(s) of %s left out: not JSON objects, or longer than %s", f.bad, f.tail.Path(), userfile.Bytes(DefaultMaxLine))
		}
		if key := state + "\x00" + detail; key != f.state {
			f.state = key
			msg, _ := json.Marshal(map[string]any{"run": f.index, "state": state, "detail": detail})
			if err := s.send("state", msg); err != nil {
				return err
			}
		}
		if !u.More {
			return nil
		}
	}
}

// Listen opens the TCP address addr for the board. Its errors name the
// address and say what to do: one in use (another board, TensorBoard),
// one this machine does not have, a port that needs privileges.
func Listen(addr string) (net.Listener, error) {
	return localhttp.Listen(addr, "another gorun board, or TensorBoard?")
}

// Timeouts of Serve's server.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	idleTimeout       = 60 * time.Second
	// ShutdownTimeout is how long Serve waits for requests under way
	// once its context ends.
	ShutdownTimeout = 5 * time.Second
)

// Serve serves h on ln until ctx ends, then shuts down: it stops
// accepting, ends the event streams (their requests' contexts derive from
// ctx) and waits up to ShutdownTimeout for the requests under way. It
// returns nil after such a shutdown, or the error that stopped the
// server.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-done
	return err
}
