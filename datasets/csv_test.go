package datasets

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gorun/datasets/torchrand"
	"gorun/engine/spec"
)

// writeText writes text into dir/name and returns its path.
func writeText(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const flowers = "\ufeffpetal length,\"petal, width\",kind,id\n" +
	"1.4,0.2,setosa,1\n" +
	"4.7,1.4,versicolor,2\n" +
	"6.0,2.5,virginica,3\n" +
	"1.3,\"0.2\",setosa,4\n" +
	"4.5,1.5,versicolor,5\n" +
	"5.9,2.1,virginica,6\n" +
	"1.5,0.1,setosa,7\n" +
	"4.9,1.5,versicolor,8\n"

// TestCSVClasses: a header (a byte-order mark dropped, a quoted name with
// a comma), named labels numbered in sorted order, chosen columns,
// standardisation by the training split's statistics for both splits,
// and the split torch's random_split makes.
func TestCSVClasses(t *testing.T) {
	path := writeText(t, t.TempDir(), "flowers.csv", flowers)
	c := CSVConfig{Path: path, X: []string{"petal length", "petal, width"}, Y: "kind", Standardize: true,
		Split: "train", TestFraction: 0.25, Seed: 3}
	train, err := CSV(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Split = "test"
	test, err := CSV(c)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 6 || test.Len() != 2 || !slices.Equal(train.SampleShape(), []int{2}) || train.NumClasses() != 3 {
		t.Fatalf("train %d, test %d samples of %v in %d classes", train.Len(), test.Len(), train.SampleShape(), train.NumClasses())
	}
	if names := ClassNames(test); !slices.Equal(names, []string{"setosa", "versicolor", "virginica"}) {
		t.Fatalf("classes %v", names)
	}
	rows := [][3]float64{{1.4, 0.2, 0}, {4.7, 1.4, 1}, {6.0, 2.5, 2}, {1.3, 0.2, 0}, {4.5, 1.5, 1}, {5.9, 2.1, 2}, {1.5, 0.1, 0}, {4.9, 1.5, 1}}
	perm := torchrand.RandPerm(8, 3)
	var mean, std [2]float64
	for _, r := range perm[:6] {
		for j := range 2 {
			mean[j] += rows[r][j] / 6
		}
	}
	for _, r := range perm[:6] {
		for j := range 2 {
			std[j] += (rows[r][j] - mean[j]) * (rows[r][j] - mean[j]) / 6
		}
	}
	std[0], std[1] = math.Sqrt(std[0]), math.Sqrt(std[1])
	for _, s := range []struct {
		ds   Dataset
		rows []int
	}{{train, perm[:6]}, {test, perm[6:]}} {
		x := make([]float32, 2)
		var y [1]int32
		for i, r := range s.rows {
			s.ds.Fill([]int{i}, x, y[:])
			for j := range 2 {
				if want := float32((rows[r][j] - mean[j]) / std[j]); x[j] != want {
					t.Fatalf("%s sample %d (row %d) value %d = %v, want %v", s.ds.Name(), i, r+1, j, x[j], want)
				}
			}
			if y[0] != int32(rows[r][2]) {
				t.Fatalf("%s sample %d: label %d, want %v", s.ds.Name(), i, y[0], rows[r][2])
			}
		}
	}
	var meta CSVMeta
	m := Metadata(test)
	if err := json.Unmarshal([]byte(m[MetaCSV]), &meta); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(meta.X, c.X) || meta.Y != "kind" || meta.Task != "classes" || math.Abs(meta.Mean[0]-mean[0]) > 1e-12 || math.Abs(meta.Std[1]-std[1]) > 1e-12 ||
		m[MetaClasses] != `["setosa","versicolor","virginica"]` {
		t.Fatalf("metadata %v", m)
	}
	// The metadata makes a new row the sample training made of it.
	r := perm[6]
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	got, err := meta.Sample([]string{"kind", "petal, width", "petal length"}, []string{"?", f(rows[r][1]), f(rows[r][0])})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2)
	var y [1]int32
	test.Fill([]int{0}, x, y[:])
	if !slices.Equal(got, x) {
		t.Fatalf("CSVMeta.Sample %v, the test sample (row %d) %v", got, r+1, x)
	}
	for _, bad := range []struct {
		header, row []string
		want        string
	}{
		{[]string{"petal length"}, []string{"1"}, `no column "petal, width": the model reads the columns "petal length", "petal, width"`},
		{[]string{"petal length", "petal, width"}, []string{"1", ""}, `column "petal, width": missing value`},
		{[]string{"petal length", "petal, width"}, []string{"1", "wide"}, `column "petal, width": "wide" is not a number`},
		{[]string{"petal length", "petal, width"}, []string{"inf", "1"}, `column "petal length": "inf" is not a finite number`},
	} {
		if _, err := meta.Sample(bad.header, bad.row); err == nil || err.Error() != bad.want {
			t.Errorf("Sample(%q, %q): %v, want %s", bad.header, bad.row, err, bad.want)
		}
	}
}

// TestCSVRegressionAndTestFile: every column but y as the input, a float
// target, integer labels, and a test file whose rows keep the training
// file's statistics.
func TestCSVRegressionAndTestFile(t *testing.T) {
	dir := t.TempDir()
	path := writeText(t, dir, "train.csv", "a,b,y\n1,10,0.5\n2,20,1.5\n3,60,2.5\n")
	tf := writeText(t, dir, "test.csv", "a,b,y\n4,40,3.5\n")
	reg, err := CSV(CSVConfig{Path: path, TestFile: tf, Y: "y", Regression: true, Standardize: true, Split: "test"})
	if err != nil {
		t.Fatal(err)
	}
	r := reg.(Regression)
	x, y := make([]float32, 2), make([]float32, 1)
	r.FillTargets([]int{0}, x, y)
	ma, sa := 2.0, math.Sqrt(2.0/3)
	mb, sb := 30.0, math.Sqrt((400+100+900)/3.0)
	if want := []float32{float32((4 - ma) / sa), float32((40 - mb) / sb)}; !slices.Equal(x, want) || y[0] != 3.5 || !slices.Equal(r.TargetShape(), []int{1}) {
		t.Fatalf("test row: x %v y %v, want %v and 3.5", x, y, want)
	}
	if reg.Name() != "csv:test.csv/test" {
		t.Fatalf("name %q", reg.Name())
	}
	// Integer labels are class indices (pandas' 1.0 too); classes widens them.
	ints := writeText(t, dir, "ints.csv", "f,label\n0.5,0\n0.25,2.0\n1,1\n")
	ds, err := CSV(CSVConfig{Path: ints, Y: "label", Split: "train", Classes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds.Labels(), []int32{0, 2, 1}) || ds.NumClasses() != 4 || !slices.Equal(ClassNames(ds), []string{"0", "1", "2", "3"}) {
		t.Fatalf("labels %v, %d classes %v", ds.Labels(), ds.NumClasses(), ClassNames(ds))
	}
	// Through a spec.Data, as the runner loads it.
	d := &spec.Data{Kind: "csv", File: path, Y: "y", Regression: true, Split: "train", Pos: "t.star:2:3"}
	info, err := Describe(d)
	if err != nil || !slices.Equal(info.Sample, []int{2}) || !slices.Equal(info.Target, []int{1}) || info.Classes != 0 {
		t.Fatalf("Describe %+v, %v", info, err)
	}
}

// TestCSVHostile: the messages for tables data.csv cannot use; each
// names the file, the line and the column where there is one.
func TestCSVHostile(t *testing.T) {
	good := "a,b,y\n1,2,cat\n3,4,dog\n5,6,cat\n"
	for _, tc := range []struct {
		name, text string
		c          CSVConfig
		want       string
	}{
		{"empty file", "", CSVConfig{}, "F: empty file: data.csv wants a header line naming the columns, then one row per sample"},
		{"no header", "1,2,3\n4,5,6\n", CSVConfig{}, "F: the first line (1,2,3) holds numbers, not column names: data.csv wants a header line naming the columns"},
		{"a header only", "a,b,y\n", CSVConfig{}, "F: a header but no rows"},
		{"a column twice", "a,b,a\n1,2,3\n", CSVConfig{}, "F: the header names column \"a\" twice (columns 1 and 3)"},
		{"unknown y", good, CSVConfig{Y: "label"}, "F: no column \"label\" (y); its columns are \"a\", \"b\", \"y\""},
		{"unknown x", good, CSVConfig{X: []string{"a", "c"}}, "F: no column \"c\" (x); its columns are \"a\", \"b\", \"y\""},
		{"y as input", good, CSVConfig{X: []string{"a", "y"}}, "F: column \"y\" is both an input (x) and the target (y)"},
		{"missing value", "a,b,y\n1,2,cat\n3,,dog\n", CSVConfig{}, "F line 3 (row 2), column \"b\": missing value"},
		{"missing label", "a,b,y\n1,2,cat\n3,4, \n", CSVConfig{}, "F line 3 (row 2), column \"y\": missing value"},
		{"not a number", "a,b,y\n1,2,cat\n3,4.5.6,dog\n", CSVConfig{}, "F line 3 (row 2), column \"b\": \"4.5.6\" is not a number"},
		{"NaN", "a,b,y\n1,NaN,cat\n", CSVConfig{}, "F line 2 (row 1), column \"b\": \"NaN\" is not a finite number"},
		{"infinity", "a,b,y\n1,-Inf,cat\n", CSVConfig{}, "F line 2 (row 1), column \"b\": \"-Inf\" is not a finite number"},
		{"too few fields", "a,b,y\n1,2,cat\n3,dog\n", CSVConfig{}, "F line 3 (row 2): 2 fields, but the header names 3 columns"},
		{"a bare quote", "a,b,y\n1,2\"x,cat\n", CSVConfig{}, "F line 2, column 4: bare \" in non-quoted-field"},
		{"an open quote", "a,b,y\n1,\"2,cat\n", CSVConfig{}, "F line 2, column 10: extraneous or missing \" in quoted-field"},
		{"a line break in a quoted label", "a,b,y\n1,2,\"ca\nt\"\n3,x,dog\n", CSVConfig{}, "F line 4 (row 2), column \"b\": \"x\" is not a number"},
		{"a negative label", "a,y\n1,0\n2,-1\n", CSVConfig{}, "F line 3 (row 2), column \"y\": class label -1 is negative"},
		{"a label past classes", "a,y\n1,0\n2,5\n", CSVConfig{Classes: 3}, "F line 3 (row 2), column \"y\": class label 5, but classes = 3"},
		{"one class", "a,y\n1,cat\n2,cat\n", CSVConfig{}, "F, column \"y\": every label is \"cat\": one class"},
		{"float labels", "a,y\n1,0.5\n2,1.25\n", CSVConfig{}, "F, column \"y\": the labels are numbers but not all integers (such as \"0.5\"): for a numeric target give task = \"regression\""},
		{"a text target", good, CSVConfig{Regression: true}, "F line 2 (row 1), column \"y\": \"cat\" is not a number (a regression target)"},
		{"a test label the training file lacks", good, CSVConfig{TestFile: "T", Split: "test"}, "T line 3 (row 2), column \"y\": label \"cow\" is not one of the classes of F (\"cat\", \"dog\")"},
		{"a test file with other columns", good, CSVConfig{TestFile: "U", Split: "test"}, "U: its columns (\"a\", \"y\") are not those of F (\"a\", \"b\", \"y\")"},
		{"no test split", good, CSVConfig{Split: "test"}, "F: there is no test split: give test_fraction (such as 0.2) or test_file to both data.csv calls"},
		{"a test fraction of no row", good, CSVConfig{Split: "test", TestFraction: 0.2}, "F: test_fraction 0.2 of its 3 rows is no row: raise it"},
		{"a folder", good, CSVConfig{Path: "D"}, "D is a folder, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeText(t, dir, "f.csv", tc.text)
			writeText(t, dir, "t.csv", "a,b,y\n1,2,cat\n3,4,cow\n")
			writeText(t, dir, "u.csv", "a,y\n1,cat\n")
			c := tc.c
			c.Path = strings.NewReplacer("D", dir).Replace(c.Path)
			if c.Path == "" {
				c.Path = path
			}
			if c.TestFile != "" {
				c.TestFile = filepath.Join(dir, map[string]string{"T": "t.csv", "U": "u.csv"}[c.TestFile])
			}
			if c.Y == "" {
				c.Y = "y"
			}
			if c.Split == "" {
				c.Split = "train"
			}
			_, err := CSV(c)
			want := strings.NewReplacer("F", path, "T", filepath.Join(dir, "t.csv"), "U", filepath.Join(dir, "u.csv"), "D", dir).Replace(tc.want)
			if err == nil || err.Error() != want {
				t.Fatalf("error\n%v\nwant\n%s", err, want)
			}
			t.Logf("%s", strings.ReplaceAll(err.Error(), dir+"/", ""))
		})
	}
}
