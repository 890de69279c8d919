package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gorgonia.org/tensor"

	"gorun/model"
)

// predictCmd is `gorun predict RUN_DIR FILE... [--json] [--key NAME]
// [--weights FILE] [--normalized]`: it loads the run's model (package
// model) and prints, for every sample of every file, the predicted class
// (its name when the training data named the classes) and its
// probability (a classifier) or the values (a regressor), one line each.
//
// A file is, by its name's ending:
//   - an image (.png, .jpg, .jpeg, .gif, .bmp, .tif, .tiff, .webp), one
//     sample of a model trained on images, made as training made its
//     samples (Model.FromImage); consecutive images run as one batch;
//   - a table (.csv) in the form of a data.csv model's training file,
//     one sample a row (Model.FromCSV: its columns by name, standardised);
//   - else a .npy file or a tensor of a .safetensors file, [N, ...sample]
//     or one sample, read as data.tensors reads its samples: uint8 pixels
//     become v/255, and every value is then normalised with the training
//     set's normalisation (Model.Normalize); --normalized takes float files
//     as the model's inputs already.
func predictCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun predict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per sample (file, index, class, label, probability, probabilities, outputs; or values)")
	key := fs.String("key", "", "the tensor to read from .safetensors files (default: a file's only tensor)")
	weights := fs.String("weights", "", "weights `file` (default RUN_DIR/model.safetensors)")
	normalized := fs.Bool("normalized", false, "float array files hold the model's inputs, already normalised as in training")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun predict RUN_DIR FILE... [--json] [--key NAME] [--weights FILE] [--normalized]")
		fmt.Fprintln(stderr, "FILE: an image (PNG, JPEG, GIF, BMP, TIFF, WebP), a .csv table, a .npy or .safetensors array")
		fs.PrintDefaults()
	}
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return &usageError{fmt.Sprintf("predict needs a RUN_DIR and at least one FILE (an image, .csv, .npy or .safetensors), got %d arguments", len(pos))}
	}
	dir, files := pos[0], pos[1:]
	for _, f := range files {
		if st, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %w", f, errors.Unwrap(err))
		} else if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: not a file", f)
		}
	}
	var opts []model.Option
	if *weights != "" {
		opts = append(opts, model.WithWeights(*weights))
	}
	m, err := model.Load(dir, opts...)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "model: "))
	}
	defer m.Close()
	if m.Kind() == model.Sequence {
		return fmt.Errorf("%s holds a sequence model of token windows: gorun sample %s --prompt TEXT continues a text with it", dir, dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := &predictor{m: m, key: *key, normalized: *normalized, w: newLineWriter(stdout), asJSON: *asJSON}
	for i := 0; i < len(files); {
		n := 1
		if isImageFile(files[i]) {
			for i+n < len(files) && isImageFile(files[i+n]) {
				n++
			}
		}
		if err := p.files(ctx, files[i:i+n]); err != nil {
			if ctx.Err() != nil {
				return &interrupted{msg: "predict: interrupted"}
			}
			return err
		}
		i += n
	}
	return nil
}

// imageExtensions are the file name endings gorun predict reads as
// images.
var imageExtensions = []string{".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"}

func isImageFile(name string) bool {
	return slices.Contains(imageExtensions, strings.ToLower(filepath.Ext(name)))
}

// predictor predicts files' samples and prints a line each.
type predictor struct {
	m          *model.Model
	key        string
	normalized bool
	asJSON     bool
	w          *lineWriter
}

// files predicts one file, or several image files as one batch.
func (p *predictor) files(ctx context.Context, files []string) error {
	m := p.m
	file := files[0]
	fail := func(err error) error {
		msg := strings.TrimPrefix(err.Error(), "model: ")
		if !strings.HasPrefix(msg, file) {
			msg = file + ": " + msg
		}
		return errors.New(msg)
	}
	var x *tensor.Dense
	var names []string // of each sample
	var err error
	switch {
	case isImageFile(file):
		var v []float32
		for _, f := range files {
			file = f
			one, err := fromFile(f, m.FromImage)
			if err != nil {
				return fail(err)
			}
			v = append(v, one.Data().([]float32)...)
			names = append(names, filepath.ToSlash(f))
		}
		x = tensor.New(tensor.WithShape(append([]int{len(files)}, m.InputShape()...)...), tensor.WithBacking(v))
	case strings.EqualFold(filepath.Ext(file), ".csv"):
		if x, err = fromFile(file, m.FromCSV); err != nil {
			return fail(err)
		}
	default:
		if x, err = model.ReadArray(file, p.key); err != nil {
			return err
		}
		if !p.normalized || x.Dtype() == tensor.Uint8 {
			if x, err = m.Normalize(x); err != nil {
				return fail(err)
			}
		}
	}
	out, err := m.Predict(ctx, x)
	if err != nil {
		return fail(err)
	}
	single := len(out.Shape()) == len(m.OutputShape())
	n := 1
	if !single {
		n = out.Shape()[0]
	}
	if names == nil {
		name := filepath.ToSlash(file)
		names = []string{name}
		if !single {
			names = make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("%s[%d]", name, i)
			}
		}
	}
	vals := out.Data().([]float32)
	per := len(vals) / n
	var probs []float32
	if m.Kind() == model.Classifier {
		pr, err := m.Probabilities(out)
		if err != nil {
			return fail(err)
		}
		probs = pr.Data().([]float32)
	}
	classNames := m.ClassNames()
	for i := range n {
		row := vals[i*per : (i+1)*per]
		// The file and the sample's index in it, for --json.
		src, index := file, i
		if len(files) > 1 || isImageFile(file) {
			src, index = files[i], 0
		}
		if probs == nil { // regression: the values
			if p.asJSON {
				p.w.json(map[string]any{"file": src, "index": index, "values": row})
				continue
			}
			s := make([]string, len(row))
			for j, v := range row {
				s[j] = strconv.FormatFloat(float64(v), 'g', 6, 32)
			}
			p.w.printf("%s  %s\n", names[i], strings.Join(s, " "))
			continue
		}
		pr := probs[i*per : (i+1)*per]
		best := 0
		for c, v := range pr {
			if v > pr[best] {
				best = c
			}
		}
		class := strconv.Itoa(best)
		if classNames != nil {
			class = classNames[best]
		}
		if p.asJSON {
			rec := map[string]any{"file": src, "index": index, "class": best, "probability": pr[best], "probabilities": pr, "outputs": row}
			if classNames != nil {
				rec["label"] = classNames[best]
			}
			p.w.json(rec)
			continue
		}
		p.w.printf("%s  %s  %.4f\n", names[i], class, pr[best])
	}
	return p.w.err
}

// fromFile opens a file and makes it model inputs with read (FromImage,
// FromCSV), whose errors name the file.
func fromFile(path string, read func(io.Reader) (*tensor.Dense, error)) (*tensor.Dense, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f)
}

// lineWriter writes lines and keeps the first error.
type lineWriter struct {
	w   io.Writer
	err error
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{w: w} }

func (l *lineWriter) printf(format string, a ...any) {
	if l.err == nil {
		_, l.err = fmt.Fprintf(l.w, format, a...)
	}
}

func (l *lineWriter) json(v any) {
	if l.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		l.err = err
		return
	}
	_, l.err = l.w.Write(append(b, '\n'))
}
