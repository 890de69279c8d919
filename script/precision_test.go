package script

import (
	"strings"
	"testing"

	"gorun/ops"
)

// TestPrecision: train(precision = ...) reaches the Spec as a typed
// ops.Precision, fp32 by default, from the script or from --set; a bad
// value names the train() call's line and the choices.
func TestPrecision(t *testing.T) {
	load := func(src string, sets ...string) (ops.Precision, error) {
		var ov []Override
		for _, s := range sets {
			o, err := ParseOverride(s)
			if err != nil {
				t.Fatal(err)
			}
			ov = append(ov, o)
		}
		s, err := Load("/w/train.star", WithFileReader(memFS{"/w/train.star": src}), WithOverrides(ov...))
		if err != nil {
			return 0, err
		}
		return s.Precision, nil
	}
	withPrecision := strings.Replace(netScript, "batch_size = batch,", `batch_size = batch, precision = "bf16",`, 1)
	for _, c := range []struct {
		src  string
		sets []string
		want ops.Precision
	}{
		{netScript, nil, ops.FP32},
		{withPrecision, nil, ops.BF16},
		{netScript, []string{`precision="fp16"`}, ops.FP16},
		{withPrecision, []string{`precision="fp32"`}, ops.FP32},
	} {
		got, err := load(c.src, c.sets...)
		if err != nil || got != c.want {
			t.Errorf("%v: precision %v, %v; want %v", c.sets, got, err, c.want)
		}
	}
	_, err := load(netScript, `precision="int8"`)
	if err == nil || !strings.Contains(errorText(err), `/w/train.star:14:6: in <toplevel>`) ||
		!strings.Contains(errorText(err), `precision must be "fp32", "bf16" or "fp16", got "int8"`) {
		t.Errorf("precision = \"int8\": %s", errorText(err))
	}
}
