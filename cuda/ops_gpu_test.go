//go:build cuda

package cuda

// GPU checks: every op on the CUDA device against the CPU backend (the
// ops.Kernels32 kernels) on random inputs, and a captured graph against
// eager launches. They need an NVIDIA GPU: without one they skip (or fail
// with -require-gpu, as gpucheck/run.sh passes). Each check prints a
// JSON line ({"check": ...}) on stdout.

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/engine/backend/cpu"
	"gorun/ops"
)

// requireGPU makes the GPU tests fail instead of skipping where no GPU is
// usable: gpucheck/run.sh passes -require-gpu to cuda.test on the GPU
// machine, where a skip would hide a broken driver or library.
var requireGPU = flag.Bool("require-gpu", false, "fail, not skip, the GPU tests when no GPU is usable")

// needGPU skips t on a machine without a usable GPU (fails with
// -require-gpu).
func needGPU(t *testing.T) {
	t.Helper()
	if err := initError(); err != nil {
		if *requireGPU {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// jsonLine prints one check result.
func jsonLine(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// progBuilder lays out a Program by hand: buffers in an arena, steps.
type progBuilder struct {
	p       *engine.Program
	classes map[*engine.Buffer]int  // int32 buffers: labels in [0, classes)
	nonneg  map[*engine.Buffer]bool // float32 buffers that hold no negative value (Adam's v)
}

func newProg() *progBuilder {
	return &progBuilder{p: &engine.Program{}, classes: map[*engine.Buffer]int{}, nonneg: map[*engine.Buffer]bool{}}
}

func (b *progBuilder) add(name string, dt engine.DType, batched bool, shape []int) *engine.Buffer {
	buf := &engine.Buffer{ID: len(b.p.Buffers), Name: name, DType: dt, Max: shape, Batched: batched, Offset: b.p.ArenaElems}
	b.p.ArenaElems += (max(buf.Elems(), 1) + 15) / 16 * 16
	b.p.Buffers = append(b.p.Buffers, buf)
	return buf
}

// f is a float32 buffer; batched ones have the batch first.
func (b *progBuilder) f(name string, batched bool, shape ...int) *engine.Buffer {
	return b.add(name, engine.Float32, batched, shape)
}

// i is an int32 buffer of labels in [0, classes).
func (b *progBuilder) i(name string, classes int, batched bool, shape ...int) *engine.Buffer {
	buf := b.add(name, engine.Int32, batched, shape)
	b.classes[buf] = classes
	return buf
}

func (b *progBuilder) step(phase engine.Phase, op ops.Op, a ops.Attrs, acc bool, in []*engine.Buffer, out ...*engine.Buffer) *engine.Step {
	st := &engine.Step{Kind: engine.KernelStep, Phase: phase, Op: op, Attrs: a, In: in, Out: out, Acc: acc, Layer: op.String(), ID: len(b.p.Steps)}
	b.p.Steps = append(b.p.Steps, st)
	return st
}

// done adds the loss seed and the scratch the steps need.
func (b *progBuilder) done() *engine.Program {
	b.p.LossSeed = b.f("loss seed", false, 1)
	work := 0
	shapes := func(bs []*engine.Buffer) [][]int {
		out := make([][]int, len(bs))
		for j, x := range bs {
			if x != nil {
				out[j] = x.Max
			}
		}
		return out
	}
	for _, st := range b.p.Steps {
		work = max(work, ops.Workspace(st.Op, &st.Attrs, shapes(st.In), shapes(st.Out)))
	}
	if work > 0 {
		b.p.Work = b.f("scratch", false, work)
	}
	return b.p
}

// pair is one program loaded on the CUDA device and on a CPU device.
type pair struct {
	gpu, cpu backend.Device
	prog     *engine.Program
}

func loadPair(t *testing.T, b *progBuilder, opts backend.Options, seed uint64) *pair {
	t.Helper()
	prog := b.done()
	g, err := Backend{}.Open(0, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cpu.Backend{}.Open(0, backend.Options{})
	pr := &pair{gpu: g, cpu: c, prog: prog}
	t.Cleanup(func() { g.Close(); c.Close() })
	for _, d := range []backend.Device{g, c} {
		if err := d.Load(prog); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(seed, 99))
	for _, buf := range prog.Buffers {
		if buf == prog.LossSeed || buf == prog.Work {
			continue
		}
		n := buf.Elems()
		if buf.DType == engine.Int32 {
			v := make([]int32, n)
			for j := range v {
				v[j] = int32(r.IntN(max(b.classes[buf], 1)))
			}
			for _, d := range []backend.Device{g, c} {
				if err := d.UploadI32(buf, 0, v); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(r.NormFloat64())
			if b.nonneg[buf] {
				v[j] = float32(math.Abs(float64(v[j])))
			}
		}
		for _, d := range []backend.Device{g, c} {
			if err := d.UploadF32(buf, 0, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pr
}

// liveElems is the number of live elements of buf at batch n.
func liveElems(buf *engine.Buffer, n int) int {
	e := buf.Elems()
	if buf.Batched && buf.Max[0] > 0 {
		e = e / buf.Max[0] * n
	}
	return e
}

// relErr is max|got-want| / max|want| (want's largest magnitude at least
// 1e-6), NaN when either holds a NaN where the other does not.
func relErr(got, want []float32) float64 {
	var num, den float64
	for j := range want {
		g, w := float64(got[j]), float64(want[j])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.NaN()
		}
		num = max(num, math.Abs(g-w))
		den = max(den, math.Abs(w))
	}
	return num / max(den, 1e-6)
}

// worse is the larger of two errors, NaN when either is.
func worse(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return max(a, b)
}

func download(t *testing.T, d backend.Device, buf *engine.Buffer, n int) []float32 {
	t.Helper()
	if buf.DType == engine.Int32 {
		v := make([]int32, n)
		if err := d.DownloadI32(buf, 0, v); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, n)
		for j, x := range v {
			out[j] = float32(x)
		}
		return out
	}
	v := make([]float32, n)
	if err := d.DownloadF32(buf, 0, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// opCase is one op check: a program, the micro-batches to run it with and
// the buffers to compare.
type opCase struct {
	name  string
	build func(b *progBuilder) []*engine.Buffer // returns the buffers to compare
	// runs are the RunCtx of each run of the program's steps.
	runs []backend.RunCtx
}

const tb = 4 // the planned batch of the op checks

func fwd(b *progBuilder, op ops.Op, a ops.Attrs, in []*engine.Buffer, out ...*engine.Buffer) []*engine.Buffer {
	b.step(engine.PhaseForward, op, a, false, in, out...)
	return out
}

func bwd(b *progBuilder, op ops.Op, a ops.Attrs, acc bool, in []*engine.Buffer, out ...*engine.Buffer) []*engine.Buffer {
	b.step(engine.PhaseBackward, op, a, acc, in, out...)
	return out
}

var once = []backend.RunCtx{{LossScale: 1.0 / tb, Step: 1, First: true, Last: true}}
var accumulate = []backend.RunCtx{{LossScale: 1.0 / tb, Step: 1, First: false, Last: true}}

func opCases() []opCase {
	conv := func(stride, pad int, bias bool) func(b *progBuilder) []*engine.Buffer {
		return func(b *progBuilder) []*engine.Buffer {
			oh := (9+2*pad-3)/stride + 1
			x, w, y := b.f("x", true, tb, 3, 9, 9), b.f("w", false, 5, 3, 3, 3), b.f("y", true, tb, 5, oh, oh)
			var bb *engine.Buffer
			if bias {
				bb = b.f("b", false, 5)
			}
			return fwd(b, ops.Conv2D, ops.Attrs{Stride: stride, Padding: pad}, []*engine.Buffer{x, w, bb}, y)
		}
	}
	convGrad := func(op ops.Op, acc bool) func(b *progBuilder) []*engine.Buffer {
		return func(b *progBuilder) []*engine.Buffer {
			a := ops.Attrs{Stride: 2, Padding: 1}
			x, w, dy := b.f("x", true, tb, 3, 9, 9), b.f("w", false, 5, 3, 3, 3), b.f("dy", true, tb, 5, 5, 5)
			switch op {
			case ops.Conv2DGradInput:
				return bwd(b, op, a, false, []*engine.Buffer{dy, w}, b.f("dx", true, tb, 3, 9, 9))
			case ops.Conv2DGradWeight:
				return bwd(b, op, a, acc, []*engine.Buffer{dy, x}, b.f("dw", false, 5, 3, 3, 3))
			}
			return bwd(b, op, a, acc, []*engine.Buffer{dy}, b.f("db", false, 5))
		}
	}
	unary := func(op ops.Op, shape ...int) func(b *progBuilder) []*engine.Buffer {
		return func(b *progBuilder) []*engine.Buffer {
			return fwd(b, op, ops.Attrs{}, []*engine.Buffer{b.f("x", true, shape...)}, b.f("y", true, shape...))
		}
	}
	binary := func(op ops.Op, shape ...int) func(b *progBuilder) []*engine.Buffer {
		return func(b *progBuilder) []*engine.Buffer {
			return bwd(b, op, ops.Attrs{}, false, []*engine.Buffer{b.f("a", true, shape...), b.f("b", true, shape...)}, b.f("out", true, shape...))
		}
	}
	var cs []opCase
	add := func(name string, runs []backend.RunCtx, build func(b *progBuilder) []*engine.Buffer) {
		cs = append(cs, opCase{name: name, build: build, runs: runs})
	}
	add("conv2d", once, conv(1, 0, true))
	add("conv2d stride 2 padding 1", once, conv(2, 1, true))
	add("conv2d no bias", once, conv(1, 0, false))
	add("conv2d_grad_input", once, convGrad(ops.Conv2DGradInput, false))
	add("conv2d_grad_weight", once, convGrad(ops.Conv2DGradWeight, false))
	add("conv2d_grad_weight accumulate", accumulate, convGrad(ops.Conv2DGradWeight, true))
	add("conv2d_grad_bias", once, convGrad(ops.Conv2DGradBias, false))
	add("conv2d_grad_bias accumulate", accumulate, convGrad(ops.Conv2DGradBias, true))
	// Long channels take the split sum's two phases (30000-40000
	// elements a channel: 4-5 chunks), and a linear layer's batch alone is
	// cut when it is long (a planned, unbatched 20011: 3 chunks).
	for _, acc := range []bool{false, true} {
		runs, suffix := once, ""
		if acc {
			runs, suffix = accumulate, " accumulate"
		}
		add("conv2d_grad_bias split"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.Conv2DGradBias, ops.Attrs{}, acc, []*engine.Buffer{b.f("dy", true, tb, 3, 100, 100)}, b.f("db", false, 3))
		})
		add("linear_grad_bias split"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.LinearGradBias, ops.Attrs{}, acc, []*engine.Buffer{b.f("dy", false, 20011, 3)}, b.f("db", false, 3))
		})
	}
	for _, bias := range []bool{true, false} {
		name := "linear"
		if !bias {
			name += " no bias"
		}
		add(name, once, func(b *progBuilder) []*engine.Buffer {
			var bb *engine.Buffer
			if bias {
				bb = b.f("b", false, 5)
			}
			return fwd(b, ops.Linear, ops.Attrs{}, []*engine.Buffer{b.f("x", true, tb, 7), b.f("w", false, 5, 7), bb}, b.f("y", true, tb, 5))
		})
	}
	add("linear_grad_input", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.LinearGradInput, ops.Attrs{}, false, []*engine.Buffer{b.f("dy", true, tb, 5), b.f("w", false, 5, 7)}, b.f("dx", true, tb, 7))
	})
	for _, acc := range []bool{false, true} {
		runs, suffix := once, ""
		if acc {
			runs, suffix = accumulate, " accumulate"
		}
		add("linear_grad_weight"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.LinearGradWeight, ops.Attrs{}, acc, []*engine.Buffer{b.f("dy", true, tb, 5), b.f("x", true, tb, 7)}, b.f("dw", false, 5, 7))
		})
		add("linear_grad_bias"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.LinearGradBias, ops.Attrs{}, acc, []*engine.Buffer{b.f("dy", true, tb, 5)}, b.f("db", false, 5))
		})
		add("nll_loss"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			st := b.step(engine.PhaseForward, ops.NLLLoss, ops.Attrs{}, acc,
				[]*engine.Buffer{b.f("logp", true, tb, 10), b.i("target", 10, true, tb)}, b.f("loss", false, 1))
			return st.Out
		})
		add("cross_entropy"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			st := b.step(engine.PhaseForward, ops.CrossEntropy, ops.Attrs{}, acc,
				[]*engine.Buffer{b.f("logits", true, tb, 10), b.i("target", 10, true, tb)}, b.f("loss", false, 1), b.f("probs", true, tb, 10))
			return st.Out
		})
	}
	add("relu", once, unary(ops.ReLU, tb, 3, 5, 5))
	add("relu_grad", once, binary(ops.ReLUGrad, tb, 3, 5, 5))
	add("add", once, binary(ops.Add, tb, 3, 5, 5))
	add("dropout_grad", once, binary(ops.DropoutGrad, tb, 50))
	add("dropout2d_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.Dropout2DGrad, ops.Attrs{}, false, []*engine.Buffer{b.f("dy", true, tb, 3, 4, 4), b.f("mask", true, tb, 3)}, b.f("dx", true, tb, 3, 4, 4))
	})
	add("log_softmax", once, unary(ops.LogSoftmax, tb, 10))
	add("softmax", once, unary(ops.Softmax, tb, 10))
	add("log_softmax_grad", once, binary(ops.LogSoftmaxGrad, tb, 10))
	add("softmax_grad", once, binary(ops.SoftmaxGrad, tb, 10))
	add("flatten", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Flatten, ops.Attrs{}, []*engine.Buffer{b.f("x", true, tb, 3, 2, 2)}, b.f("y", true, tb, 12))
	})
	for _, k := range [][2]int{{2, 0}, {3, 2}} {
		a := ops.Attrs{Kernel: k[0], Stride: k[1]}
		s := k[1]
		if s == 0 {
			s = k[0]
		}
		oh := (8-k[0])/s + 1
		add(fmt.Sprintf("maxpool2d k%d s%d", k[0], s), once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.MaxPool2D, a, []*engine.Buffer{b.f("x", true, tb, 3, 8, 8)}, b.f("y", true, tb, 3, oh, oh), b.i("idx", 1, true, tb, 3, oh, oh))
		})
		add(fmt.Sprintf("maxpool2d_grad k%d s%d", k[0], s), once, func(b *progBuilder) []*engine.Buffer {
			x, y, idx := b.f("x", true, tb, 3, 8, 8), b.f("y", true, tb, 3, oh, oh), b.i("idx", 1, true, tb, 3, oh, oh)
			fwd(b, ops.MaxPool2D, a, []*engine.Buffer{x}, y, idx)
			return bwd(b, ops.MaxPool2DGrad, a, false, []*engine.Buffer{b.f("dy", true, tb, 3, oh, oh), idx}, b.f("dx", true, tb, 3, 8, 8))
		})
	}
	add("nll_loss_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.NLLLossGrad, ops.Attrs{}, false, []*engine.Buffer{b.f("dloss", false, 1), b.i("target", 10, true, tb)}, b.f("dx", true, tb, 10))
	})
	add("cross_entropy_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.CrossEntropyGrad, ops.Attrs{}, false, []*engine.Buffer{b.f("dloss", false, 1), b.f("probs", true, tb, 10), b.i("target", 10, true, tb)}, b.f("dx", true, tb, 10))
	})
	// Grouped convolutions: two groups, and depthwise (a group per
	// channel), forward and both gradients.
	for _, g := range []struct{ c, o, groups int }{{6, 4, 2}, {3, 6, 3}} {
		a := ops.Attrs{Stride: 2, Padding: 1, Groups: g.groups}
		cg := g.c / g.groups
		suffix := fmt.Sprintf(" groups %d", g.groups)
		add("conv2d"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			x, w, bb := b.f("x", true, tb, g.c, 9, 9), b.f("w", false, g.o, cg, 3, 3), b.f("b", false, g.o)
			return fwd(b, ops.Conv2D, a, []*engine.Buffer{x, w, bb}, b.f("y", true, tb, g.o, 5, 5))
		})
		add("conv2d_grad_input"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			dy, w := b.f("dy", true, tb, g.o, 5, 5), b.f("w", false, g.o, cg, 3, 3)
			return bwd(b, ops.Conv2DGradInput, a, false, []*engine.Buffer{dy, w}, b.f("dx", true, tb, g.c, 9, 9))
		})
		for _, acc := range []bool{false, true} {
			runs, name := once, "conv2d_grad_weight"+suffix
			if acc {
				runs, name = accumulate, name+" accumulate"
			}
			add(name, runs, func(b *progBuilder) []*engine.Buffer {
				dy, x := b.f("dy", true, tb, g.o, 5, 5), b.f("x", true, tb, g.c, 9, 9)
				return bwd(b, ops.Conv2DGradWeight, a, acc, []*engine.Buffer{dy, x}, b.f("dw", false, g.o, cg, 3, 3))
			})
		}
	}
	// Activations and elementwise arithmetic.
	add("sigmoid", once, unary(ops.Sigmoid, tb, 3, 5, 5))
	add("tanh", once, unary(ops.Tanh, tb, 3, 5, 5))
	add("leaky_relu", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.LeakyReLU, ops.Attrs{NegativeSlope: 0.01}, []*engine.Buffer{b.f("x", true, tb, 3, 5, 5)}, b.f("y", true, tb, 3, 5, 5))
	})
	add("scale", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Scale, ops.Attrs{Alpha: -1.5}, []*engine.Buffer{b.f("x", true, tb, 3, 5, 5)}, b.f("y", true, tb, 3, 5, 5))
	})
	add("sub", once, binary(ops.Sub, tb, 3, 5, 5))
	add("mul", once, binary(ops.Mul, tb, 3, 5, 5))
	add("sigmoid_grad", once, binary(ops.SigmoidGrad, tb, 3, 5, 5))
	add("tanh_grad", once, binary(ops.TanhGrad, tb, 3, 5, 5))
	add("leaky_relu_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.LeakyReLUGrad, ops.Attrs{NegativeSlope: 0.01}, false, []*engine.Buffer{b.f("dy", true, tb, 3, 5, 5), b.f("x", true, tb, 3, 5, 5)}, b.f("dx", true, tb, 3, 5, 5))
	})
	// Average pooling (padding, overlapping windows) and global average
	// pooling.
	avg := ops.Attrs{Kernel: 3, Stride: 2, Padding: 1}
	add("avgpool2d k3 s2 p1", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.AvgPool2D, avg, []*engine.Buffer{b.f("x", true, tb, 3, 9, 8)}, b.f("y", true, tb, 3, 5, 4))
	})
	add("avgpool2d_grad k3 s2 p1", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.AvgPool2DGrad, avg, false, []*engine.Buffer{b.f("dy", true, tb, 3, 5, 4)}, b.f("dx", true, tb, 3, 9, 8))
	})
	add("global_avgpool2d", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.GlobalAvgPool2D, ops.Attrs{}, []*engine.Buffer{b.f("x", true, tb, 5, 7, 6)}, b.f("y", true, tb, 5, 1, 1))
	})
	add("global_avgpool2d_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.GlobalAvgPool2DGrad, ops.Attrs{}, false, []*engine.Buffer{b.f("dy", true, tb, 5, 1, 1)}, b.f("dx", true, tb, 5, 7, 6))
	})
	// Losses: MSE, and cross entropy with label smoothing.
	for _, acc := range []bool{false, true} {
		runs, suffix := once, ""
		if acc {
			runs, suffix = accumulate, " accumulate"
		}
		add("mse_loss"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			st := b.step(engine.PhaseForward, ops.MSELoss, ops.Attrs{}, acc,
				[]*engine.Buffer{b.f("pred", true, tb, 3, 7), b.f("target", true, tb, 3, 7)}, b.f("loss", false, 1))
			return st.Out
		})
		add("cross_entropy smoothing 0.1"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			st := b.step(engine.PhaseForward, ops.CrossEntropy, ops.Attrs{LabelSmoothing: 0.1}, acc,
				[]*engine.Buffer{b.f("logits", true, tb, 10), b.i("target", 10, true, tb)}, b.f("loss", false, 1), b.f("probs", true, tb, 10))
			return st.Out
		})
	}
	add("mse_loss_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.MSELossGrad, ops.Attrs{}, false, []*engine.Buffer{b.f("dloss", false, 1), b.f("pred", true, tb, 3, 7), b.f("target", true, tb, 3, 7)}, b.f("dx", true, tb, 3, 7))
	})
	add("cross_entropy_grad smoothing 0.1", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.CrossEntropyGrad, ops.Attrs{LabelSmoothing: 0.1}, false, []*engine.Buffer{b.f("dloss", false, 1), b.f("probs", true, tb, 10), b.i("target", 10, true, tb)}, b.f("dx", true, tb, 10))
	})
	// Batch norm, as chains from the statistics (random stats would not be
	// sums of squares): training forward with and without gamma and beta,
	// on [N, C, H, W] and [N, C], and with channels long enough for the
	// split sum's chunks (40000 elements: 5 chunks); evaluation; the
	// running statistics (momentum and cumulative average, three updates);
	// backward, overwriting and accumulating gamma's and beta's gradients.
	bnShapes := [][]int{{tb, 3, 5, 5}, {tb, 7}, {tb, 3, 100, 100}}
	for _, shape := range bnShapes {
		c := shape[1]
		for _, affine := range []bool{true, false} {
			add(fmt.Sprintf("batch_norm_stats, batch_norm_norm %v affine %t", shape, affine), once, func(b *progBuilder) []*engine.Buffer {
				x, stats := b.f("x", true, shape...), b.f("stats", false, 3, c)
				var gamma, beta *engine.Buffer
				if affine {
					gamma, beta = b.f("gamma", false, c), b.f("beta", false, c)
				}
				fwd(b, ops.BatchNormStats, ops.Attrs{}, []*engine.Buffer{x}, stats)
				y, save := b.f("y", true, shape...), b.f("save", false, 3, c)
				fwd(b, ops.BatchNormNorm, ops.Attrs{Eps: 1e-5}, []*engine.Buffer{x, stats, gamma, beta}, y, save)
				return []*engine.Buffer{stats, y, save}
			})
		}
		add(fmt.Sprintf("batch_norm_eval %v", shape), once, func(b *progBuilder) []*engine.Buffer {
			x, rm, rv := b.f("x", true, shape...), b.f("running_mean", false, c), b.f("running_var", false, c)
			b.nonneg[rv] = true
			return fwd(b, ops.BatchNormEval, ops.Attrs{Eps: 1e-5}, []*engine.Buffer{x, rm, rv, b.f("gamma", false, c), b.f("beta", false, c)}, b.f("y", true, shape...))
		})
		for _, acc := range []bool{false, true} {
			runs, suffix := once, ""
			if acc {
				runs, suffix = accumulate, " accumulate"
			}
			add(fmt.Sprintf("batch_norm_grad_* %v%s", shape, suffix), runs, func(b *progBuilder) []*engine.Buffer {
				a := ops.Attrs{Eps: 1e-5}
				x, stats, gamma := b.f("x", true, shape...), b.f("stats", false, 3, c), b.f("gamma", false, c)
				y, save := b.f("y", true, shape...), b.f("save", false, 3, c)
				fwd(b, ops.BatchNormStats, a, []*engine.Buffer{x}, stats)
				fwd(b, ops.BatchNormNorm, a, []*engine.Buffer{x, stats, gamma}, y, save)
				dy, gstats := b.f("dy", true, shape...), b.f("gstats", false, 2, c)
				bwd(b, ops.BatchNormGradStats, a, false, []*engine.Buffer{dy, x, save}, gstats)
				dgamma := bwd(b, ops.BatchNormGradGamma, a, acc, []*engine.Buffer{gstats, save}, b.f("dgamma", false, c))
				dbeta := bwd(b, ops.BatchNormGradBeta, a, acc, []*engine.Buffer{gstats}, b.f("dbeta", false, c))
				dx := bwd(b, ops.BatchNormGradInput, a, false, []*engine.Buffer{dy, x, save, gstats, gamma}, b.f("dx", true, shape...))
				dx2 := bwd(b, ops.BatchNormGradInput, a, false, []*engine.Buffer{dy, x, save, gstats}, b.f("dx no gamma", true, shape...))
				return []*engine.Buffer{gstats, dgamma[0], dbeta[0], dx[0], dx2[0]}
			})
		}
	}
	for _, m := range []float64{0.1, -1} {
		add(fmt.Sprintf("batch_norm_running momentum %g", m), []backend.RunCtx{once[0], once[0], once[0]}, func(b *progBuilder) []*engine.Buffer {
			x, stats := b.f("x", true, tb, 3, 5, 5), b.f("stats", false, 3, 3)
			y, save := b.f("y", true, tb, 3, 5, 5), b.f("save", false, 3, 3)
			rm, rv, tracked := b.f("running_mean", false, 3), b.f("running_var", false, 3), b.f("num_batches_tracked", false, 1)
			b.nonneg[rv], b.nonneg[tracked] = true, true
			fwd(b, ops.BatchNormStats, ops.Attrs{}, []*engine.Buffer{x}, stats)
			fwd(b, ops.BatchNormNorm, ops.Attrs{Eps: 1e-5}, []*engine.Buffer{x, stats}, y, save)
			b.step(engine.PhaseForward, ops.BatchNormRunning, ops.Attrs{BNMomentum: m}, false, []*engine.Buffer{save, rm, rv, tracked})
			return []*engine.Buffer{rm, rv, tracked}
		})
	}
	// Sequence models: GELU, SiLU, softmax over the last dimension of [N, T, C]
	// and causal, losses over positions with an ignored class, concat and
	// narrow, embeddings, layer norm, batched matrix products, permutes,
	// positions.
	for _, approx := range []bool{false, true} {
		a := ops.Attrs{Approximate: approx}
		add(fmt.Sprintf("gelu approximate %t", approx), once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.GELU, a, []*engine.Buffer{b.f("x", true, tb, 3, 5, 5)}, b.f("y", true, tb, 3, 5, 5))
		})
		add(fmt.Sprintf("gelu_grad approximate %t", approx), once, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.GELUGrad, a, false, []*engine.Buffer{b.f("dy", true, tb, 3, 5, 5), b.f("x", true, tb, 3, 5, 5)}, b.f("dx", true, tb, 3, 5, 5))
		})
	}
	add("silu", once, unary(ops.SiLU, tb, 3, 5, 5))
	add("silu_grad", once, binary(ops.SiLUGrad, tb, 3, 5, 5))
	add("log_softmax [N, T, C]", once, unary(ops.LogSoftmax, tb, 3, 10))
	add("softmax [N, T, C]", once, unary(ops.Softmax, tb, 3, 10))
	add("softmax causal", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Softmax, ops.Attrs{Causal: true}, []*engine.Buffer{b.f("scores", true, tb, 2, 5, 5)}, b.f("probs", true, tb, 2, 5, 5))
	})
	add("softmax_grad [N, T, C]", once, binary(ops.SoftmaxGrad, tb, 3, 10))
	for _, ig := range []bool{false, true} {
		a := ops.Attrs{HasIgnore: ig, IgnoreIndex: 2, LabelSmoothing: 0.1}
		suffix := fmt.Sprintf(" [N, T, C] ignore %t", ig)
		add("nll_loss"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.NLLLoss, a, []*engine.Buffer{b.f("logp", true, tb, 3, 10), b.i("target", 10, true, tb, 3)}, b.f("loss", false, 1))
		})
		add("cross_entropy"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.CrossEntropy, a, []*engine.Buffer{b.f("logits", true, tb, 3, 10), b.i("target", 10, true, tb, 3)}, b.f("loss", false, 1), b.f("probs", true, tb, 3, 10))
		})
		add("nll_loss_grad"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.NLLLossGrad, a, false, []*engine.Buffer{b.f("dloss", false, 1), b.i("target", 10, true, tb, 3)}, b.f("dx", true, tb, 3, 10))
		})
		add("cross_entropy_grad"+suffix, once, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.CrossEntropyGrad, a, false, []*engine.Buffer{b.f("dloss", false, 1), b.f("probs", true, tb, 3, 10), b.i("target", 10, true, tb, 3)}, b.f("dx", true, tb, 3, 10))
		})
		for _, c := range []int{10, 1000} { // the fused classifier: rows shorter and longer than a block
			add(fmt.Sprintf("cross_entropy_fused C %d%s", c, suffix), accumulate, func(b *progBuilder) []*engine.Buffer {
				st := b.step(engine.PhaseForward, ops.CrossEntropyFused, a, true,
					[]*engine.Buffer{b.f("logits", true, tb, 3, c), b.i("target", c, true, tb, 3), b.f("dloss", false, 1)}, b.f("loss", false, 1), b.f("dx", true, tb, 3, c))
				return st.Out
			})
		}
	}
	add("concat", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Concat, ops.Attrs{}, []*engine.Buffer{b.f("a", true, tb, 3, 4), b.f("b", true, tb, 5, 4)}, b.f("c", true, tb, 8, 4))
	})
	add("narrow", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.Narrow, ops.Attrs{Offset: 3, Length: 5}, false, []*engine.Buffer{b.f("dy", true, tb, 8, 4)}, b.f("db", true, tb, 5, 4))
	})
	add("narrow_grad", once, func(b *progBuilder) []*engine.Buffer {
		return bwd(b, ops.NarrowGrad, ops.Attrs{Offset: 3}, false, []*engine.Buffer{b.f("dy", true, tb, 4, 4)}, b.f("dx", true, tb, 8, 4))
	})
	add("embedding", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Embedding, ops.Attrs{}, []*engine.Buffer{b.i("ids", 50, true, tb, 6), b.f("w", false, 50, 8)}, b.f("y", true, tb, 6, 8))
	})
	for _, acc := range []bool{false, true} {
		runs, suffix := once, ""
		if acc {
			runs, suffix = accumulate, " accumulate"
		}
		add("embedding_grad_weight"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.EmbeddingGradWeight, ops.Attrs{}, acc, []*engine.Buffer{b.f("dy", true, tb, 6, 8), b.i("ids", 7, true, tb, 6)}, b.f("dw", false, 7, 8))
		})
		add("layer_norm_grad_gamma, layer_norm_grad_beta"+suffix, runs, func(b *progBuilder) []*engine.Buffer {
			a := ops.Attrs{Eps: 1e-5}
			x, y, save := b.f("x", true, tb, 6, 8), b.f("y", true, tb, 6, 8), b.f("save", true, tb, 6, 2)
			fwd(b, ops.LayerNorm, a, []*engine.Buffer{x}, y, save)
			dy := b.f("dy", true, tb, 6, 8)
			dg := bwd(b, ops.LayerNormGradGamma, a, acc, []*engine.Buffer{dy, x, save}, b.f("dgamma", false, 8))
			db := bwd(b, ops.LayerNormGradBeta, a, acc, []*engine.Buffer{dy}, b.f("dbeta", false, 8))
			return []*engine.Buffer{dg[0], db[0]}
		})
	}
	for _, affine := range []bool{true, false} {
		add(fmt.Sprintf("layer_norm affine %t", affine), once, func(b *progBuilder) []*engine.Buffer {
			var gamma, beta *engine.Buffer
			if affine {
				gamma, beta = b.f("gamma", false, 300), b.f("beta", false, 300)
			}
			return fwd(b, ops.LayerNorm, ops.Attrs{Eps: 1e-5}, []*engine.Buffer{b.f("x", true, tb, 3, 300), gamma, beta}, b.f("y", true, tb, 3, 300), b.f("save", true, tb, 3, 2))
		})
		add(fmt.Sprintf("layer_norm_grad_input gamma %t", affine), once, func(b *progBuilder) []*engine.Buffer {
			a := ops.Attrs{Eps: 1e-5}
			var gamma *engine.Buffer
			if affine {
				gamma = b.f("gamma", false, 300)
			}
			x, y, save := b.f("x", true, tb, 3, 300), b.f("y", true, tb, 3, 300), b.f("save", true, tb, 3, 2)
			fwd(b, ops.LayerNorm, a, []*engine.Buffer{x, gamma}, y, save)
			return bwd(b, ops.LayerNormGradInput, a, false, []*engine.Buffer{b.f("dy", true, tb, 3, 300), x, save, gamma}, b.f("dx", true, tb, 3, 300))
		})
	}
	for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		a := ops.Attrs{TransA: tr[0], TransB: tr[1]}
		xs, ys := []int{tb, 2, 4, 5}, []int{tb, 2, 5, 6}
		if tr[0] {
			xs = []int{tb, 2, 5, 4}
		}
		if tr[1] {
			ys = []int{tb, 2, 6, 5}
		}
		add(fmt.Sprintf("batch_matmul transA %t transB %t", tr[0], tr[1]), once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.BatchMatMul, a, []*engine.Buffer{b.f("a", true, xs...), b.f("b", true, ys...)}, b.f("c", true, tb, 2, 4, 6))
		})
	}
	add("permute", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Permute, ops.Attrs{Perm: [ops.MaxPermRank]int8{0, 2, 1, 3}}, []*engine.Buffer{b.f("x", true, tb, 3, 4, 5)}, b.f("y", true, tb, 4, 3, 5))
	})
	add("positions", once, func(b *progBuilder) []*engine.Buffer {
		return fwd(b, ops.Positions, ops.Attrs{}, []*engine.Buffer{b.f("x", true, tb, 5, 3)}, b.i("pos", 1, true, tb, 5))
	})
	// The fused attention (cuda/op_attention.go): T not a multiple of the
	// tile, N·H odd at the partial batch, head dimensions 24 and 64.
	for _, c := range []struct {
		t, h, dh int
		causal   bool
	}{{37, 3, 24, true}, {20, 1, 64, false}} {
		a := ops.Attrs{Causal: c.causal}
		add(fmt.Sprintf("attention, attention_grad T %d H %d dh %d causal %t", c.t, c.h, c.dh, c.causal), once, func(b *progBuilder) []*engine.Buffer {
			qkv := b.f("qkv", true, tb, c.t, 3, c.h, c.dh)
			o, lse := b.f("o", true, tb, c.t, c.h*c.dh), b.f("lse", true, tb, c.h, c.t)
			fwd(b, ops.Attention, a, []*engine.Buffer{qkv}, o, lse)
			d := bwd(b, ops.AttentionGrad, a, false, []*engine.Buffer{b.f("do", true, tb, c.t, c.h*c.dh), qkv, o, lse},
				b.f("dqkv", true, tb, c.t, 3, c.h, c.dh))
			return []*engine.Buffer{o, lse, d[0]}
		})
	}
	steps := []backend.RunCtx{{Step: 1, First: true, Last: true}, {Step: 2, First: true, Last: true}, {Step: 3, First: true, Last: true}}
	for _, maxNorm := range []float64{0.5, 1e6} {
		add(fmt.Sprintf("clip_grad_norm max_norm %g", maxNorm), steps, func(b *progBuilder) []*engine.Buffer {
			g := b.f("grads", false, 40013)
			b.step(engine.PhaseUpdate, ops.ClipGradNorm, ops.Attrs{MaxNorm: maxNorm}, false, []*engine.Buffer{g})
			return []*engine.Buffer{g}
		})
	}
	for _, maxNorm := range []float64{0.5, 1e6} {
		// Clipping gradients sharded in parts (sync.zero): two parts' sums
		// of squares, then each part scaled by their total.
		add(fmt.Sprintf("grad_norm_sq and clip_grad_scale max_norm %g", maxNorm), steps, func(b *progBuilder) []*engine.Buffer {
			g1, g2, sq := b.f("grads 1", false, 40013), b.f("grads 2", false, 517), b.f("sq", false, 2)
			part := func(j int) *engine.Buffer { // element j of sq
				v := &engine.Buffer{ID: len(b.p.Buffers), Name: fmt.Sprintf("sq %d", j), Max: []int{1}, View: sq, Offset: sq.Offset + j}
				b.p.Buffers = append(b.p.Buffers, v)
				return v
			}
			b.step(engine.PhaseUpdate, ops.GradNormSq, ops.Attrs{}, false, []*engine.Buffer{g1, part(0)})
			b.step(engine.PhaseUpdate, ops.GradNormSq, ops.Attrs{}, false, []*engine.Buffer{g2, part(1)})
			b.step(engine.PhaseUpdate, ops.ClipGradScale, ops.Attrs{MaxNorm: maxNorm}, false, []*engine.Buffer{g1, sq})
			b.step(engine.PhaseUpdate, ops.ClipGradScale, ops.Attrs{MaxNorm: maxNorm}, false, []*engine.Buffer{g2, sq})
			return []*engine.Buffer{g1, g2, sq}
		})
	}
	for _, a := range []ops.Attrs{
		{LR: 0.01},
		{LR: 0.01, Momentum: 0.5},
		{LR: 0.01, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01},
		{LR: 0.01, Momentum: 0.9, WeightDecay: 0.01, Nesterov: true},
	} {
		add(fmt.Sprintf("sgd_step momentum %g nesterov %t", a.Momentum, a.Nesterov), steps, func(b *progBuilder) []*engine.Buffer {
			p, g := b.f("param", false, 300), b.f("grad", false, 300)
			var m *engine.Buffer
			if a.Momentum != 0 {
				m = b.f("momentum", false, 300)
			}
			b.step(engine.PhaseUpdate, ops.SGDStep, a, false, []*engine.Buffer{p, g, m})
			if m == nil {
				return []*engine.Buffer{p}
			}
			return []*engine.Buffer{p, m}
		})
	}
	for _, op := range []ops.Op{ops.AdamStep, ops.AdamWStep} {
		for _, wd := range []float64{0, 0.01} {
			a := ops.Attrs{LR: 0.001, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: wd}
			add(fmt.Sprintf("%s weight_decay %g", op, wd), steps, func(b *progBuilder) []*engine.Buffer {
				p, g, m, v := b.f("param", false, 300), b.f("grad", false, 300), b.f("m", false, 300), b.f("v", false, 300)
				b.nonneg[v] = true // a sum of squares: sqrt of a negative one is NaN on both sides
				b.step(engine.PhaseUpdate, op, a, false, []*engine.Buffer{p, g, m, v})
				return []*engine.Buffer{p, m, v}
			})
		}
	}
	return append(cs, precisionCases()...)
}

