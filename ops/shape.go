package ops

import (
	"fmt"
	"slices"
)

// Infer returns the output shapes of forward op for input shapes in, or an
// error that says what was expected and what came. in holds one shape per
// input, in the order of the op's doc comment; an absent optional bias is nil
// (or left off the end). The result includes every output: MaxPool2D's index,
// the dropout masks, CrossEntropy's probabilities. Loss outputs are [1].
//
// a may be nil for ops without attributes. Zero-valued strides take
// PyTorch's defaults: 1 for Conv2D, Kernel for MaxPool2D.
func Infer(op Op, a *Attrs, in [][]int) ([][]int, error) {
	info := op.Info()
	if !info.Forward {
		return nil, fmt.Errorf("%v: not a forward op, it has no shape rule", op)
	}
	if a == nil {
		a = &Attrs{}
	}
	if minIn := info.MinIn(); len(in) < minIn || len(in) > info.NumIn {
		switch minIn {
		case info.NumIn:
			return nil, fmt.Errorf("%v: got %d inputs, want %d", op, len(in), info.NumIn)
		case info.NumIn - 1:
			return nil, fmt.Errorf("%v: got %d inputs, want %d or %d", op, len(in), minIn, info.NumIn)
		}
		return nil, fmt.Errorf("%v: got %d inputs, want %d to %d", op, len(in), minIn, info.NumIn)
	}
	for i, s := range in {
		if s == nil {
			if info.MayOmit(i) {
				continue
			}
			return nil, fmt.Errorf("%v: %s is missing", op, inputName(op, i))
		}
		if len(s) == 0 {
			return nil, fmt.Errorf("%v: %s has no dimensions", op, inputName(op, i))
		}
		for _, d := range s {
			if d < 1 {
				return nil, fmt.Errorf("%v: %s shape %v has a dimension below 1", op, inputName(op, i), s)
			}
		}
	}
	switch op {
	case Conv2D:
		return inferConv2D(a, in)
	case Conv2DPool:
		conv, err := inferConv2D(a, in)
		if err != nil {
			return nil, err
		}
		return inferMaxPool2D(&Attrs{Kernel: 2, Stride: 2}, conv[0])
	case Linear:
		return inferLinear(in)
	case ReLU:
		return [][]int{clone(in[0])}, nil
	case MaxPool2D:
		return inferMaxPool2D(a, in[0])
	case Dropout:
		if err := checkP(op, a.P); err != nil {
			return nil, err
		}
		return [][]int{clone(in[0]), clone(in[0])}, nil
	case Dropout2D:
		if err := checkP(op, a.P); err != nil {
			return nil, err
		}
		x := in[0]
		if len(x) != 4 {
			return nil, fmt.Errorf("dropout2d: input must be [N C H W], got %v", x)
		}
		return [][]int{clone(x), {x[0], x[1]}}, nil
	case Flatten:
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("flatten: input must be [N ...] with at least 2 dimensions, got %v", x)
		}
		return [][]int{{x[0], prod(x[1:])}}, nil
	case LogSoftmax, Softmax:
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("%v: input must be [N ... C] with at least 2 dimensions, got %v", op, x)
		}
		if a.Causal {
			if op != Softmax {
				return nil, fmt.Errorf("%v: causal masking is for softmax only", op)
			}
			if r := len(x); r < 3 || x[r-1] != x[r-2] {
				return nil, fmt.Errorf("softmax: causal masking needs scores [N ... T T], got %v", x)
			}
		}
		return [][]int{clone(x)}, nil
	case NLLLoss, CrossEntropy:
		if op == CrossEntropy && !(a.LabelSmoothing >= 0 && a.LabelSmoothing <= 1) {
			return nil, fmt.Errorf("cross_entropy: label_smoothing must be in [0, 1], got %v", a.LabelSmoothing)
		}
		x, t := in[0], in[1]
		if len(x) < 2 {
			return nil, fmt.Errorf("%v: input must be [N ... C] with at least 2 dimensions, got %v", op, x)
		}
		if want := x[:len(x)-1]; !slices.Equal(t, want) {
			return nil, fmt.Errorf("%v: target must be %v, the input's shape %v without its last dimension, got %v", op, want, x, t)
		}
		if op == NLLLoss {
			return [][]int{{1}}, nil
		}
		return [][]int{{1}, clone(x)}, nil
	case MSELoss:
		p, t := in[0], in[1]
		if !slices.Equal(p, t) {
			return nil, fmt.Errorf("mse_loss: target shape %v differs from input shape %v", t, p)
		}
		return [][]int{{1}}, nil
	case BatchNormStats, BatchNormNorm, BatchNormEval:
		return inferBatchNorm(op, a, in)
	case AvgPool2D:
		return inferAvgPool2D(a, in[0])
	case GlobalAvgPool2D:
		x := in[0]
		if len(x) != 4 {
			return nil, fmt.Errorf("global_avgpool2d: input must be [N C H W], got %v", x)
		}
		return [][]int{{x[0], x[1], 1, 1}}, nil
	case Sigmoid, Tanh, LeakyReLU, Scale, GELU:
		return [][]int{clone(in[0])}, nil
	case Add, Sub, Mul:
		if !slices.Equal(in[0], in[1]) {
			return nil, fmt.Errorf("%v: shapes %v and %v differ", op, in[0], in[1])
		}
		return [][]int{clone(in[0])}, nil
	case Concat:
		x, y := in[0], in[1]
		if len(x) < 2 || len(y) < 2 {
			return nil, fmt.Errorf("concat: inputs must be [N C ...] with at least 2 dimensions, got %v and %v", x, y)
		}
		if len(x) != len(y) || x[0] != y[0] || !slices.Equal(x[2:], y[2:]) {
			return nil, fmt.Errorf("concat: shapes %v and %v differ outside dimension 1", x, y)
		}
		z := clone(x)
		z[1] += y[1]
		return [][]int{z}, nil
	case Embedding:
		ids, w := in[0], in[1]
		if len(w) != 2 {
			return nil, fmt.Errorf("embedding: weight must be [V D], got %v", w)
		}
		return [][]int{append(clone(ids), w[1])}, nil
	case LayerNorm:
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("layer_norm: input must be [N ... D] with at least 2 dimensions, got %v", x)
		}
		if !(a.Eps >= 0) {
			return nil, fmt.Errorf("layer_norm: eps must not be negative, got %v", a.Eps)
		}
		d := x[len(x)-1]
		for i := 1; i < len(in); i++ {
			if s := in[i]; s != nil && !slices.Equal(s, []int{d}) {
				return nil, fmt.Errorf("layer_norm: %s must be [%d], the last dimension of input %v, got %v", inputName(op, i), d, x, s)
			}
		}
		save := clone(x)
		save[len(save)-1] = 2
		return [][]int{clone(x), save}, nil
	case BatchMatMul:
		return inferBatchMatMul(a, in[0], in[1])
	case Narrow:
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("narrow: input must be [N S ...] with at least 2 dimensions, got %v", x)
		}
		if a.Offset < 0 {
			return nil, fmt.Errorf("narrow: offset must not be negative, got %d", a.Offset)
		}
		if a.Length < 1 {
			return nil, fmt.Errorf("narrow: length must be at least 1, got %d", a.Length)
		}
		if a.Offset+a.Length > x[1] {
			return nil, fmt.Errorf("narrow: offset %d + length %d exceeds dimension 1 of input %v (%d)", a.Offset, a.Length, x, x[1])
		}
		y := clone(x)
		y[1] = a.Length
		return [][]int{y}, nil
	case Positions:
		x := in[0]
		if len(x) < 2 {
			return nil, fmt.Errorf("positions: input must be [N T ...] with at least 2 dimensions, got %v", x)
		}
		return [][]int{{x[0], x[1]}}, nil
	case Permute:
		x := in[0]
		r := len(x)
		if r > MaxPermRank {
			return nil, fmt.Errorf("permute: input has %d dimensions, at most %d are supported: %v", r, MaxPermRank, x)
		}
		perm := a.Perm[:r]
		var seen [MaxPermRank]bool
		for _, p := range perm {
			if p < 0 || int(p) >= r || seen[p] {
				return nil, fmt.Errorf("permute: perm %v is not a permutation of the %d dimensions of input %v", perm, r, x)
			}
			seen[p] = true
		}
		if perm[0] != 0 {
			return nil, fmt.Errorf("permute: perm %v moves the batch dimension; it must stay first", perm)
		}
		y := make([]int, r)
		for i, p := range perm {
			y[i] = x[p]
		}
		return [][]int{y}, nil
	}
	return nil, fmt.Errorf("%v: no shape rule", op)
}

