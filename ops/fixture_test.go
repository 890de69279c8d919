package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A gradCase describes one forward op call and the backward kernels that
// differentiate it. The same descriptions drive the finite-difference
// gradient checks, the allocation checks and the tail checks (kernels must
// not touch elements past the live batch).
type gradCase struct {
	name  string
	op    Op
	attrs Attrs
	in    [][]int // input shapes at the live batch; nil for an absent bias
	capN  int     // buffer capacity in samples; 0 means the live batch
	scale float64 // Ctx.LossScale; 0 means 1
	bwd   []bwdStep

	distinct     bool // input 0 holds well-separated values (no max ties)
	awayFromZero bool // input 0 keeps clear of 0 (ReLU's kink)
}

// A bwdStep is one backward kernel: its inputs, and the forward input whose
// gradient it writes.
type bwdStep struct {
	op   Op
	args []ref
	wrt  int
}

// A ref names a buffer of the forward call: the cotangent of output i
// ('d'), input i ('i') or output i ('o').
type ref struct {
	kind byte
	i    int
}

func dyOf(i int) ref  { return ref{'d', i} }
func inOf(i int) ref  { return ref{'i', i} }
func outOf(i int) ref { return ref{'o', i} }

var gradCases = []gradCase{
	{name: "conv2d", op: Conv2D, in: [][]int{{2, 3, 7, 6}, {4, 3, 3, 3}, {4}}, bwd: convBwd(true)},
	{name: "conv2d/stride2-pad1-bias-partial", op: Conv2D, attrs: Attrs{Stride: 2, Padding: 1},
		in: [][]int{{3, 2, 7, 8}, {5, 2, 3, 2}, {5}}, capN: 5, bwd: convBwd(true)},
	{name: "conv2d/stride2-pad1-nobias", op: Conv2D, attrs: Attrs{Stride: 2, Padding: 1},
		in: [][]int{{2, 2, 6, 5}, {3, 2, 3, 3}, nil}, bwd: convBwd(false)},
	{name: "conv2d/batch1-pad1", op: Conv2D, attrs: Attrs{Padding: 1},
		in: [][]int{{1, 2, 5, 4}, {3, 2, 2, 2}, {3}}, capN: 3, bwd: convBwd(true)},
	{name: "conv2d/stride3-pad2", op: Conv2D, attrs: Attrs{Stride: 3, Padding: 2},
		in: [][]int{{2, 1, 5, 6}, {2, 1, 3, 3}, {2}}, bwd: convBwd(true)},
	{name: "linear", op: Linear, in: [][]int{{3, 5}, {4, 5}, {4}}, capN: 6, bwd: linearBwd(true)},
	{name: "linear/nobias", op: Linear, in: [][]int{{2, 3}, {4, 3}, nil}, bwd: linearBwd(false)},
	{name: "relu", op: ReLU, in: [][]int{{3, 4, 2}}, capN: 4, awayFromZero: true,
		bwd: []bwdStep{{ReLUGrad, []ref{dyOf(0), outOf(0)}, 0}}},
	{name: "maxpool2d/k2", op: MaxPool2D, attrs: Attrs{Kernel: 2}, in: [][]int{{2, 3, 6, 5}}, capN: 3, distinct: true,
		bwd: []bwdStep{{MaxPool2DGrad, []ref{dyOf(0), outOf(1)}, 0}}},
	{name: "maxpool2d/k3s2-overlap", op: MaxPool2D, attrs: Attrs{Kernel: 3, Stride: 2}, in: [][]int{{2, 2, 7, 8}}, distinct: true,
		bwd: []bwdStep{{MaxPool2DGrad, []ref{dyOf(0), outOf(1)}, 0}}},
	{name: "dropout", op: Dropout, attrs: Attrs{P: 0.5}, in: [][]int{{4, 6}}, capN: 6,
		bwd: []bwdStep{{DropoutGrad, []ref{dyOf(0), outOf(1)}, 0}}},
	{name: "dropout/p0", op: Dropout, attrs: Attrs{P: 0}, in: [][]int{{2, 3}},
		bwd: []bwdStep{{DropoutGrad, []ref{dyOf(0), outOf(1)}, 0}}},
	{name: "dropout2d", op: Dropout2D, attrs: Attrs{P: 0.4}, in: [][]int{{3, 4, 2, 3}}, capN: 4,
		bwd: []bwdStep{{Dropout2DGrad, []ref{dyOf(0), outOf(1)}, 0}}},
	{name: "flatten", op: Flatten, in: [][]int{{3, 2, 2, 3}}, capN: 4,
		bwd: []bwdStep{{Flatten, []ref{dyOf(0)}, 0}}}, // the gradient of a reshape is a reshape
	{name: "log_softmax", op: LogSoftmax, in: [][]int{{4, 5}}, capN: 5,
		bwd: []bwdStep{{LogSoftmaxGrad, []ref{dyOf(0), outOf(0)}, 0}}},
	{name: "softmax", op: Softmax, in: [][]int{{4, 5}}, capN: 6,
		bwd: []bwdStep{{SoftmaxGrad, []ref{dyOf(0), outOf(0)}, 0}}},
	{name: "nll_loss", op: NLLLoss, in: [][]int{{5, 4}, {5}}, capN: 7, scale: 1.0 / 7,
		bwd: []bwdStep{{NLLLossGrad, []ref{dyOf(0), inOf(1)}, 0}}},
	{name: "cross_entropy", op: CrossEntropy, in: [][]int{{5, 4}, {5}}, capN: 6, scale: 0.25,
		bwd: []bwdStep{{CrossEntropyGrad, []ref{dyOf(0), outOf(1), inOf(1)}, 0}}},
}

