package engine

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"gorun/ops"
)

// TestStepKey: a step's key names its op, dtypes and shapes and only the
// attributes set, by field name in field order; zero fields — such as
// those a future ops.Attrs adds — do not appear.
func TestStepKey(t *testing.T) {
	in := &Value{Shape: []int{4, 1, 28, 28}}
	w := &Value{Shape: []int{8, 1, 5, 5}}
	idx := &Value{Shape: []int{4, 8, 12, 12}, Int: true}
	n := &Node{Op: ops.Conv2D, Attrs: ops.Attrs{Stride: 1, Groups: 1, Eps: 1e-5, Perm: [ops.MaxPermRank]int8{0, 2, 1}}, In: []*Value{in, w, nil}, Out: []*Value{idx}, Layer: `conv2d "conv1"`}
	want := "conv2d f32[4 1 28 28] f32[8 1 5 5] - → i32[4 8 12 12] {Stride:1 Groups:1 Perm:[0 2 1] Eps:1e-05}"
	if got := StepKey(n); got != want {
		t.Errorf("StepKey:\n got %s\nwant %s", got, want)
	}
	if got := StepKey(&Node{Op: ops.ReLU, In: []*Value{in}, Out: []*Value{in}}); got != "relu f32[4 1 28 28] → f32[4 1 28 28] {}" {
		t.Errorf("StepKey without attributes: %s", got)
	}
	// A struct with a field more, zero, keys as the struct without it.
	type grown struct {
		Stride, Padding int
		Swish           float64
	}
	if a, b := attrsKey(reflect.ValueOf(grown{Stride: 2})), attrsKey(reflect.ValueOf(struct{ Stride, Padding int }{Stride: 2})); a != b || a != "{Stride:2}" {
		t.Errorf("a zero field changes the key: %s, %s", a, b)
	}
}

// TestLegacyStepKey: the legacy rendering prints a node as resume keys
// did before keys by meaning (every field of the frozen Attrs), and
// refuses a node that sets a field that struct lacks, or a value that
// does not fit it.
func TestLegacyStepKey(t *testing.T) {
	in := &Value{Shape: []int{32, 8, 12, 12}}
	n := &Node{Op: ops.BatchNormRunning, Attrs: ops.Attrs{BNMomentum: 0.1}, In: []*Value{in, nil}, Out: nil, Layer: `batchnorm2d "bn1"`}
	// As gorun 0239761 wrote it (the cnn checkpoint of runner/testdata/legacy).
	want := `batch_norm_running batchnorm2d "bn1" [[32 8 12 12] -] → [] {Stride:0 Padding:0 Kernel:0 Groups:0 P:0 Accumulate:false LabelSmoothing:0 IgnoreIndex:0 HasIgnore:false NegativeSlope:0 Alpha:0 Offset:0 Length:0 Approximate:false Causal:false TransA:false TransB:false Perm:[0 0 0 0 0 0] BNMomentum:0.1 MaxNorm:0 ReLU:false LR:0 Momentum:0 Dampening:0 WeightDecay:0 Nesterov:false Beta1:0 Beta2:0 Eps:0}`
	if got, err := LegacyStepKey(n); err != nil || got != want {
		t.Errorf("LegacyStepKey:\n got %s (%v)\nwant %s", got, err, want)
	}

	// Attrs as a later gorun might have them: a new field, a wider
	// integer, a longer Perm.
	type later struct {
		Stride int64
		Perm   [8]int8
		Swish  bool
		Eps    float64
	}
	for _, c := range []struct {
		a    later
		want string // the legacy text's fields, or the error
	}{
		{later{Stride: 2, Perm: [8]int8{0, 2, 1}, Eps: 1e-5}, "Stride:2 Padding:0 "},
		{later{Swish: true}, "attribute Swish = true, which ops.Attrs had no field for then"},
		{later{Perm: [8]int8{0, 1, 2, 3, 4, 5, 7, 6}}, "attribute Perm = [0 1 2 3 4 5 7 6], longer than the [6]int8 it was then"},
		{later{Stride: 1 << 40}, "Stride:1099511627776 "},
	} {
		var a legacyAttrs
		err := toLegacy(reflect.ValueOf(&a).Elem(), reflect.ValueOf(c.a))
		got := fmt.Sprintf("%+v", a)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v: %s, want %s", c.a, got, c.want)
		}
	}
	var a legacyAttrs
	if err := toLegacy(reflect.ValueOf(&a).Elem(), reflect.ValueOf(struct{ Stride float64 }{2.5})); err == nil || !strings.Contains(err.Error(), "does not fit the int") {
		t.Errorf("a fractional stride: %v", err)
	}
	if err := toLegacy(reflect.ValueOf(&a).Elem(), reflect.ValueOf(struct{ ReLU int }{1})); err == nil || !strings.Contains(err.Error(), "which was then a bool") {
		t.Errorf("an integer ReLU: %v", err)
	}
}

// TestCheckResumeKey: a key of this format compares entry by entry; one
// written before keys by meaning compares through the legacy rendering,
// its data files by name; an unknown format is refused.
func TestCheckResumeKey(t *testing.T) {
	p := compile(t, loadSpec(t, mnistScript), 1)
	key := p.ResumeKey()
	if err := p.CheckResumeKey(ResumeKeyFormat, key); err != nil {
		t.Errorf("the plan's own key: %v", err)
	}
	legacy, err := p.resumeKey(LegacyStepKey, nil, p.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range legacy {
		if e.Label == "data" {
			// The folder the run lay in when its checkpoint was written.
			legacy[i].Text = strings.Replace(e.Text, `file ""`, `file "/elsewhere/mnist.safetensors"`, 1)
		}
	}
	q := compile(t, loadSpec(t, mnistScript), 1)
	q.Spec.Data.File = "/here/mnist.safetensors"
	if err := q.CheckResumeKey("", legacy); err != nil {
		t.Errorf("a legacy key: %v", err)
	}
	q.Spec.Data.File = "/here/other.safetensors"
	if err := q.CheckResumeKey("", legacy); err == nil || !strings.Contains(err.Error(), `data: file was "mnist.safetensors" in the checkpoint, is "other.safetensors" now`) {
		t.Errorf("a legacy key of another data file: %v", err)
	}
	changed := append([]PlanStep(nil), key...)
	for i, e := range changed {
		if e.Label == "forward step 1" {
			changed[i].Text += " "
		}
	}
	if err := p.CheckResumeKey(ResumeKeyFormat, changed); err == nil || !strings.Contains(err.Error(), "the checkpoint was made with forward step 1") {
		t.Errorf("another forward step: %v", err)
	}
	if err := p.CheckResumeKey(ResumeKeyFormat, key[1:]); err == nil || !strings.Contains(err.Error(), "resume with the script and --set that made it") {
		t.Errorf("a key with an entry less: %v", err)
	}
	if err := p.CheckResumeKey("meaning-9", key); err == nil || !strings.Contains(err.Error(), `plan key is of format "meaning-9"`) {
		t.Errorf("an unknown format: %v", err)
	}
}