// inferBatchNorm: x is [N C ...]; the per-channel inputs are [C] and the
// statistics [3 C].
func inferBatchNorm(op Op, a *Attrs, in [][]int) ([][]int, error) {
	x := in[0]
	if len(x) < 2 {
		return nil, fmt.Errorf("%v: input must be [N C ...], got %v", op, x)
	}
	ch := x[1]
	if op == BatchNormStats {
		return [][]int{{3, ch}}, nil
	}
	if !(a.Eps >= 0) {
		return nil, fmt.Errorf("%v: eps must not be negative, got %v", op, a.Eps)
	}
	for i, s := range in[1:] {
		i++
		want := []int{ch}
		switch {
		case op == BatchNormNorm && i == 1:
			want = []int{3, ch}
		case op == BatchNormNorm && i == 4, op == BatchNormEval && i == 5:
			if s != nil && !slices.Equal(s, x) {
				return nil, fmt.Errorf("%v: residual must have the input's shape %v, got %v", op, x, s)
			}
			continue
		}
		if s != nil && !slices.Equal(s, want) {
			return nil, fmt.Errorf("%v: %s must be %v, one per channel of input %v, got %v", op, inputName(op, i), want, x, s)
		}
	}
	if op == BatchNormNorm {
		return [][]int{clone(x), {3, ch}}, nil
	}
	return [][]int{clone(x)}, nil
}

