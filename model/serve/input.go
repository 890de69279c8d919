package serve

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"gorun/model"
)

// The bodies /v1/predict takes.
type bodyKind int

const (
	bodyUnknown bodyKind = iota
	bodyJSON
	bodyCSV
	// The images (Model.FromImage decodes them).
	bodyPNG
	bodyJPEG
	bodyGIF
	bodyBMP
	bodyTIFF
	bodyWebP
)

func (k bodyKind) String() string {
	return [...]string{"unknown", "JSON", "CSV", "PNG", "JPEG", "GIF", "BMP", "TIFF", "WebP"}[k]
}

// imageTypes are the Content-Types of images.
var imageTypes = map[string]bodyKind{
	"image/png": bodyPNG, "image/jpeg": bodyJPEG, "image/jpg": bodyJPEG, "image/gif": bodyGIF,
	"image/bmp": bodyBMP, "image/x-ms-bmp": bodyBMP, "image/tiff": bodyTIFF, "image/webp": bodyWebP,
}

// accepted lists the Content-Types of /v1/predict, for messages.
const accepted = "application/json, text/csv or an image (image/png, image/jpeg, image/gif, image/bmp, image/tiff, image/webp)"

// kindOf is the body's kind by its Content-Type; a body without one, or
// with a type that says nothing of its content (application/octet-stream,
// or curl's default for --data, application/x-www-form-urlencoded), is
// sniffed.
func kindOf(r *http.Request, body []byte) (bodyKind, error) {
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %q: %v; send %s", ct, err, accepted)
		}
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			return bodyJSON, nil
		case mt == "text/csv":
			return bodyCSV, nil
		case imageTypes[mt] != bodyUnknown:
			return imageTypes[mt], nil
		case mt == "application/octet-stream" || mt == "application/x-www-form-urlencoded":
		default:
			return 0, errorf(http.StatusUnsupportedMediaType, "Content-Type %s: /v1/predict takes %s", mt, accepted)
		}
	}
	return sniff(body)
}

// sniff tells a body's kind from its first bytes.
func sniff(body []byte) (bodyKind, error) {
	switch {
	case bytes.HasPrefix(body, []byte("\x89PNG\r\n\x1a\n")):
		return bodyPNG, nil
	case bytes.HasPrefix(body, []byte("\xff\xd8\xff")):
		return bodyJPEG, nil
	case bytes.HasPrefix(body, []byte("GIF87a")) || bytes.HasPrefix(body, []byte("GIF89a")):
		return bodyGIF, nil
	case bytes.HasPrefix(body, []byte("II*\x00")) || bytes.HasPrefix(body, []byte("MM\x00*")):
		return bodyTIFF, nil
	case len(body) >= 12 && bytes.Equal(body[:4], []byte("RIFF")) && bytes.Equal(body[8:12], []byte("WEBP")):
		return bodyWebP, nil
	case bytes.HasPrefix(body, []byte("BM")):
		return bodyBMP, nil
	}
	t := bytes.TrimLeft(body, " \t\r\n\ufeff")
	if len(t) == 0 {
		return 0, errorf(http.StatusBadRequest, "the body is empty: send %s", accepted)
	}
	switch c := t[0]; {
	case c == '[' || c == '{':
		return bodyJSON, nil
	case c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.':
		return bodyCSV, nil
	}
	return 0, errorf(http.StatusUnsupportedMediaType, "the body is none of %s (it starts %q); say which with Content-Type", accepted, head(body))
}

// head is the start of a body, for messages.
func head(b []byte) string {
	if len(b) > 16 {
		return string(b[:16]) + "…"
	}
	return string(b)
}

// checkJSONType refuses a body whose Content-Type says it is not JSON;
// none, application/octet-stream and application/x-www-form-urlencoded
// (curl's default for --data) are read as JSON.
func checkJSONType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/json", strings.HasSuffix(mt, "+json"), mt == "application/octet-stream", mt == "application/x-www-form-urlencoded":
		return nil
	}
	return errorf(http.StatusUnsupportedMediaType, "Content-Type %q: %s takes application/json", ct, r.URL.Path)
}

