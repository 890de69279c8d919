package serve

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"gorgonia.org/tensor"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/model"
	"gorun/script"
)

// tmpRoot holds the runs the tests train; TestMain removes it.
var tmpRoot string

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "serve-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// The models the tests serve, each trained once.
const (
	// netScript is a tiny MNIST classifier.
	netScript = `
train(
    model = nn.sequential(
        nn.conv2d(1, 4, kernel = 5, name = "conv1"),
        nn.relu(),
        nn.maxpool2d(2),
        nn.flatten(),
        nn.linear(576, 10, name = "fc"),
        nn.log_softmax(),
    ),
    loss = "nll",
    data = data.mnist(split = "train", limit = 256, normalize = (0.1307, 0.3081)),
    optimizer = optim.sgd(lr = 0.05, momentum = 0.5),
    batch_size = 64,
    epochs = 1,
    seed = 7,
)
`
	// regScript is a regression of 3 values onto 2, on .npy files.
	regScript = `
train(
    model = nn.linear(3, 2, name = "fc"),
    loss = "mse",
    data = data.tensors(x = "x.npy", y = "y.npy"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 8,
    epochs = 20,
    seed = 1,
)
`
	// textScript is a sequence model of the 11 characters of textData.
	textScript = `
x = data.input()
h = nn.embedding(11, 8, name = "wte")(x)
logits = nn.linear(8, 11, name = "head")(h)
train(
    model = logits,
    loss = "cross_entropy",
    data = data.text("text.txt", seq_len = 8, vocab = "chars"),
    optimizer = optim.adam(lr = 0.01),
    batch_size = 16,
    epochs = 2,
    seed = 3,
)
`
	textData = "the cat sat on the mat. "
)

type trainedModel struct {
	once            sync.Once
	script, weights string
	err             error
}

var (
	netRun, regRun, textRun trainedModel
)

// train trains src (with files written beside it) into a folder of
// tmpRoot once, and returns its script and weights.
func (tm *trainedModel) train(t testing.TB, name, src string, files map[string][]byte, sets ...string) (string, string) {
	t.Helper()
	tm.once.Do(func() {
		dir := filepath.Join(tmpRoot, name)
		if tm.err = os.MkdirAll(dir, 0o755); tm.err != nil {
			return
		}
		for f, b := range files {
			if tm.err = os.WriteFile(filepath.Join(dir, f), b, 0o644); tm.err != nil {
				return
			}
		}
		tm.script = filepath.Join(dir, name+".star")
		if tm.err = os.WriteFile(tm.script, []byte(src), 0o644); tm.err != nil {
			return
		}
		var ov []script.Override
		for _, s := range sets {
			o, err := script.ParseOverride(s)
			if err != nil {
				tm.err = err
				return
			}
			ov = append(ov, o)
		}
		s, err := script.Load(tm.script, script.WithOverrides(ov...))
		if err != nil {
			tm.err = err
			return
		}
		p, err := engine.Compile(s, engine.DefaultCluster())
		if err != nil {
			tm.err = err
			return
		}
		run := filepath.Join(dir, "run")
		if _, tm.err = runner.Run(p, runner.RunOptions{Out: run}); tm.err != nil {
			return
		}
		tm.weights = filepath.Join(run, "model.safetensors")
	})
	if tm.err != nil {
		t.Fatal(tm.err)
	}
	return tm.script, tm.weights
}

