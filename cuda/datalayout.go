//go:build cuda

package cuda

import (
	"fmt"

	"gorun/datasets"
	"gorun/engine"
)

// dataKind is how a dataset resident on the GPU holds its samples and
// targets; it follows the CPU backend's Gather, which fills a batch by
// the same three kinds.
type dataKind int

const (
	// classData: float32 samples, one int32 class label each (Fill).
	classData dataKind = iota
	// tokenData: int32 token windows and, per position, the int32 id
	// that follows (FillTokens: data.text, integer data.tensors).
	tokenData
	// regressionData: float32 samples and float32 targets of a fixed
	// shape (FillTargets: data.csv and data.tensors with float targets).
	regressionData
)

// dataLayout is a resident dataset's layout: its kind and the 4-byte
// values per sample (per) and per target (tper).
type dataLayout struct {
	kind      dataKind
	per, tper int
}

// residentLayout is the layout LoadData gives ds.
func residentLayout(ds datasets.Dataset) dataLayout {
	per := datasets.SampleSize(ds)
	if _, ok := ds.(datasets.Tokens); ok {
		// A window's target is the window shifted by one: one id per
		// position.
		return dataLayout{kind: tokenData, per: per, tper: per}
	}
	if r, ok := ds.(datasets.Regression); ok {
		t := 1
		for _, v := range r.TargetShape() {
			t *= v
		}
		return dataLayout{kind: regressionData, per: per, tper: t}
	}
	return dataLayout{kind: classData, per: per, tper: 1}
}

// what names the layout's sample values in messages.
func (l dataLayout) what() string {
	switch l.kind {
	case tokenData:
		return "token ids"
	case regressionData:
		return "values with float targets"
	}
	return "values"
}

// checkGather reports a dataset (named name, in layout l) whose samples
// or targets do not fit the program's input and target buffers, in the
// words of the CPU backend's Gather where it has them: token ids for an
// input that takes floats or the reverse, class labels for a target that
// takes floats or the reverse, or sizes that differ.
func (l dataLayout) checkGather(name string, input, target *engine.Buffer) error {
	perIn := input.Elems() / max(input.Max[0], 1)
	perT := target.Elems() / max(target.Max[0], 1)
	switch {
	case input.DType == engine.Int32 && l.kind != tokenData:
		return fmt.Errorf("%s has no token ids, the model's input takes them", name)
	case input.DType != engine.Int32 && l.kind == tokenData:
		return fmt.Errorf("%s holds token ids, the model's input takes float values (give the ids to an nn.embedding)", name)
	case target.DType == engine.Float32 && l.kind != regressionData:
		return fmt.Errorf("%s has class labels, the model's target takes float values", name)
	case target.DType != engine.Float32 && l.kind == regressionData:
		return fmt.Errorf("%s has float targets (regression), the model's target takes class labels", name)
	case perIn != l.per:
		return fmt.Errorf("%s has samples of %d values, the input takes %d", name, l.per, perIn)
	case perT != l.tper:
		return fmt.Errorf("%s has targets of %d values, the model's target takes %d", name, l.tper, perT)
	}
	return nil
}
