package ops

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLinearGELUMatchesUnfused: LinearGELU's kernel writes exactly the
// bits of Linear then GELU (tanh form, and the exact one its kernel also
// serves), pre being Linear's output, with and without a bias, at GPT
// MLP-like shapes and a ragged one, in float32 and float64.
func TestLinearGELUMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkLinearGELU(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkLinearGELU(t, Kernels64) })
}

func checkLinearGELU[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(3, 4))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, tc := range []struct {
		x []int
		o int
	}{
		{[]int{4, 16, 32}, 128}, {[]int{7, 13}, 9}, {[]int{1, 5}, 3},
	} {
		for _, bias := range []bool{false, true} {
			for _, approx := range []bool{true, false} {
				x := normalBuf[T](r, tc.x)
				w := normalBuf[T](r, []int{tc.o, tc.x[len(tc.x)-1]})
				in := []*Buf[T]{x, w}
				if bias {
					in = append(in, normalBuf[T](r, []int{tc.o}))
				}
				ys := append(slices.Clone(tc.x[:len(tc.x)-1]), tc.o)
				lin, want := zeroBuf[T](ys), zeroBuf[T](ys)
				call(k, c, Linear, &Attrs{}, in, []*Buf[T]{lin})
				call(k, c, GELU, &Attrs{Approximate: approx}, []*Buf[T]{lin}, []*Buf[T]{want})
				y, pre := zeroBuf[T](ys), zeroBuf[T](ys)
				call(k, c, LinearGELU, &Attrs{Approximate: approx}, in, []*Buf[T]{y, pre})
				if !slices.Equal(pre.Data, lin.Data) || !slices.Equal(y.Data, want.Data) {
					t.Errorf("%v→%d bias %v tanh %v: linear_gelu differs from linear then gelu", tc.x, tc.o, bias, approx)
				}
			}
		}
	}
}

// TestLinearGradInputGELUMatchesUnfused: LinearGradInputGELU's kernel
// writes exactly the bits of LinearGradInput then GELUGrad (tanh form and
// exact), in float32 and float64, on GPT MLP-like shapes and ragged ones.
func TestLinearGradInputGELUMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkLinearGradInputGELU(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkLinearGradInputGELU(t, Kernels64) })
}

func checkLinearGradInputGELU[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(5, 6))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, tc := range []struct {
		rows []int
		o, i int
	}{
		{[]int{4, 16}, 32, 128}, {[]int{7}, 9, 13}, {[]int{1}, 3, 5},
	} {
		for _, approx := range []bool{true, false} {
			xs := append(slices.Clone(tc.rows), tc.i)
			dy := normalBuf[T](r, append(slices.Clone(tc.rows), tc.o))
			w, pre := normalBuf[T](r, []int{tc.o, tc.i}), normalBuf[T](r, xs)
			g, want := zeroBuf[T](xs), zeroBuf[T](xs)
			call(k, c, LinearGradInput, &Attrs{}, []*Buf[T]{dy, w}, []*Buf[T]{g})
			call(k, c, GELUGrad, &Attrs{Approximate: approx}, []*Buf[T]{g, pre}, []*Buf[T]{want})
			got := zeroBuf[T](xs)
			call(k, c, LinearGradInputGELU, &Attrs{Approximate: approx}, []*Buf[T]{dy, w, pre}, []*Buf[T]{got})
			if !slices.Equal(got.Data, want.Data) {
				t.Errorf("%v·[%d %d] tanh %v: linear_grad_input_gelu differs from linear_grad_input then gelu_grad", tc.rows, tc.o, tc.i, approx)
			}
		}
	}
}

// TestLinearGradWeightBiasMatchesUnfused: LinearGradWeightBias's kernel
// writes exactly the bits of LinearGradWeight then LinearGradBias,
// overwriting and accumulating, in float32 and float64.
func TestLinearGradWeightBiasMatchesUnfused(t *testing.T) {
	t.Run("float32", func(t *testing.T) { checkLinearGradWeightBias(t, Kernels32) })
	t.Run("float64", func(t *testing.T) { checkLinearGradWeightBias(t, Kernels64) })
}

func checkLinearGradWeightBias[T Float](t *testing.T, k map[Op]Kernel[T]) {
	r := rand.New(rand.NewPCG(7, 9))
	c := &Ctx[T]{LossScale: 1, Step: 1}
	for _, tc := range []struct {
		rows []int
		o, i int
	}{
		{[]int{4, 16}, 128, 32}, {[]int{7}, 19, 13}, {[]int{1}, 3, 5},
	} {
		for _, acc := range []bool{false, true} {
			dy := normalBuf[T](r, append(slices.Clone(tc.rows), tc.o))
			x := normalBuf[T](r, append(slices.Clone(tc.rows), tc.i))
			dw0, db0 := normalBuf[T](r, []int{tc.o, tc.i}), normalBuf[T](r, []int{tc.o})
			wdw, wdb := zeroBuf[T](dw0.Shape), zeroBuf[T](db0.Shape)
			copy(wdw.Data, dw0.Data)
			copy(wdb.Data, db0.Data)
			a := &Attrs{Accumulate: acc}
			call(k, c, LinearGradWeight, a, []*Buf[T]{dy, x}, []*Buf[T]{wdw})
			call(k, c, LinearGradBias, a, []*Buf[T]{dy}, []*Buf[T]{wdb})
			dw, db := zeroBuf[T](dw0.Shape), zeroBuf[T](db0.Shape)
			copy(dw.Data, dw0.Data)
			copy(db.Data, db0.Data)
			call(k, c, LinearGradWeightBias, a, []*Buf[T]{dy, x}, []*Buf[T]{dw, db})
			if !slices.Equal(dw.Data, wdw.Data) || !slices.Equal(db.Data, wdb.Data) {
				t.Errorf("%v·[%d %d] accumulate %v: linear_grad_weight_bias differs from linear_grad_weight then linear_grad_bias", tc.rows, tc.o, tc.i, acc)
			}
		}
	}
}
