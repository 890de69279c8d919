package datasets

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gorun/datasets/torchrand"
	"gorun/datasets/userfile"
)

// MaxCSVBytes is the largest CSV file data.csv reads (2 GiB).
const MaxCSVBytes = 2 << 30

// CSVConfig says which table data.csv reads and how.
type CSVConfig struct {
	// Path is the table: a header line naming the columns, then one
	// sample a row (RFC 4180: commas, fields in double quotes may hold
	// commas, quotes doubled and line breaks).
	Path string
	// TestFile, when set, is the test split (a table with the same
	// columns); else the TestFraction of Path's rows drawn with Seed are.
	TestFile string
	// X are the input columns, in order; nil is every column but Y.
	X []string
	// Y is the target column.
	Y string
	// Regression makes Y a float target (shape [1]); else Y holds class
	// labels: integers 0..K−1, or names, numbered in sorted order.
	Regression bool
	// Classes, when > 0, is the number of classes of integer labels (else
	// the largest label + 1); of names, it must be their number.
	Classes int
	// Standardize maps every input column to (v − mean)/std with the mean
	// and standard deviation (population, as scikit-learn's
	// StandardScaler; 1 for a constant column) of the training split.
	Standardize bool
	// Split is "train" or "test".
	Split string
	// TestFraction and Seed split Path when there is no TestFile: as
	// torch.utils.data.random_split(rows, [n − k, k],
	// generator = torch.Generator().manual_seed(Seed)), k = ⌊n · TestFraction⌋.
	TestFraction float64
	Seed         int64
}

// csvTable is a table read: the input values (row-major, float64) and the
// raw target fields, with the line of each row for messages.
type csvTable struct {
	path   string
	x      []float64
	y      []string
	lines  []int // the file line of each row
	header []string
}