// TestOpsAgainstCPU runs every op on the GPU and on the CPU backend, at
// the planned batch and at a partial one, and compares every output.
func TestOpsAgainstCPU(t *testing.T) {
	needGPU(t)
	seen := map[ops.Op]bool{}
	for ci, c := range opCases() {
		for _, live := range []int{tb, tb - 1} {
			b := newProg()
			check := c.build(b)
			for _, st := range b.p.Steps {
				seen[st.Op] = true
			}
			pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, uint64(ci))
			for _, d := range []backend.Device{pr.gpu, pr.cpu} {
				d.SetBatch(live)
				for _, rc := range c.runs {
					for _, st := range pr.prog.Steps {
						if err := d.Exec(st, &rc); err != nil {
							t.Fatalf("%s: %s: %v", c.name, d.Name(), err)
						}
					}
				}
			}
			if err := pr.gpu.Sync(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			worst := 0.0
			for _, buf := range check {
				n := liveElems(buf, live)
				e := relErr(download(t, pr.gpu, buf, n), download(t, pr.cpu, buf, n))
				worst = worse(worst, e)
			}
			ok := worst <= 1e-4
			jsonLine(map[string]any{"check": "op", "op": c.name, "batch": live, "rel_err": worst, "ok": ok})
			if !ok {
				t.Errorf("%s (batch %d): relative error %g > 1e-4", c.name, live, worst)
			}
		}
	}
	for _, op := range []ops.Op{ops.Dropout, ops.Dropout2D} {
		seen[op] = true // TestDropout
	}
	for op := range declined {
		seen[op] = true // no CUDA kernel: CPU plans only
	}
	for _, op := range ops.All() {
		if !seen[op] {
			t.Errorf("no GPU check for op %s", op)
		}
	}
}