// readBody reads a request's body (under MaxBody: the MaxBytesReader
// that post set).
func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := io.Copy(&buf, r.Body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// predict answers /v1/predict: the body as a batch, Predict, the outputs.
func (s *Server) predict(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	kind, err := kindOf(r, body)
	if err != nil {
		return err
	}
	var x *tensor.Dense
	switch kind {
	case bodyJSON:
		x, err = s.jsonInput(body)
	case bodyCSV:
		x, err = s.csvInput(body)
	default:
		x, err = s.imageInput(body, kind)
	}
	if err != nil {
		return err
	}
	n := x.Shape()[0]
	s.metrics.samples.Observe(float64(n))
	out, err := s.m.Predict(ctx, x)
	if err != nil {
		return s.modelError(ctx, err)
	}
	b, err := s.answer(out, n)
	if err != nil {
		return err
	}
	s.write(w, http.StatusOK, "application/json", b)
	return nil
}

// jsonInput reads a JSON body: an array (a number, for a model of one
// value per sample), or an object {"inputs": array} (the model's inputs)
// or {"pixels": array} (raw pixels 0 to 255, normalised as in training).
func (s *Server) jsonInput(body []byte) (*tensor.Dense, error) {
	p := arrayParser{data: body, form: s.valueForm(), what: "the body"}
	p.space()
	var shape []int
	var err error
	if p.pos < len(p.data) && p.data[p.pos] == '{' {
		shape, err = p.object(s.images)
	} else {
		shape, err = p.parse()
	}
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	n, err := s.batchOf(shape, p.what)
	if err != nil {
		return nil, err
	}
	full := append([]int{n}, s.sample...)
	switch p.form {
	case formTokens:
		if err := s.checkTokens(p.ids, p.what); err != nil {
			return nil, err
		}
		return tensor.New(tensor.WithShape(full...), tensor.WithBacking(p.ids)), nil
	case formPixels:
		return tensor.New(tensor.WithShape(full...), tensor.WithBacking(p.pixels)), nil
	}
	return tensor.New(tensor.WithShape(full...), tensor.WithBacking(p.floats)), nil
}

// valueForm is how the model's inputs are written: float32 values, or
// token ids.
func (s *Server) valueForm() valueForm {
	if s.m.Kind() == model.Sequence {
		return formTokens
	}
	return formFloats
}

// batchOf matches a body's shape with the model's: one sample (nested or
// a flat row) or a batch of them; it returns the number of samples.
func (s *Server) batchOf(shape []int, what string) (int, error) {
	sample := s.sample
	eq := func(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	n := -1
	switch {
	case eq(shape, sample), len(shape) == 1 && shape[0] == s.per:
		n = 1
	case len(shape) == len(sample)+1 && eq(shape[1:], sample), len(shape) == 2 && shape[1] == s.per:
		n = shape[0]
	case len(shape) == 0 && s.per == 1:
		n = 1
	}
	if n == 0 || n < 0 && len(shape) > 0 && shape[0] == 0 {
		return 0, errorf(http.StatusBadRequest, "%s holds no samples (shape %v)", what, shape)
	}
	if n < 0 {
		return 0, errorf(http.StatusBadRequest, "%s has shape %v; the model takes %s", what, shape, s.takes())
	}
	return n, nil
}

// takes says what shapes the model takes, for messages.
func (s *Server) takes() string {
	if len(s.sample) == 1 {
		return fmt.Sprintf("one sample [%d] or a batch [N %d]", s.per, s.per)
	}
	return fmt.Sprintf("one sample %v (or %d values in a row), or a batch [N %s] (or [N %d])", s.sample, s.per, dims(s.sample), s.per)
}

func dims(s []int) string {
	t := fmt.Sprint(s)
	return t[1 : len(t)-1]
}

// checkTokens refuses token ids outside the vocabulary.
func (s *Server) checkTokens(ids []int64, what string) error {
	v := int64(s.m.Classes())
	for i, id := range ids {
		if id < 0 || id >= v {
			return errorf(http.StatusBadRequest, "%s: sample %d holds token id %d at position %d: the vocabulary has ids 0 to %d", what, i/s.per, id, i%s.per, v-1)
		}
	}
	return nil
}

// csvInput reads CSV rows of numbers, one sample each (a row of
// InputShape's values in row-major order), with an optional header row.
// For a model trained on data.csv, a body whose first row is a header is
// a table such as the training file: its rows become samples through
// Model.FromCSV (the model's columns by name, standardised as in
// training).
func (s *Server) csvInput(body []byte) (*tensor.Dense, error) {
	if _, ok := s.m.CSVMeta(); ok && !numericRow(body) {
		x, err := s.m.FromCSV(bytes.NewReader(body))
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "%s", strings.Replace(err.Error(), "model: the CSV", "the CSV body", 1))
		}
		return x, nil
	}
	cr := csv.NewReader(bytes.NewReader(body))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	form := s.valueForm()
	var floats []float32
	var ids []int64
	rows := 0
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, errorf(http.StatusBadRequest, "the CSV body, line %d: %v", pe.Line, pe.Err)
			}
			return nil, errorf(http.StatusBadRequest, "the CSV body: %v", err)
		}
		row, _ := cr.FieldPos(0)
		if line == 1 && !numeric(rec[0]) {
			continue // a header
		}
		if len(rec) != s.per {
			return nil, errorf(http.StatusBadRequest, "the CSV body, line %d: %d values; the model takes %d per row (one sample %v)", row, len(rec), s.per, s.sample)
		}
		for j, f := range rec {
			f = strings.TrimSpace(f)
			at := func(format string, a ...any) error {
				return errorf(http.StatusBadRequest, "the CSV body, line %d, column %d: %s", row, j+1, fmt.Sprintf(format, a...))
			}
			if f == "" {
				return nil, at("no value (missing values are refused)")
			}
			if form == formTokens {
				id, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return nil, at("%q is not a token id (an integer)", f)
				}
				ids = append(ids, id)
				continue
			}
			v, err := strconv.ParseFloat(f, 32)
			if err != nil {
				if errors.Is(err, strconv.ErrRange) {
					return nil, at("%s is beyond float32's range", f)
				}
				return nil, at("%q is not a number", f)
			}
			if v-v != 0 {
				return nil, at("%s: inputs must be finite", f)
			}
			floats = append(floats, float32(v))
		}
		rows++
	}
	if rows == 0 {
		return nil, errorf(http.StatusBadRequest, "the CSV body holds no rows")
	}
	shape := append([]int{rows}, s.sample...)
	if form == formTokens {
		if err := s.checkTokens(ids, "the CSV body"); err != nil {
			return nil, err
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(ids)), nil
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(floats)), nil
}

