package serve

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pngHeader is the start of a PNG of w×h grey pixels: the signature, the
// IHDR chunk and a few bytes of an IDAT chunk; image.DecodeConfig reads
// its size, and decoding it fails.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		start := len(b)
		b = append(b, typ...)
		b = append(b, data...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 0, 0, 0, 0) // 8 bits, grey, deflate, no filter, no interlace
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x01, 0x02})
	return b
}

// jpegHeader is the start of a baseline JPEG of w×h grey pixels, up to
// its frame header (SOF0): what image.DecodeConfig reads.
func jpegHeader(w, h uint16) []byte {
	b := []byte{0xff, 0xd8, 0xff, 0xc0, 0, 11, 8}
	b = binary.BigEndian.AppendUint16(b, h)
	b = binary.BigEndian.AppendUint16(b, w)
	b = append(b, 1, 1, 0x11, 0)
	return append(b, 0xff, 0xda, 0, 8) // the start of a scan: DecodeConfig stops there
}

// hostile is one request that the server must refuse.
type hostile struct {
	name         string
	method, path string
	ctype        string
	host         string // the Host header, when not the server's address
	body         []byte
	code         int
	want         string // in the "error" of the answer
}

// hostileRequests are refused with a 4xx (or 5xx) that names the
// problem, each in turn, the server answering a good request after
// every one.
func hostileRequests(t *testing.T) []hostile {
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	garbage[0] = 0xfe // neither JSON, CSV nor an image's signature
	_, raw := mnistTest(t, 1)
	digit := grayPNG(t, raw, 28, 28)
	row := func(n int, v string) string { return "[" + strings.Repeat(v+",", n-1) + v + "]" }
	const p = "/v1/predict"
	return []hostile{
		{"garbage bytes", "POST", p, "", "", garbage, 415, "the body is none of application/json, text/csv or an image (image/png, image/jpeg, image/gif, image/bmp, image/tiff, image/webp)"},
		{"garbage bytes as JSON", "POST", p, "application/json", "", garbage, 400, "the body: byte 0xfe where a number or an array should be"},
		{"garbage bytes as a PNG", "POST", p, "image/png", "", garbage, 400, "the body is not a PNG image: not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes fe"},
		{"garbage bytes as a JPEG", "POST", p, "image/jpeg", "", garbage, 400, "the body is not a JPEG image: not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes fe"},
		{"garbage bytes as CSV", "POST", p, "text/csv", "", garbage, 400, "the CSV body"},
		{"an empty body", "POST", p, "", "", nil, 400, "the body is empty"},
		{"an empty JSON body", "POST", p, "application/json", "", nil, 400, "the body: the JSON ends early"},
		{"a 1×1 image", "POST", p, "image/png", "", grayPNG(t, []uint8{255}, 1, 1), 400, "the image is 1×1 pixels; the model takes 28×28 (images are resized, but not from under half that: 14×14)"},
		{"a 10,000×10,000 PNG", "POST", p, "image/png", "", pngHeader(10000, 10000), 413, "the image is 10000×10000 pixels: more than the 4194304 this server decodes; the model takes 28×28"},
		{"a 10,000×10,000 PNG, sniffed", "POST", p, "", "", pngHeader(10000, 10000), 413, "the image is 10000×10000 pixels"},
		{"a 65,535×65,535 JPEG", "POST", p, "image/jpeg", "", jpegHeader(65535, 65535), 413, "the image is 65535×65535 pixels"},
		{"a PNG cut short", "POST", p, "image/png", "", digit[:len(digit)/2], 400, "the image: decoding it as PNG: png: invalid format: not enough pixel data"},
		{"a PNG of 28×28 that has no pixels", "POST", p, "image/png", "", pngHeader(28, 28), 400, "the image: decoding it as PNG: png: invalid format: not enough pixel data"},
		{"JSON: the wrong number of values", "POST", p, "application/json", "", []byte(row(783, "0")), 400, "the body has shape [783]; the model takes one sample [1 28 28] (or 784 values in a row), or a batch [N 1 28 28] (or [N 784])"},
		{"JSON: no channel dimension", "POST", p, "application/json", "", []byte(row(28, row(28, "0"))), 400, "the body has shape [28 28]; the model takes one sample [1 28 28]"},
		{"JSON: three channels", "POST", p, "application/json", "", []byte("[" + strings.Repeat(row(28, row(28, "0"))+",", 2) + row(28, row(28, "0")) + "]"), 400, "the body has shape [3 28 28]; the model takes one sample [1 28 28]"},
		{"JSON: ragged", "POST", p, "application/json", "", []byte("[" + row(784, "0") + "," + row(783, "0") + "]"), 400, "the body[1]: 783 values where the arrays before hold 784: the array is ragged"},
		{"JSON: a number among arrays", "POST", p, "application/json", "", []byte("[" + row(784, "0") + ",5]"), 400, "the body[1]: a number where the other values are arrays 2 deep: the array is ragged"},
		{"JSON: no samples", "POST", p, "application/json", "", []byte("[]"), 400, "the body holds no samples (shape [0])"},
		{"JSON: no samples in inputs", "POST", p, "application/json", "", []byte(`{"inputs": [[]]}`), 400, "inputs has shape [1 0]"},
		{"JSON: nested too deep", "POST", p, "application/json", "", []byte(strings.Repeat("[", 100) + "1" + strings.Repeat("]", 100)), 400, "arrays nested deeper than 8"},
		{"JSON: NaN", "POST", p, "application/json", "", []byte("[" + strings.Repeat("0,", 783) + "NaN]"), 400, "the body[783]: NaN: JSON has no such number, and inputs must be finite"},
		{"JSON: -Infinity", "POST", p, "application/json", "", []byte(`{"inputs": [-Infinity]}`), 400, "inputs[0]: -Infinity: JSON has no such number, and inputs must be finite"},
		{"JSON: beyond float32", "POST", p, "application/json", "", []byte("[" + strings.Repeat("0,", 783) + "1e39]"), 400, "the body[783]: 1e39 is beyond float32's range"},
		{"JSON: a string", "POST", p, "application/json", "", []byte(`["0.5"]`), 400, `the body[0]: '"' where a number or an array should be`},
		{"JSON: null", "POST", p, "application/json", "", []byte(`null`), 400, `the body: "null" is not a number`},
		{"JSON: trailing garbage", "POST", p, "application/json", "", []byte(row(784, "0") + "]"), 400, `more after the end of the array: "]"`},
		{"JSON: cut short", "POST", p, "application/json", "", []byte("[[0,1"), 400, "the JSON ends early"},
		{"JSON: another key", "POST", p, "application/json", "", []byte(`{"inputs": [1], "x": 2}`), 400, `the JSON object has another key after "inputs": want {"inputs": [...]} (the model's inputs) or {"pixels": [...]} (raw pixels 0 to 255)`},
		{"JSON: an unknown key", "POST", p, "application/json", "", []byte(`{"input": [1]}`), 400, `the JSON object has the key "input": want {"inputs": [...]}`},
		{"JSON: a broken object", "POST", p, "application/json", "", []byte(`{"inputs": [1]`), 400, `the JSON object does not end after "inputs"`},
		{"JSON: pixels beyond 255", "POST", p, "application/json", "", []byte(`{"pixels": ` + row(784, "256") + `}`), 400, "pixels[0]: 256 is not a pixel value (an integer from 0 to 255)"},
		{"CSV: a short row", "POST", p, "text/csv", "", []byte(strings.Repeat("0,", 783) + "0\n" + strings.Repeat("0,", 782) + "0\n"), 400, "the CSV body, line 2: 783 values; the model takes 784 per row (one sample [1 28 28])"},
		{"CSV: a missing value", "POST", p, "text/csv", "", []byte(strings.Repeat("0,", 10) + "," + strings.Repeat("0,", 772) + "0\n"), 400, "the CSV body, line 1, column 11: no value (missing values are refused)"},
		{"CSV: NaN", "POST", p, "text/csv", "", []byte(strings.Repeat("0,", 783) + "NaN\n"), 400, "the CSV body, line 1, column 784: NaN: inputs must be finite"},
		{"CSV: Inf", "POST", p, "text/csv", "", []byte("+Inf" + strings.Repeat(",0", 783) + "\n"), 400, "the CSV body, line 1, column 1: +Inf: inputs must be finite"},
		{"CSV: a word", "POST", p, "text/csv", "", []byte("1" + strings.Repeat(",x", 783) + "\n"), 400, `the CSV body, line 1, column 2: "x" is not a number`},
		{"CSV: a bare quote", "POST", p, "text/csv", "", []byte("1,2\"3\n"), 400, `the CSV body, line 1: bare " in non-quoted-field`},
		{"CSV: only a header", "POST", p, "text/csv", "", []byte("a,b,c\n"), 400, "the CSV body holds no rows"},
		{"text/html", "POST", p, "text/html", "", []byte("<html>"), 415, "Content-Type text/html: /v1/predict takes application/json, text/csv or an image (image/png, image/jpeg, image/gif, image/bmp, image/tiff, image/webp)"},
		{"a GIF cut short", "POST", p, "image/gif", "", []byte("GIF89a"), 400, "the body is not a GIF image: reading the GIF header: gif: reading header: unexpected EOF"},
		{"a broken Content-Type", "POST", p, "image/png; x", "", digit, 415, `Content-Type "image/png; x": mime: invalid media parameter`},
		{"GET /v1/predict", "GET", p, "", "", nil, 405, "GET /v1/predict: this route takes POST"},
		{"POST /healthz", "POST", "/healthz", "", "", nil, 405, "POST /healthz: this route takes GET"},
		{"DELETE /metrics", "DELETE", "/metrics", "", "", nil, 405, "this route takes GET"},
		{"an unknown route", "GET", "/v2/predict", "", "", nil, 404, "/v2/predict: no such route"},
		{"another Host", "POST", p, "image/png", "evil.example:8080", digit, 403, `host "evil.example:8080": this server answers requests for localhost or an IP address of this machine only`},
	}
}

