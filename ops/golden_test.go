package ops

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"
)

// ops_golden.json holds PyTorch 1.13's float64 forward and backward values
// of conv2d, max_pool2d, log_softmax + nll_loss, cross_entropy (label
// smoothing, ignore_index, classes along the last dimension of higher-rank
// inputs), softmax (causal too), log_softmax, batch_norm, avg_pool2d,
// adaptive_avg_pool2d, sigmoid, tanh, leaky_relu, gelu, add, sub, mul,
// scaling, mse_loss, cat, embedding, layer_norm, matmul (batched, with
// transposes), permute, linear (over the last dimension of any rank),
// narrow, position ids, silu and linear_gelu (F.gelu(F.linear(...),
// approximate="tanh"): ops.LinearGELU) on small random inputs;
// testdata/gen_ops_golden.py writes it.

type goldenTensor struct {
	Shape []int
	Data  []float64
}

type opsGoldenCase struct {
	Name, Op                        string
	Stride, Padding, Kernel, Groups int
	Offset, Length                  int
	Eps, Momentum, Alpha            float64
	LabelSmoothing                  float64 `json:"label_smoothing"`
	NegativeSlope                   float64 `json:"negative_slope"`
	Approximate, Causal, ReLU       bool
	TransA                          bool `json:"trans_a"`
	TransB                          bool `json:"trans_b"`
	Perm                            []int8
	IgnoreIndex                     *int `json:"ignore_index"`
	X, W, B, Y, Dy, Dx, Dw          *goldenTensor
	Db, Idx, Target, Probs, Ids     *goldenTensor
	Logp, Loss, Dloss               *goldenTensor
	Dlogp                           *goldenTensor
	Other, Dother                   *goldenTensor
	Gamma, Beta, Dgamma, Dbeta      *goldenTensor
	Mean, Rstd                      *goldenTensor
	Pre                             *goldenTensor
	RunningMean                     *goldenTensor `json:"running_mean"`
	RunningVar                      *goldenTensor `json:"running_var"`
	RunningMeanOut                  *goldenTensor `json:"running_mean_out"`
	RunningVarOut                   *goldenTensor `json:"running_var_out"`
	Tracked                         *goldenTensor
	TrackedOut                      *goldenTensor `json:"tracked_out"`
	XEval                           *goldenTensor `json:"x_eval"`
	YEval                           *goldenTensor `json:"y_eval"`
}

func loadJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestOpsGolden(t *testing.T) {
	var g struct {
		Torch string
		Cases []opsGoldenCase
	}
	loadJSON(t, "ops_golden.json", &g)
	if len(g.Cases) == 0 {
		t.Fatal("ops_golden.json has no cases")
	}
	for _, gc := range g.Cases {
		t.Run(gc.Name+"/float64", func(t *testing.T) { runOpsGolden(t, &gc, Kernels64, 1e-12) })
		t.Run(gc.Name+"/float32", func(t *testing.T) { runOpsGolden(t, &gc, Kernels32, 2e-5) })
	}
}

func fromGolden[T Float](g *goldenTensor) *Buf[T] {
	if g == nil {
		return nil
	}
	b := &Buf[T]{Shape: clone(g.Shape), Data: make([]T, len(g.Data))}
	for i, v := range g.Data {
		b.Data[i] = T(v)
	}
	return b
}

func idxFromGolden[T Float](g *goldenTensor) *Buf[T] {
	b := &Buf[T]{Shape: clone(g.Shape), Idx: make([]int32, len(g.Data))}
	for i, v := range g.Data {
		b.Idx[i] = int32(v)
	}
	return b
}

func zeroBuf[T Float](shape []int) *Buf[T] {
	return &Buf[T]{Shape: clone(shape), Data: make([]T, prod(shape))}
}

// call runs kernel op with scratch sized by Workspace.
func call[T Float](k map[Op]Kernel[T], c *Ctx[T], op Op, a *Attrs, in, out []*Buf[T]) {
	var inS, outS [][]int
	for _, b := range in {
		if b == nil {
			inS = append(inS, nil)
		} else {
			inS = append(inS, b.Shape)
		}
	}
	for _, b := range out {
		outS = append(outS, b.Shape)
	}
	c.Work = make([]T, Workspace(op, a, inS, outS))
	k[op](c, a, in, out)
}

