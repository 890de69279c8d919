package datasets

import "fmt"

// Class targets as the losses see them: one label per sample, or one token
// per position of a window (Tokens). A target below 0 is not a class: a
// loss with ignore_index skips it when it is that index, and anything else
// is an error (CheckNegatives), found when the data are described and
// again when they are loaded.

// Negative is a class target below 0: its value and the first sample (or
// window) that holds it.
type Negative struct {
	Value  int32
	Sample int
}

// maxNegatives bounds the distinct negative targets Negatives reports.
const maxNegatives = 8

// Negatives returns the distinct class targets below 0 of ds (at most 8),
// each with the first sample holding it, in the order they first occur.
// A dataset without class targets (regression) has none.
func Negatives(ds Dataset) []Negative {
	var out []Negative
	seen := map[int32]bool{}
	eachTargets(ds, nil, func(j int, ys []int32) bool {
		for _, y := range ys {
			if y < 0 && !seen[y] {
				seen[y] = true
				out = append(out, Negative{Value: y, Sample: j})
			}
		}
		return len(out) < maxNegatives
	})
	return out
}

// Kept counts the class targets of samples idx of ds that are not ignore
// (every position of a token window counts); idx nil counts every sample.
// A dataset without class targets (regression) counts its samples. It
// allocates nothing for gorun's datasets (the runner counts every step's).
func Kept(ds Dataset, idx []int, ignore int32) int {
	if idx == nil {
		idx = make([]int, ds.Len())
		for i := range idx {
			idx[i] = i
		}
	}
	n := 0
	switch s := ds.(type) {
	case *tokenTensors:
		for _, j := range idx {
			n += keptIn(s.y[j*s.t:(j+1)*s.t], ignore)
		}
		return n
	case *textSet:
		for _, j := range idx {
			n += keptIn(s.ids[j*s.t+1:j*s.t+s.t+1], ignore)
		}
		return n
	case Tokens:
		eachTargets(ds, idx, func(_ int, ys []int32) bool {
			n += keptIn(ys, ignore)
			return true
		})
		return n
	}
	labels := ds.Labels()
	if labels == nil {
		return len(idx)
	}
	for _, j := range idx {
		if labels[j] != ignore {
			n++
		}
	}
	return n
}

// keptIn counts the targets of ys that are not ignore.
func keptIn(ys []int32, ignore int32) int {
	n := 0
	for _, y := range ys {
		if y != ignore {
			n++
		}
	}
	return n
}

// CheckNegatives refuses class targets below 0 (negs, from Negatives)
// other than ignore (nil: the loss has no ignore_index): the class losses
// would look them up outside their scores. name says whose targets they
// are ("train.star:9:8: data.tensors").
func CheckNegatives(name string, negs []Negative, ignore *int) error {
	for _, n := range negs {
		switch {
		case ignore == nil:
			return fmt.Errorf("%s: sample %d has the target %d: class targets are 0 … classes − 1, and no ignore_index is set; set ignore_index = %d (train's or the loss's) to skip such targets",
				name, n.Sample, n.Value, n.Value)
		case int(n.Value) != *ignore:
			return fmt.Errorf("%s: sample %d has the target %d: class targets are 0 … classes − 1, and the loss skips only its ignore_index, %d",
				name, n.Sample, n.Value, *ignore)
		}
	}
	return nil
}

// eachTargets calls f with the class targets of each sample j of idx (every
// sample when idx is nil) until f returns false. Datasets without class
// targets call f never.
func eachTargets(ds Dataset, idx []int, f func(j int, ys []int32) bool) {
	n := ds.Len()
	at := func(i int) int {
		if idx == nil {
			return i
		}
		return idx[i]
	}
	count := n
	if idx != nil {
		count = len(idx)
	}
	var row func(j int) []int32
	switch s := ds.(type) {
	case *tokenTensors:
		row = func(j int) []int32 { return s.y[j*s.t : (j+1)*s.t] }
	case *textSet:
		row = func(j int) []int32 { return s.ids[j*s.t+1 : j*s.t+s.t+1] }
	case Tokens:
		t := SampleSize(s)
		x, y := make([]int32, t), make([]int32, t)
		one := []int{0}
		row = func(j int) []int32 {
			one[0] = j
			s.FillTokens(one, x, y)
			return y
		}
	default:
		labels := ds.Labels()
		if labels == nil {
			return
		}
		row = func(j int) []int32 { return labels[j : j+1] }
	}
	for i := range count {
		j := at(i)
		if !f(j, row(j)) {
			return
		}
	}
}
