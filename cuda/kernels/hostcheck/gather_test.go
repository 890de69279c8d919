//go:build cgo

package hostcheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"gorun/datasets"
)

// TestGatherTokenWindows checks the cuda backend's batches of token
// windows and of float targets: the whole dataset as rows (FillTokens or
// FillTargets of every sample, as cuda's LoadData holds it), then
// gather_rows_int / gather_rows of a batch's indices (as its Gather
// does), against FillTokens / FillTargets of those indices: windows of
// odd lengths (1, 7, 13), targets that are ignore_index (-100), repeated
// and out-of-order indices, every geometry; nothing written past the
// live rows.
func TestGatherTokenWindows(t *testing.T) {
	r := newRand(21)
	text := []byte(strings.Repeat("gorun gathers token windows on the GPU, 1234567890! ", 5))
	for _, seqLen := range []int{1, 7, 13} {
		ds, err := datasets.Text("t.txt", text, seqLen, "chars", "train", 0.2)
		if err != nil {
			t.Fatal(err)
		}
		n := ds.Len()
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		x, y := make([]int32, n*seqLen), make([]int32, n*seqLen)
		ds.FillTokens(all, x, y)
		for i := range y {
			if i%5 == 2 {
				y[i] = -100 // as data.tensors' targets may be
			}
		}
		for _, rows := range []int{1, 4, 9} {
			idx := make([]int32, rows)
			ints := make([]int, rows)
			for i := range idx {
				idx[i] = int32(r.IntN(n))
				ints[i] = int(idx[i])
			}
			if rows > 2 {
				idx[2], ints[2] = idx[0], ints[0] // a repeat
			}
			wantX, wantY := make([]int32, rows*seqLen), make([]int32, rows*seqLen)
			ds.FillTokens(ints, wantX, wantY)
			for i, k := range ints {
				for j := range seqLen {
					if (k*seqLen+j)%5 == 2 {
						wantY[i*seqLen+j] = -100
					}
				}
			}
			for gi, geo := range geoms(rows * seqLen) {
				for _, c := range []struct {
					what      string
					src, want []int32
				}{{"ids", x, wantX}, {"targets", y, wantY}} {
					dst := slices.Repeat([]int32{-7}, rows*seqLen+3)
					GatherRowsInt(geo, c.src, idx, dst, rows, seqLen)
					if !slices.Equal(dst[:rows*seqLen], c.want) {
						t.Fatalf("seq_len %d, %d rows, geometry %d: gathered %s %v, want %v", seqLen, rows, gi, c.what, dst[:rows*seqLen], c.want)
					}
					if !slices.Equal(dst[rows*seqLen:], []int32{-7, -7, -7}) {
						t.Errorf("seq_len %d, %d rows: gather_rows_int wrote past the live rows", seqLen, rows)
					}
				}
			}
		}
	}
}

// regression is a Regression dataset of n samples of 5 values and
// targets of shape [3] (values from a formula: a mix-up shows).
type regression struct{ n int }

func (s regression) Name() string       { return "regression" }
func (s regression) Len() int           { return s.n }
func (s regression) SampleShape() []int { return []int{5} }
func (s regression) TargetShape() []int { return []int{3} }
func (s regression) NumClasses() int    { return 0 }
func (s regression) Labels() []int32    { return nil }
func (s regression) Fill(idx []int, x []float32, _ []int32) {
	s.FillTargets(idx, x, make([]float32, 3*len(idx)))
}
func (s regression) FillTargets(idx []int, x, y []float32) {
	for i, k := range idx {
		for j := range 5 {
			x[i*5+j] = float32(k) + float32(j)/8
		}
		for j := range 3 {
			y[i*3+j] = -float32(k) - float32(j)/4
		}
	}
}

// TestGatherFloatTargets: float targets of 3 values a sample through
// gather_rows, against FillTargets.
func TestGatherFloatTargets(t *testing.T) {
	var ds datasets.Regression = regression{n: 11}
	all := make([]int, ds.Len())
	for i := range all {
		all[i] = i
	}
	x, y := make([]float32, 5*len(all)), make([]float32, 3*len(all))
	ds.FillTargets(all, x, y)
	ints := []int{10, 0, 3, 3, 7}
	idx := []int32{10, 0, 3, 3, 7}
	wantX, wantY := make([]float32, 5*len(ints)), make([]float32, 3*len(ints))
	ds.FillTargets(ints, wantX, wantY)
	for gi, geo := range geoms(len(ints) * 3) {
		for _, c := range []struct {
			cols      int
			src, want []float32
		}{{5, x, wantX}, {3, y, wantY}} {
			n := len(ints) * c.cols
			dst := nans(n + 2)
			GatherRows(geo, c.src, idx, dst, len(ints), c.cols)
			checkExact(t, fmt.Sprintf("geometry %d, %d columns", gi, c.cols), dst, c.want, n)
			checkTail(t, "gather_rows", dst, n)
		}
	}
}
