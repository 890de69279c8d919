package ops

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Forward values on cases small enough to work out by hand.

func buf64(shape []int, data ...float64) *Buf[float64] {
	if len(data) == 0 {
		data = make([]float64, prod(shape))
	}
	return &Buf[float64]{Shape: shape, Data: data}
}

func idx64(shape []int, idx ...int32) *Buf[float64] {
	if len(idx) == 0 {
		idx = make([]int32, prod(shape))
	}
	return &Buf[float64]{Shape: shape, Idx: idx}
}

func run64(op Op, a *Attrs, c *Ctx[float64], in, out []*Buf[float64]) {
	if c == nil {
		c = &Ctx[float64]{LossScale: 1, Step: 1}
	}
	call(Kernels64, c, op, a, in, out)
}

func expectData(t *testing.T, what string, got []float64, want ...float64) {
	t.Helper()
	for i, w := range want {
		if g := got[i]; !(math.Abs(g-w) <= 1e-12*(1+math.Abs(w))) && !(math.IsNaN(g) && math.IsNaN(w)) {
			t.Errorf("%s = %v, want %v", what, got[:len(want)], want)
			return
		}
	}
}

func TestConv2DForward(t *testing.T) {
	x := buf64([]int{1, 1, 3, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	// Cross-correlation, not convolution: y[i,j] = x[i,j] - x[i+1,j+1].
	w := buf64([]int{1, 1, 2, 2}, 1, 0, 0, -1)
	y := buf64([]int{1, 1, 2, 2})
	run64(Conv2D, &Attrs{}, nil, []*Buf[float64]{x, w, buf64([]int{1}, 0.5)}, []*Buf[float64]{y})
	expectData(t, "conv2d", y.Data, -3.5, -3.5, -3.5, -3.5)

	// Stride 2, padding 1, all-ones 2×2 kernel: each output sums the part
	// of its window inside the image.
	ones := buf64([]int{1, 1, 2, 2}, 1, 1, 1, 1)
	y = buf64([]int{1, 1, 2, 2})
	run64(Conv2D, &Attrs{Stride: 2, Padding: 1}, nil, []*Buf[float64]{x, ones, nil}, []*Buf[float64]{y})
	expectData(t, "conv2d stride 2 padding 1", y.Data, 1, 2+3, 4+7, 5+6+8+9)

	// Two samples, two input channels, two output channels, 1×1 kernel.
	x2 := buf64([]int{2, 2, 1, 2}, 1, 2, 3, 4, 5, 6, 7, 8)
	w2 := buf64([]int{2, 2, 1, 1}, 1, 10, -1, 0)
	y2 := buf64([]int{2, 2, 1, 2})
	run64(Conv2D, &Attrs{}, nil, []*Buf[float64]{x2, w2, buf64([]int{2}, 0, 100)}, []*Buf[float64]{y2})
	expectData(t, "conv2d batch 2", y2.Data, 31, 42, 99, 98, 75, 86, 95, 94)
}

func TestLinearForward(t *testing.T) {
	x := buf64([]int{2, 2}, 1, 2, 3, 4)
	w := buf64([]int{3, 2}, 1, 0, 0, 1, 1, 1)
	y := buf64([]int{2, 3})
	run64(Linear, nil, nil, []*Buf[float64]{x, w, buf64([]int{3}, 0.5, 0, -1)}, []*Buf[float64]{y})
	expectData(t, "linear", y.Data, 1.5, 2, 2, 3.5, 4, 6)
	run64(Linear, nil, nil, []*Buf[float64]{x, w, nil}, []*Buf[float64]{y})
	expectData(t, "linear without bias", y.Data, 1, 2, 3, 3, 4, 7)
	clear(y.Data)
	run64(Linear, nil, nil, []*Buf[float64]{x, w}, []*Buf[float64]{y}) // bias left off the end
	expectData(t, "linear with two inputs", y.Data, 1, 2, 3, 3, 4, 7)

	// [N,T,I]: each of the N·T rows is transformed alike; the gradients
	// sum over all rows.
	x3 := buf64([]int{1, 2, 2}, 1, 2, 3, 4)
	y3 := buf64([]int{1, 2, 3})
	run64(Linear, nil, nil, []*Buf[float64]{x3, w, buf64([]int{3}, 0.5, 0, -1)}, []*Buf[float64]{y3})
	expectData(t, "linear 3d", y3.Data, 1.5, 2, 2, 3.5, 4, 6)
	dy3 := buf64([]int{1, 2, 3}, 1, 0, 1, 0, 1, 1)
	dx3, dw, db := buf64([]int{1, 2, 2}), buf64([]int{3, 2}), buf64([]int{3})
	run64(LinearGradInput, &Attrs{}, nil, []*Buf[float64]{dy3, w}, []*Buf[float64]{dx3})
	expectData(t, "linear_grad_input 3d", dx3.Data, 2, 1, 1, 2)
	run64(LinearGradWeight, &Attrs{}, nil, []*Buf[float64]{dy3, x3}, []*Buf[float64]{dw})
	expectData(t, "linear_grad_weight 3d", dw.Data, 1, 2, 3, 4, 4, 6)
	run64(LinearGradBias, &Attrs{}, nil, []*Buf[float64]{dy3}, []*Buf[float64]{db})
	expectData(t, "linear_grad_bias 3d", db.Data, 1, 1, 2)
}

func TestReLUForward(t *testing.T) {
	x := buf64([]int{5}, -1, 0, 2, math.NaN(), math.Inf(-1))
	y := buf64([]int{5})
	run64(ReLU, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "relu", y.Data, 0, 0, 2, math.NaN(), 0)
	dx := buf64([]int{5})
	run64(ReLUGrad, nil, nil, []*Buf[float64]{buf64([]int{5}, 1, 2, 3, 4, 5), y}, []*Buf[float64]{dx})
	expectData(t, "relu_grad", dx.Data, 0, 0, 3, 0, 0)
}

func TestMaxPool2DForward(t *testing.T) {
	// Ties: the first maximum in row-major window order wins, as PyTorch.
	x := buf64([]int{1, 1, 2, 6},
		1, 3, 3, 0, 0, 0,
		3, 2, 0, 0, 0, 0)
	y, idx := buf64([]int{1, 1, 1, 3}), idx64([]int{1, 1, 1, 3})
	run64(MaxPool2D, &Attrs{Kernel: 2}, nil, []*Buf[float64]{x}, []*Buf[float64]{y, idx})
	expectData(t, "maxpool2d", y.Data, 3, 3, 0)
	if want := []int32{1, 2, 4}; !slices.Equal(idx.Idx, want) {
		t.Errorf("maxpool2d index = %v, want %v", idx.Idx, want)
	}
	// The general path (kernel 2, stride 1) breaks ties the same way, and
	// floor mode drops the last column for kernel 2, stride 2 on width 5.
	y, idx = buf64([]int{1, 1, 1, 5}), idx64([]int{1, 1, 1, 5})
	run64(MaxPool2D, &Attrs{Kernel: 2, Stride: 1}, nil, []*Buf[float64]{x}, []*Buf[float64]{y, idx})
	expectData(t, "maxpool2d stride 1", y.Data, 3, 3, 3, 0, 0)
	if want := []int32{1, 1, 2, 3, 4}; !slices.Equal(idx.Idx, want) {
		t.Errorf("maxpool2d stride 1 index = %v, want %v", idx.Idx, want)
	}
	x5 := buf64([]int{1, 1, 2, 5}, 1, 2, 3, 4, 99, 5, 6, 7, 8, 99)
	y, idx = buf64([]int{1, 1, 1, 2}), idx64([]int{1, 1, 1, 2})
	run64(MaxPool2D, &Attrs{Kernel: 2}, nil, []*Buf[float64]{x5}, []*Buf[float64]{y, idx})
	expectData(t, "maxpool2d floor", y.Data, 6, 8)
	// Overlapping windows send both gradients to a shared maximum.
	y, idx = buf64([]int{1, 1, 1, 2}), idx64([]int{1, 1, 1, 2})
	xo2 := buf64([]int{1, 1, 2, 3}, 0, 5, 1, 0, 0, 0)
	run64(MaxPool2D, &Attrs{Kernel: 2, Stride: 1}, nil, []*Buf[float64]{xo2}, []*Buf[float64]{y, idx})
	dx := buf64([]int{1, 1, 2, 3})
	run64(MaxPool2DGrad, nil, nil, []*Buf[float64]{buf64([]int{1, 1, 1, 2}, 1, 10), idx}, []*Buf[float64]{dx})
	expectData(t, "maxpool2d_grad overlapping", dx.Data, 0, 11, 0, 0, 0, 0)
}

func TestSoftmaxForward(t *testing.T) {
	// Rows [0, ln 3] and the same shifted by 1000 (stable: no overflow).
	x := buf64([]int{2, 2}, 0, math.Log(3), 1000, 1000+math.Log(3))
	y := buf64([]int{2, 2})
	run64(Softmax, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "softmax", y.Data, 0.25, 0.75, 0.25, 0.75)
	run64(LogSoftmax, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "log_softmax", y.Data, math.Log(0.25), math.Log(0.75), math.Log(0.25), math.Log(0.75))

	// Causal scores [1,2,2]: row 0 keeps column 0 only, whatever column 1
	// holds (even NaN); row 1 keeps both.
	s := buf64([]int{1, 2, 2}, 5, math.NaN(), 0, math.Log(3))
	p := buf64([]int{1, 2, 2})
	run64(Softmax, &Attrs{Causal: true}, nil, []*Buf[float64]{s}, []*Buf[float64]{p})
	expectData(t, "softmax causal", p.Data, 1, 0, 0.25, 0.75)
	dx := buf64([]int{1, 2, 2})
	run64(SoftmaxGrad, nil, nil, []*Buf[float64]{buf64([]int{1, 2, 2}, 1, 7, 1, 2), p}, []*Buf[float64]{dx})
	expectData(t, "softmax_grad causal", dx.Data, 0, 0, -0.1875, 0.1875)
}

func TestLossForward(t *testing.T) {
	c := &Ctx[float64]{LossScale: 0.5}
	logp := buf64([]int{2, 2}, -1, -2, -3, -4)
	target := idx64([]int{2}, 1, 0)
	loss := buf64([]int{1})
	run64(NLLLoss, nil, c, []*Buf[float64]{logp, target}, []*Buf[float64]{loss})
	expectData(t, "nll_loss", loss.Data, 2.5) // -0.5·(-2 - 3)
	dx := buf64([]int{2, 2})
	run64(NLLLossGrad, nil, c, []*Buf[float64]{buf64([]int{1}, 2), target}, []*Buf[float64]{dx})
	expectData(t, "nll_loss_grad", dx.Data, 0, -1, -1, 0)

	logits := buf64([]int{1, 2}, 0, math.Log(3))
	probs := buf64([]int{1, 2})
	c.LossScale = 1
	run64(CrossEntropy, nil, c, []*Buf[float64]{logits, idx64([]int{1}, 1)}, []*Buf[float64]{loss, probs})
	expectData(t, "cross_entropy", loss.Data, -math.Log(0.75))
	expectData(t, "cross_entropy probs", probs.Data, 0.25, 0.75)
	dx = buf64([]int{1, 2})
	run64(CrossEntropyGrad, nil, c, []*Buf[float64]{buf64([]int{1}, 1), probs, idx64([]int{1}, 1)}, []*Buf[float64]{dx})
	expectData(t, "cross_entropy_grad", dx.Data, 0.25, -0.25)
}

func TestLossTargetOutOfRange(t *testing.T) {
	defer func() {
		if r := recover(); r != "nll_loss: target 3 out of range [0, 2)" {
			t.Errorf("panic %v", r)
		}
	}()
	run64(NLLLoss, nil, nil, []*Buf[float64]{buf64([]int{1, 2}), idx64([]int{1}, 3)}, []*Buf[float64]{buf64([]int{1})})
}

func TestDropout(t *testing.T) {
	const n = 10000
	x := buf64([]int{100, 100})
	for i := range x.Data {
		x.Data[i] = float64(i%7) + 1
	}
	y, mask := buf64([]int{100, 100}), buf64([]int{100, 100})
	c := &Ctx[float64]{RNG: rand.New(rand.NewPCG(1, 2))}
	run64(Dropout, &Attrs{P: 0.3}, c, []*Buf[float64]{x}, []*Buf[float64]{y, mask})
	kept := 0
	for i, m := range mask.Data {
		switch m {
		case 0:
		case 1 / 0.7:
			kept++
		default:
			t.Fatalf("mask[%d] = %v, want 0 or 1/0.7", i, m)
		}
		if y.Data[i] != x.Data[i]*m {
			t.Fatalf("y[%d] = %v, want x·mask = %v", i, y.Data[i], x.Data[i]*m)
		}
	}
	if f := float64(kept) / n; math.Abs(f-0.7) > 0.02 {
		t.Errorf("kept %.3f of the elements, want about 0.7", f)
	}
	// The same RNG state gives the same mask.
	mask2 := buf64([]int{100, 100})
	c.RNG = rand.New(rand.NewPCG(1, 2))
	run64(Dropout, &Attrs{P: 0.3}, c, []*Buf[float64]{x}, []*Buf[float64]{y, mask2})
	if !slices.Equal(mask.Data, mask2.Data) {
		t.Error("dropout is not deterministic given the RNG state")
	}
	// p = 0 and a nil RNG (evaluation) are the identity; p = 1 drops all.
	for _, tc := range []struct {
		p    float64
		rng  *rand.Rand
		want float64
	}{{0, c.RNG, 1}, {0.5, nil, 1}, {1, c.RNG, 0}} {
		c.RNG = tc.rng
		run64(Dropout, &Attrs{P: tc.p}, c, []*Buf[float64]{x}, []*Buf[float64]{y, mask})
		for i, m := range mask.Data {
			if m != tc.want || y.Data[i] != x.Data[i]*tc.want {
				t.Fatalf("p=%v rng=%v: mask[%d] = %v, y = %v", tc.p, tc.rng != nil, i, m, y.Data[i])
			}
		}
	}
}

func TestDropout2D(t *testing.T) {
	x := buf64([]int{8, 16, 2, 3})
	for i := range x.Data {
		x.Data[i] = float64(i) + 1
	}
	y, mask := buf64(x.Shape), buf64([]int{8, 16})
	c := &Ctx[float64]{RNG: rand.New(rand.NewPCG(3, 4))}
	run64(Dropout2D, &Attrs{P: 0.5}, c, []*Buf[float64]{x}, []*Buf[float64]{y, mask})
	kept := 0
	for p, m := range mask.Data {
		if m != 0 && m != 2 {
			t.Fatalf("mask[%d] = %v, want 0 or 2", p, m)
		}
		if m == 2 {
			kept++
		}
		for i := p * 6; i < (p+1)*6; i++ {
			if y.Data[i] != x.Data[i]*m {
				t.Fatalf("channel %d: y[%d] = %v, want %v", p, i, y.Data[i], x.Data[i]*m)
			}
		}
	}
	if kept == 0 || kept == len(mask.Data) {
		t.Errorf("kept %d of %d channels", kept, len(mask.Data))
	}
}

func TestFlattenAndAdd(t *testing.T) {
	x := buf64([]int{2, 1, 2}, 1, 2, 3, 4)
	y := buf64([]int{2, 2})
	run64(Flatten, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "flatten (copy)", y.Data, 1, 2, 3, 4)
	alias := &Buf[float64]{Shape: []int{2, 2}, Data: x.Data}
	run64(Flatten, nil, nil, []*Buf[float64]{x}, []*Buf[float64]{alias})
	expectData(t, "flatten (alias)", alias.Data, 1, 2, 3, 4)

	z := buf64([]int{2, 2})
	run64(Add, nil, nil, []*Buf[float64]{y, buf64([]int{2, 2}, 10, 20, 30, 40)}, []*Buf[float64]{z})
	expectData(t, "add", z.Data, 11, 22, 33, 44)
	run64(Add, nil, nil, []*Buf[float64]{z, z}, []*Buf[float64]{z})
	expectData(t, "add in place", z.Data, 22, 44, 66, 88)
}

// TestInPlace checks the kernels documented as safe to run with their
// output over their first input.
func TestInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	rnd := func(shape ...int) *Buf[float64] {
		b := buf64(shape)
		for i := range b.Data {
			b.Data[i] = 2*r.Float64() - 1
		}
		return b
	}
	dup := func(b *Buf[float64]) *Buf[float64] {
		return &Buf[float64]{Shape: clone(b.Shape), Data: slices.Clone(b.Data)}
	}
	mask := rnd(3, 4, 2, 2)
	for i := range mask.Data {
		mask.Data[i] = float64(i % 2)
	}
	for _, tc := range []struct {
		op Op
		in []*Buf[float64]
		a  Attrs
	}{
		{ReLU, []*Buf[float64]{rnd(3, 4, 2, 2)}, Attrs{}},
		{ReLUGrad, []*Buf[float64]{rnd(3, 4, 2, 2), rnd(3, 4, 2, 2)}, Attrs{}},
		{Sigmoid, []*Buf[float64]{rnd(3, 4, 2)}, Attrs{}},
		{SigmoidGrad, []*Buf[float64]{rnd(3, 4, 2), rnd(3, 4, 2)}, Attrs{}},
		{Tanh, []*Buf[float64]{rnd(3, 4, 2)}, Attrs{}},
		{TanhGrad, []*Buf[float64]{rnd(3, 4, 2), rnd(3, 4, 2)}, Attrs{}},
		{LeakyReLU, []*Buf[float64]{rnd(3, 4, 2)}, Attrs{NegativeSlope: 0.1}},
		{LeakyReLUGrad, []*Buf[float64]{rnd(3, 4, 2), rnd(3, 4, 2)}, Attrs{NegativeSlope: 0.1}},
		{GELU, []*Buf[float64]{rnd(3, 4, 2)}, Attrs{}},
		{GELU, []*Buf[float64]{rnd(3, 4, 2)}, Attrs{Approximate: true}},
		{GELUGrad, []*Buf[float64]{rnd(3, 4, 2), rnd(3, 4, 2)}, Attrs{}},
		{GELUGrad, []*Buf[float64]{rnd(3, 4, 2), rnd(3, 4, 2)}, Attrs{Approximate: true}},
		{Add, []*Buf[float64]{rnd(3, 4), rnd(3, 4)}, Attrs{}},
		{Sub, []*Buf[float64]{rnd(3, 4), rnd(3, 4)}, Attrs{}},
		{Mul, []*Buf[float64]{rnd(3, 4), rnd(3, 4)}, Attrs{}},
		{Scale, []*Buf[float64]{rnd(3, 4)}, Attrs{Alpha: -3}},
		{DropoutGrad, []*Buf[float64]{rnd(3, 4, 2, 2), mask}, Attrs{}},
		{Dropout2DGrad, []*Buf[float64]{rnd(3, 4, 2, 2), rnd(3, 4)}, Attrs{}},
		{LogSoftmax, []*Buf[float64]{rnd(3, 4)}, Attrs{}},
		{Softmax, []*Buf[float64]{rnd(3, 4)}, Attrs{}},
		{Softmax, []*Buf[float64]{rnd(2, 3, 3)}, Attrs{Causal: true}},
		{LogSoftmax, []*Buf[float64]{rnd(2, 3, 4)}, Attrs{}},
		{LogSoftmaxGrad, []*Buf[float64]{rnd(3, 4), rnd(3, 4)}, Attrs{}},
		{SoftmaxGrad, []*Buf[float64]{rnd(3, 4), rnd(3, 4)}, Attrs{}},
	} {
		want := buf64(tc.in[0].Shape)
		var in []*Buf[float64]
		for _, b := range tc.in {
			in = append(in, dup(b))
		}
		run64(tc.op, &tc.a, nil, in, []*Buf[float64]{want})
		run64(tc.op, &tc.a, nil, tc.in, []*Buf[float64]{tc.in[0]})
		if !slices.Equal(tc.in[0].Data, want.Data) {
			t.Errorf("%v in place: %v, want %v", tc.op, tc.in[0].Data, want.Data)
		}
	}
	for _, op := range []Op{Dropout, Dropout2D} {
		x := rnd(3, 4, 2, 2)
		m1, m2 := buf64(x.Shape), buf64(x.Shape)
		if op == Dropout2D {
			m1, m2 = buf64([]int{3, 4}), buf64([]int{3, 4})
		}
		want := buf64(x.Shape)
		c := &Ctx[float64]{RNG: rand.New(rand.NewPCG(1, 1))}
		run64(op, &Attrs{P: 0.5}, c, []*Buf[float64]{x}, []*Buf[float64]{want, m1})
		c.RNG = rand.New(rand.NewPCG(1, 1))
		run64(op, &Attrs{P: 0.5}, c, []*Buf[float64]{x}, []*Buf[float64]{x, m2})
		if !slices.Equal(x.Data, want.Data) {
			t.Errorf("%v in place: %v, want %v", op, x.Data, want.Data)
		}
	}
}

func TestBatchNormForward(t *testing.T) {
	// One channel holding 1 and 3: mean 2, biased variance 1.
	x := buf64([]int{2, 1}, 1, 3)
	stats, save := buf64([]int{3, 1}), buf64([]int{3, 1})
	run64(BatchNormStats, &Attrs{}, nil, []*Buf[float64]{x}, []*Buf[float64]{stats})
	expectData(t, "batch_norm_stats", stats.Data, 4, 10, 2)
	y := buf64([]int{2, 1})
	a := &Attrs{BNMomentum: 0.1}
	run64(BatchNormNorm, a, nil, []*Buf[float64]{x, stats, buf64([]int{1}, 2), buf64([]int{1}, 0.5)}, []*Buf[float64]{y, save})
	expectData(t, "batch_norm_norm save", save.Data, 2, 1, 2)
	expectData(t, "batch_norm_norm", y.Data, -1.5, 2.5)
	run64(BatchNormNorm, a, nil, []*Buf[float64]{x, stats}, []*Buf[float64]{y, save}) // affine=False
	expectData(t, "batch_norm_norm without gamma and beta", y.Data, -1, 1)

	// The running statistics take the unbiased variance, 2.
	rm, rv, tracked := buf64([]int{1}, 0), buf64([]int{1}, 1), buf64([]int{1}, 0)
	run := func(a *Attrs, save *Buf[float64]) {
		run64(BatchNormRunning, a, nil, []*Buf[float64]{save, rm, rv, tracked}, nil)
	}
	run(a, save)
	expectData(t, "running mean", rm.Data, 0.2)
	expectData(t, "running var", rv.Data, 0.9+0.2)
	expectData(t, "num_batches_tracked", tracked.Data, 1)
	// Momentum=None (negative): a cumulative average, 1/tracked.
	run(&Attrs{BNMomentum: -1}, save)
	expectData(t, "cumulative running mean", rm.Data, 0.2+(2-0.2)/2)
	expectData(t, "cumulative running var", rv.Data, 1.1+(2-1.1)/2)
	expectData(t, "num_batches_tracked", tracked.Data, 2)
	// One value per channel: the mean moves, the variance does not.
	run(a, buf64([]int{3, 1}, 5, 0, 1))
	expectData(t, "running mean after count 1", rm.Data, 0.9*1.1+0.5)
	expectData(t, "running var after count 1", rv.Data, 1.55)
	expectData(t, "num_batches_tracked", tracked.Data, 3)
	// No values: nothing changes.
	run(a, buf64([]int{3, 1}, 0, 0, 0))
	expectData(t, "running mean after count 0", rm.Data, 0.9*1.1+0.5)
	expectData(t, "running var after count 0", rv.Data, 1.55)
	expectData(t, "num_batches_tracked", tracked.Data, 3)

	// Statistics whose variance rounds below 0 give variance 0; a count of
	// 0 gives mean and variance 0.
	y2, save2 := buf64([]int{1, 2}), buf64([]int{3, 2})
	run64(BatchNormNorm, &Attrs{Eps: 1}, nil, []*Buf[float64]{buf64([]int{1, 2}, 7, 7), buf64([]int{3, 2}, 2, 0, 1, 0, 2, 0)},
		[]*Buf[float64]{y2, save2})
	expectData(t, "batch_norm_norm clamped save", save2.Data, 1, 0, 0, 0, 2, 0)
	expectData(t, "batch_norm_norm clamped", y2.Data, 6, 7)

	// Evaluation: running statistics, 4-d input.
	xe := buf64([]int{1, 2, 1, 2}, 1, 2, 3, 4)
	ye := buf64([]int{1, 2, 1, 2})
	run64(BatchNormEval, &Attrs{Eps: 0}, nil, []*Buf[float64]{xe, buf64([]int{2}, 1, 3), buf64([]int{2}, 4, 0.25), buf64([]int{2}, 1, 2), nil},
		[]*Buf[float64]{ye})
	expectData(t, "batch_norm_eval", ye.Data, 0, 0.5, 0, 4)
}

func TestAvgPoolForward(t *testing.T) {
	// Padding 1 around a 2×2 image, kernel 2, stride 2: each window holds
	// one element and three zeros of padding, and divides by 4.
	x := buf64([]int{1, 1, 2, 2}, 1, 2, 3, 4)
	y := buf64([]int{1, 1, 2, 2})
	a := &Attrs{Kernel: 2, Padding: 1}
	run64(AvgPool2D, a, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "avgpool2d padded", y.Data, 0.25, 0.5, 0.75, 1)
	dx := buf64([]int{1, 1, 2, 2})
	run64(AvgPool2DGrad, a, nil, []*Buf[float64]{buf64([]int{1, 1, 2, 2}, 4, 8, 12, 16)}, []*Buf[float64]{dx})
	expectData(t, "avgpool2d_grad padded", dx.Data, 1, 2, 3, 4)
	// Floor mode drops the last column for kernel 2 on width 3.
	x = buf64([]int{1, 1, 2, 3}, 1, 2, 100, 3, 4, 100)
	y = buf64([]int{1, 1, 1, 1})
	run64(AvgPool2D, &Attrs{Kernel: 2}, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "avgpool2d floor", y.Data, 2.5)

	g := buf64([]int{1, 2, 1, 1})
	run64(GlobalAvgPool2D, nil, nil, []*Buf[float64]{buf64([]int{1, 2, 1, 3}, 1, 2, 3, 4, 4, 4)}, []*Buf[float64]{g})
	expectData(t, "global_avgpool2d", g.Data, 2, 4)
	dg := buf64([]int{1, 2, 1, 3})
	run64(GlobalAvgPool2DGrad, nil, nil, []*Buf[float64]{buf64([]int{1, 2, 1, 1}, 3, 6)}, []*Buf[float64]{dg})
	expectData(t, "global_avgpool2d_grad", dg.Data, 1, 1, 1, 2, 2, 2)
}

func TestActivationsForward(t *testing.T) {
	x := buf64([]int{5}, -2, 0, 1, math.NaN(), 5)
	y := buf64([]int{5})
	run64(LeakyReLU, &Attrs{NegativeSlope: 0.1}, nil, []*Buf[float64]{x}, []*Buf[float64]{y})
	expectData(t, "leaky_relu", y.Data, -0.2, 0, 1, math.NaN(), 5)
	dx := buf64([]int{5})
	run64(LeakyReLUGrad, &Attrs{NegativeSlope: 0.1}, nil, []*Buf[float64]{buf64([]int{5}, 1, 1, 1, 1, 1), x}, []*Buf[float64]{dx})
	expectData(t, "leaky_relu_grad", dx.Data, 0.1, 0.1, 1, 0.1, 1)
	run64(Sigmoid, nil, nil, []*Buf[float64]{buf64([]int{3}, 0, math.Log(3), math.Inf(-1))}, []*Buf[float64]{y})
	expectData(t, "sigmoid", y.Data, 0.5, 0.75, 0)
	run64(SigmoidGrad, nil, nil, []*Buf[float64]{buf64([]int{2}, 2, 4), buf64([]int{2}, 0.5, 0.75)}, []*Buf[float64]{dx})
	expectData(t, "sigmoid_grad", dx.Data, 0.5, 0.75)
	run64(Tanh, nil, nil, []*Buf[float64]{buf64([]int{2}, 0, math.Log(3))}, []*Buf[float64]{y})
	expectData(t, "tanh", y.Data, 0, 0.8)
	run64(TanhGrad, nil, nil, []*Buf[float64]{buf64([]int{2}, 2, 1), buf64([]int{2}, 0, 0.8)}, []*Buf[float64]{dx})
	expectData(t, "tanh_grad", dx.Data, 2, 0.36)

	a, b := buf64([]int{2, 2}, 1, 2, 3, 4), buf64([]int{2, 2}, 4, 3, 2, 1)
	z := buf64([]int{2, 2})
	run64(Sub, nil, nil, []*Buf[float64]{a, b}, []*Buf[float64]{z})
	expectData(t, "sub", z.Data, -3, -1, 1, 3)
	run64(Mul, nil, nil, []*Buf[float64]{a, b}, []*Buf[float64]{z})
	expectData(t, "mul", z.Data, 4, 6, 6, 4)
	run64(Scale, &Attrs{Alpha: -0.5}, nil, []*Buf[float64]{a}, []*Buf[float64]{z})
	expectData(t, "scale", z.Data, -0.5, -1, -1.5, -2)

	// GELU(0) = 0, GELU(x) → x and 0 far out, GELU(-x) = GELU(x) - x.
	g := buf64([]int{4})
	run64(GELU, &Attrs{}, nil, []*Buf[float64]{buf64([]int{4}, 0, 40, -40, -1)}, []*Buf[float64]{g})
	expectData(t, "gelu", g.Data, 0, 40, 0, 0.8413447460685429-1)
	run64(GELU, &Attrs{Approximate: true}, nil, []*Buf[float64]{buf64([]int{4}, 0, 40, -40, 1)}, []*Buf[float64]{g})
	expectData(t, "gelu tanh", g.Data, 0, 40, 0, 0.5*(1+math.Tanh(math.Sqrt(2/math.Pi)*1.044715)))
	run64(GELUGrad, &Attrs{}, nil, []*Buf[float64]{buf64([]int{2}, 2, 2), buf64([]int{2}, 0, 40)}, []*Buf[float64]{g})
	expectData(t, "gelu_grad", g.Data, 1, 2)
}

// TestSiLUEdges: SiLU and its gradient in float32 where exp overflows, as
// PyTorch 1.13 computes them (F.silu on CPU: silu(±Inf) = +Inf and NaN,
// -0 below -88, NaN gradients at ±Inf), and at an ordinary point.
func TestSiLUEdges(t *testing.T) {
	inf := float32(math.Inf(1))
	x := &Buf[float32]{Shape: []int{5}, Data: []float32{inf, -inf, -100, -90, 3}}
	y := &Buf[float32]{Shape: []int{5}, Data: make([]float32, 5)}
	dx := &Buf[float32]{Shape: []int{5}, Data: make([]float32, 5)}
	dy := &Buf[float32]{Shape: []int{5}, Data: []float32{1, 1, 1, 1, 1}}
	Kernels32[SiLU](&Ctx[float32]{}, &Attrs{}, []*Buf[float32]{x}, []*Buf[float32]{y})
	Kernels32[SiLUGrad](&Ctx[float32]{}, &Attrs{}, []*Buf[float32]{dy, x}, []*Buf[float32]{dx})
	nan := float32(math.NaN())
	// torch.nn.functional.silu(x) and its backward with ones, in float32.
	wantY := []float32{inf, nan, 0, 0, 2.857722520828247}
	wantDx := []float32{nan, nan, 0, 0, 1.0881041288375854}
	for i := range wantY {
		for _, c := range []struct {
			what      string
			got, want float32
		}{{"silu", y.Data[i], wantY[i]}, {"silu_grad", dx.Data[i], wantDx[i]}} {
			same := c.got == c.want || (c.got != c.got && c.want != c.want)
			if !same || (c.want == 0 && !math.Signbit(float64(c.got))) {
				t.Errorf("%s(%v) = %v, want %v (PyTorch's, -0 for zeros)", c.what, x.Data[i], c.got, c.want)
			}
		}
	}
}

func TestLossesWithSmoothingAndMSE(t *testing.T) {
	// Uniform logits over 4 classes: every -logp is ln 4, whatever ε.
	c := &Ctx[float64]{LossScale: 0.5}
	logits := buf64([]int{2, 4})
	target := idx64([]int{2}, 1, 3)
	loss, probs := buf64([]int{1}), buf64([]int{2, 4})
	a := &Attrs{LabelSmoothing: 0.2}
	run64(CrossEntropy, a, c, []*Buf[float64]{logits, target}, []*Buf[float64]{loss, probs})
	expectData(t, "cross_entropy smoothed", loss.Data, math.Log(4))
	dx := buf64([]int{2, 4})
	run64(CrossEntropyGrad, a, c, []*Buf[float64]{buf64([]int{1}, 2), probs, target}, []*Buf[float64]{dx})
	// probs 0.25; smoothed target 0.05 off, 0.85 on.
	expectData(t, "cross_entropy_grad smoothed", dx.Data, 0.2, -0.6, 0.2, 0.2, 0.2, 0.2, 0.2, -0.6)
	// With Accumulate the loss adds up.
	a.Accumulate = true
	run64(CrossEntropy, a, c, []*Buf[float64]{logits, target}, []*Buf[float64]{loss, probs})
	expectData(t, "cross_entropy smoothed, accumulated", loss.Data, 2*math.Log(4))

	pred := buf64([]int{2, 2}, 1, 2, 3, 4)
	tgt := buf64([]int{2, 2}, 0, 0, 3, 6)
	run64(MSELoss, nil, c, []*Buf[float64]{pred, tgt}, []*Buf[float64]{loss})
	expectData(t, "mse_loss", loss.Data, 0.5*((1+4)/2.0+(0+4)/2.0))
	run64(MSELoss, &Attrs{Accumulate: true}, c, []*Buf[float64]{pred, tgt}, []*Buf[float64]{loss})
	expectData(t, "mse_loss accumulated", loss.Data, 2*0.5*((1+4)/2.0+(0+4)/2.0))
	dp := buf64([]int{2, 2})
	run64(MSELossGrad, nil, c, []*Buf[float64]{buf64([]int{1}, 3), pred, tgt}, []*Buf[float64]{dp})
	expectData(t, "mse_loss_grad", dp.Data, 1.5, 3, 0, -3) // 0.5·3·2·(p-t)/2
}