// load loads a trained model, closed when the test ends.
func load(t testing.TB, scriptPath, weights string, opts ...model.Option) *model.Model {
	t.Helper()
	m, err := model.LoadScript(scriptPath, weights, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func netModel(t testing.TB, opts ...model.Option) *model.Model {
	t.Helper()
	s, w := netRun.train(t, "net", netScript, nil)
	return load(t, s, w, opts...)
}

func regModel(t testing.TB) *model.Model {
	t.Helper()
	const n = 40
	x := make([]float32, n*3)
	y := make([]float32, n*2)
	for i := range n {
		for j := range 3 {
			x[i*3+j] = float32((i*7+j*3)%11) / 5
		}
		y[i*2] = 2*x[i*3] - x[i*3+1] + 0.5*x[i*3+2] + 1
		y[i*2+1] = x[i*3+2] - 1
	}
	s, w := regRun.train(t, "reg", regScript, map[string][]byte{
		"x.npy": npy([]int{n, 3}, x), "y.npy": npy([]int{n, 2}, y)})
	return load(t, s, w)
}

func textModel(t testing.TB) *model.Model {
	t.Helper()
	s, w := textRun.train(t, "text", textScript, map[string][]byte{"text.txt": []byte(strings.Repeat(textData, 40))})
	return load(t, s, w)
}

// npy is a .npy file of float32 values.
func npy(shape []int, v []float32) []byte {
	d := make([]string, len(shape))
	for i, n := range shape {
		d[i] = strconv.Itoa(n)
	}
	h := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }", strings.Join(d, ", "))
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// mnistTest is the first n MNIST test digits: normalised inputs (as the
// models were trained on) and raw pixels.
func mnistTest(t testing.TB, n int) (x []float32, raw []uint8) {
	t.Helper()
	ds, err := datasets.MNIST("test", "", 0.1307, 0.3081)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := datasets.MNIST("test", "", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	x = make([]float32, n*784)
	ds.Fill(idx, x, make([]int32, n))
	v := make([]float32, n*784)
	plain.Fill(idx, v, make([]int32, n))
	raw = make([]uint8, len(v))
	for i, f := range v {
		raw[i] = uint8(math.Round(float64(f) * 255))
	}
	return x, raw
}

// server is a Server of m serving on a loopback port, stopped when the
// test ends.
type server struct {
	*Server
	url  string
	addr string
	log  *syncBuffer
	stop func() error
}

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

func serve(t testing.TB, m *model.Model, opts Options) *server {
	t.Helper()
	logs := &syncBuffer{}
	opts.Log = log.New(logs, "", 0)
	s, err := New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var serr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serr = <-done:
			case <-time.After(s.ShutdownTimeout() + 5*time.Second):
				serr = fmt.Errorf("Serve did not return within %v of its context's end", s.ShutdownTimeout()+5*time.Second)
			}
		})
		return serr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return &server{Server: s, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), log: logs, stop: stop}
}

var client = &http.Client{Timeout: 20 * time.Second}

// reply is an answer: its status and body.
type reply struct {
	code int
	body []byte
	hdr  http.Header
}

// errorText is the "error" of a JSON error body.
func (r reply) errorText() string {
	var e struct{ Error string }
	if json.Unmarshal(r.body, &e) != nil {
		return "(not a JSON error: " + string(r.body) + ")"
	}
	return e.Error
}

func (s *server) do(t testing.TB, method, path, ctype string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return reply{code: res.StatusCode, body: b, hdr: res.Header}
}

// prediction is one sample's answer of /v1/predict.
type prediction struct {
	Class         *int
	Label         string
	Probability   float64
	Probabilities json.RawMessage
	Outputs       json.RawMessage
	Values        json.RawMessage
}

func predictions(t testing.TB, r reply) []prediction {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var out struct{ Predictions []prediction }
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
	return out.Predictions
}

// floats32 parses a JSON array of numbers (nested or not) as float32.
func floats32(t testing.TB, raw json.RawMessage) []float32 {
	t.Helper()
	p := arrayParser{data: raw, what: "answer"}
	if _, err := p.parse(); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return p.floats
}

// jsonArray writes v as a JSON array of rows of per values, each float32
// with its shortest representation.
func jsonArray(v []float32, per int) []byte {
	b := []byte{'['}
	for i := 0; i < len(v); i += per {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendArray(b, v[i:i+per], []int{per})
	}
	return append(b, ']')
}