// CSV reads one split of a CSV table (see CSVConfig). Samples have shape
// [len(X)] (float32); class labels come with ClassNames, regression
// targets have shape [1]. Errors name the file, the line and the column.
func CSV(c CSVConfig) (Dataset, error) {
	if c.Split != "train" && c.Split != "test" {
		return nil, fmt.Errorf("unknown split %q: want \"train\" or \"test\"", c.Split)
	}
	if c.Y == "" {
		return nil, errors.New("y: name the target column")
	}
	if !(c.TestFraction >= 0 && c.TestFraction < 1) {
		return nil, fmt.Errorf("test_fraction must be from 0 up to 1 (not 1), got %v", c.TestFraction)
	}
	if c.Classes < 0 || c.Classes == 1 {
		return nil, fmt.Errorf("classes must be 0 (from the labels) or ≥ 2, got %d", c.Classes)
	}
	header, err := readCSVHeader(c.Path)
	if err != nil {
		return nil, err
	}
	xcols, ycol, err := csvColumns(c.Path, header, c.X, c.Y)
	if err != nil {
		return nil, err
	}
	main, err := readCSV(c.Path, header, xcols, ycol)
	if err != nil {
		return nil, err
	}
	d := len(xcols)
	// The rows of each split, as indices into main or test.
	var trainRows, testRows []int
	var test *csvTable
	if c.TestFile != "" {
		th, err := readCSVHeader(c.TestFile)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(th, header) {
			return nil, fmt.Errorf("%s: its columns (%s) are not those of %s (%s)", c.TestFile, QuoteList(th, 20), c.Path, QuoteList(header, 20))
		}
		if test, err = readCSV(c.TestFile, header, xcols, ycol); err != nil {
			return nil, err
		}
		trainRows = seq(len(main.y))
		testRows = seq(len(test.y))
	} else {
		n := len(main.y)
		k := int(math.Floor(float64(n) * c.TestFraction))
		switch {
		case c.Split == "test" && c.TestFraction == 0:
			return nil, fmt.Errorf("%s: there is no test split: give test_fraction (such as 0.2) or test_file to both data.csv calls", c.Path)
		case c.Split == "test" && k == 0:
			return nil, fmt.Errorf("%s: test_fraction %v of its %d rows is no row: raise it", c.Path, c.TestFraction, n)
		case c.TestFraction == 0:
			trainRows = seq(n)
		default:
			perm := torchrand.RandPerm(n, uint64(c.Seed))
			trainRows, testRows = perm[:n-k], perm[n-k:]
		}
		test = main
	}
	if len(trainRows) == 0 {
		return nil, fmt.Errorf("%s: no rows in the training split", c.Path)
	}
	meta := &CSVMeta{X: slices.Clone(xcols), Y: c.Y, Task: "classes"}
	if c.Regression {
		meta.Task = "regression"
	}
	if c.Standardize {
		meta.Mean, meta.Std = columnStats(main.x, trainRows, d)
	}
	tab, rows := main, trainRows
	if c.Split == "test" {
		tab, rows = test, testRows
	}
	x := make([]float32, len(rows)*d)
	for i, r := range rows {
		for j := range d {
			v := tab.x[r*d+j]
			if meta.Mean != nil {
				v = (v - meta.Mean[j]) / meta.Std[j]
			}
			x[i*d+j] = float32(v)
		}
	}
	name := "csv:" + filepath.Base(c.Path) + "/" + c.Split
	if c.TestFile != "" && c.Split == "test" {
		name = "csv:" + filepath.Base(c.TestFile) + "/test"
	}
	if c.Regression {
		y := make([]float32, len(rows))
		for i, r := range rows {
			v, err := csvNumber(tab, r, c.Y, tab.y[r])
			if err != nil {
				return nil, err
			}
			y[i] = float32(v)
		}
		return &regressionSet{name: name, shape: []int{d}, tshape: []int{1}, size: d, tsize: 1, x: x, y: y, n: len(rows), csv: meta}, nil
	}
	// Class names from the training file (and its test rows, when split by
	// a fraction): a test file's label must be one of them.
	names, ints, err := csvClasses(main, c.Y, c.Classes)
	if err != nil {
		return nil, err
	}
	labels := make([]int32, len(rows))
	for i, r := range rows {
		l, err := csvLabel(tab, r, c.Y, names, ints, main.path)
		if err != nil {
			return nil, err
		}
		labels[i] = l
	}
	return &floatSet{name: name, shape: []int{d}, classes: len(names), size: d, x: x, labels: labels, classNames: names, csv: meta}, nil
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// openCSV opens a table for reading as encoding/csv reads it.
func openCSV(path string) (*csv.Reader, io.Closer, error) {
	f, err := userfile.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if st, err := f.Stat(); err == nil && st.Size() > MaxCSVBytes {
		f.Close()
		return nil, nil, &userfile.TooLargeError{Path: path, Size: st.Size(), Limit: MaxCSVBytes}
	}
	r := csv.NewReader(bufio.NewReaderSize(f, 1<<16))
	r.ReuseRecord = true
	return r, f, nil
}

// readCSVHeader reads the first line of a table: its column names.
func readCSVHeader(path string) ([]string, error) {
	r, f, err := openCSV(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rec, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty file: data.csv wants a header line naming the columns, then one row per sample", path)
	}
	if err != nil {
		return nil, csvError(path, err)
	}
	header := slices.Clone(rec)
	header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte-order mark (Excel's)
	numeric := true
	seen := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		if _, err := strconv.ParseFloat(h, 64); err != nil {
			numeric = false
		}
		if j, ok := seen[h]; ok {
			return nil, fmt.Errorf("%s: the header names column %q twice (columns %d and %d)", path, h, j+1, i+1)
		}
		seen[h] = i
	}
	if numeric {
		return nil, fmt.Errorf("%s: the first line (%s) holds numbers, not column names: data.csv wants a header line naming the columns", path, strings.Join(header, ","))
	}
	return header, nil
}

// csvColumns resolves the input columns (nil: all but y) and the target
// column to indices of header.
func csvColumns(path string, header, x []string, y string) (xcols []string, ycol int, err error) {
	index := map[string]int{}
	for i, h := range header {
		index[h] = i
	}
	unknown := func(name, what string) error {
		return fmt.Errorf("%s: no column %q (%s); its columns are %s", path, name, what, QuoteList(header, 30))
	}
	ycol, ok := index[y]
	if !ok {
		return nil, 0, unknown(y, "y")
	}
	if x == nil {
		for _, h := range header {
			if h != y {
				xcols = append(xcols, h)
			}
		}
		if len(xcols) == 0 {
			return nil, 0, fmt.Errorf("%s: the target %q is its only column: there is no input", path, y)
		}
		return xcols, ycol, nil
	}
	if len(x) == 0 {
		return nil, 0, errors.New("x: an empty list of columns")
	}
	seen := map[string]bool{}
	for _, c := range x {
		if _, ok := index[c]; !ok {
			return nil, 0, unknown(c, "x")
		}
		if c == y {
			return nil, 0, fmt.Errorf("%s: column %q is both an input (x) and the target (y)", path, c)
		}
		if seen[c] {
			return nil, 0, fmt.Errorf("x names column %q twice", c)
		}
		seen[c] = true
	}
	return slices.Clone(x), ycol, nil
}

// readCSV reads a table's rows: the input columns as numbers, the target
// as text.
func readCSV(path string, header, xcols []string, ycol int) (*csvTable, error) {
	r, f, err := openCSV(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r.FieldsPerRecord = len(header)
	if _, err := r.Read(); err != nil { // the header, read before
		return nil, csvError(path, err)
	}
	cols := make([]int, len(xcols))
	for i, c := range xcols {
		cols[i] = slices.Index(header, c)
	}
	t := &csvTable{path: path, header: header}
	for row := 1; ; row++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				return nil, fmt.Errorf("%s line %d (row %d): %d fields, but the header names %d columns", path, pe.StartLine, row, len(rec), len(header))
			}
			return nil, csvError(path, err)
		}
		line, _ := r.FieldPos(0)
		t.lines = append(t.lines, line)
		for j, c := range cols {
			s := strings.TrimSpace(rec[c])
			if s == "" {
				return nil, fmt.Errorf("%s line %d (row %d), column %q: missing value", path, line, row, xcols[j])
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("%s line %d (row %d), column %q: %q is not a number", path, line, row, xcols[j], clip(s))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%s line %d (row %d), column %q: %q is not a finite number", path, line, row, xcols[j], clip(s))
			}
			t.x = append(t.x, v)
		}
		y := strings.TrimSpace(rec[ycol])
		if y == "" {
			return nil, fmt.Errorf("%s line %d (row %d), column %q: missing value", path, line, row, header[ycol])
		}
		t.y = append(t.y, strings.Clone(y))
	}
	if len(t.y) == 0 {
		return nil, fmt.Errorf("%s: a header but no rows", path)
	}
	return t, nil
}