// expectClose fails when got differs from want by more than tol·(1+|want|)
// anywhere.
func expectClose[T Float](t *testing.T, what string, got *Buf[T], want *goldenTensor, tol float64) {
	t.Helper()
	if len(got.Data) < len(want.Data) {
		t.Fatalf("%s: %d elements, want %d", what, len(got.Data), len(want.Data))
	}
	for i, w := range want.Data {
		if g := float64(got.Data[i]); !(math.Abs(g-w) <= tol*(1+math.Abs(w))) {
			t.Errorf("%s[%d] = %.10g, PyTorch %.10g", what, i, g, w)
			return
		}
	}
}

func runOpsGolden[T Float](t *testing.T, g *opsGoldenCase, k map[Op]Kernel[T], tol float64) {
	c := &Ctx[T]{LossScale: 1, Step: 1}
	switch g.Op {
	case "conv2d":
		a := &Attrs{Stride: g.Stride, Padding: g.Padding, Groups: g.Groups}
		x, w, b, dy := fromGolden[T](g.X), fromGolden[T](g.W), fromGolden[T](g.B), fromGolden[T](g.Dy)
		y := zeroBuf[T](g.Y.Shape)
		call(k, c, Conv2D, a, []*Buf[T]{x, w, b}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		dx, dw := zeroBuf[T](g.X.Shape), zeroBuf[T](g.W.Shape)
		call(k, c, Conv2DGradInput, a, []*Buf[T]{dy, w}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		call(k, c, Conv2DGradWeight, a, []*Buf[T]{dy, x}, []*Buf[T]{dw})
		expectClose(t, "dw", dw, g.Dw, tol)
		if g.B != nil {
			db := zeroBuf[T](g.B.Shape)
			call(k, c, Conv2DGradBias, a, []*Buf[T]{dy}, []*Buf[T]{db})
			expectClose(t, "db", db, g.Db, tol)
		}
	case "linear":
		x, w, b, dy := fromGolden[T](g.X), fromGolden[T](g.W), fromGolden[T](g.B), fromGolden[T](g.Dy)
		y, dx, dw := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape), zeroBuf[T](g.W.Shape)
		in := []*Buf[T]{x, w}
		if b != nil {
			in = append(in, b)
		}
		call(k, c, Linear, &Attrs{}, in, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, LinearGradInput, &Attrs{}, []*Buf[T]{dy, w}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		call(k, c, LinearGradWeight, &Attrs{}, []*Buf[T]{dy, x}, []*Buf[T]{dw})
		expectClose(t, "dw", dw, g.Dw, tol)
		if b != nil {
			db := zeroBuf[T](g.B.Shape)
			call(k, c, LinearGradBias, &Attrs{}, []*Buf[T]{dy}, []*Buf[T]{db})
			expectClose(t, "db", db, g.Db, tol)
		}
	case "linear_gelu":
		// LinearGELU forward, then the backward nodes its rule emits:
		// GELUGrad on the pre-activation, then Linear's gradients.
		x, w, b, dy := fromGolden[T](g.X), fromGolden[T](g.W), fromGolden[T](g.B), fromGolden[T](g.Dy)
		y, pre, dpre := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.Y.Shape), zeroBuf[T](g.Y.Shape)
		dx, dw := zeroBuf[T](g.X.Shape), zeroBuf[T](g.W.Shape)
		in := []*Buf[T]{x, w}
		if b != nil {
			in = append(in, b)
		}
		a := &Attrs{Approximate: g.Approximate}
		call(k, c, LinearGELU, a, in, []*Buf[T]{y, pre})
		expectClose(t, "y", y, g.Y, tol)
		expectClose(t, "pre", pre, g.Pre, tol)
		call(k, c, GELUGrad, a, []*Buf[T]{dy, pre}, []*Buf[T]{dpre})
		call(k, c, LinearGradInput, &Attrs{}, []*Buf[T]{dpre, w}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		call(k, c, LinearGradWeight, &Attrs{}, []*Buf[T]{dpre, x}, []*Buf[T]{dw})
		expectClose(t, "dw", dw, g.Dw, tol)
		if b != nil {
			db := zeroBuf[T](g.B.Shape)
			call(k, c, LinearGradBias, &Attrs{}, []*Buf[T]{dpre}, []*Buf[T]{db})
			expectClose(t, "db", db, g.Db, tol)
		}
	case "narrow":
		a := &Attrs{Offset: g.Offset, Length: g.Length}
		out, err := Infer(Narrow, a, [][]int{g.X.Shape})
		if err != nil || !slices.Equal(out[0], g.Y.Shape) {
			t.Fatalf("Infer(narrow) = %v, %v; PyTorch's shape %v", out, err, g.Y.Shape)
		}
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, Narrow, a, []*Buf[T]{x}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, NarrowGrad, a, []*Buf[T]{dy}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "positions":
		ids := idxFromGolden[T](g.Ids)
		pos := &Buf[T]{Shape: clone(g.Y.Shape), Idx: make([]int32, prod(g.Y.Shape))}
		call(k, c, Positions, &Attrs{}, []*Buf[T]{ids}, []*Buf[T]{pos})
		for i, w := range g.Y.Data {
			if pos.Idx[i] != int32(w) {
				t.Fatalf("positions[%d] = %d, PyTorch %v", i, pos.Idx[i], w)
			}
		}
	case "conv2d_maxpool2d":
		// Conv2DPool, and the gradient the engine's rule emits for it.
		a := &Attrs{Padding: g.Padding, ReLU: g.ReLU}
		x, w, b, dy := fromGolden[T](g.X), fromGolden[T](g.W), fromGolden[T](g.B), fromGolden[T](g.Dy)
		in := []*Buf[T]{x, w}
		if b != nil {
			in = append(in, b)
		}
		y := zeroBuf[T](g.Y.Shape)
		idx := &Buf[T]{Shape: clone(g.Y.Shape), Idx: make([]int32, prod(g.Y.Shape))}
		call(k, c, Conv2DPool, a, in, []*Buf[T]{y, idx})
		expectClose(t, "y", y, g.Y, tol)
		for i, v := range g.Idx.Data {
			if idx.Idx[i] != int32(v) {
				t.Fatalf("idx[%d] = %d, PyTorch %v", i, idx.Idx[i], v)
			}
		}
		if g.ReLU {
			dz := zeroBuf[T](g.Y.Shape)
			call(k, c, ReLUGrad, nil, []*Buf[T]{dy, y}, []*Buf[T]{dz})
			dy = dz
		}
		s := g.X.Shape
		conv := zeroBuf[T]([]int{s[0], g.W.Shape[0], s[2] + 2*g.Padding - g.W.Shape[2] + 1, s[3] + 2*g.Padding - g.W.Shape[3] + 1})
		call(k, c, MaxPool2DGrad, &Attrs{Kernel: 2, Stride: 2}, []*Buf[T]{dy, idx}, []*Buf[T]{conv})
		dx, dw := zeroBuf[T](g.X.Shape), zeroBuf[T](g.W.Shape)
		call(k, c, Conv2DGradInput, a, []*Buf[T]{conv, w}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		call(k, c, Conv2DGradWeight, a, []*Buf[T]{conv, x}, []*Buf[T]{dw})
		expectClose(t, "dw", dw, g.Dw, tol)
		if b != nil {
			db := zeroBuf[T](g.B.Shape)
			call(k, c, Conv2DGradBias, a, []*Buf[T]{conv}, []*Buf[T]{db})
			expectClose(t, "db", db, g.Db, tol)
		}
	case "maxpool2d":
		a := &Attrs{Kernel: g.Kernel, Stride: g.Stride}
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y := zeroBuf[T](g.Y.Shape)
		idx := &Buf[T]{Shape: clone(g.Y.Shape), Idx: make([]int32, prod(g.Y.Shape))}
		call(k, c, MaxPool2D, a, []*Buf[T]{x}, []*Buf[T]{y, idx})
		expectClose(t, "y", y, g.Y, tol)
		for i, w := range g.Idx.Data {
			if idx.Idx[i] != int32(w) {
				t.Fatalf("index[%d] = %d, PyTorch %v", i, idx.Idx[i], w)
			}
		}
		dx := zeroBuf[T](g.X.Shape)
		call(k, c, MaxPool2DGrad, a, []*Buf[T]{dy, idx}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "log_softmax_nll":
		a := lossAttrs(g)
		c.LossScale = meanScale(g) // reduction="mean"
		x, target, dloss := fromGolden[T](g.X), idxFromGolden[T](g.Target), fromGolden[T](g.Dloss)
		logp, loss := zeroBuf[T](g.X.Shape), zeroBuf[T]([]int{1})
		call(k, c, LogSoftmax, a, []*Buf[T]{x}, []*Buf[T]{logp})
		expectClose(t, "logp", logp, g.Logp, tol)
		call(k, c, NLLLoss, a, []*Buf[T]{logp, target}, []*Buf[T]{loss})
		expectClose(t, "loss", loss, g.Loss, tol)
		dlogp, dx := zeroBuf[T](g.X.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, NLLLossGrad, a, []*Buf[T]{dloss, target}, []*Buf[T]{dlogp})
		expectClose(t, "dlogp", dlogp, g.Dlogp, tol)
		call(k, c, LogSoftmaxGrad, a, []*Buf[T]{dlogp, logp}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "cross_entropy":
		a := lossAttrs(g)
		c.LossScale = meanScale(g)
		x, target, dloss := fromGolden[T](g.X), idxFromGolden[T](g.Target), fromGolden[T](g.Dloss)
		loss, probs := zeroBuf[T]([]int{1}), zeroBuf[T](g.X.Shape)
		call(k, c, CrossEntropy, a, []*Buf[T]{x, target}, []*Buf[T]{loss, probs})
		expectClose(t, "loss", loss, g.Loss, tol)
		expectClose(t, "probs", probs, g.Probs, tol)
		dx := zeroBuf[T](g.X.Shape)
		call(k, c, CrossEntropyGrad, a, []*Buf[T]{dloss, probs, target}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		// The fused classifier (ops.CrossEntropyFused) against the same
		// PyTorch loss and gradient.
		floss, fdx := zeroBuf[T]([]int{1}), zeroBuf[T](g.X.Shape)
		call(k, c, CrossEntropyFused, a, []*Buf[T]{x, target, dloss}, []*Buf[T]{floss, fdx})
		expectClose(t, "cross_entropy_fused loss", floss, g.Loss, tol)
		expectClose(t, "cross_entropy_fused dx", fdx, g.Dx, tol)
	case "softmax":
		a := &Attrs{Causal: g.Causal}
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y, dx := zeroBuf[T](g.X.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, Softmax, a, []*Buf[T]{x}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, SoftmaxGrad, a, []*Buf[T]{dy, y}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "mse_loss":
		a := &Attrs{}
		c.LossScale = 1 / float64(g.X.Shape[0]) // reduction="mean"
		x, target, dloss := fromGolden[T](g.X), fromGolden[T](g.Target), fromGolden[T](g.Dloss)
		loss, dx := zeroBuf[T]([]int{1}), zeroBuf[T](g.X.Shape)
		call(k, c, MSELoss, a, []*Buf[T]{x, target}, []*Buf[T]{loss})
		expectClose(t, "loss", loss, g.Loss, tol)
		call(k, c, MSELossGrad, a, []*Buf[T]{dloss, x, target}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "concat":
		x, other, dy := fromGolden[T](g.X), fromGolden[T](g.Other), fromGolden[T](g.Dy)
		y, dx, dother := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape), zeroBuf[T](g.Other.Shape)
		call(k, c, Concat, &Attrs{}, []*Buf[T]{x, other}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, Narrow, &Attrs{Offset: 0}, []*Buf[T]{dy}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		call(k, c, Narrow, &Attrs{Offset: g.X.Shape[1]}, []*Buf[T]{dy}, []*Buf[T]{dother})
		expectClose(t, "dother", dother, g.Dother, tol)
	case "embedding":
		ids, w, dy := idxFromGolden[T](g.Ids), fromGolden[T](g.W), fromGolden[T](g.Dy)
		y, dw := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.W.Shape)
		call(k, c, Embedding, &Attrs{}, []*Buf[T]{ids, w}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, EmbeddingGradWeight, &Attrs{}, []*Buf[T]{dy, ids}, []*Buf[T]{dw})
		expectClose(t, "dw", dw, g.Dw, tol)
	case "layer_norm":
		a := &Attrs{Eps: g.Eps}
		x, dy, gamma, beta := fromGolden[T](g.X), fromGolden[T](g.Dy), fromGolden[T](g.Gamma), fromGolden[T](g.Beta)
		rows := len(g.Mean.Data)
		y, save, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T]([]int{rows, 2}), zeroBuf[T](g.X.Shape)
		call(k, c, LayerNorm, a, []*Buf[T]{x, gamma, beta}, []*Buf[T]{y, save})
		expectClose(t, "y", y, g.Y, tol)
		for r := range rows {
			if m, w := float64(save.Data[2*r]), g.Mean.Data[r]; !(math.Abs(m-w) <= tol*(1+math.Abs(w))) {
				t.Errorf("mean[%d] = %v, PyTorch %v", r, m, w)
			}
			if s, w := float64(save.Data[2*r+1]), g.Rstd.Data[r]; !(math.Abs(s-w) <= tol*(1+math.Abs(w))) {
				t.Errorf("invstd[%d] = %v, PyTorch %v", r, s, w)
			}
		}
		call(k, c, LayerNormGradInput, a, []*Buf[T]{dy, x, save, gamma}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
		if gamma != nil {
			dgamma, dbeta := zeroBuf[T](g.Gamma.Shape), zeroBuf[T](g.Beta.Shape)
			call(k, c, LayerNormGradGamma, a, []*Buf[T]{dy, x, save}, []*Buf[T]{dgamma})
			expectClose(t, "dgamma", dgamma, g.Dgamma, tol)
			call(k, c, LayerNormGradBeta, a, []*Buf[T]{dy}, []*Buf[T]{dbeta})
			expectClose(t, "dbeta", dbeta, g.Dbeta, tol)
		}
	case "batch_matmul":
		x, other, dy := fromGolden[T](g.X), fromGolden[T](g.Other), fromGolden[T](g.Dy)
		y, dx, dother := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape), zeroBuf[T](g.Other.Shape)
		call(k, c, BatchMatMul, &Attrs{TransA: g.TransA, TransB: g.TransB}, []*Buf[T]{x, other}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		// The gradients as BatchMatMul's doc comment lists them.
		gc := bmmCase(g.Name, g.TransA, g.TransB, [][]int{g.X.Shape, g.Other.Shape}, 0)
		for i, d := range []*Buf[T]{dx, dother} {
			st := gc.bwd[i]
			var in []*Buf[T]
			for _, r := range st.args {
				in = append(in, map[ref]*Buf[T]{dyOf(0): dy, inOf(0): x, inOf(1): other}[r])
			}
			call(k, c, BatchMatMul, st.attrs, in, []*Buf[T]{d})
		}
		expectClose(t, "dx", dx, g.Dx, tol)
		expectClose(t, "dother", dother, g.Dother, tol)
	case "permute":
		a := &Attrs{}
		copy(a.Perm[:], g.Perm)
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, Permute, a, []*Buf[T]{x}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, Permute, &Attrs{Perm: InversePerm(a.Perm, len(g.Perm))}, []*Buf[T]{dy}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "batch_norm":
		runBatchNormGolden(t, g, k, c, tol)
	case "avgpool2d":
		a := &Attrs{Kernel: g.Kernel, Stride: g.Stride, Padding: g.Padding}
		runUnaryGolden(t, g, k, c, a, AvgPool2D, AvgPool2DGrad, false, tol)
	case "global_avgpool2d":
		runUnaryGolden(t, g, k, c, &Attrs{}, GlobalAvgPool2D, GlobalAvgPool2DGrad, false, tol)
	case "sigmoid":
		runUnaryGolden(t, g, k, c, &Attrs{}, Sigmoid, SigmoidGrad, true, tol)
	case "tanh":
		runUnaryGolden(t, g, k, c, &Attrs{}, Tanh, TanhGrad, true, tol)
	case "leaky_relu":
		runUnaryGolden(t, g, k, c, &Attrs{NegativeSlope: g.NegativeSlope}, LeakyReLU, LeakyReLUGrad, false, tol)
	case "log_softmax":
		runUnaryGolden(t, g, k, c, &Attrs{}, LogSoftmax, LogSoftmaxGrad, true, tol)
	case "gelu":
		runUnaryGolden(t, g, k, c, &Attrs{Approximate: g.Approximate}, GELU, GELUGrad, false, tol)
	case "silu":
		runUnaryGolden(t, g, k, c, &Attrs{}, SiLU, SiLUGrad, false, tol)
	case "scale":
		a := &Attrs{Alpha: g.Alpha}
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, Scale, a, []*Buf[T]{x}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, Scale, a, []*Buf[T]{dy}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "add", "sub", "mul":
		op := map[string]Op{"add": Add, "sub": Sub, "mul": Mul}[g.Op]
		x, other, dy := fromGolden[T](g.X), fromGolden[T](g.Other), fromGolden[T](g.Dy)
		y, dx, dother := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, op, &Attrs{}, []*Buf[T]{x, other}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		// The gradients as the engine builds them.
		if op == Mul {
			call(k, c, Mul, &Attrs{}, []*Buf[T]{dy, other}, []*Buf[T]{dx})
			call(k, c, Mul, &Attrs{}, []*Buf[T]{dy, x}, []*Buf[T]{dother})
		} else {
			call(k, c, Scale, &Attrs{Alpha: 1}, []*Buf[T]{dy}, []*Buf[T]{dx})
			alpha := 1.0
			if op == Sub {
				alpha = -1
			}
			call(k, c, Scale, &Attrs{Alpha: alpha}, []*Buf[T]{dy}, []*Buf[T]{dother})
		}
		expectClose(t, "dx", dx, g.Dx, tol)
		expectClose(t, "dother", dother, g.Dother, tol)
	default:
		t.Fatalf("unknown golden op %q", g.Op)
	}
}

// lossAttrs returns a loss case's attributes.
func lossAttrs(g *opsGoldenCase) *Attrs {
	a := &Attrs{LabelSmoothing: g.LabelSmoothing}
	if g.IgnoreIndex != nil {
		a.HasIgnore, a.IgnoreIndex = true, *g.IgnoreIndex
	}
	return a
}

// meanScale is the LossScale of PyTorch's reduction="mean": 1 over the
// number of targets not ignored.
func meanScale(g *opsGoldenCase) float64 {
	n := 0
	for _, v := range g.Target.Data {
		if g.IgnoreIndex == nil || int(v) != *g.IgnoreIndex {
			n++
		}
	}
	return 1 / float64(n)
}

// runUnaryGolden checks a one-input op and its gradient, which reads dy
// and either the forward output (fromY) or nothing else (the pools) or the
// forward input.
func runUnaryGolden[T Float](t *testing.T, g *opsGoldenCase, k map[Op]Kernel[T], c *Ctx[T], a *Attrs, fwd, bwd Op, fromY bool, tol float64) {
	x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
	y, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape)
	call(k, c, fwd, a, []*Buf[T]{x}, []*Buf[T]{y})
	expectClose(t, "y", y, g.Y, tol)
	in := []*Buf[T]{dy}
	switch {
	case fromY:
		in = append(in, y)
	case len(Lookup(bwd).In) == 2:
		in = append(in, x)
	}
	call(k, c, bwd, a, in, []*Buf[T]{dx})
	expectClose(t, "dx", dx, g.Dx, tol)
}

// runBatchNormGolden checks a training-mode batch norm step (forward,
// backward, running statistics) and evaluation mode with the updated
// running statistics, as the engine composes the ops.
func runBatchNormGolden[T Float](t *testing.T, g *opsGoldenCase, k map[Op]Kernel[T], c *Ctx[T], tol float64) {
	a := &Attrs{Eps: g.Eps, BNMomentum: g.Momentum}
	ch := g.X.Shape[1]
	x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
	gamma, beta := fromGolden[T](g.Gamma), fromGolden[T](g.Beta)
	stats, save, gstats := zeroBuf[T]([]int{3, ch}), zeroBuf[T]([]int{3, ch}), zeroBuf[T]([]int{2, ch})
	y, dx := zeroBuf[T](g.Y.Shape), zeroBuf[T](g.X.Shape)
	call(k, c, BatchNormStats, a, []*Buf[T]{x}, []*Buf[T]{stats})
	call(k, c, BatchNormNorm, a, []*Buf[T]{x, stats, gamma, beta}, []*Buf[T]{y, save})
	expectClose(t, "y", y, g.Y, tol)
	// Fused with a residual (dy's values) and ReLU: relu(PyTorch's y + res).
	fused, save2 := zeroBuf[T](g.Y.Shape), zeroBuf[T]([]int{3, ch})
	af := *a
	af.ReLU = true
	call(k, c, BatchNormNorm, &af, []*Buf[T]{x, stats, gamma, beta, dy}, []*Buf[T]{fused, save2})
	expectClose(t, "relu(y + res)", fused, reluSum(g.Y, g.Dy), tol)
	call(k, c, BatchNormGradStats, a, []*Buf[T]{dy, x, save}, []*Buf[T]{gstats})
	call(k, c, BatchNormGradInput, a, []*Buf[T]{dy, x, save, gstats, gamma}, []*Buf[T]{dx})
	expectClose(t, "dx", dx, g.Dx, tol)
	if gamma != nil {
		dgamma, dbeta := zeroBuf[T]([]int{ch}), zeroBuf[T]([]int{ch})
		call(k, c, BatchNormGradGamma, a, []*Buf[T]{gstats, save}, []*Buf[T]{dgamma})
		expectClose(t, "dgamma", dgamma, g.Dgamma, tol)
		call(k, c, BatchNormGradBeta, a, []*Buf[T]{gstats}, []*Buf[T]{dbeta})
		expectClose(t, "dbeta", dbeta, g.Dbeta, tol)
	}
	rm, rv, tracked := fromGolden[T](g.RunningMean), fromGolden[T](g.RunningVar), fromGolden[T](g.Tracked)
	call(k, c, BatchNormRunning, a, []*Buf[T]{save, rm, rv, tracked}, nil)
	expectClose(t, "running_mean", rm, g.RunningMeanOut, tol)
	expectClose(t, "running_var", rv, g.RunningVarOut, tol)
	expectClose(t, "num_batches_tracked", tracked, g.TrackedOut, 0)
	xe, ye := fromGolden[T](g.XEval), zeroBuf[T](g.YEval.Shape)
	call(k, c, BatchNormEval, a, []*Buf[T]{xe, rm, rv, gamma, beta}, []*Buf[T]{ye})
	expectClose(t, "y_eval", ye, g.YEval, tol)
	fe := zeroBuf[T](g.YEval.Shape)
	call(k, c, BatchNormEval, &af, []*Buf[T]{xe, rm, rv, gamma, beta, xe}, []*Buf[T]{fe})
	expectClose(t, "relu(y_eval + res)", fe, reluSum(g.YEval, g.XEval), tol)
}

// reluSum is max(a + b, 0) elementwise, in float64.
func reluSum(a, b *goldenTensor) *goldenTensor {
	out := &goldenTensor{Shape: a.Shape, Data: make([]float64, len(a.Data))}
	for i, v := range a.Data {
		out.Data[i] = max(v+b.Data[i], 0)
	}
	return out
}