// nested writes one MNIST sample nested as [1][28][28].
func nested(v []float32) []byte {
	return appendArray(nil, v, []int{1, 28, 28})
}

func predict(t testing.TB, m *model.Model, x *tensor.Dense) []float32 {
	t.Helper()
	out, err := m.Predict(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	return out.Data().([]float32)
}

func dense(shape []int, v any) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// sameBits says where got and want first differ, or -1.
func sameBits(got, want []float32) int {
	if len(got) != len(want) {
		return 0
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// TestPredictEqualsModel: /v1/predict's outputs and probabilities are
// Predict's and Probabilities' bit for bit, through JSON, for the same
// batches: a batch of 16 as flat rows, as nested samples and as
// {"inputs"}, the same batch as CSV, one sample nested [1 28 28], raw
// pixels as {"pixels"} and as PNG images; the class is the argmax.
func TestPredictEqualsModel(t *testing.T) {
	m := netModel(t)
	s := serve(t, m, Options{})
	const n = 16
	x, raw := mnistTest(t, n)
	want := predict(t, m, dense([]int{n, 1, 28, 28}, x))
	probs, err := m.Probabilities(dense([]int{n, 10}, want))
	if err != nil {
		t.Fatal(err)
	}
	wantP := probs.Data().([]float32)

	var nestedBatch []byte
	nestedBatch = append(nestedBatch, '[')
	for i := range n {
		if i > 0 {
			nestedBatch = append(nestedBatch, ',')
		}
		nestedBatch = append(nestedBatch, nested(x[i*784:(i+1)*784])...)
	}
	nestedBatch = append(nestedBatch, ']')
	var csvBody bytes.Buffer
	csvBody.WriteString("# a header row,\n")
	for i := range n {
		row := jsonArray(x[i*784:(i+1)*784], 784)
		csvBody.Write(bytes.Trim(row, "[]"))
		csvBody.WriteString("\r\n")
	}
	for _, c := range []struct {
		name, ctype string
		body        []byte
	}{
		{"flat rows", "application/json", jsonArray(x, 784)},
		{"nested", "application/json", nestedBatch},
		{"inputs", "application/json; charset=utf-8", []byte(`{"inputs": ` + string(nestedBatch) + `}`)},
		{"sniffed JSON", "", nestedBatch},
		{"csv", "text/csv", csvBody.Bytes()},
	} {
		t.Run(c.name, func(t *testing.T) {
			preds := predictions(t, s.do(t, "POST", "/v1/predict", c.ctype, c.body))
			if len(preds) != n {
				t.Fatalf("%d predictions for %d samples", len(preds), n)
			}
			for i, p := range preds {
				got := floats32(t, p.Outputs)
				if j := sameBits(got, want[i*10:(i+1)*10]); j >= 0 {
					t.Fatalf("sample %d: outputs %v, Predict's %v (first difference at %d)", i, got, want[i*10:(i+1)*10], j)
				}
				gp := floats32(t, p.Probabilities)
				if j := sameBits(gp, wantP[i*10:(i+1)*10]); j >= 0 {
					t.Fatalf("sample %d: probabilities %v, Probabilities' %v", i, gp, wantP[i*10:(i+1)*10])
				}
				best := 0
				for k, v := range gp {
					if v > gp[best] {
						best = k
					}
				}
				if p.Class == nil || *p.Class != best || float32(p.Probability) != gp[best] {
					t.Fatalf("sample %d: class %v probability %v; the likeliest is %d (%v)", i, p.Class, p.Probability, best, gp[best])
				}
			}
		})
	}

	// One sample, nested as the model's input shape.
	one := predict(t, m, dense([]int{1, 28, 28}, x[:784]))
	preds := predictions(t, s.do(t, "POST", "/v1/predict", "application/json", nested(x[:784])))
	if len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), one) >= 0 {
		t.Fatalf("one sample: %+v, want outputs %v", preds, one)
	}

	// Raw pixels: JSON and PNG images, as Predict takes uint8 pixels.
	wantRaw := predict(t, m, dense([]int{n, 1, 28, 28}, raw))
	rows := jsonRows(raw, n)
	preds = predictions(t, s.do(t, "POST", "/v1/predict", "application/json", []byte(`{"pixels": `+rows+`}`)))
	for i, p := range preds {
		if sameBits(floats32(t, p.Outputs), wantRaw[i*10:(i+1)*10]) >= 0 {
			t.Fatalf("pixels, sample %d: outputs differ from Predict's on uint8 pixels", i)
		}
	}
	for i := range 3 {
		img := grayPNG(t, raw[i*784:(i+1)*784], 28, 28)
		alone := predict(t, m, dense([]int{1, 1, 28, 28}, raw[i*784:(i+1)*784]))
		for _, ct := range []string{"image/png", ""} {
			preds := predictions(t, s.do(t, "POST", "/v1/predict", ct, img))
			if len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), alone) >= 0 {
				t.Fatalf("PNG of digit %d (Content-Type %q): %s; want outputs %v", i, ct, preds[0].Outputs, alone)
			}
		}
	}
}

