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
	"strconv"
	"strings"
	"syscall"

	"gorgonia.org/tensor"

	"gorun/model"
)

// predictCmd is `gorun predict RUN_DIR FILE... [--json] [--key NAME]
// [--weights FILE] [--normalized]`: it loads the run's model (package
// model) and prints, for every sample of every file, the predicted class
// and its probability (a classifier) or the values (a regressor), one
// line each.
//
// A file is a .npy file or a tensor of a .safetensors file, [N, ...sample]
// or one sample, read as data.tensors reads its samples: uint8 pixels
// become v/255, and every value is then normalised with the training
// set's normalize; --normalized takes float files as the model's inputs
// already.
func predictCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun predict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per sample (file, index, class, probability, probabilities; or values)")
	key := fs.String("key", "", "the tensor to read from .safetensors files (default: a file's only tensor)")
	weights := fs.String("weights", "", "weights `file` (default RUN_DIR/model.safetensors)")
	normalized := fs.Bool("normalized", false, "float files hold the model's inputs, already normalised as in training")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun predict RUN_DIR FILE... [--json] [--key NAME] [--weights FILE] [--normalized]")
		fs.PrintDefaults()
	}
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return &usageError{fmt.Sprintf("predict needs a RUN_DIR and at least one FILE (.npy or .safetensors), got %d arguments", len(pos))}
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
	for _, f := range files {
		if err := predictFile(ctx, m, f, *key, *normalized, *asJSON, stdout); err != nil {
			if ctx.Err() != nil {
				return &interrupted{msg: "predict: interrupted"}
			}
			return err
		}
	}
	return nil
}

// predictFile predicts the samples of one file and prints a line each.
func predictFile(ctx context.Context, m *model.Model, file, key string, normalized, asJSON bool, w io.Writer) error {
	fail := func(err error) error {
		return fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "model: "))
	}
	x, err := model.ReadArray(file, key)
	if err != nil {
		return err
	}
	if !normalized || x.Dtype() == tensor.Uint8 {
		if x, err = m.Normalize(x); err != nil {
			return fail(err)
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
	vals := out.Data().([]float32)
	per := len(vals) / n
	var probs []float32
	if m.Kind() == model.Classifier {
		p, err := m.Probabilities(out)
		if err != nil {
			return fail(err)
		}
		probs = p.Data().([]float32)
	}
	name := filepath.ToSlash(file)
	bw := newLineWriter(w)
	for i := range n {
		label := name
		if !single {
			label = fmt.Sprintf("%s[%d]", name, i)
		}
		if probs == nil { // regression: the values
			row := vals[i*per : (i+1)*per]
			if asJSON {
				bw.json(map[string]any{"file": file, "index": i, "values": row})
				continue
			}
			s := make([]string, len(row))
			for j, v := range row {
				s[j] = strconv.FormatFloat(float64(v), 'g', 6, 32)
			}
			bw.printf("%s  %s\n", label, strings.Join(s, " "))
			continue
		}
		row := probs[i*per : (i+1)*per]
		best := 0
		for c, p := range row {
			if p > row[best] {
				best = c
			}
		}
		if asJSON {
			bw.json(map[string]any{"file": file, "index": i, "class": best, "probability": row[best], "probabilities": row})
			continue
		}
		bw.printf("%s  %d  %.4f\n", label, best, row[best])
	}
	return bw.err
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
