package datasets

import (
	"reflect"
	"strings"
	"testing"

	"gorun/engine/spec"
)

// TestRecordedMeta: Recorded reads the MetaData key (with the class names
// and the vocabulary), or, in a weights file written before it, derives
// the record from data.images', data.csv's and data.text's metadata
// (transforms applied to the image shape); it gives nil where the
// metadata say too little, and errors name the key. Describe of a Data
// that carries a record reads no file.
func TestRecordedMeta(t *testing.T) {
	images := &spec.Data{Kind: "images", Dir: "/nowhere", Split: "train", Channels: 3}
	cropped := *images
	cropped.Transforms = append(cropped.Transforms, struct {
		Kind          string
		Height, Width int
		Padding       int
		P             float64
	}{Kind: "random_crop", Height: 6, Width: 5})
	text := &spec.Data{Kind: "text", File: "/nowhere.txt", SeqLen: 16}
	csv := &spec.Data{Kind: "csv", File: "/nowhere.csv", Y: "y"}
	tensors := &spec.Data{Kind: "tensors", X: "/nowhere.npy", Y: "/nowhere-y.npy"}
	img := `{"height":8,"width":10,"channels":3,"mean":[0.5,0.5,0.5],"std":[0.2,0.2,0.2],"resize":"bilinear"}`
	for _, c := range []struct {
		name string
		d    *spec.Data
		meta map[string]string
		want *spec.DataRecord
		err  string
	}{
		{"recorded", images, map[string]string{MetaData: DataMeta{Kind: "images", Sample: []int{3, 8, 10}, Classes: 2}.String(), MetaClasses: `["cat","dog"]`},
			&spec.DataRecord{Sample: []int{3, 8, 10}, Classes: 2, ClassNames: []string{"cat", "dog"}}, ""},
		{"recorded tokens", text, map[string]string{MetaData: DataMeta{Kind: "text", Sample: []int{16}, Classes: 256, Tokens: true}.String(), MetaVocab: "bytes"},
			&spec.DataRecord{Sample: []int{16}, Classes: 256, Tokens: true, Vocab: "bytes"}, ""},
		{"recorded regression", tensors, map[string]string{MetaData: DataMeta{Kind: "tensors", Sample: []int{3}, Target: []int{2}}.String()},
			&spec.DataRecord{Sample: []int{3}, Target: []int{2}}, ""},
		{"old images", images, map[string]string{MetaImage: img, MetaClasses: `["cat","dog"]`},
			&spec.DataRecord{Sample: []int{3, 8, 10}, Classes: 2, ClassNames: []string{"cat", "dog"}}, ""},
		{"old images, cropped", &cropped, map[string]string{MetaImage: img, MetaClasses: `["cat","dog"]`},
			&spec.DataRecord{Sample: []int{3, 6, 5}, Classes: 2, ClassNames: []string{"cat", "dog"}}, ""},
		{"old CSV classes", csv, map[string]string{MetaCSV: `{"x":["a","b"],"y":"y","task":"classes"}`, MetaClasses: `["0","1","2"]`},
			&spec.DataRecord{Sample: []int{2}, Classes: 3, ClassNames: []string{"0", "1", "2"}}, ""},
		{"old CSV regression", csv, map[string]string{MetaCSV: `{"x":["a","b","c"],"y":"y","task":"regression"}`},
			&spec.DataRecord{Sample: []int{3}, Target: []int{1}}, ""},
		{"old text", text, map[string]string{MetaVocab: "chars:abc"},
			&spec.DataRecord{Sample: []int{16}, Classes: 3, Tokens: true, Vocab: "chars:abc"}, ""},
		{"old tensors", tensors, map[string]string{"format": "pt"}, nil, ""},
		{"old images without classes", images, map[string]string{MetaImage: img}, nil, ""},
		{"another kind", csv, map[string]string{MetaData: DataMeta{Kind: "images", Sample: []int{3, 8, 8}, Classes: 2}.String()}, nil,
			`metadata "data": the model was trained on data.images, but the script declares data.csv`},
		{"a broken record", images, map[string]string{MetaData: `{"kind":`}, nil, `metadata "data": unexpected end of JSON input`},
		{"no sample", images, map[string]string{MetaData: `{"kind":"images","sample":[3,0,8],"classes":2}`}, nil, `metadata "data": sample shape [3 0 8]`},
		{"names and classes differ", images, map[string]string{MetaData: DataMeta{Kind: "images", Sample: []int{3, 8, 8}, Classes: 3}.String(), MetaClasses: `["a","b"]`}, nil,
			`metadata "classes" names 2 classes, "data" says 3`},
		{"a broken vocabulary", text, map[string]string{MetaVocab: "words"}, nil, `metadata "vocab": unknown vocabulary "words"`},
	} {
		got, err := Recorded(c.d, c.meta)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: %v, want the error %s", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
			continue
		}
		if got == nil {
			continue
		}
		// Describe of the Data with its record: no file is read.
		d := *c.d
		d.Recorded = got
		info, err := Describe(&d)
		if err != nil {
			t.Errorf("%s: Describe: %v", c.name, err)
			continue
		}
		if rec := info.Record(); !reflect.DeepEqual(rec, got) {
			t.Errorf("%s: Describe gave %+v, whose record is %+v", c.name, info, rec)
		}
	}
	// Without a record, Describe reads the data: here they are not there.
	if _, err := Describe(tensors); err == nil || !strings.Contains(err.Error(), "/nowhere.npy") {
		t.Errorf("Describe without a record: %v", err)
	}
}