// jsonRows writes n rows of uint8 values.
func jsonRows(v []uint8, n int) string {
	per := len(v) / n
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		for j, p := range v[i*per : (i+1)*per] {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(p)))
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// grayPNG encodes pixels as a grey PNG of w×h.
func grayPNG(t testing.TB, pix []uint8, w, h int) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	copy(img.Pix, pix)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestImageFormats: a digit as a PNG, a GIF, a BMP and a TIFF (each
// lossless) gives the outputs of Predict on its pixels; an RGB PNG of
// it (grey in every channel) is converted to grey as training converts
// images (PIL's convert("L")) and gives them too; a larger uniform image
// is resized as training resizes (still uniform), through
// Model.FromImage.
func TestImageFormats(t *testing.T) {
	m := netModel(t)
	s := serve(t, m, Options{})
	_, raw := mnistTest(t, 1)
	want := predict(t, m, dense([]int{1, 1, 28, 28}, raw))
	g := image.NewGray(image.Rect(0, 0, 28, 28))
	copy(g.Pix, raw)
	pal := make(color.Palette, 256)
	for i := range pal {
		pal[i] = color.Gray{uint8(i)}
	}
	p := image.NewPaletted(g.Rect, pal)
	copy(p.Pix, raw)
	rgb := image.NewNRGBA(g.Rect)
	for i, v := range raw {
		copy(rgb.Pix[4*i:], []uint8{v, v, v, 255})
	}
	encode := func(f func(io.Writer) error) []byte {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, c := range []struct {
		name, ctype string
		body        []byte
	}{
		{"PNG", "image/png", encode(func(w io.Writer) error { return png.Encode(w, g) })},
		{"GIF", "image/gif", encode(func(w io.Writer) error { return gif.Encode(w, p, nil) })},
		{"GIF, sniffed", "", encode(func(w io.Writer) error { return gif.Encode(w, p, nil) })},
		{"BMP", "image/bmp", encode(func(w io.Writer) error { return bmp.Encode(w, g) })},
		{"TIFF", "image/tiff", encode(func(w io.Writer) error { return tiff.Encode(w, g, nil) })},
		{"TIFF, sniffed", "", encode(func(w io.Writer) error { return tiff.Encode(w, g, nil) })},
		{"an RGB PNG", "image/png", encode(func(w io.Writer) error { return png.Encode(w, rgb) })},
	} {
		preds := predictions(t, s.do(t, "POST", "/v1/predict", c.ctype, c.body))
		if len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), want) >= 0 {
			t.Errorf("%s: %+v; want outputs %v", c.name, preds, want)
		}
	}
	uniform := make([]uint8, 56*40)
	for i := range uniform {
		uniform[i] = 77
	}
	x, err := m.FromImage(bytes.NewReader(grayPNG(t, uniform, 56, 40)))
	if err != nil {
		t.Fatal(err)
	}
	same := make([]uint8, 784)
	for i := range same {
		same[i] = 77
	}
	norm, err := m.Normalize(dense([]int{1, 28, 28}, same))
	if err != nil {
		t.Fatal(err)
	}
	if j := sameBits(x.Data().([]float32), norm.Data().([]float32)); j >= 0 {
		t.Errorf("a uniform 56×40 image resized to 28×28: value %d is %v, want %v", j, x.Data().([]float32)[j], norm.Data().([]float32)[j])
	}
}

