package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"gorun/engine/localhttp"
	"gorun/model"
)

// Defaults of Options.
const (
	DefaultMaxBody       = 10 << 20 // 10 MiB
	DefaultTimeout       = 30 * time.Second
	DefaultReadTimeout   = 10 * time.Second
	DefaultWriteTimeout  = 10 * time.Second
	DefaultMaxConcurrent = 64
	DefaultMaxQueue      = 256
	DefaultMaxPixels     = 2048 * 2048
	DefaultMaxTokens     = 2000
	// DefaultTokens, DefaultTemperature and DefaultSeed are what
	// /v1/generate takes when a request leaves them out: gorun sample's
	// defaults, so that both give the same text.
	DefaultTokens      = 200
	DefaultTemperature = 0.8
	DefaultSeed        = 1
)

// Options tunes a Server; the zero value is the defaults.
type Options struct {
	// MaxBody is the largest request body, in bytes (default 10 MiB);
	// a larger one is refused with 413, from its Content-Length before
	// it is read when it has one.
	MaxBody int64
	// Timeout bounds a request from its arrival to its answer, waiting
	// for its turn included: the deadline of the context Predict and
	// Generate get (default 30s). A request past it is answered 504.
	Timeout time.Duration
	// ReadTimeout bounds the sending of a request's body, counted from
	// when its turn comes (default 10s): a client that stalls gets 408
	// and its connection is closed.
	ReadTimeout time.Duration
	// WriteTimeout bounds the writing of an answer (default 10s).
	WriteTimeout time.Duration
	// MaxConcurrent is how many /v1/ requests are read and answered at
	// once (default 64); MaxQueue how many more wait for a turn (default
	// 256; negative: none wait). Beyond both, a request is refused with
	// 503 at once; one that waits past Timeout gets 503 too.
	MaxConcurrent, MaxQueue int
	// MaxPixels is the most pixels (width × height) an image may have
	// (default 2048 × 2048: 16 MiB decoded), checked from its header before it is
	// decoded.
	MaxPixels int64
	// MaxTokens is the most tokens /v1/generate adds in one request
	// (default 2000).
	MaxTokens int
	// ClassNames, when set, are the classes' names, one per class: each
	// prediction gives its class's name as "label". By default they are
	// the model's own (Model.ClassNames: data.images' class folders,
	// data.csv's labels), when it has them.
	ClassNames []string
	// Hosts are host names that requests may name besides IP addresses
	// and localhost; AnyHost takes every Host (a server bound to other
	// machines' networks, reached through names).
	Hosts   []string
	AnyHost bool
	// OnStop, when set, is called when Serve begins to shut down, with
	// the number of requests under way.
	OnStop func(inFlight int)
	// Log receives a line per failed request (5xx), per panic (with its
	// stack) and the HTTP server's own errors (default: nowhere).
	Log *log.Logger
}

func (o *Options) defaults() {
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxQueue < 0 {
		o.MaxQueue = 0
	} else if o.MaxQueue == 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = DefaultMaxPixels
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Log == nil {
		o.Log = log.New(io.Discard, "", 0)
	}
}

// Server is the HTTP handler of one model: the routes of the package
// documentation. It is safe for concurrent use; it does not close the
// model.
type Server struct {
	m        *model.Model
	opts     Options
	mux      *http.ServeMux
	sample   []int // the model's input shape
	per      int   // values in one sample
	images   bool  // the model's data were images: image bodies are taken
	slots    chan struct{}
	queue    chan struct{}
	metrics  *metrics
	stopping atomic.Bool
}

// New returns the Server of m. Options.ClassNames, when given, must name
// every class of a classifier.
func New(m *model.Model, opts Options) (*Server, error) {
	opts.defaults()
	if opts.ClassNames == nil && m.Kind() == model.Classifier {
		opts.ClassNames = m.ClassNames()
	}
	if n := len(opts.ClassNames); n > 0 && (m.Kind() != model.Classifier || n != m.Classes()) {
		return nil, fmt.Errorf("serve: %d class names for a %s of %d classes", n, m.Kind(), m.Classes())
	}
	s := &Server{m: m, opts: opts, mux: http.NewServeMux(), sample: m.InputShape(),
		slots: make(chan struct{}, opts.MaxConcurrent), queue: make(chan struct{}, opts.MaxQueue)}
	s.per = 1
	for _, d := range s.sample {
		s.per *= d
	}
	s.images = takesImages(m)
	s.metrics = newMetrics(s)
	s.mux.HandleFunc("/v1/predict", s.post(s.predict))
	s.mux.HandleFunc("/v1/generate", s.post(s.generate))
	s.mux.HandleFunc("/healthz", s.get(s.healthz))
	s.mux.Handle("/metrics", s.get(s.metrics.handler.ServeHTTP))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, errorf(http.StatusNotFound, "%s: no such route (POST /v1/predict, POST /v1/generate, GET /healthz, GET /metrics)", r.URL.Path))
	})
	return s, nil
}