// TestDropout checks the dropout kernels' masks (their random stream is
// not the CPU's): every mask value is 0 or 1/(1-p), y = x·mask, about 1-p
// of them kept, and a different offset gives a different mask.
func TestDropout(t *testing.T) {
	needGPU(t)
	for _, op := range []ops.Op{ops.Dropout, ops.Dropout2D} {
		b := newProg()
		const c, hw = 64, 16
		x := b.f("x", true, tb, c, 4, 4)
		maskShape := []int{tb, c, 4, 4}
		if op == ops.Dropout2D {
			maskShape = []int{tb, c}
		}
		y, mask := b.f("y", true, tb, c, 4, 4), b.f("mask", true, maskShape...)
		fwd(b, op, ops.Attrs{P: 0.5}, []*engine.Buffer{x}, y, mask)
		pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 5)
		pr.gpu.SeedRNG(1234, 0)
		rc := backend.RunCtx{Step: 1, First: true, Last: true}
		var masks [][]float32
		for run := 0; run < 2; run++ {
			if err := pr.gpu.Exec(b.p.Steps[0], &rc); err != nil {
				t.Fatal(err)
			}
			masks = append(masks, download(t, pr.gpu, mask, mask.Elems()))
		}
		xs, ys, m := download(t, pr.gpu, x, x.Elems()), download(t, pr.gpu, y, y.Elems()), masks[1]
		kept, bad := 0, 0
		for _, v := range m {
			switch v {
			case 2:
				kept++
			case 0:
			default:
				bad++
			}
		}
		per := 1
		if op == ops.Dropout2D {
			per = hw
		}
		for j := range xs {
			if ys[j] != xs[j]*m[j/per] {
				bad++
			}
		}
		frac := float64(kept) / float64(len(m))
		same := true
		for j := range m {
			same = same && m[j] == masks[0][j]
		}
		ok := bad == 0 && frac > 0.35 && frac < 0.65 && !same
		jsonLine(map[string]any{"check": "op", "op": op.String(), "kept": frac, "bad": bad, "fresh_mask": !same, "ok": ok})
		if !ok {
			t.Errorf("%s: %d bad values, %.3f kept, same mask twice %t", op, bad, frac, same)
		}
	}
}