// TestPredictRegressor: a regression model's values, from JSON and CSV,
// are Predict's; it refuses images.
func TestPredictRegressor(t *testing.T) {
	m := regModel(t)
	s := serve(t, m, Options{})
	x := []float32{0.5, -1.25, 3, 1, 2, 0.1}
	want := predict(t, m, dense([]int{2, 3}, x))
	for _, c := range []struct{ ctype, body string }{
		{"application/json", string(jsonArray(x, 3))},
		{"text/csv", "a,b,c\n0.5,-1.25,3\n1,2,0.1\n"},
		{"", "0.5, -1.25, 3\n1, 2, 0.1"},
	} {
		preds := predictions(t, s.do(t, "POST", "/v1/predict", c.ctype, []byte(c.body)))
		if len(preds) != 2 {
			t.Fatalf("%q: %d predictions", c.body, len(preds))
		}
		for i, p := range preds {
			if p.Class != nil || sameBits(floats32(t, p.Values), want[i*2:(i+1)*2]) >= 0 {
				t.Errorf("%q: sample %d: %+v, want values %v", c.body, i, p, want[i*2:(i+1)*2])
			}
		}
	}
	one := predict(t, m, dense([]int{3}, x[:3]))
	preds := predictions(t, s.do(t, "POST", "/v1/predict", "application/json", []byte("[0.5,-1.25,3]")))
	if len(preds) != 1 || sameBits(floats32(t, preds[0].Values), one) >= 0 {
		t.Errorf("one sample: %s, want %v", preds[0].Values, one)
	}
	r := s.do(t, "POST", "/v1/predict", "image/png", grayPNG(t, make([]uint8, 9), 3, 3))
	if r.code != http.StatusUnsupportedMediaType || !strings.Contains(r.errorText(), "this model does not take images (its data were tensors, samples of [3])") {
		t.Errorf("a PNG to a regressor: %d %s", r.code, r.body)
	}
}