// The routes, as the metrics label them. Every other path is "other".
const (
	routePredict  = "predict"
	routeGenerate = "generate"
	routeHealthz  = "healthz"
	routeMetrics  = "metrics"
	routeOther    = "other"
)

// ServeHTTP answers a request: the Host is checked, panics are
// recovered, and every answer is counted in the metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	route := routeOf(r.URL.Path)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.opts.Log.Printf("panic serving %s %s: %v\n%s", r.Method, r.URL.Path, v, debug.Stack())
			if !rec.wrote {
				s.fail(rec, r, errorf(http.StatusInternalServerError, "internal error: %v (logged)", v))
			} else {
				rec.code = http.StatusInternalServerError
			}
		}
		s.metrics.observe(route, rec.status(), time.Since(start))
	}()
	h := rec.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	rc := http.NewResponseController(rec)
	// Backstops: the handlers move these deadlines as a request goes on.
	_ = rc.SetWriteDeadline(start.Add(s.opts.Timeout + s.opts.ReadTimeout + s.opts.WriteTimeout))
	if r.ContentLength != 0 {
		// Only with a body: without one, the server is reading the
		// connection already, and a deadline would end the request.
		_ = rc.SetReadDeadline(start.Add(s.opts.ReadTimeout))
	}
	if !s.hostAllowed(r.Host) {
		s.fail(rec, r, errorf(http.StatusForbidden, "host %q: this server answers requests for localhost or an IP address of this machine only", r.Host))
		return
	}
	s.mux.ServeHTTP(rec, r)
}

func routeOf(path string) string {
	switch path {
	case "/v1/predict":
		return routePredict
	case "/v1/generate":
		return routeGenerate
	case "/healthz":
		return routeHealthz
	case "/metrics":
		return routeMetrics
	}
	return routeOther
}

// hostAllowed says whether a request's Host names the server: an IP
// address, localhost, one of Options.Hosts, or any with AnyHost.
func (s *Server) hostAllowed(host string) bool {
	return s.opts.AnyHost || localhttp.HostAllowed(host, s.opts.Hosts)
}

// post is a /v1/ route: POST only, one of MaxConcurrent at a time (after
// waiting in the queue), under the request's deadline.
func (s *Server) post(h func(ctx context.Context, w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			s.fail(w, r, errorf(http.StatusMethodNotAllowed, "%s %s: this route takes POST", r.Method, r.URL.Path))
			return
		}
		if r.ContentLength > s.opts.MaxBody {
			s.fail(w, r, errorf(http.StatusRequestEntityTooLarge, "the body is %d bytes; the server takes at most %d (--max-body)", r.ContentLength, s.opts.MaxBody))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.Timeout)
		defer cancel()
		release, err := s.acquire(ctx)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer release()
		if r.ContentLength != 0 {
			// The body's time starts with the request's turn.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.ReadTimeout))
		}
		// The server's own writer, so that it closes the connection
		// after a body over the limit.
		rw := w
		if rec, ok := w.(*recorder); ok {
			rw = rec.ResponseWriter
		}
		r.Body = http.MaxBytesReader(rw, r.Body, s.opts.MaxBody)
		if err := h(ctx, w, r); err != nil {
			s.fail(w, r, err)
		}
	}
}

// get is a GET (and HEAD) route.
func (s *Server) get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			s.fail(w, r, errorf(http.StatusMethodNotAllowed, "%s %s: this route takes GET", r.Method, r.URL.Path))
			return
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		h(w, r)
	}
}

// acquire waits for one of the MaxConcurrent turns, in the queue of
// MaxQueue, until ctx ends; the release function gives the turn back.
func (s *Server) acquire(ctx context.Context) (func(), error) {
	release := func() { <-s.slots; s.metrics.inFlight.Dec() }
	select {
	case s.slots <- struct{}{}:
		s.metrics.inFlight.Inc()
		return release, nil
	default:
	}
	select {
	case s.queue <- struct{}{}:
	default:
		return nil, errorf(http.StatusServiceUnavailable, "the server is busy: %d requests under way and %d waiting (--max-concurrent, --max-queue); try again", s.opts.MaxConcurrent, s.opts.MaxQueue)
	}
	s.metrics.queued.Inc()
	defer func() { <-s.queue; s.metrics.queued.Dec() }()
	select {
	case s.slots <- struct{}{}:
		s.metrics.inFlight.Inc()
		return release, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, errorf(http.StatusServiceUnavailable, "the server is busy: no turn came within %v (--timeout); try again", s.opts.Timeout)
		}
		return nil, ctx.Err()
	}
}