// TestHostileRequests: every hostile request gets its status and an
// error that names the problem, over a real connection, and the server
// answers a good request after each; nothing reaches the log (no 5xx,
// no panic).
func TestHostileRequests(t *testing.T) {
	m := netModel(t)
	s := serve(t, m, Options{})
	x, _ := mnistTest(t, 1)
	good := jsonArray(x, 784)
	want := predict(t, m, dense([]int{1, 1, 28, 28}, x))
	var table strings.Builder
	for _, h := range hostileRequests(t) {
		req, err := http.NewRequest(h.method, s.url+h.path, bytes.NewReader(h.body))
		if err != nil {
			t.Fatal(err)
		}
		if h.ctype != "" {
			req.Header.Set("Content-Type", h.ctype)
		}
		if h.host != "" {
			req.Host = h.host
		}
		res, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", h.name, err)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		r := reply{code: res.StatusCode, body: b}
		fmt.Fprintf(&table, "| %s | %d | `%s` |\n", h.name, r.code, r.errorText())
		if r.code != h.code || !strings.Contains(r.errorText(), h.want) {
			t.Errorf("%s: %d %q; want %d saying %q", h.name, r.code, r.errorText(), h.code, h.want)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", h.name, ct)
		}
		preds := predictions(t, s.do(t, "POST", "/v1/predict", "application/json", good))
		if sameBits(floats32(t, preds[0].Outputs), want) >= 0 {
			t.Fatalf("after %s: the answer to a good request changed", h.name)
		}
	}
	// HTTP/1.0 lets a request name no host: refused too.
	res, b, err := rawRequest(t, s.addr, "GET /healthz HTTP/1.0", nil, 10*time.Second)
	if err != nil || res.StatusCode != 403 || !strings.Contains(string(b), `host \"\": this server answers`) {
		t.Errorf("no Host: %v %v %s", err, res, b)
	}
	fmt.Fprintf(&table, "| no Host (HTTP/1.0) | %d | `%s` |\n", res.StatusCode, reply{body: b}.errorText())
	if testing.Verbose() {
		t.Logf("the hostile requests:\n%s", table.String())
	}
	if l := s.log.String(); l != "" {
		t.Errorf("the log:\n%s", l)
	}
}

