package model

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gorgonia.org/tensor"

	"gorun/datasets"
)

// readerName is r's file name when it has one (an *os.File), else what.
func readerName(r io.Reader, what string) string {
	if f, ok := r.(interface{ Name() string }); ok && f.Name() != "" {
		return f.Name()
	}
	return what
}

// FromImage reads one image file (PNG, JPEG, GIF, BMP, TIFF or WebP,
// told by its first bytes) and makes it one sample of the model's
// inputs, [...InputShape] float32, exactly as training made its samples
// (ImageMeta: datasets.ImageMeta.Sample): decoded, converted to the
// model's channels as PIL's convert("L") or convert("RGB") (an RGB image
// for a grayscale model, a grayscale one for an RGB model, alpha
// dropped), resized to the model's height × width with PIL's
// antialiased bilinear filter when its size differs, then v/255 and each
// channel's normalisation. It takes a model trained on images
// (data.images, data.mnist, data.fashion_mnist: 28×28 grayscale). At most
// datasets.MaxImageFileBytes are read, and an image that declares more
// than datasets.MaxImagePixels pixels is refused from its header. Errors
// name r's file when it is one (an *os.File), else "the image".
func (m *Model) FromImage(r io.Reader) (*tensor.Dense, error) {
	name := readerName(r, "the image")
	im := m.prep.image
	if im == nil {
		return nil, fmt.Errorf("model: %s: the model was trained on %s, not on images: it takes no image files", name, m.prep.dataName())
	}
	b, err := io.ReadAll(io.LimitReader(r, datasets.MaxImageFileBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("model: %s: %w", name, err)
	case len(b) > datasets.MaxImageFileBytes:
		return nil, fmt.Errorf("model: %s: more than %d bytes, the most an image file may take", name, datasets.MaxImageFileBytes)
	case len(b) == 0:
		return nil, fmt.Errorf("model: %s: empty (0 bytes), not an image", name)
	}
	v, err := im.Sample(name, b)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	shape := []int{im.Channels, im.Height, im.Width}
	if !slices.Equal(shape, m.plan.Sample) {
		return nil, fmt.Errorf("model: %s: images become samples of %v, but the model takes %v (its training transforms changed the shape): give Predict samples of its shape", name, shape, m.plan.Sample)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v)), nil
}

// FromCSV reads a table in the form of the one a data.csv model was
// trained on (CSVMeta): a header line naming the columns, then one sample
// a row (RFC 4180), and makes its rows the model's inputs, [N, columns]
// float32, exactly as training made its samples
// (datasets.CSVMeta.Sample): the model's input columns found by name, in
// whatever order the table has them and among other columns (the target
// may be there or not), read as numbers and standardised with the
// training split's statistics. A column the model reads that the header
// lacks, a missing value and a field that is not a finite number are
// errors naming the line and the column. Errors name r's file when it is
// one (an *os.File), else "the CSV".
func (m *Model) FromCSV(r io.Reader) (*tensor.Dense, error) {
	name := readerName(r, "the CSV")
	cm := m.prep.csv
	if cm == nil {
		return nil, fmt.Errorf("model: %s: the model was trained on %s, not on a CSV table: it takes no CSV rows", name, m.prep.dataName())
	}
	cr := csv.NewReader(bufio.NewReaderSize(r, 1<<16))
	cr.ReuseRecord = true
	rec, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("model: %s: empty: the model takes a header line naming the columns (%s), then one row per sample", name, datasets.QuoteList(cm.X, 30))
	}
	if err != nil {
		return nil, csvError(name, err)
	}
	header := slices.Clone(rec)
	header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte-order mark (Excel's)
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		if seen[h] && slices.Contains(cm.X, h) {
			return nil, fmt.Errorf("model: %s: the header names column %q twice", name, h)
		}
		seen[h] = true
	}
	var missing []string
	for _, c := range cm.X {
		if !seen[c] {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) == 1:
		return nil, fmt.Errorf("model: %s has no column %q: the model reads the columns %s", name, missing[0], datasets.QuoteList(cm.X, 30))
	case len(missing) > 1:
		return nil, fmt.Errorf("model: %s has no columns %s: the model reads the columns %s", name, datasets.QuoteList(missing, 30), datasets.QuoteList(cm.X, 30))
	}
	cr.FieldsPerRecord = len(header)
	var x []float32
	rows := 0
	for row := 1; ; row++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				return nil, fmt.Errorf("model: %s line %d (row %d): %d fields, but the header names %d columns", name, pe.StartLine, row, len(rec), len(header))
			}
			return nil, csvError(name, err)
		}
		line, _ := cr.FieldPos(0)
		v, err := cm.Sample(header, rec)
		if err != nil {
			return nil, fmt.Errorf("model: %s line %d (row %d): %v", name, line, row, err)
		}
		x = append(x, v...)
		rows++
	}
	if rows == 0 {
		return nil, fmt.Errorf("model: %s: a header but no rows", name)
	}
	return tensor.New(tensor.WithShape(rows, len(cm.X)), tensor.WithBacking(x)), nil
}

// csvError names the table in an encoding/csv error.
func csvError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("model: %s line %d, column %d: %v", name, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("model: %s: %w", name, err)
}
