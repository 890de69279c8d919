package cuda

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gorun/ops"
)

// TestLtLinearGELUCall: ops.LinearGELU as one cuBLASLt matmul — the
// epilogue is cublasLt.h's (CUDA 11.8) GELU_AUX_BIAS = 164 with a bias
// and GELU_AUX = 160 without, the layouts are the bias call's, and the
// auxiliary matrix (the pre-activation) is laid out as D, leading
// dimension o; the descriptor's extra attributes are the aux leading
// dimension (attribute 12, int64), its data type (22, CUDA_R_32F) and,
// with a bias, the bias's data type (26, CUDA_R_32F); the bias call sets
// none. A reference column-major matmul of those layouts gives
// ops.LinearGELU's pre, and tanh GELU of it its y. An output count not
// a multiple of 8 (cuBLASLt's rule for the aux leading dimension) and an
// empty batch stay with the unfused kernels.
func TestLtLinearGELUCall(t *testing.T) {
	if ltEpilogueGELUAuxBias != 164 || ltEpilogueGELUAux != 160 || ltDescAuxPointer != 11 || ltDescAuxLD != 12 ||
		ltDescAuxDataType != 22 || ltDescBiasDataType != 26 || ltDescBiasPointer != 8 {
		t.Fatal("cublasLt.h's values changed")
	}
	r := rand.New(rand.NewPCG(26, 2))
	for _, sz := range [][3]int{{1, 1, 8}, {3, 5, 16}, {17, 4, 24}, {64, 32, 128}} {
		for _, bias := range []bool{true, false} {
			n, in, o := sz[0], sz[1], sz[2]
			c, ok := linearGELUCall(n, in, o, bias, 64, ltCompute32F)
			want := ltEpilogueGELUAux
			attrs := []ltAttr{{12, int64(o), 8}, {22, 0, 4}}
			if bias {
				want = ltEpilogueGELUAuxBias
				attrs = append(attrs, ltAttr{26, 0, 4})
			}
			if !ok || c.Epilogue != want || !c.SwapOperands || c.C.Rows != o || c.C.Cols != n || c.AuxLD != o || c.Align != 64 || c.Compute != ltCompute32F {
				t.Fatalf("n=%d i=%d o=%d bias %v: %+v, %v", n, in, o, bias, c, ok)
			}
			if got := c.extraAttrs(); !slices.Equal(got, attrs) {
				t.Errorf("n=%d i=%d o=%d bias %v: attributes %v, want %v", n, in, o, bias, got, attrs)
			}
			x, w, b := randFloats(r, n*in), randFloats(r, o*in), randFloats(r, o)
			ref := c
			ref.Epilogue = ltEpilogueDefault
			if bias {
				ref.Epilogue = ltEpilogueBias
			}
			pre := ltMatmulRef(t, ref, w, x, b) // aux: D's values before GELU, ld AuxLD = C.LD
			in3 := []*ops.Buf[float32]{{Data: x, Shape: []int{n, in}}, {Data: w, Shape: []int{o, in}}}
			if bias {
				in3 = append(in3, &ops.Buf[float32]{Data: b, Shape: []int{o}})
			}
			wy, wpre := make([]float32, n*o), make([]float32, n*o)
			ops.Kernels32[ops.LinearGELU](&ops.Ctx[float32]{LossScale: 1}, &ops.Attrs{Approximate: true}, in3,
				[]*ops.Buf[float32]{{Data: wy, Shape: []int{n, o}}, {Data: wpre, Shape: []int{n, o}}})
			y := make([]float32, n*o)
			ops.Kernels32[ops.GELU](&ops.Ctx[float32]{LossScale: 1}, &ops.Attrs{Approximate: true},
				[]*ops.Buf[float32]{{Data: pre, Shape: []int{n, o}}}, []*ops.Buf[float32]{{Data: y, Shape: []int{n, o}}})
			for e := range wpre {
				if d := pre[e] - wpre[e]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("n=%d i=%d o=%d: pre[%d] = %v, ops.LinearGELU %v", n, in, o, e, pre[e], wpre[e])
				}
				if d := y[e] - wy[e]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("n=%d i=%d o=%d: y[%d] = %v, ops.LinearGELU %v", n, in, o, e, y[e], wy[e])
				}
			}
		}
	}
	if _, ok := linearGELUCall(4, 3, 12, true, 256, ltCompute32F); ok {
		t.Error("an aux leading dimension of 12 (not a multiple of 8) goes to cuBLASLt")
	}
	if _, ok := linearGELUCall(0, 3, 16, true, 256, ltCompute32F); ok {
		t.Error("an empty batch goes to cuBLASLt")
	}
	if c, _ := linearBiasCall(3, 4, 5, 256, ltCompute32F); c.extraAttrs() != nil || c.AuxLD != 0 {
		t.Errorf("the bias call sets %v, aux ld %d", c.extraAttrs(), c.AuxLD)
	}
}

