package engine

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
)

// Checkpoints written before resume keys by meaning (gorun up to commit
// 0239761) hold a key whose steps print every field of ops.Attrs with
// %+v. LegacyStepKey writes a node that way again, from a frozen copy of
// that struct, so such checkpoints keep resuming whatever fields ops.Attrs
// gains; do not edit legacyAttrs.

// legacyAttrs is ops.Attrs as it was at commit 0239761, field for field
// (names, types and order), so that %+v prints it as that gorun printed
// ops.Attrs.
type legacyAttrs struct {
	Stride, Padding int
	Kernel          int
	Groups          int
	P               float64
	Accumulate      bool

	LabelSmoothing float64
	IgnoreIndex    int
	HasIgnore      bool
	NegativeSlope  float64
	Alpha          float64
	Offset, Length int
	Approximate    bool
	Causal         bool
	TransA, TransB bool
	Perm           [6]int8
	BNMomentum     float64
	MaxNorm        float64
	ReLU           bool

	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	Beta1, Beta2, Eps                    float64
}

// LegacyStepKey writes node n as resume keys did before StepKey:
//
//	conv2d conv2d "conv1" [[32 1 28 28] [8 1 5 5] [8]] → [[32 8 24 24]] {Stride:1 Padding:0 … Eps:0}
//
// It fails when n sets an attribute that ops.Attrs did not have then (or
// a value its field could not hold): no checkpoint of that format can
// have been made by such a plan.
func LegacyStepKey(n *Node) (string, error) {
	var a legacyAttrs
	if err := toLegacy(reflect.ValueOf(&a).Elem(), reflect.ValueOf(n.Attrs)); err != nil {
		return "", fmt.Errorf("%s %s sets %w", n.Op, n.Layer, err)
	}
	shapes := func(vs []*Value) []string {
		var out []string
		for _, v := range vs {
			if v == nil {
				out = append(out, "-")
			} else {
				out = append(out, fmt.Sprint(v.Shape))
			}
		}
		return out
	}
	return fmt.Sprintf("%s %s %v → %v %+v", n.Op, n.Layer, shapes(n.In), shapes(n.Out), a), nil
}

// toLegacy fills struct dst from struct src field by field name: a field
// dst lacks must be zero in src, and a value must fit dst's field (arrays
// element by element, the elements past dst's length zero).
func toLegacy(dst, src reflect.Value) error {
	t := src.Type()
	for i := range t.NumField() {
		name, f := t.Field(i).Name, src.Field(i)
		d := dst.FieldByName(name)
		if !d.IsValid() {
			if !f.IsZero() {
				return fmt.Errorf("attribute %s = %v, which ops.Attrs had no field for then", name, f)
			}
			continue
		}
		if err := setLegacy(d, f); err != nil {
			return fmt.Errorf("attribute %s = %v, %w", name, f, err)
		}
	}
	return nil
}

// setLegacy sets d to f's value, or says why it does not fit.
func setLegacy(d, f reflect.Value) error {
	if f.Kind() == reflect.Array || f.Kind() == reflect.Slice {
		if d.Kind() != reflect.Array {
			return fmt.Errorf("which was then a %s", d.Type())
		}
		for j := range f.Len() {
			if j >= d.Len() {
				if !f.Index(j).IsZero() {
					return fmt.Errorf("longer than the %s it was then", d.Type())
				}
				continue
			}
			if err := setLegacy(d.Index(j), f.Index(j)); err != nil {
				return err
			}
		}
		return nil
	}
	if kindClass(f.Kind()) != kindClass(d.Kind()) || kindClass(d.Kind()) == "" {
		return fmt.Errorf("which was then a %s", d.Type())
	}
	c := f.Convert(d.Type())
	if !c.Convert(f.Type()).Equal(f) {
		return fmt.Errorf("which does not fit the %s it was then", d.Type())
	}
	d.Set(c)
	return nil
}

// kindClass groups the kinds whose values convert into each other
// without changing meaning: numbers, booleans, strings ("" for the rest).
func kindClass(k reflect.Kind) string {
	switch {
	case k == reflect.Bool:
		return "bool"
	case k == reflect.String:
		return "string"
	case k >= reflect.Int && k <= reflect.Float64:
		return "number"
	}
	return ""
}

// legacyPath is a quoted data file in a checkpoint's "data" entry.
var legacyPath = regexp.MustCompile(`\b(file|x|y) ("(?:[^"\\]|\\.)*")`)

// legacyDataNames rewrites the data files of a "data" entry written before
// keys by meaning (full paths) by their names, as Fingerprint writes them.
func legacyDataNames(text string) string {
	return legacyPath.ReplaceAllStringFunc(text, func(m string) string {
		sub := legacyPath.FindStringSubmatch(m)
		path, err := strconv.Unquote(sub[2])
		if err != nil {
			return m
		}
		return sub[1] + " " + strconv.Quote(baseName(path))
	})
}