// numericRow says whether a CSV body's first field is a number (else its
// first row is a header).
func numericRow(body []byte) bool {
	cr := csv.NewReader(bytes.NewReader(body))
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	return err != nil || numeric(rec[0])
}

// numeric says whether a CSV field is a number (else the row is a
// header).
func numeric(f string) bool {
	_, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}

// valueForm is the type a JSON array's numbers are read as.
type valueForm int

const (
	formFloats valueForm = iota // float32: the model's inputs
	formPixels                  // uint8: raw pixels
	formTokens                  // int64: token ids
)

// maxRank bounds how deeply JSON arrays may nest.
const maxRank = 8

// arrayParser reads a JSON number or nested arrays of numbers into one
// flat slice and a shape, refusing ragged arrays; it builds no Go value
// per number (encoding/json would, at ~40 bytes each). Numbers are parsed
// as float32 directly (strconv.ParseFloat(s, 32)), so a float32 written
// with its shortest representation comes back with the same bits.
type arrayParser struct {
	data   []byte
	pos    int
	form   valueForm
	what   string // "the body", "inputs", "pixels": for messages
	shape  []int  // the length of the arrays at each depth, -1 until known
	rank   int    // the depth of the numbers, -1 until known
	index  []int  // where the parser is, for messages
	floats []float32
	pixels []uint8
	ids    []int64
}

// parse reads the whole of data, one array; it returns the array's
// shape.
func (p *arrayParser) parse() ([]int, error) {
	if err := p.array(); err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(p.data) {
		return nil, p.errorf("more after the end of the array: %q", head(p.data[p.pos:]))
	}
	return p.shape, nil
}

// object reads the whole of data, an object of one key, "inputs" or
// (images) "pixels", whose value is the array; it returns the array's
// shape.
func (p *arrayParser) object(images bool) ([]int, error) {
	want := `want {"inputs": [...]} (the model's inputs)`
	if images {
		want = `want {"inputs": [...]} (the model's inputs) or {"pixels": [...]} (raw pixels 0 to 255)`
	}
	p.pos++ // {
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return nil, fmt.Errorf("the JSON object has no key: %s", want)
	}
	end := p.pos + 1
	for ; end < len(p.data) && p.data[end] != '"'; end++ {
		if p.data[end] == '\\' {
			end++
		}
	}
	var key string
	if end >= len(p.data) || json.Unmarshal(p.data[p.pos:end+1], &key) != nil {
		return nil, fmt.Errorf("the JSON object's first key is not a JSON string: %s", want)
	}
	p.pos = end + 1
	switch {
	case key == "inputs":
	case key == "pixels" && p.form == formTokens:
		return nil, fmt.Errorf(`"pixels": the model is a sequence model of token ids: send them as "inputs"`)
	case key == "pixels" && images:
		p.form = formPixels
	default:
		return nil, fmt.Errorf("the JSON object has the key %q: %s", key, want)
	}
	p.what = key
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != ':' {
		return nil, fmt.Errorf("the JSON object: no colon after %q", key)
	}
	p.pos++
	if err := p.array(); err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ',' {
		return nil, fmt.Errorf("the JSON object has another key after %q: %s", key, want)
	}
	if p.pos >= len(p.data) || p.data[p.pos] != '}' {
		return nil, fmt.Errorf("the JSON object does not end after %q", key)
	}
	p.pos++
	p.space()
	if p.pos < len(p.data) {
		return nil, fmt.Errorf("more after the end of the JSON object: %q", head(p.data[p.pos:]))
	}
	return p.shape, nil
}