// inferBatchMatMul: a is [B... M K] ([B... K M] with TransA), b [B... K N]
// ([B... N K] with TransB).
func inferBatchMatMul(a *Attrs, x, y []int) ([][]int, error) {
	r := len(x)
	if r < 3 || len(y) != r {
		return nil, fmt.Errorf("batch_matmul: inputs must be [B ... M K] and [B ... K N] with the same rank, at least 3, got %v and %v", x, y)
	}
	if !slices.Equal(x[:r-2], y[:r-2]) {
		return nil, fmt.Errorf("batch_matmul: leading dimensions differ: %v and %v (no broadcasting)", x, y)
	}
	m, k := x[r-2], x[r-1]
	if a.TransA {
		m, k = k, m
	}
	kb, n := y[r-2], y[r-1]
	if a.TransB {
		kb, n = n, kb
	}
	if k != kb {
		return nil, fmt.Errorf("batch_matmul: a %v (trans_a %v) has inner dimension %d, b %v (trans_b %v) has %d", x, a.TransA, k, y, a.TransB, kb)
	}
	z := clone(x)
	z[r-2], z[r-1] = m, n
	return [][]int{z}, nil
}

func inferAvgPool2D(a *Attrs, x []int) ([][]int, error) {
	if len(x) != 4 {
		return nil, fmt.Errorf("avgpool2d: input must be [N C H W], got %v", x)
	}
	k, s, p := a.Kernel, poolStride(a), a.Padding
	if k < 1 {
		return nil, fmt.Errorf("avgpool2d: kernel must be at least 1, got %d", k)
	}
	if s < 1 {
		return nil, fmt.Errorf("avgpool2d: stride must be at least 1, got %d", s)
	}
	if p < 0 || 2*p > k {
		return nil, fmt.Errorf("avgpool2d: padding must be between 0 and half the kernel (%d), got %d", k/2, p)
	}
	if x[2]+2*p < k || x[3]+2*p < k {
		msg := fmt.Sprintf("avgpool2d: kernel %d does not fit input %d×%d", k, x[2], x[3])
		if p > 0 {
			msg += fmt.Sprintf(" with padding %d", p)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return [][]int{{x[0], x[1], (x[2]+2*p-k)/s + 1, (x[3]+2*p-k)/s + 1}}, nil
}

func inferConv2D(a *Attrs, in [][]int) ([][]int, error) {
	x, w := in[0], in[1]
	if len(x) != 4 {
		return nil, fmt.Errorf("conv2d: input must be [N C H W], got %v", x)
	}
	if len(w) != 4 {
		return nil, fmt.Errorf("conv2d: weight must be [O C KH KW], got %v", w)
	}
	if g := a.Groups; g < 0 {
		return nil, fmt.Errorf("conv2d: groups must be at least 1, got %d", g)
	}
	if g := convGroups(a); g == 1 {
		if x[1] != w[1] {
			return nil, fmt.Errorf("conv2d: input has %d channels, weight expects %d (input shape %v, weight shape %v)", x[1], w[1], x, w)
		}
	} else {
		if x[1]%g != 0 {
			return nil, fmt.Errorf("conv2d: input channels %d are not divisible by groups %d (input shape %v)", x[1], g, x)
		}
		if w[0]%g != 0 {
			return nil, fmt.Errorf("conv2d: output channels %d are not divisible by groups %d (weight shape %v)", w[0], g, w)
		}
		if x[1] != w[1]*g {
			return nil, fmt.Errorf("conv2d: input has %d channels, weight expects %d per group × %d groups = %d (input shape %v, weight shape %v)", x[1], w[1], g, w[1]*g, x, w)
		}
	}
	if b := optShape(in, 2); b != nil && (len(b) != 1 || b[0] != w[0]) {
		return nil, fmt.Errorf("conv2d: bias must be [%d], one per output channel of weight %v, got %v", w[0], w, b)
	}
	s, p := convStride(a), a.Padding
	if s < 1 {
		return nil, fmt.Errorf("conv2d: stride must be at least 1, got %d", s)
	}
	if p < 0 {
		return nil, fmt.Errorf("conv2d: padding must not be negative, got %d", p)
	}
	if x[2]+2*p < w[2] || x[3]+2*p < w[3] {
		msg := fmt.Sprintf("conv2d: kernel %d×%d does not fit input %d×%d", w[2], w[3], x[2], x[3])
		if p > 0 {
			msg += fmt.Sprintf(" with padding %d", p)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	oh := (x[2]+2*p-w[2])/s + 1
	ow := (x[3]+2*p-w[3])/s + 1
	return [][]int{{x[0], w[0], oh, ow}}, nil
}

// inferLinear: x is [N ... I] (any rank from 2), w [O I], the bias [O]; y
// is x's shape with its last dimension O.
func inferLinear(in [][]int) ([][]int, error) {
	x, w := in[0], in[1]
	if len(x) < 2 {
		return nil, fmt.Errorf("linear: input must be [N ... features] with at least 2 dimensions, got %v", x)
	}
	if len(w) != 2 {
		return nil, fmt.Errorf("linear: weight must be [out in], got %v", w)
	}
	if f := x[len(x)-1]; f != w[1] {
		return nil, fmt.Errorf("linear: input has %d features, weight expects %d (input shape %v, weight shape %v)", f, w[1], x, w)
	}
	if b := optShape(in, 2); b != nil && (len(b) != 1 || b[0] != w[0]) {
		return nil, fmt.Errorf("linear: bias must be [%d], one per output feature of weight %v, got %v", w[0], w, b)
	}
	y := clone(x)
	y[len(y)-1] = w[0]
	return [][]int{y}, nil
}

func inferMaxPool2D(a *Attrs, x []int) ([][]int, error) {
	if len(x) != 4 {
		return nil, fmt.Errorf("maxpool2d: input must be [N C H W], got %v", x)
	}
	k, s := a.Kernel, poolStride(a)
	if k < 1 {
		return nil, fmt.Errorf("maxpool2d: kernel must be at least 1, got %d", k)
	}
	if s < 1 {
		return nil, fmt.Errorf("maxpool2d: stride must be at least 1, got %d", s)
	}
	if x[2] < k || x[3] < k {
		return nil, fmt.Errorf("maxpool2d: kernel %d does not fit input %d×%d", k, x[2], x[3])
	}
	y := []int{x[0], x[1], (x[2]-k)/s + 1, (x[3]-k)/s + 1}
	return [][]int{y, clone(y)}, nil
}

func checkP(op Op, p float64) error {
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%v: p must be in [0, 1], got %v", op, p)
	}
	return nil
}

// inputName names input i of op in error messages.
func inputName(op Op, i int) string {
	switch op {
	case Conv2D, Linear, Conv2DPool:
		return [...]string{"input", "weight", "bias"}[i]
	case NLLLoss, CrossEntropy, MSELoss:
		return [...]string{"input", "target"}[i]
	case BatchNormNorm:
		return [...]string{"input", "stats", "weight", "bias", "residual"}[i]
	case BatchNormEval:
		return [...]string{"input", "running_mean", "running_var", "weight", "bias", "residual"}[i]
	case Embedding:
		return [...]string{"ids", "weight"}[i]
	case LayerNorm:
		return [...]string{"input", "weight", "bias"}[i]
	case Concat:
		return [...]string{"input", "other"}[i]
	}
	return "input"
}

// Workspace returns how many elements of scratch (Ctx.Work) op's kernel
// needs for input shapes in and output shapes out, given at the planned
// maximum batch; a kernel run on a smaller live batch needs no more. Most
// ops need none.
//
// Conv2D, Conv2DGradInput and Conv2DGradWeight lower the whole batch into
// one matrix multiply (one per group) and need (C/G·KH·KW + O)·N·OH·OW
// elements, G the groups. Conv2DPool needs one chunk's convolution output
// and that chunk's lowering (convPoolWork); Conv2DPoolGrad a chunk's
// gradients (convPoolGradWork). CrossEntropy in float32 keeps two elements per
// row of its logits (the row's maximum and its sum of exponentials).
func Workspace(op Op, a *Attrs, in, out [][]int) int {
	switch op {
	case Conv2D: // in x, w; out y
		x, w, y := in[0], in[1], out[0]
		return convWork(w[1]*w[2]*w[3], w[0], x[0]*y[2]*y[3])
	case Conv2DPool: // in x, w: a chunk's convolution output, and its scratch
		return convPoolWork(in[0], in[1], a)
	case Conv2DPoolGrad: // in dy, idx, y, x; out dw
		return convPoolGradWork(in[3], out[0], a)
	case Conv2DGradInput: // in dy, w
		dy, w := in[0], in[1]
		return convWork(w[1]*w[2]*w[3], w[0], dy[0]*dy[2]*dy[3])
	case Conv2DGradWeight: // in dy, x; out dw
		dy, dw := in[0], out[0]
		return convWork(dw[1]*dw[2]*dw[3], dw[0], dy[0]*dy[2]*dy[3])
	case CrossEntropy: // in logits[N,...,C]: two per row
		x := in[0]
		if len(x) == 0 || x[len(x)-1] == 0 {
			return 0
		}
		return 2 * prod(x) / x[len(x)-1]
	}
	return 0
}

// convStride is Conv2D's stride; 0 means PyTorch's default, 1.
func convStride(a *Attrs) int {
	if a.Stride == 0 {
		return 1
	}
	return a.Stride
}

// convGroups is Conv2D's number of groups; 0 means 1.
func convGroups(a *Attrs) int { return max(a.Groups, 1) }

// poolStride is MaxPool2D's and AvgPool2D's stride; 0 means PyTorch's
// default, the kernel.
func poolStride(a *Attrs) int {
	if a.Stride == 0 {
		return a.Kernel
	}
	return a.Stride
}

func optShape(in [][]int, i int) []int {
	if i < len(in) {
		return in[i]
	}
	return nil
}

func clone(s []int) []int { return append([]int(nil), s...) }

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