// clip shortens a field for a message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

// csvError names the file in an encoding/csv error.
func csvError(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s line %d, column %d: %v", path, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// csvNumber is row r's target as a number.
func csvNumber(t *csvTable, r int, col, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s line %d (row %d), column %q: %q is not a number (a regression target)", t.path, t.lines[r], r+1, col, clip(s))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s line %d (row %d), column %q: %q is not a finite number", t.path, t.lines[r], r+1, col, clip(s))
	}
	return v, nil
}

// maxCSVClasses bounds the classes of names a table may have.
const maxCSVClasses = 100000

// csvClasses returns the class names of a table's labels and whether
// they are integers (the names are then "0" … "K−1"). classes > 0 is the
// number of classes the script gives.
func csvClasses(t *csvTable, col string, classes int) (names []string, ints bool, err error) {
	ints = true
	most := int64(-1)
	for r, s := range t.y {
		v, ok := classInt(s)
		if !ok {
			ints = false
			break
		}
		if v < 0 {
			return nil, false, fmt.Errorf("%s line %d (row %d), column %q: class label %d is negative", t.path, t.lines[r], r+1, col, v)
		}
		if v >= maxCSVClasses {
			return nil, false, fmt.Errorf("%s line %d (row %d), column %q: class label %d: more than %d classes", t.path, t.lines[r], r+1, col, v, maxCSVClasses)
		}
		most = max(most, v)
	}
	if ints {
		k := int(most) + 1
		if classes > 0 {
			if int(most) >= classes {
				r := slices.IndexFunc(t.y, func(s string) bool { v, _ := classInt(s); return v == most })
				return nil, false, fmt.Errorf("%s line %d (row %d), column %q: class label %d, but classes = %d", t.path, t.lines[r], r+1, col, most, classes)
			}
			k = classes
		}
		if k < 2 {
			return nil, false, fmt.Errorf("%s, column %q: every label is 0: one class; give classes = N when some are missing", t.path, col)
		}
		names = make([]string, k)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
		return names, true, nil
	}
	seen := map[string]bool{}
	numbers := true
	for _, s := range t.y {
		if !seen[s] {
			seen[s] = true
			names = append(names, s)
			if _, err := strconv.ParseFloat(s, 64); err != nil {
				numbers = false
			}
		}
	}
	if numbers {
		return nil, false, fmt.Errorf("%s, column %q: the labels are numbers but not all integers (such as %q): for a numeric target give task = \"regression\"", t.path, col, names[0])
	}
	if len(names) > maxCSVClasses {
		return nil, false, fmt.Errorf("%s, column %q: %d distinct labels, more than %d classes", t.path, col, len(names), maxCSVClasses)
	}
	sort.Strings(names)
	if classes > 0 && classes != len(names) {
		return nil, false, fmt.Errorf("%s, column %q: %d distinct labels (%s), but classes = %d", t.path, col, len(names), QuoteList(names, 10), classes)
	}
	if len(names) < 2 {
		return nil, false, fmt.Errorf("%s, column %q: every label is %q: one class", t.path, col, names[0])
	}
	return names, false, nil
}