// TestHugeImageNotDecoded: a 10,000×10,000 image is refused from its
// header: the request allocates far less than its 100 M pixels.
func TestHugeImageNotDecoded(t *testing.T) {
	s, err := New(netModel(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{pngHeader(10000, 10000), jpegHeader(10000, 10000)} {
		req := httptest.NewRequest("POST", "/v1/predict", bytes.NewReader(body))
		req.Host = "127.0.0.1"
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "10000×10000 pixels") {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
			t.Errorf("refusing a 10,000×10,000 image allocated %d bytes", d)
		}
	}
}

// rawRequest sends head (request line and headers, without the blank
// line) and body on a new connection, and reads the answer within d.
func rawRequest(t *testing.T, addr, head string, body []byte, d time.Duration) (*http.Response, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	go func() {
		io.WriteString(c, head+"\r\n\r\n")
		c.Write(body)
	}()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// TestLargeBodies: a 50 MB body is refused with 413 from its
// Content-Length before it is sent, and when it comes chunked (no
// length) once 10 MiB have been read; a smaller --max-body too. The
// server goes on.
func TestLargeBodies(t *testing.T) {
	m := netModel(t)
	s := serve(t, m, Options{})
	host := "Host: " + s.addr
	const size = 50 << 20
	res, b, err := rawRequest(t, s.addr, "POST /v1/predict HTTP/1.1\r\n"+host+"\r\nContent-Type: application/json\r\nContent-Length: 52428800", nil, 10*time.Second)
	if err != nil || res.StatusCode != 413 || !strings.Contains(string(b), "the body is 52428800 bytes; the server takes at most 10485760 (--max-body)") {
		t.Errorf("50 MB announced: %v %v %s", err, res, b)
	}
	// Chunked: the server reads up to the limit and stops.
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	sent := make(chan int64, 1)
	go func() {
		var n int64
		defer func() { sent <- n }()
		if _, err := io.WriteString(c, "POST /v1/predict HTTP/1.1\r\n"+host+"\r\nContent-Type: text/csv\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		chunk := append([]byte(fmt.Sprintf("%x\r\n", 1<<16)), append(bytes.Repeat([]byte("0,"), 1<<15), "\r\n"...)...)
		for n < size {
			if _, err := c.Write(chunk); err != nil {
				return
			}
			n += 1 << 16
		}
		io.WriteString(c, "0\r\n\r\n")
	}()
	res, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("50 MB chunked: %v", err)
	}
	b, _ = io.ReadAll(res.Body)
	if res.StatusCode != 413 || !strings.Contains(string(b), "the body is larger than 10485760 bytes (--max-body)") {
		t.Errorf("50 MB chunked: %d %s", res.StatusCode, b)
	}
	c.Close()
	if n := <-sent; n >= size {
		t.Errorf("the client could send all %d bytes", n)
	}

	small := serve(t, m, Options{MaxBody: 1000})
	x, _ := mnistTest(t, 1)
	r := small.do(t, "POST", "/v1/predict", "application/json", jsonArray(x, 784))
	if r.code != 413 || !strings.Contains(r.errorText(), "the server takes at most 1000 (--max-body)") {
		t.Errorf("MaxBody 1000: %d %s", r.code, r.body)
	}
	if r := s.do(t, "GET", "/healthz", "", nil); r.code != 200 {
		t.Errorf("after the large bodies: /healthz %d", r.code)
	}
}

// TestSlowClient: a client that sends its headers and part of its body,
// then stalls, gets 408 once ReadTimeout has passed and its connection
// closed; meanwhile, and after, the server answers others. With one turn
// (MaxConcurrent 1) and no queue, the others are refused with 503 while
// the slow client holds it.
func TestSlowClient(t *testing.T) {
	m := netModel(t)
	x, _ := mnistTest(t, 1)
	good := jsonArray(x, 784)
	for _, c := range []struct {
		name string
		opts Options
		busy bool
	}{
		{"64 turns", Options{ReadTimeout: 500 * time.Millisecond}, false},
		{"one turn", Options{ReadTimeout: 500 * time.Millisecond, MaxConcurrent: 1, MaxQueue: -1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := serve(t, m, c.opts)
			conn, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			fmt.Fprintf(conn, "POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.addr, len(good), good[:100])
			waitFor(t, func() bool { return s.InFlight() == 1 })
			r := s.do(t, "POST", "/v1/predict", "application/json", good)
			switch {
			case c.busy && (r.code != 503 || !strings.Contains(r.errorText(), "the server is busy: 1 requests under way and 0 waiting (--max-concurrent, --max-queue)") || r.hdr.Get("Retry-After") != "1"):
				t.Errorf("while the slow client holds the only turn: %d %s %v", r.code, r.body, r.hdr)
			case !c.busy && r.code != 200:
				t.Errorf("while a client stalls: %d %s", r.code, r.body)
			}
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("the slow client got no answer: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 408 || !strings.Contains(string(b), "the body did not arrive within 500ms") {
				t.Errorf("the slow client: %d %s", res.StatusCode, b)
			}
			if d := time.Since(start); d < 400*time.Millisecond || d > 5*time.Second {
				t.Errorf("the slow client was answered after %v; ReadTimeout is 500ms", d)
			}
			// Its connection is closed.
			if _, err := conn.Read(make([]byte, 1)); err == nil {
				t.Errorf("the slow client's connection is still open")
			}
			if r := s.do(t, "POST", "/v1/predict", "application/json", good); r.code != 200 {
				t.Errorf("after the slow client: %d %s", r.code, r.body)
			}
		})
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("waited 10 s in vain")
		}
	}
}

// TestQueueAndDeadline: requests beyond MaxConcurrent wait in the queue
// for a turn, and get 503 when none comes within Timeout; a request whose
// deadline passes before the model answers gets 504.
func TestQueueAndDeadline(t *testing.T) {
	m := netModel(t)
	x, _ := mnistTest(t, 1)
	good := jsonArray(x, 784)
	s := serve(t, m, Options{MaxConcurrent: 1, MaxQueue: 1, Timeout: 300 * time.Millisecond, ReadTimeout: 5 * time.Second})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", s.addr, len(good))
	waitFor(t, func() bool { return s.InFlight() == 1 })
	start := time.Now()
	r := s.do(t, "POST", "/v1/predict", "application/json", good)
	if r.code != 503 || !strings.Contains(r.errorText(), "the server is busy: no turn came within 300ms (--timeout)") {
		t.Errorf("a queued request: %d %s", r.code, r.body)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("the queued request was refused after %v, before its deadline", d)
	}
	// The held request finishes.
	conn.Write(good)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	// Its deadline passed while it waited for its body: 504.
	if res.StatusCode != 504 {
		t.Errorf("a request whose body came after its deadline: %d", res.StatusCode)
	}

	// Queued requests get their turn.
	q := serve(t, m, Options{MaxConcurrent: 1, MaxQueue: 8})
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = q.do(t, "POST", "/v1/predict", "application/json", good).code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("queued request %d: %d", i, c)
		}
	}
}