// TestLtGELUNotes: a GELU call's fallback says that the GELU runs apart,
// once, besides the bias call's note for the same reason.
func TestLtGELUNotes(t *testing.T) {
	var b bytes.Buffer
	n := &ltNotes{w: &b}
	g, _ := linearGELUCall(3, 4, 8, true, 256, ltCompute32F)
	lb, _ := linearBiasCall(3, 4, 8, 256, ltCompute32F)
	n.fallbackAs("cuda:0", "no algorithm", g.instead())
	n.fallbackAs("cuda:0", "no algorithm", g.instead())
	n.fallbackAs("cuda:0", "no algorithm", lb.instead())
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "a separate GELU kernel") || !strings.HasSuffix(lines[1], "a separate bias kernel") {
		t.Errorf("notes:\n%s", b.String())
	}
}

// TestLtLinearGradInputGELUCall: ops.LinearGradInputGELU as one cuBLASLt
// matmul — LinearGradInput's layouts with cublasLt.h's (CUDA 11.8)
// CUBLASLT_EPILOGUE_DGELU = 192, the pre-activation as the auxiliary
// matrix laid out as D (leading dimension i, float32; no bias, so no bias
// data type). A reference column-major matmul of those layouts, then
// GELUGrad of the product at pre, gives ops.LinearGradInputGELU's dx.
// An i not a multiple of 8 and an empty batch stay with the unfused
// kernels.
func TestLtLinearGradInputGELUCall(t *testing.T) {
	if ltEpilogueDGELU != 192 {
		t.Fatal("cublasLt.h's value changed")
	}
	r := rand.New(rand.NewPCG(26, 3))
	for _, sz := range [][3]int{{1, 1, 8}, {3, 5, 16}, {17, 4, 24}, {64, 32, 128}} {
		n, o, i := sz[0], sz[1], sz[2]
		c, ok := linearGradInputGELUCall(n, o, i, 64, ltCompute32F)
		if !ok || c.Epilogue != ltEpilogueDGELU || !c.SwapOperands || c.C.Rows != i || c.C.Cols != n || c.AuxLD != i || c.Align != 64 {
			t.Fatalf("n=%d o=%d i=%d: %+v, %v", n, o, i, c, ok)
		}
		if got, want := c.extraAttrs(), []ltAttr{{12, int64(i), 8}, {22, 0, 4}}; !slices.Equal(got, want) {
			t.Errorf("n=%d o=%d i=%d: attributes %v, want %v", n, o, i, got, want)
		}
		dy, w, pre := randFloats(r, n*o), randFloats(r, o*i), randFloats(r, n*i)
		ref := c
		ref.Epilogue = ltEpilogueDefault
		prod := ltMatmulRef(t, ref, w, dy, nil) // the call's A is the row-major B (w)
		k := &ops.Ctx[float32]{LossScale: 1}
		got := make([]float32, n*i)
		ops.Kernels32[ops.GELUGrad](k, &ops.Attrs{Approximate: true},
			[]*ops.Buf[float32]{{Data: prod, Shape: []int{n, i}}, {Data: pre, Shape: []int{n, i}}}, []*ops.Buf[float32]{{Data: got, Shape: []int{n, i}}})
		want := make([]float32, n*i)
		ops.Kernels32[ops.LinearGradInputGELU](k, &ops.Attrs{Approximate: true},
			[]*ops.Buf[float32]{{Data: dy, Shape: []int{n, o}}, {Data: w, Shape: []int{o, i}}, {Data: pre, Shape: []int{n, i}}},
			[]*ops.Buf[float32]{{Data: want, Shape: []int{n, i}}})
		for e := range want {
			if d := got[e] - want[e]; d > 1e-5 || d < -1e-5 {
				t.Fatalf("n=%d o=%d i=%d: dx[%d] = %v, ops.LinearGradInputGELU %v", n, o, i, e, got[e], want[e])
			}
		}
	}
	if _, ok := linearGradInputGELUCall(4, 3, 12, 256, ltCompute32F); ok {
		t.Error("an aux leading dimension of 12 (not a multiple of 8) goes to cuBLASLt")
	}
	if _, ok := linearGradInputGELUCall(0, 3, 16, 256, ltCompute32F); ok {
		t.Error("an empty batch goes to cuBLASLt")
	}
}