// classInt reads an integer class label: "3", or "3.0" as pandas writes
// integers of a float column.
func classInt(s string) (int64, bool) {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// csvLabel is row r's class index.
func csvLabel(t *csvTable, r int, col string, names []string, ints bool, train string) (int32, error) {
	s := t.y[r]
	if ints {
		v, ok := classInt(s)
		switch {
		case !ok:
			return 0, fmt.Errorf("%s line %d (row %d), column %q: %q is not a class label: %s's labels are integers", t.path, t.lines[r], r+1, col, clip(s), train)
		case v < 0 || v >= int64(len(names)):
			return 0, fmt.Errorf("%s line %d (row %d), column %q: class label %d is outside 0..%d, the classes of %s", t.path, t.lines[r], r+1, col, v, len(names)-1, train)
		}
		return int32(v), nil
	}
	i, ok := slices.BinarySearch(names, s)
	if !ok {
		return 0, fmt.Errorf("%s line %d (row %d), column %q: label %q is not one of the classes of %s (%s)", t.path, t.lines[r], r+1, col, clip(s), train, QuoteList(names, 10))
	}
	return int32(i), nil
}

// columnStats is the mean and population standard deviation of each of
// the d columns of x over rows (1 for a constant column).
func columnStats(x []float64, rows []int, d int) (mean, std []float64) {
	mean, std = make([]float64, d), make([]float64, d)
	n := float64(len(rows))
	for _, r := range rows {
		for j := range d {
			mean[j] += x[r*d+j]
		}
	}
	for j := range mean {
		mean[j] /= n
	}
	for _, r := range rows {
		for j := range d {
			e := x[r*d+j] - mean[j]
			std[j] += e * e
		}
	}
	for j := range std {
		std[j] = math.Sqrt(std[j] / n)
		if std[j] == 0 {
			std[j] = 1
		}
	}
	return mean, std
}