func convBwd(bias bool) []bwdStep {
	s := []bwdStep{
		{Conv2DGradInput, []ref{dyOf(0), inOf(1)}, 0},
		{Conv2DGradWeight, []ref{dyOf(0), inOf(0)}, 1},
	}
	if bias {
		s = append(s, bwdStep{Conv2DGradBias, []ref{dyOf(0)}, 2})
	}
	return s
}

func linearBwd(bias bool) []bwdStep {
	s := []bwdStep{
		{LinearGradInput, []ref{dyOf(0), inOf(1)}, 0},
		{LinearGradWeight, []ref{dyOf(0), inOf(0)}, 1},
	}
	if bias {
		s = append(s, bwdStep{LinearGradBias, []ref{dyOf(0)}, 2})
	}
	return s
}

func isLoss(op Op) bool { return op == NLLLoss || op == CrossEntropy }

// idxIn reports whether forward input i of op holds indices.
func idxIn(op Op, i int) bool { return isLoss(op) && i == 1 }

// idxOut reports whether forward output i of op holds indices.
func idxOut(op Op, i int) bool { return op == MaxPool2D && i == 1 }

// batchedIn reports whether forward input i of op has the batch as its
// first dimension (weights and biases do not).
func batchedIn(op Op, i int) bool { return i == 0 || idxIn(op, i) }

// batchedOut reports whether forward output i of op is batched (losses are
// not).
func batchedOut(op Op, i int) bool { return !(isLoss(op) && i == 0) }

// A fixture holds the buffers of one gradCase in T.
type fixture[T Float] struct {
	gc      *gradCase
	k       *[NumOps]Kernel[T]
	c       *Ctx[T]
	in, out []*Buf[T]
	dy      *Buf[T]     // cotangent of output 0
	bin     [][]*Buf[T] // per backward step
	bout    []*Buf[T]
	work    []T
}

// newBuf returns a buffer of live shape whose storage holds capN samples
// when batched. Everything starts as NaN (or -7 for indices) so that
// reads of unset elements and missed writes show.
func newBuf[T Float](shape []int, batched bool, capN int, idx bool) *Buf[T] {
	n := prod(shape)
	if batched && capN > shape[0] {
		n = capN * prod(shape[1:])
	}
	b := &Buf[T]{Shape: clone(shape)}
	if idx {
		b.Idx = make([]int32, n)
		for i := range b.Idx {
			b.Idx[i] = -7
		}
	} else {
		b.Data = make([]T, n)
		fillNaN(b.Data)
	}
	return b
}

func fillNaN[T Float](s []T) {
	for i := range s {
		s[i] = T(math.NaN())
	}
}

func capShape(shape []int, batched bool, capN int) []int {
	s := clone(shape)
	if batched && capN > s[0] {
		s[0] = capN
	}
	return s
}