// healthz answers the model's kind and shapes (its class names and a
// data.csv model's input columns when it has them), or 503 once the
// server is stopping.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	status, code := "ok", http.StatusOK
	if s.stopping.Load() {
		status, code = "stopping", http.StatusServiceUnavailable
	}
	h := map[string]any{
		"status":       status,
		"kind":         s.m.Kind().String(),
		"input_shape":  s.sample,
		"output_shape": s.m.OutputShape(),
		"classes":      s.m.Classes(),
		"max_batch":    s.m.MaxBatch(),
		"images":       s.images,
	}
	if len(s.opts.ClassNames) > 0 {
		h["class_names"] = s.opts.ClassNames
	}
	if cm, ok := s.m.CSVMeta(); ok {
		h["csv_columns"] = cm.X
	}
	s.writeJSON(w, code, h)
}

// generateRequest is the body of /v1/generate.
type generateRequest struct {
	Prompt      *string  `json:"prompt"`
	Tokens      *int     `json:"tokens"`
	Temperature *float64 `json:"temperature"`
	Seed        *uint64  `json:"seed"`
}

// generate continues a prompt with a sequence model.
func (s *Server) generate(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	if s.m.Kind() != model.Sequence {
		return errorf(http.StatusNotFound, "/v1/generate: the model is a %s, not a sequence model of text (data.text): POST /v1/predict", s.m.Kind())
	}
	if err := checkJSONType(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req generateRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return errorf(http.StatusBadRequest, "the body is not a generate request (a JSON object of prompt, tokens, temperature, seed): %v", err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "the body holds more than one JSON value")
	}
	if req.Prompt == nil || *req.Prompt == "" {
		return errorf(http.StatusBadRequest, `no "prompt": give the text to continue`)
	}
	o := model.GenerateOptions{Tokens: min(DefaultTokens, s.opts.MaxTokens), Temperature: DefaultTemperature, Seed: DefaultSeed}
	if req.Tokens != nil {
		o.Tokens = *req.Tokens
	}
	if o.Tokens < 1 || o.Tokens > s.opts.MaxTokens {
		return errorf(http.StatusBadRequest, `"tokens": %d: want 1 to %d (--max-tokens)`, o.Tokens, s.opts.MaxTokens)
	}
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if !(o.Temperature >= 0) || math.IsInf(o.Temperature, 0) {
		return errorf(http.StatusBadRequest, `"temperature": %g: want 0 (greedy: the likeliest token) or more, finite`, o.Temperature)
	}
	if req.Seed != nil {
		o.Seed = *req.Seed
	}
	text, err := s.m.Generate(ctx, *req.Prompt, o)
	if err != nil {
		return s.modelError(ctx, err)
	}
	s.writeJSON(w, http.StatusOK, map[string]any{
		"text": text, "tokens": o.Tokens, "temperature": o.Temperature, "seed": o.Seed,
	})
	return nil
}

// modelError turns an error of Predict or Generate into an answer.
func (s *Server) modelError(ctx context.Context, err error) error {
	msg := strings.TrimPrefix(err.Error(), "model: ")
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusGatewayTimeout, "the model did not answer within %v (--timeout)", s.opts.Timeout)
	case errors.Is(err, context.Canceled):
		return err // the client went away
	case msg == "closed":
		return errorf(http.StatusServiceUnavailable, "the server is stopping")
	case strings.HasPrefix(msg, "input "), strings.HasPrefix(msg, "Generate: prompt"), strings.HasPrefix(msg, "Generate: an empty prompt"):
		return errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(msg, "Generate: "))
	}
	return errorf(http.StatusInternalServerError, "%s", msg)
}

// httpError is an answer other than 200.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, a ...any) *httpError {
	return &httpError{code: code, msg: fmt.Sprintf(format, a...)}
}

// statusClientClosed is the status the metrics count a request whose
// client went away under (nginx's 499).
const statusClientClosed = 499

// fail answers err as {"error": …}.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
	case errors.As(err, &mbe):
		he = errorf(http.StatusRequestEntityTooLarge, "the body is larger than %d bytes (--max-body)", mbe.Limit)
	case isTimeout(err):
		he = errorf(http.StatusRequestTimeout, "the body did not arrive within %v", s.opts.ReadTimeout)
		w.Header().Set("Connection", "close")
	case errors.Is(err, context.Canceled) || r.Context().Err() != nil:
		if rec, ok := w.(*recorder); ok {
			rec.code = statusClientClosed
		}
		return
	default:
		he = errorf(http.StatusBadRequest, "reading the body: %v", err)
	}
	if he.code >= 500 && he.code != http.StatusServiceUnavailable {
		s.opts.Log.Printf("%s %s: %d %s", r.Method, r.URL.Path, he.code, he.msg)
	}
	if he.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	s.writeJSON(w, he.code, map[string]string{"error": he.msg})
}

// isTimeout says whether err is a read that ran past its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// writeJSON answers v as JSON with code.
func (s *Server) writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	s.write(w, code, "application/json", append(b, '\n'))
}

// write answers body with code, under WriteTimeout.
func (s *Server) write(w http.ResponseWriter, code int, ctype string, body []byte) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

// recorder keeps the status a handler answers.
type recorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.code, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
