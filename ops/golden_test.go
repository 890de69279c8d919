package ops

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// ops_golden.json holds PyTorch 1.13's float64 forward and backward values
// of conv2d, max_pool2d, log_softmax + nll_loss, cross_entropy and softmax
// on small random inputs; testdata/gen_ops_golden.py writes it.

type goldenTensor struct {
	Shape []int
	Data  []float64
}

type opsGoldenCase struct {
	Name, Op                string
	Stride, Padding, Kernel int
	X, W, B, Y, Dy, Dx, Dw  *goldenTensor
	Db, Idx, Target, Probs  *goldenTensor
	Logp, Loss, Dloss       *goldenTensor
	Dlogp                   *goldenTensor
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
		t.Run(gc.Name+"/float64", func(t *testing.T) { runOpsGolden(t, &gc, &Kernels64, 1e-12) })
		t.Run(gc.Name+"/float32", func(t *testing.T) { runOpsGolden(t, &gc, &Kernels32, 2e-5) })
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
func call[T Float](k *[NumOps]Kernel[T], c *Ctx[T], op Op, a *Attrs, in, out []*Buf[T]) {
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

func runOpsGolden[T Float](t *testing.T, g *opsGoldenCase, k *[NumOps]Kernel[T], tol float64) {
	c := &Ctx[T]{LossScale: 1, Step: 1}
	switch g.Op {
	case "conv2d":
		a := &Attrs{Stride: g.Stride, Padding: g.Padding}
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
		a := &Attrs{}
		c.LossScale = 1 / float64(g.X.Shape[0]) // reduction="mean"
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
		a := &Attrs{}
		c.LossScale = 1 / float64(g.X.Shape[0])
		x, target, dloss := fromGolden[T](g.X), idxFromGolden[T](g.Target), fromGolden[T](g.Dloss)
		loss, probs := zeroBuf[T]([]int{1}), zeroBuf[T](g.X.Shape)
		call(k, c, CrossEntropy, a, []*Buf[T]{x, target}, []*Buf[T]{loss, probs})
		expectClose(t, "loss", loss, g.Loss, tol)
		expectClose(t, "probs", probs, g.Probs, tol)
		dx := zeroBuf[T](g.X.Shape)
		call(k, c, CrossEntropyGrad, a, []*Buf[T]{dloss, probs, target}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	case "softmax":
		a := &Attrs{}
		x, dy := fromGolden[T](g.X), fromGolden[T](g.Dy)
		y, dx := zeroBuf[T](g.X.Shape), zeroBuf[T](g.X.Shape)
		call(k, c, Softmax, a, []*Buf[T]{x}, []*Buf[T]{y})
		expectClose(t, "y", y, g.Y, tol)
		call(k, c, SoftmaxGrad, a, []*Buf[T]{dy, y}, []*Buf[T]{dx})
		expectClose(t, "dx", dx, g.Dx, tol)
	default:
		t.Fatalf("unknown golden op %q", g.Op)
	}
}