// TestGenerate: /v1/generate continues a prompt as Model.Generate does,
// with gorun sample's defaults; the sequence model's /v1/predict takes
// token ids and answers logits; a classifier has no /v1/generate.
func TestGenerate(t *testing.T) {
	m := textModel(t)
	s := serve(t, m, Options{MaxTokens: 50})
	want, err := m.Generate(context.Background(), "the ", model.GenerateOptions{Tokens: 30, Temperature: 0.5, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	r := s.do(t, "POST", "/v1/generate", "application/json", []byte(`{"prompt": "the ", "tokens": 30, "temperature": 0.5, "seed": 9}`))
	var got struct {
		Text   string
		Tokens int
		Seed   uint64
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.Text != want || got.Tokens != 30 || got.Seed != 9 {
		t.Fatalf("generate: %d %s; want the text %q", r.code, r.body, want)
	}
	def, err := m.Generate(context.Background(), "cat", model.GenerateOptions{Tokens: 20, Temperature: DefaultTemperature, Seed: DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	r = s.do(t, "POST", "/v1/generate", "", []byte(`{"prompt": "cat", "tokens": 20}`))
	if r.code != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.Text != def {
		t.Fatalf("generate with the default temperature and seed: %d %s; want %q", r.code, r.body, def)
	}
	for _, c := range []struct {
		body string
		code int
		want string
	}{
		{`{"prompt": "the ", "tokens": 51}`, 400, `"tokens": 51: want 1 to 50 (--max-tokens)`},
		{`{"prompt": "the ", "tokens": 0}`, 400, `"tokens": 0: want 1 to 50`},
		{`{"prompt": "the ", "temperature": -1}`, 400, `"temperature": -1: want 0 (greedy: the likeliest token) or more`},
		{`{"prompt": "the ", "temperature": 1e999}`, 400, `the body is not a generate request`},
		{`{"prompt": ""}`, 400, `no "prompt"`},
		{`{"tokens": 3}`, 400, `no "prompt"`},
		{`{"prompt": "the", "top_k": 3}`, 400, `unknown field "top_k"`},
		{`{"prompt": "QUIZ"}`, 400, `prompt: `},
		{`{"prompt": "a"} {"prompt": "b"}`, 400, `more than one JSON value`},
		{`not json`, 400, `the body is not a generate request`},
	} {
		r := s.do(t, "POST", "/v1/generate", "application/json", []byte(c.body))
		if r.code != c.code || !strings.Contains(r.errorText(), c.want) {
			t.Errorf("generate %s: %d %q; want %d saying %q", c.body, r.code, r.errorText(), c.code, c.want)
		}
	}
	r = s.do(t, "POST", "/v1/generate", "text/plain", []byte(`{"prompt": "the"}`))
	if r.code != http.StatusUnsupportedMediaType {
		t.Errorf("generate as text/plain: %d %s", r.code, r.body)
	}

	// Token ids to /v1/predict: logits [T][V], Predict's.
	ids := []int64{0, 1, 2, 3, 4, 5, 6, 7}
	wantLogits := predict(t, m, dense([]int{1, 8}, ids))
	preds := predictions(t, s.do(t, "POST", "/v1/predict", "application/json", []byte(`[[0,1,2,3,4,5,6,7]]`)))
	if len(preds) != 1 || sameBits(floats32(t, preds[0].Outputs), wantLogits) >= 0 {
		t.Fatalf("token ids: %+v", preds)
	}
	for _, c := range []struct{ ctype, body, want string }{
		{"application/json", `[[0,1,2,3,4,5,6,11]]`, "sample 0 holds token id 11 at position 7: the vocabulary has ids 0 to 10"},
		{"application/json", `[[0,1,2,3,4,5,6,1.5]]`, "the body[0][7]: 1.5 is not a token id (an integer)"},
		{"application/json", `{"pixels": [[0,1,2,3,4,5,6,7]]}`, `"pixels": the model is a sequence model of token ids`},
		{"text/csv", "0,1,2,3,4,5,6,x\n", `line 1, column 8: "x" is not a token id`},
	} {
		r := s.do(t, "POST", "/v1/predict", c.ctype, []byte(c.body))
		if r.code != 400 || !strings.Contains(r.errorText(), c.want) {
			t.Errorf("predict %s: %d %q; want 400 saying %q", c.body, r.code, r.errorText(), c.want)
		}
	}

	cls := serve(t, netModel(t), Options{})
	r = cls.do(t, "POST", "/v1/generate", "application/json", []byte(`{"prompt": "the"}`))
	if r.code != http.StatusNotFound || !strings.Contains(r.errorText(), "the model is a classifier, not a sequence model") {
		t.Errorf("generate on a classifier: %d %s", r.code, r.body)
	}
}

// TestHealthzAndMetrics: /healthz gives the model's kind and shapes (503
// once stopping); /metrics counts requests by route and code, latency,
// samples per request and the model's batches.
func TestHealthzAndMetrics(t *testing.T) {
	m := netModel(t)
	s := serve(t, m, Options{})
	r := s.do(t, "GET", "/healthz", "", nil)
	var h struct {
		Status      string
		Kind        string
		InputShape  []int `json:"input_shape"`
		OutputShape []int `json:"output_shape"`
		Classes     int
		Images      bool
	}
	if r.code != 200 || json.Unmarshal(r.body, &h) != nil || h.Status != "ok" || h.Kind != "classifier" ||
		fmt.Sprint(h.InputShape) != "[1 28 28]" || fmt.Sprint(h.OutputShape) != "[10]" || h.Classes != 10 || !h.Images {
		t.Fatalf("/healthz: %d %s", r.code, r.body)
	}
	x, _ := mnistTest(t, 3)
	predictions(t, s.do(t, "POST", "/v1/predict", "application/json", jsonArray(x, 784)))
	s.do(t, "POST", "/v1/predict", "application/json", []byte("[1,2]"))
	r = s.do(t, "GET", "/metrics", "", nil)
	if r.code != 200 || !strings.HasPrefix(r.hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", r.code, r.hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`gorun_serve_requests_total{code="200",route="healthz"} 1`,
		`gorun_serve_requests_total{code="200",route="predict"} 1`,
		`gorun_serve_requests_total{code="400",route="predict"} 1`,
		`gorun_serve_request_duration_seconds_count{route="predict"} 2`,
		`gorun_serve_request_duration_seconds_bucket{route="predict",le="+Inf"} 2`,
		`gorun_serve_request_samples_bucket{le="4"} 1`,
		`gorun_serve_request_samples_sum 3`,
		`gorun_serve_in_flight_requests 0`,
		`gorun_serve_queued_requests 0`,
		`gorun_model_requests_total 1`,
		`gorun_model_samples_total 3`,
		`gorun_model_batches_total 1`,
		`gorun_model_mean_batch_size 3`,
		`gorun_model_max_batch 64`,
		`# TYPE gorun_serve_request_duration_seconds histogram`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(string(r.body), want+"") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	s.stopping.Store(true)
	r = s.do(t, "GET", "/healthz", "", nil)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"status":"stopping"`) {
		t.Errorf("/healthz while stopping: %d %s", r.code, r.body)
	}
	s.stopping.Store(false)
}

// TestClassNamesAndHosts: class names give each prediction its "label"
// (and must be one per class); Options.Hosts adds names a request's Host
// may give, AnyHost takes any.
func TestClassNamesAndHosts(t *testing.T) {
	m := netModel(t)
	if _, err := New(m, Options{ClassNames: []string{"a", "b"}}); err == nil || err.Error() != "serve: 2 class names for a classifier of 10 classes" {
		t.Errorf("2 names for 10 classes: %v", err)
	}
	names := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
	x, _ := mnistTest(t, 4)
	for _, c := range []struct {
		opts Options
		host string
		code int
	}{
		{Options{ClassNames: names}, "127.0.0.1:8080", 200},
		{Options{ClassNames: names}, "[::1]:8080", 200},
		{Options{ClassNames: names}, "LOCALHOST", 200},
		{Options{ClassNames: names}, "model.internal:8080", 403},
		{Options{ClassNames: names, Hosts: []string{"model.internal"}}, "model.internal:8080", 200},
		{Options{ClassNames: names, Hosts: []string{"model.internal"}}, "other.internal", 403},
		{Options{ClassNames: names, AnyHost: true}, "other.internal", 200},
	} {
		s, err := New(m, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "/v1/predict", bytes.NewReader(jsonArray(x, 784)))
		req.Host = c.host
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("Host %s, Hosts %v: %d %s", c.host, c.opts.Hosts, rec.Code, rec.Body)
			continue
		}
		if c.code != 200 {
			continue
		}
		for i, p := range predictions(t, reply{code: 200, body: rec.Body.Bytes()}) {
			if p.Class == nil || p.Label != names[*p.Class] {
				t.Errorf("sample %d: class %v, label %q", i, p.Class, p.Label)
			}
		}
	}
}