// array reads one number or nested arrays of numbers from p.pos, and
// sets p.shape.
func (p *arrayParser) array() error {
	p.rank = -1
	if err := p.value(0); err != nil {
		return err
	}
	if p.rank < 0 { // only empty arrays
		p.rank = len(p.shape)
	}
	p.shape = p.shape[:p.rank]
	for i, d := range p.shape {
		if d < 0 {
			p.shape[i] = 0
		}
	}
	return nil
}

func (p *arrayParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\r', '\n':
			p.pos++
		default:
			return
		}
	}
}

// where is the position of the value being read, as in inputs[0][3].
func (p *arrayParser) where() string {
	var b strings.Builder
	b.WriteString(p.what)
	for _, i := range p.index {
		fmt.Fprintf(&b, "[%d]", i)
	}
	return b.String()
}

func (p *arrayParser) errorf(format string, a ...any) error {
	return fmt.Errorf("%s: %s", p.where(), fmt.Sprintf(format, a...))
}

// value reads an array or a number at depth d.
func (p *arrayParser) value(d int) error {
	p.space()
	if p.pos >= len(p.data) {
		return p.errorf("the JSON ends early")
	}
	if p.data[p.pos] != '[' {
		if p.rank >= 0 && p.rank != d {
			return p.errorf("a number where the other values are arrays %d deep: the array is ragged", p.rank)
		}
		p.rank = d
		return p.number()
	}
	if d >= maxRank {
		return p.errorf("arrays nested deeper than %d", maxRank)
	}
	if p.rank >= 0 && d >= p.rank {
		return p.errorf("an array where the other values are numbers: the array is ragged")
	}
	if len(p.shape) == d {
		p.shape = append(p.shape, -1)
	}
	p.pos++ // [
	p.index = append(p.index, 0)
	n := 0
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
	} else {
		for {
			p.index[d] = n
			if err := p.value(d + 1); err != nil {
				return err
			}
			n++
			p.space()
			if p.pos >= len(p.data) {
				return p.errorf("the JSON ends early")
			}
			c := p.data[p.pos]
			p.pos++
			if c == ']' {
				break
			}
			if c != ',' {
				return p.errorf("%s where a comma or ] should be", quoteByte(c))
			}
		}
	}
	p.index = p.index[:d]
	switch want := p.shape[d]; {
	case want < 0:
		p.shape[d] = n
	case want != n:
		return p.errorf("%d values where the arrays before hold %d: the array is ragged", n, want)
	}
	if n == 0 && p.rank < 0 {
		p.rank = d + 1
	}
	return nil
}

// number reads one number at p.pos.
func (p *arrayParser) number() error {
	start := p.pos
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			p.pos++
			continue
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			for p.pos < len(p.data) && (p.data[p.pos] >= 'a' && p.data[p.pos] <= 'z' || p.data[p.pos] >= 'A' && p.data[p.pos] <= 'Z') {
				p.pos++
			}
			word := string(p.data[start:p.pos])
			switch strings.ToLower(strings.TrimLeft(word, "+-")) {
			case "nan", "inf", "infinity":
				return p.errorf("%s: JSON has no such number, and inputs must be finite", word)
			}
			return p.errorf("%q is not a number", word)
		}
		break
	}
	tok := string(p.data[start:p.pos])
	if tok == "" {
		if p.pos < len(p.data) {
			return p.errorf("%s where a number or an array should be", quoteByte(p.data[p.pos]))
		}
		return p.errorf("the JSON ends early")
	}
	switch p.form {
	case formTokens:
		id, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			return p.errorf("%s is not a token id (an integer)", tok)
		}
		p.ids = append(p.ids, id)
	case formPixels:
		v, err := strconv.ParseUint(tok, 10, 8)
		if err != nil {
			return p.errorf("%s is not a pixel value (an integer from 0 to 255)", tok)
		}
		p.pixels = append(p.pixels, uint8(v))
	default:
		v, err := strconv.ParseFloat(tok, 32)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return p.errorf("%s is beyond float32's range", tok)
			}
			return p.errorf("%q is not a number", tok)
		}
		p.floats = append(p.floats, float32(v))
	}
	return nil
}

// quoteByte writes a byte of the body, for messages: a printable ASCII
// character quoted, else its value.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