// TestPanicRecovered: a panic in a handler is a 500 with a JSON error
// and a log line with the stack; the server goes on.
func TestPanicRecovered(t *testing.T) {
	s := serve(t, netModel(t), Options{})
	s.mux.HandleFunc("/boom", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	r := s.do(t, "GET", "/boom", "", nil)
	if r.code != 500 || r.errorText() != "internal error: boom (logged)" {
		t.Errorf("%d %s", r.code, r.body)
	}
	if l := s.log.String(); !strings.Contains(l, "panic serving GET /boom: boom") || !strings.Contains(l, "goroutine") {
		t.Errorf("the log: %s", l)
	}
	if r := s.do(t, "GET", "/healthz", "", nil); r.code != 200 {
		t.Errorf("after the panic: %d", r.code)
	}
}

// TestShutdownFinishesInFlight: once Serve's context ends, a request
// under way (its body still coming) is answered in full, new connections
// are refused, and Serve returns nil.
func TestShutdownFinishesInFlight(t *testing.T) {
	m := netModel(t)
	x, _ := mnistTest(t, 1)
	good := jsonArray(x, 784)
	want := predict(t, m, dense([]int{1, 1, 28, 28}, x))
	s := serve(t, m, Options{})
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /v1/predict HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", s.addr, len(good), good[:10])
	waitFor(t, func() bool { return s.InFlight() == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned (%v) with a request under way", err)
	default:
	}
	conn.Write(good[10:])
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	preds := predictions(t, reply{code: res.StatusCode, body: b})
	if sameBits(floats32(t, preds[0].Outputs), want) >= 0 {
		t.Errorf("the request under way was answered %s", b)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the request under way finished")
	}
}