// TestLtLinearGradWeightBiasCall: ops.LinearGradWeightBias as one
// cuBLASLt matmul — LinearGradWeight's layouts with cublasLt.h's (CUDA
// 11.8) CUBLASLT_EPILOGUE_BGRADB = 512, whose B operand (the sum's, over
// k) is dy: a reference column-major matmul of those layouts gives
// ops.LinearGradWeightBias's dw, and the sum of op(B) over k for each of
// D's columns its db. No extra attributes; an empty batch stays with the
// unfused kernels.
func TestLtLinearGradWeightBiasCall(t *testing.T) {
	if ltEpilogueBGradB != 512 {
		t.Fatal("cublasLt.h's value changed")
	}
	r := rand.New(rand.NewPCG(26, 4))
	for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 4, 9}, {64, 32, 128}} {
		n, o, i := sz[0], sz[1], sz[2]
		c, ok := linearGradWeightBiasCall(n, o, i, 64, ltCompute32F)
		if !ok || c.Epilogue != ltEpilogueBGradB || !c.SwapOperands || c.C.Rows != i || c.C.Cols != o || c.k() != n || c.extraAttrs() != nil {
			t.Fatalf("n=%d o=%d i=%d: %+v, %v", n, o, i, c, ok)
		}
		dy, x := randFloats(r, n*o), randFloats(r, n*i)
		ref := c
		ref.Epilogue = ltEpilogueDefault
		dw := ltMatmulRef(t, ref, x, dy, nil) // the call's A is the row-major B (x), its B dy
		db := make([]float32, c.C.Cols)
		for j := range c.C.Cols {
			for l := range c.k() {
				if c.TransB {
					db[j] += dy[j+l*c.B.LD]
				} else {
					db[j] += dy[l+j*c.B.LD]
				}
			}
		}
		wdw, wdb := make([]float32, o*i), make([]float32, o)
		ops.Kernels32[ops.LinearGradWeightBias](&ops.Ctx[float32]{LossScale: 1}, &ops.Attrs{},
			[]*ops.Buf[float32]{{Data: dy, Shape: []int{n, o}}, {Data: x, Shape: []int{n, i}}},
			[]*ops.Buf[float32]{{Data: wdw, Shape: []int{o, i}}, {Data: wdb, Shape: []int{o}}})
		for e := range wdw {
			if d := dw[e] - wdw[e]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("n=%d o=%d i=%d: dw[%d] = %v, ops.LinearGradWeightBias %v", n, o, i, e, dw[e], wdw[e])
			}
		}
		for e := range wdb {
			if d := db[e] - wdb[e]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("n=%d o=%d i=%d: db[%d] = %v, ops.LinearGradWeightBias %v", n, o, i, e, db[e], wdb[e])
			}
		}
	}
	if _, ok := linearGradWeightBiasCall(0, 3, 16, 256, ltCompute32F); ok {
		t.Error("an empty batch goes to cuBLASLt")
	}
}