// TestGraphReplay runs a small training program (dropout, loss, gradient
// accumulation over micro-batches of different sizes, SGD with momentum)
// as captured graphs on one device and eagerly on another: every buffer
// must come out the same.
func TestGraphReplay(t *testing.T) {
	needGPU(t)
	build := func() *progBuilder {
		b := newProg()
		x, w, bias := b.f("x", true, tb, 7), b.f("w", false, 10, 7), b.f("b", false, 10)
		h, h2, mask := b.f("h", true, tb, 10), b.f("h2", true, tb, 10), b.f("mask", true, tb, 10)
		logp, target, loss := b.f("logp", true, tb, 10), b.i("target", 10, true, tb), b.f("loss", false, 1)
		dlogp, dh2, dh := b.f("dlogp", true, tb, 10), b.f("dh2", true, tb, 10), b.f("dh", true, tb, 10)
		dw, db, mom := b.f("dw", false, 10, 7), b.f("db", false, 10), b.f("mom", false, 10, 7)
		dloss := b.f("dloss", false, 1)
		fwd(b, ops.Linear, ops.Attrs{}, []*engine.Buffer{x, w, bias}, h)
		fwd(b, ops.Dropout, ops.Attrs{P: 0.3}, []*engine.Buffer{h}, h2, mask)
		fwd(b, ops.LogSoftmax, ops.Attrs{}, []*engine.Buffer{h2}, logp)
		b.step(engine.PhaseForward, ops.NLLLoss, ops.Attrs{}, true, []*engine.Buffer{logp, target}, loss)
		bwd(b, ops.NLLLossGrad, ops.Attrs{}, false, []*engine.Buffer{dloss, target}, dlogp)
		bwd(b, ops.LogSoftmaxGrad, ops.Attrs{}, false, []*engine.Buffer{dlogp, logp}, dh2)
		bwd(b, ops.DropoutGrad, ops.Attrs{}, false, []*engine.Buffer{dh2, mask}, dh)
		bwd(b, ops.LinearGradWeight, ops.Attrs{}, true, []*engine.Buffer{dh, x}, dw)
		bwd(b, ops.LinearGradBias, ops.Attrs{}, true, []*engine.Buffer{dh}, db)
		b.step(engine.PhaseUpdate, ops.SGDStep, ops.Attrs{LR: 0.1, Momentum: 0.5}, false, []*engine.Buffer{w, dw, mom})
		b.step(engine.PhaseUpdate, ops.SGDStep, ops.Attrs{LR: 0.1}, false, []*engine.Buffer{bias, db, nil})
		return b
	}
	bg, be := build(), build()
	graph := loadPair(t, bg, backend.Options{}, 7)
	eager := loadPair(t, be, backend.Options{Settings: map[string]any{"eager": true}}, 7)
	devs := []*Device{graph.gpu.(*Device), eager.gpu.(*Device)}
	progs := []*engine.Program{graph.prog, eager.prog}
	for j, d := range devs {
		d.SeedRNG(42, 0)
		for step := 1; step <= 4; step++ {
			for micro, n := range []int{tb, tb - 1} {
				d.SetBatch(n)
				rc := backend.RunCtx{LossScale: 1.0 / (2*tb - 1), Step: step, First: micro == 0, Last: micro == 1}
				if err := d.RunTrain(progs[j], &rc, nil); err != nil {
					t.Fatal(err)
				}
				if rc.Last {
					if err := d.RunUpdate(progs[j], &rc, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if len(devs[0].graphs) != 3 {
		t.Errorf("%d graphs captured, want 3 (first, last and update)", len(devs[0].graphs))
	}
	worst := 0.0
	for j, buf := range graph.prog.Buffers {
		if buf == graph.prog.Work {
			continue
		}
		e := relErr(download(t, devs[0], buf, buf.Elems()), download(t, devs[1], eager.prog.Buffers[j], buf.Elems()))
		worst = worse(worst, e)
	}
	ok := worst <= 1e-6
	jsonLine(map[string]any{"check": "graph_replay", "rel_err": worst, "graphs": len(devs[0].graphs), "ok": ok})
	if !ok {
		t.Errorf("graph and eager differ: relative error %g", worst)
	}
}

// TestSplitSumGPU runs the split sum (conv1's bias gradient at batch 64:
// 10 channels of 36864 elements, 5 chunks each) three times, wanting the
// same bits each time (no atomics), and checks Finite, which uses it, on
// a long buffer with and without a NaN or an infinity.
func TestSplitSumGPU(t *testing.T) {
	needGPU(t)
	b := newProg()
	dy, db := b.f("dy", true, 64, 10, 24, 24), b.f("db", false, 10)
	grads := b.f("grads", false, 100003)
	st := b.step(engine.PhaseBackward, ops.Conv2DGradBias, ops.Attrs{}, false, []*engine.Buffer{dy}, db)
	pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 11)
	gpu := pr.gpu.(*Device)
	var first []float32
	for run := range 3 {
		if err := gpu.Exec(st, &once[0]); err != nil {
			t.Fatal(err)
		}
		got := download(t, gpu, db, 10)
		if run == 0 {
			first = got
			if err := pr.cpu.Exec(st, &once[0]); err != nil {
				t.Fatal(err)
			}
			if e := relErr(got, download(t, pr.cpu, db, 10)); e > 1e-4 {
				t.Errorf("split bias gradient: relative error %g against the CPU", e)
			}
		} else if !slices.Equal(got, first) {
			t.Errorf("split bias gradient, run %d: %v, first run %v", run+1, got, first)
		}
	}
	finite := func(want bool, what string) {
		t.Helper()
		ok, err := gpu.Finite(grads)
		if err != nil {
			t.Fatal(err)
		}
		if ok != want {
			t.Errorf("Finite(%s) = %v, want %v", what, ok, want)
		}
	}
	finite(true, "random values")
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, 77777, 100002} {
			keep := download(t, gpu, grads, grads.Elems())[at]
			if err := gpu.UploadF32(grads, at, []float32{bad}); err != nil {
				t.Fatal(err)
			}
			finite(false, fmt.Sprintf("%v at %d", bad, at))
			if err := gpu.UploadF32(grads, at, []float32{keep}); err != nil {
				t.Fatal(err)
			}
		}
	}
	finite(true, "random values again")
	jsonLine(map[string]any{"check": "split_sum", "ok": !t.Failed()})
}

// TestSplitSumSpeed times, on the GPU, conv1's bias gradient of the MNIST
// Net at batch 512 (10 channels of 24·24·512) and the finiteness sum over
// its 21840 gradients, each as one block per channel (gorun_bias_grad,
// gorun_sum) and as the split sum. It reports microseconds per call
// (back-to-back launches, so at least the launch rate) and fails only
// when the split sum is slower.
func TestSplitSumSpeed(t *testing.T) {
	needGPU(t)
	b := newProg()
	dy, db := b.f("dy", true, 512, 10, 24, 24), b.f("db", false, 10)
	grads := b.f("grads", false, 21840)
	b.step(engine.PhaseBackward, ops.Conv2DGradBias, ops.Attrs{}, false, []*engine.Buffer{dy}, db)
	pr := loadPair(t, b, backend.Options{Settings: map[string]any{"eager": true}}, 12)
	d := pr.gpu.(*Device)
	if err := d.enter(); err != nil {
		t.Fatal(err)
	}
	defer d.exit()
	const reps = 200
	perCall := func(f func() error) float64 {
		for range 5 {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if err := syncStream(d.stream); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		for range reps {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if err := syncStream(d.stream); err != nil {
			t.Fatal(err)
		}
		return float64(time.Since(t0).Microseconds()) / reps
	}
	n, plane, g := 512, 24*24, grads.Elems()
	out := uintptr(d.small)
	res := map[string]any{"check": "split_sum_speed",
		"bias_one_block_us": perCall(func() error {
			return d.launch(kBiasGrad, blockPer(10), ptrArg(d.ptr(dy)), ptrArg(d.ptr(db)), intArg(n), intArg(10), intArg(plane), intArg(0))
		}),
		"bias_split_us": perCall(func() error { return d.splitSum(d.ptr(dy), d.ptr(db), n, 10, plane, false) }),
		"sum_one_block_us": perCall(func() error {
			return d.launch(kSum, oneBlock(), ptrArg(d.ptr(grads)), ptrArg(out), intArg(g), intArg(0))
		}),
		"sum_split_us": perCall(func() error { return d.splitSum(d.ptr(grads), out, 1, 1, g, false) }),
	}
	ok := res["bias_split_us"].(float64) <= res["bias_one_block_us"].(float64)
	res["ok"] = ok
	jsonLine(res)
	if !ok {
		t.Errorf("the split bias gradient is slower than one block per channel: %v", res)
	}
}

// TestLocalCollectives runs the collectives of two replicas sharing GPU 0
// (device-to-device copies and the add and scale kernels) against the
// same sums on the host.
func TestLocalCollectives(t *testing.T) {
	needGPU(t)
	n, err := numGPUs()
	if err != nil {
		t.Fatal(err)
	}
	const elems = 1000
	var devs []backend.Device
	var progs []*engine.Program
	for _, index := range []int{0, n} { // index n is GPU 0 again
		b := newProg()
		b.f("x", false, elems)
		prog := b.done()
		d, err := Backend{}.Open(index, backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := d.Load(prog); err != nil {
			t.Fatal(err)
		}
		devs, progs = append(devs, d), append(progs, prog)
	}
	coll, err := Backend{}.Connect(devs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := coll[0].(*localColl); !ok {
		t.Fatalf("replicas on one GPU got %T collectives", coll[0])
	}
	r := rand.New(rand.NewPCG(11, 12))
	vals := [2][]float32{randSlice(r, elems), randSlice(r, elems)}
	reset := func() {
		for j, d := range devs {
			if err := d.UploadF32(progs[j].Buffers[0], 0, vals[j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	both := func(f func(j int) error) {
		errs := make(chan error, 2)
		for j := range devs {
			go func() { errs <- f(j) }()
		}
		for range devs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	get := func(j int) []float32 { return download(t, devs[j], progs[j].Buffers[0], elems) }
	sum, mean := make([]float32, elems), make([]float32, elems)
	for k := range sum {
		sum[k] = vals[0][k] + vals[1][k]
		mean[k] = sum[k] * 0.5
	}
	worst := 0.0
	// All-reduce (mean) on part of the buffer: the rest stays.
	reset()
	both(func(j int) error {
		return coll[j].AllReduce(progs[j].Buffers[0], 100, 800, comm.Mean, comm.Tag{Name: "test"})
	})
	for j := range devs {
		want := slices.Clone(vals[j])
		copy(want[100:900], mean[100:900])
		worst = worse(worst, relErr(get(j), want))
	}
	// Reduce (sum) to rank 1: rank 0 keeps its values.
	reset()
	both(func(j int) error {
		return coll[j].Reduce(progs[j].Buffers[0], 0, elems, 1, comm.Sum, comm.Tag{Name: "test"})
	})
	worst = worse(worst, relErr(get(0), vals[0]))
	worst = worse(worst, relErr(get(1), sum))
	// Broadcast from rank 1.
	reset()
	both(func(j int) error {
		return coll[j].Broadcast(progs[j].Buffers[0], 0, elems, 1, comm.Tag{Name: "test"})
	})
	worst = worse(worst, relErr(get(0), vals[1]))
	ok := worst <= 1e-6
	jsonLine(map[string]any{"check": "collectives", "kind": "replicas on one GPU", "rel_err": worst, "ok": ok})
	if !ok {
		t.Errorf("collectives: relative error %g", worst)
	}
}