func newFixture[T Float](t testing.TB, gc *gradCase, k *[NumOps]Kernel[T]) *fixture[T] {
	t.Helper()
	outShapes, err := Infer(gc.op, &gc.attrs, gc.in)
	if err != nil {
		t.Fatalf("%s: Infer: %v", gc.name, err)
	}
	r := rand.New(rand.NewPCG(7, uint64(len(gc.name))))
	f := &fixture[T]{gc: gc, k: k, c: &Ctx[T]{LossScale: 1, Step: 1}}
	if gc.scale != 0 {
		f.c.LossScale = gc.scale
	}
	capN := max(gc.capN, gc.in[0][0])
	var capIn, capOut [][]int
	for i, s := range gc.in {
		if s == nil {
			f.in = append(f.in, nil)
			capIn = append(capIn, nil)
			continue
		}
		b := newBuf[T](s, batchedIn(gc.op, i), capN, idxIn(gc.op, i))
		if b.Idx != nil {
			classes := gc.in[0][1]
			for j := range b.Shape[0] {
				b.Idx[j] = int32(r.IntN(classes))
			}
		} else {
			fillInput(r, b.Data[:b.Len()], i == 0 && gc.distinct, i == 0 && gc.awayFromZero)
		}
		f.in = append(f.in, b)
		capIn = append(capIn, capShape(s, batchedIn(gc.op, i), capN))
	}
	for i, s := range outShapes {
		f.out = append(f.out, newBuf[T](s, batchedOut(gc.op, i), capN, idxOut(gc.op, i)))
		capOut = append(capOut, capShape(s, batchedOut(gc.op, i), capN))
	}
	f.dy = newBuf[T](outShapes[0], batchedOut(gc.op, 0), capN, false)
	fillInput(r, f.dy.Data[:f.dy.Len()], false, false)
	ws := Workspace(gc.op, &gc.attrs, capIn, capOut)
	for _, st := range gc.bwd {
		var args []*Buf[T]
		var argShapes [][]int
		for _, a := range st.args {
			var b *Buf[T]
			var s []int
			switch a.kind {
			case 'd':
				b, s = f.dy, capOut[0]
			case 'i':
				b, s = f.in[a.i], capIn[a.i]
			case 'o':
				b, s = f.out[a.i], capOut[a.i]
			}
			args = append(args, b)
			argShapes = append(argShapes, s)
		}
		o := newBuf[T](gc.in[st.wrt], batchedIn(gc.op, st.wrt), capN, false)
		f.bin = append(f.bin, args)
		f.bout = append(f.bout, o)
		ws = max(ws, Workspace(st.op, &gc.attrs, argShapes, [][]int{capIn[st.wrt]}))
	}
	f.work = make([]T, ws)
	f.c.Work = f.work
	return f
}

// fillInput fills s with values in (-1, 1); distinct ones spread at least
// 1e-3 apart, or ones at least 0.1 away from 0.
func fillInput[T Float](r *rand.Rand, s []T, distinct, awayFromZero bool) {
	if distinct {
		for i, p := range r.Perm(len(s)) {
			s[i] = T((float64(p) + 0.8*r.Float64()) / float64(len(s)))
		}
		return
	}
	for i := range s {
		v := 2*r.Float64() - 1
		if awayFromZero {
			v = math.Copysign(0.1+0.9*math.Abs(v), v)
		}
		s[i] = T(v)
	}
}

// forward runs the forward kernel, reseeding the RNG so that dropout draws
// the same mask every time.
func (f *fixture[T]) forward() {
	if f.gc.op.Info().Random {
		f.c.RNG = rand.New(rand.NewPCG(11, 13))
	}
	fillNaN(f.work)
	f.k[f.gc.op](f.c, &f.gc.attrs, f.in, f.out)
}

// backward runs backward step i with attrs a.
func (f *fixture[T]) backward(i int, a *Attrs) {
	fillNaN(f.work)
	f.k[f.gc.bwd[i].op](f.c, a, f.bin[i], []*Buf[T]{f.bout[i]})
}

// objective is Σ dy ⊙ out[0] over the live elements.
func (f *fixture[T]) objective() float64 {
	var s float64
	for i, v := range f.out[0].Data[:f.out[0].Len()] {
		s += float64(v) * float64(f.dy.Data[i])
	}
	return s
}

// checkWritten fails unless b's live elements are all set (not NaN, or not
// -7 for indices) and its tail is untouched.
func checkWritten[T Float](t *testing.T, what string, b *Buf[T]) {
	t.Helper()
	n := b.Len()
	if b.Idx != nil {
		for i, v := range b.Idx {
			if (i < n) == (v == -7) {
				t.Errorf("%s: index element %d = %d (live elements %d)", what, i, v, n)
				return
			}
		}
		return
	}
	for i, v := range b.Data {
		if (i < n) == (v != v) {
			t.Errorf("%s: element %d = %v (live elements %d)", what, i, v, n)
			return
		}
	}
}
