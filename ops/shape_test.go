package ops

import (
	"slices"
	"testing"
)

func TestInfer(t *testing.T) {
	for _, tc := range []struct {
		op   Op
		a    Attrs
		in   [][]int
		want [][]int
	}{
		{Conv2D, Attrs{}, [][]int{{64, 1, 28, 28}, {10, 1, 5, 5}, {10}}, [][]int{{64, 10, 24, 24}}},
		{Conv2D, Attrs{Stride: 1}, [][]int{{64, 10, 12, 12}, {20, 10, 5, 5}}, [][]int{{64, 20, 8, 8}}},
		{Conv2D, Attrs{Stride: 2, Padding: 1}, [][]int{{2, 3, 7, 8}, {4, 3, 3, 3}, nil}, [][]int{{2, 4, 4, 4}}},
		{Linear, Attrs{}, [][]int{{64, 320}, {50, 320}, {50}}, [][]int{{64, 50}}},
		{Linear, Attrs{}, [][]int{{8, 16, 32}, {96, 32}, {96}}, [][]int{{8, 16, 96}}},
		{Linear, Attrs{}, [][]int{{8, 4, 16, 32}, {10, 32}}, [][]int{{8, 4, 16, 10}}},
		{ReLU, Attrs{}, [][]int{{3, 4, 5}}, [][]int{{3, 4, 5}}},
		{MaxPool2D, Attrs{Kernel: 2}, [][]int{{64, 10, 24, 24}}, [][]int{{64, 10, 12, 12}, {64, 10, 12, 12}}},
		{MaxPool2D, Attrs{Kernel: 3, Stride: 2}, [][]int{{1, 1, 7, 8}}, [][]int{{1, 1, 3, 3}, {1, 1, 3, 3}}},
		{MaxPool2D, Attrs{Kernel: 2}, [][]int{{1, 1, 5, 5}}, [][]int{{1, 1, 2, 2}, {1, 1, 2, 2}}},
		{Dropout, Attrs{P: 0.5}, [][]int{{64, 50}}, [][]int{{64, 50}, {64, 50}}},
		{Dropout2D, Attrs{P: 0.5}, [][]int{{64, 20, 8, 8}}, [][]int{{64, 20, 8, 8}, {64, 20}}},
		{Flatten, Attrs{}, [][]int{{64, 20, 4, 4}}, [][]int{{64, 320}}},
		{LogSoftmax, Attrs{}, [][]int{{64, 10}}, [][]int{{64, 10}}},
		{Softmax, Attrs{}, [][]int{{64, 10}}, [][]int{{64, 10}}},
		{Softmax, Attrs{}, [][]int{{64, 4, 7, 10}}, [][]int{{64, 4, 7, 10}}},
		{Softmax, Attrs{Causal: true}, [][]int{{64, 4, 10, 10}}, [][]int{{64, 4, 10, 10}}},
		{LogSoftmax, Attrs{}, [][]int{{64, 7, 10}}, [][]int{{64, 7, 10}}},
		{BatchMatMul, Attrs{}, [][]int{{8, 4, 3, 5}, {8, 4, 5, 7}}, [][]int{{8, 4, 3, 7}}},
		{BatchMatMul, Attrs{TransB: true}, [][]int{{8, 3, 5}, {8, 7, 5}}, [][]int{{8, 3, 7}}},
		{BatchMatMul, Attrs{TransA: true}, [][]int{{8, 5, 3}, {8, 5, 7}}, [][]int{{8, 3, 7}}},
		{BatchMatMul, Attrs{TransA: true, TransB: true}, [][]int{{8, 5, 3}, {8, 7, 5}}, [][]int{{8, 3, 7}}},
		{Permute, Attrs{Perm: [6]int8{0, 2, 1, 3}}, [][]int{{8, 16, 4, 32}}, [][]int{{8, 4, 16, 32}}},
		{Permute, Attrs{Perm: [6]int8{0, 2, 1, 3, 5, 5}}, [][]int{{8, 16, 4, 32}}, [][]int{{8, 4, 16, 32}}},
		{Permute, Attrs{Perm: [6]int8{0, 5, 4, 3, 2, 1}}, [][]int{{1, 2, 3, 4, 5, 6}}, [][]int{{1, 6, 5, 4, 3, 2}}},
		{Permute, Attrs{}, [][]int{{8}}, [][]int{{8}}},
		{Narrow, Attrs{Offset: 32, Length: 32}, [][]int{{8, 96, 16}}, [][]int{{8, 32, 16}}},
		{Narrow, Attrs{Length: 3}, [][]int{{8, 3}}, [][]int{{8, 3}}},
		{Narrow, Attrs{Offset: 2, Length: 1}, [][]int{{8, 3, 2, 2}}, [][]int{{8, 1, 2, 2}}},
		{Positions, Attrs{}, [][]int{{8, 16}}, [][]int{{8, 16}}},
		{Positions, Attrs{}, [][]int{{8, 16, 32}}, [][]int{{8, 16}}},
		{NLLLoss, Attrs{}, [][]int{{64, 10}, {64}}, [][]int{{1}}},
		{CrossEntropy, Attrs{}, [][]int{{64, 10}, {64}}, [][]int{{1}, {64, 10}}},
		{CrossEntropy, Attrs{LabelSmoothing: 0.1}, [][]int{{64, 10}, {64}}, [][]int{{1}, {64, 10}}},
		{CrossEntropy, Attrs{HasIgnore: true, IgnoreIndex: -100}, [][]int{{8, 16, 10}, {8, 16}}, [][]int{{1}, {8, 16, 10}}},
		{NLLLoss, Attrs{}, [][]int{{8, 16, 10}, {8, 16}}, [][]int{{1}}},
		{Conv2D, Attrs{Groups: 2}, [][]int{{8, 4, 9, 9}, {6, 2, 3, 3}, {6}}, [][]int{{8, 6, 7, 7}}},
		{Conv2D, Attrs{Groups: 1}, [][]int{{8, 4, 9, 9}, {6, 4, 3, 3}}, [][]int{{8, 6, 7, 7}}},
		{Conv2D, Attrs{Groups: 4, Padding: 1}, [][]int{{8, 4, 9, 9}, {8, 1, 3, 3}, nil}, [][]int{{8, 8, 9, 9}}},
		{MSELoss, Attrs{}, [][]int{{64, 3, 2}, {64, 3, 2}}, [][]int{{1}}},
		{BatchNormStats, Attrs{}, [][]int{{64, 16, 8, 8}}, [][]int{{3, 16}}},
		{BatchNormStats, Attrs{}, [][]int{{64, 50}}, [][]int{{3, 50}}},
		{BatchNormNorm, Attrs{Eps: 1e-5}, [][]int{{64, 16, 8, 8}, {3, 16}, {16}, {16}}, [][]int{{64, 16, 8, 8}, {3, 16}}},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}, {3, 16}, nil, nil}, [][]int{{64, 16, 8, 8}, {3, 16}}},
		{BatchNormNorm, Attrs{}, [][]int{{64, 50}, {3, 50}}, [][]int{{64, 50}, {3, 50}}},
		{BatchNormEval, Attrs{}, [][]int{{64, 16, 8}, {16}, {16}, {16}, {16}}, [][]int{{64, 16, 8}}},
		{BatchNormEval, Attrs{}, [][]int{{64, 16, 8}, {16}, {16}}, [][]int{{64, 16, 8}}},
		{AvgPool2D, Attrs{Kernel: 2}, [][]int{{64, 10, 24, 24}}, [][]int{{64, 10, 12, 12}}},
		{AvgPool2D, Attrs{Kernel: 3, Stride: 2, Padding: 1}, [][]int{{1, 1, 7, 8}}, [][]int{{1, 1, 4, 4}}},
		{AvgPool2D, Attrs{Kernel: 2}, [][]int{{1, 1, 5, 5}}, [][]int{{1, 1, 2, 2}}},
		{GlobalAvgPool2D, Attrs{}, [][]int{{64, 10, 7, 5}}, [][]int{{64, 10, 1, 1}}},
		{Sigmoid, Attrs{}, [][]int{{3, 4, 5}}, [][]int{{3, 4, 5}}},
		{Tanh, Attrs{}, [][]int{{3, 4}}, [][]int{{3, 4}}},
		{LeakyReLU, Attrs{NegativeSlope: 0.01}, [][]int{{3, 4}}, [][]int{{3, 4}}},
		{Scale, Attrs{Alpha: 2}, [][]int{{3, 4}}, [][]int{{3, 4}}},
		{Add, Attrs{}, [][]int{{3, 4}, {3, 4}}, [][]int{{3, 4}}},
		{Sub, Attrs{}, [][]int{{3, 4}, {3, 4}}, [][]int{{3, 4}}},
		{Mul, Attrs{}, [][]int{{3, 4, 2}, {3, 4, 2}}, [][]int{{3, 4, 2}}},
		{Concat, Attrs{}, [][]int{{3, 4, 2}, {3, 1, 2}}, [][]int{{3, 5, 2}}},
		{Concat, Attrs{}, [][]int{{3, 4}, {3, 6}}, [][]int{{3, 10}}},
		{Embedding, Attrs{}, [][]int{{8, 16}, {100, 32}}, [][]int{{8, 16, 32}}},
		{Embedding, Attrs{}, [][]int{{8}, {100, 32}}, [][]int{{8, 32}}},
		{LayerNorm, Attrs{Eps: 1e-5}, [][]int{{8, 16, 32}, {32}, {32}}, [][]int{{8, 16, 32}, {8, 16, 2}}},
		{LayerNorm, Attrs{}, [][]int{{8, 32}}, [][]int{{8, 32}, {8, 2}}},
		{LayerNorm, Attrs{}, [][]int{{8, 32}, nil, {32}}, [][]int{{8, 32}, {8, 2}}},
	} {
		got, err := Infer(tc.op, &tc.a, tc.in)
		if err != nil {
			t.Errorf("%v %v: %v", tc.op, tc.in, err)
			continue
		}
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("%v %v: got %v, want %v", tc.op, tc.in, got, tc.want)
		}
	}
}

func TestInferDoesNotAliasInputs(t *testing.T) {
	in := []int{2, 3}
	out, err := Infer(ReLU, nil, [][]int{in})
	if err != nil {
		t.Fatal(err)
	}
	out[0][0] = 99
	if in[0] != 2 {
		t.Error("Infer's output shares memory with its input")
	}
}

func TestInferErrors(t *testing.T) {
	for _, tc := range []struct {
		op   Op
		a    Attrs
		in   [][]int
		want string
	}{
		{Linear, Attrs{}, [][]int{{64, 320}, {50, 300}, {50}},
			"linear: input has 320 features, weight expects 300 (input shape [64 320], weight shape [50 300])"},
		{Linear, Attrs{}, [][]int{{64}, {50, 320}},
			"linear: input must be [N ... features] with at least 2 dimensions, got [64]"},
		{Linear, Attrs{}, [][]int{{64, 4, 80}, {50, 320}},
			"linear: input has 80 features, weight expects 320 (input shape [64 4 80], weight shape [50 320])"},
		{Linear, Attrs{}, [][]int{{64, 4, 320}, {50, 4, 320}},
			"linear: weight must be [out in], got [50 4 320]"},
		{Linear, Attrs{}, [][]int{{64, 320}, {50, 320}, {10}},
			"linear: bias must be [50], one per output feature of weight [50 320], got [10]"},
		{Conv2D, Attrs{}, [][]int{{64, 3, 28, 28}, {10, 1, 5, 5}},
			"conv2d: input has 3 channels, weight expects 1 (input shape [64 3 28 28], weight shape [10 1 5 5])"},
		{Conv2D, Attrs{}, [][]int{{64, 28, 28}, {10, 1, 5, 5}},
			"conv2d: input must be [N C H W], got [64 28 28]"},
		{Conv2D, Attrs{}, [][]int{{64, 1, 28, 28}, {10, 5, 5}},
			"conv2d: weight must be [O C KH KW], got [10 5 5]"},
		{Conv2D, Attrs{}, [][]int{{64, 1, 28, 28}, {10, 1, 5, 5}, {20}},
			"conv2d: bias must be [10], one per output channel of weight [10 1 5 5], got [20]"},
		{Conv2D, Attrs{}, [][]int{{64, 1, 3, 3}, {10, 1, 5, 5}},
			"conv2d: kernel 5×5 does not fit input 3×3"},
		{Conv2D, Attrs{Padding: 1}, [][]int{{64, 1, 2, 2}, {10, 1, 5, 5}},
			"conv2d: kernel 5×5 does not fit input 2×2 with padding 1"},
		{Conv2D, Attrs{Stride: -1}, [][]int{{64, 1, 28, 28}, {10, 1, 5, 5}},
			"conv2d: stride must be at least 1, got -1"},
		{Conv2D, Attrs{Padding: -2}, [][]int{{64, 1, 28, 28}, {10, 1, 5, 5}},
			"conv2d: padding must not be negative, got -2"},
		{Conv2D, Attrs{}, [][]int{{64, 1, 28, 28}},
			"conv2d: got 1 inputs, want 2 or 3"},
		{Conv2D, Attrs{}, [][]int{{64, 1, 28, 28}, nil},
			"conv2d: weight is missing"},
		{Conv2D, Attrs{}, [][]int{{64, 0, 28, 28}, {10, 0, 5, 5}},
			"conv2d: input shape [64 0 28 28] has a dimension below 1"},
		{MaxPool2D, Attrs{Kernel: 2}, [][]int{{64, 20, 1, 1}},
			"maxpool2d: kernel 2 does not fit input 1×1"},
		{MaxPool2D, Attrs{}, [][]int{{64, 20, 8, 8}},
			"maxpool2d: kernel must be at least 1, got 0"},
		{MaxPool2D, Attrs{Kernel: 2}, [][]int{{64, 320}},
			"maxpool2d: input must be [N C H W], got [64 320]"},
		{Dropout, Attrs{P: 1.5}, [][]int{{64, 50}},
			"dropout: p must be in [0, 1], got 1.5"},
		{Dropout2D, Attrs{P: 0.5}, [][]int{{64, 50}},
			"dropout2d: input must be [N C H W], got [64 50]"},
		{Flatten, Attrs{}, [][]int{{64}},
			"flatten: input must be [N ...] with at least 2 dimensions, got [64]"},
		{LogSoftmax, Attrs{}, [][]int{{64}},
			"log_softmax: input must be [N ... C] with at least 2 dimensions, got [64]"},
		{LogSoftmax, Attrs{Causal: true}, [][]int{{64, 10, 10}},
			"log_softmax: causal masking is for softmax only"},
		{Softmax, Attrs{Causal: true}, [][]int{{64, 10, 9}},
			"softmax: causal masking needs scores [N ... T T], got [64 10 9]"},
		{Softmax, Attrs{Causal: true}, [][]int{{10, 10}},
			"softmax: causal masking needs scores [N ... T T], got [10 10]"},
		{NLLLoss, Attrs{}, [][]int{{64, 10, 3}, {64}},
			"nll_loss: target must be [64 10], the input's shape [64 10 3] without its last dimension, got [64]"},
		{NLLLoss, Attrs{}, [][]int{{64, 10}, {32}},
			"nll_loss: target must be [64], the input's shape [64 10] without its last dimension, got [32]"},
		{CrossEntropy, Attrs{}, [][]int{{64, 10}, {64, 1}},
			"cross_entropy: target must be [64], the input's shape [64 10] without its last dimension, got [64 1]"},
		{CrossEntropy, Attrs{}, [][]int{{64}, {64}},
			"cross_entropy: input must be [N ... C] with at least 2 dimensions, got [64]"},
		{ReLU, Attrs{}, [][]int{{1}, {1}},
			"relu: got 2 inputs, want 1"},
		{Conv2D, Attrs{Groups: 3}, [][]int{{8, 4, 9, 9}, {6, 2, 3, 3}},
			"conv2d: input channels 4 are not divisible by groups 3 (input shape [8 4 9 9])"},
		{Conv2D, Attrs{Groups: 2}, [][]int{{8, 4, 9, 9}, {5, 2, 3, 3}},
			"conv2d: output channels 5 are not divisible by groups 2 (weight shape [5 2 3 3])"},
		{Conv2D, Attrs{Groups: 2}, [][]int{{8, 4, 9, 9}, {6, 4, 3, 3}},
			"conv2d: input has 4 channels, weight expects 4 per group × 2 groups = 8 (input shape [8 4 9 9], weight shape [6 4 3 3])"},
		{Conv2D, Attrs{Groups: -1}, [][]int{{8, 4, 9, 9}, {6, 4, 3, 3}},
			"conv2d: groups must be at least 1, got -1"},
		{CrossEntropy, Attrs{LabelSmoothing: 1.5}, [][]int{{64, 10}, {64}},
			"cross_entropy: label_smoothing must be in [0, 1], got 1.5"},
		{MSELoss, Attrs{}, [][]int{{64, 10}, {64}},
			"mse_loss: target shape [64] differs from input shape [64 10]"},
		{BatchNormStats, Attrs{}, [][]int{{64}},
			"batch_norm_stats: input must be [N C ...], got [64]"},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}, {2, 16}},
			"batch_norm_norm: stats must be [3 16], one per channel of input [64 16 8 8], got [2 16]"},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}, {3, 16}, {8}, {16}},
			"batch_norm_norm: weight must be [16], one per channel of input [64 16 8 8], got [8]"},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}, nil, {16}, {16}},
			"batch_norm_norm: stats is missing"},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}},
			"batch_norm_norm: got 1 inputs, want 2 to 5"},
		{BatchNormNorm, Attrs{}, [][]int{{64, 16, 8, 8}, {3, 16}, {16}, {16}, {64, 16, 8, 7}},
			"batch_norm_norm: residual must have the input's shape [64 16 8 8], got [64 16 8 7]"},
		{BatchNormEval, Attrs{}, [][]int{{64, 16}, {16}, {16}, nil, nil, {64}},
			"batch_norm_eval: residual must have the input's shape [64 16], got [64]"},
		{BatchNormNorm, Attrs{Eps: -1}, [][]int{{64, 16}, {3, 16}},
			"batch_norm_norm: eps must not be negative, got -1"},
		{BatchNormEval, Attrs{}, [][]int{{64, 16}, {16}, {15}},
			"batch_norm_eval: running_var must be [16], one per channel of input [64 16], got [15]"},
		{BatchNormEval, Attrs{}, [][]int{{64, 16}, {16}, {16}, {16}, {4}},
			"batch_norm_eval: bias must be [16], one per channel of input [64 16], got [4]"},
		{AvgPool2D, Attrs{Kernel: 3, Padding: 2}, [][]int{{64, 20, 8, 8}},
			"avgpool2d: padding must be between 0 and half the kernel (1), got 2"},
		{AvgPool2D, Attrs{Kernel: 3}, [][]int{{64, 20, 2, 8}},
			"avgpool2d: kernel 3 does not fit input 2×8"},
		{AvgPool2D, Attrs{Kernel: 5, Padding: 1}, [][]int{{64, 20, 2, 8}},
			"avgpool2d: kernel 5 does not fit input 2×8 with padding 1"},
		{AvgPool2D, Attrs{}, [][]int{{64, 20, 2, 8}},
			"avgpool2d: kernel must be at least 1, got 0"},
		{GlobalAvgPool2D, Attrs{}, [][]int{{64, 20}},
			"global_avgpool2d: input must be [N C H W], got [64 20]"},
		{Sub, Attrs{}, [][]int{{64, 20}, {64, 21}},
			"sub: shapes [64 20] and [64 21] differ"},
		{Concat, Attrs{}, [][]int{{64}, {64, 3}},
			"concat: inputs must be [N C ...] with at least 2 dimensions, got [64] and [64 3]"},
		{Concat, Attrs{}, [][]int{{64, 2, 3}, {64, 2, 4}},
			"concat: shapes [64 2 3] and [64 2 4] differ outside dimension 1"},
		{Concat, Attrs{}, [][]int{{64, 2}, {32, 2}},
			"concat: shapes [64 2] and [32 2] differ outside dimension 1"},
		{Embedding, Attrs{}, [][]int{{64, 3}, {100}},
			"embedding: weight must be [V D], got [100]"},
		{Embedding, Attrs{}, [][]int{{64, 3}},
			"embedding: got 1 inputs, want 2"},
		{LayerNorm, Attrs{}, [][]int{{8}},
			"layer_norm: input must be [N ... D] with at least 2 dimensions, got [8]"},
		{LayerNorm, Attrs{Eps: -1}, [][]int{{8, 4}},
			"layer_norm: eps must not be negative, got -1"},
		{LayerNorm, Attrs{}, [][]int{{8, 4, 6}, {4}},
			"layer_norm: weight must be [6], the last dimension of input [8 4 6], got [4]"},
		{LayerNorm, Attrs{}, [][]int{{8, 6}, {6}, {6, 1}},
			"layer_norm: bias must be [6], the last dimension of input [8 6], got [6 1]"},
		{BatchMatMul, Attrs{}, [][]int{{3, 5}, {5, 7}},
			"batch_matmul: inputs must be [B ... M K] and [B ... K N] with the same rank, at least 3, got [3 5] and [5 7]"},
		{BatchMatMul, Attrs{}, [][]int{{8, 3, 5}, {8, 2, 5, 7}},
			"batch_matmul: inputs must be [B ... M K] and [B ... K N] with the same rank, at least 3, got [8 3 5] and [8 2 5 7]"},
		{BatchMatMul, Attrs{}, [][]int{{8, 2, 3, 5}, {8, 3, 5, 7}},
			"batch_matmul: leading dimensions differ: [8 2 3 5] and [8 3 5 7] (no broadcasting)"},
		{BatchMatMul, Attrs{TransB: true}, [][]int{{8, 3, 5}, {8, 5, 7}},
			"batch_matmul: a [8 3 5] (trans_a false) has inner dimension 5, b [8 5 7] (trans_b true) has 7"},
		{Permute, Attrs{}, [][]int{{8, 3}},
			"permute: perm [0 0] is not a permutation of the 2 dimensions of input [8 3]"},
		{Permute, Attrs{Perm: [6]int8{0, 1, 3}}, [][]int{{8, 3, 2}},
			"permute: perm [0 1 3] is not a permutation of the 3 dimensions of input [8 3 2]"},
		{Permute, Attrs{Perm: [6]int8{1, 0, 2}}, [][]int{{8, 3, 2}},
			"permute: perm [1 0 2] moves the batch dimension; it must stay first"},
		{Permute, Attrs{Perm: [6]int8{0, 1, 2, 3, 4, 5}}, [][]int{{1, 1, 1, 1, 1, 1, 1}},
			"permute: input has 7 dimensions, at most 6 are supported: [1 1 1 1 1 1 1]"},
		{Narrow, Attrs{Length: 1}, [][]int{{8}},
			"narrow: input must be [N S ...] with at least 2 dimensions, got [8]"},
		{Narrow, Attrs{Offset: -1, Length: 1}, [][]int{{8, 3}},
			"narrow: offset must not be negative, got -1"},
		{Narrow, Attrs{Offset: 1}, [][]int{{8, 3}},
			"narrow: length must be at least 1, got 0"},
		{Narrow, Attrs{Offset: 2, Length: 2}, [][]int{{8, 3, 5}},
			"narrow: offset 2 + length 2 exceeds dimension 1 of input [8 3 5] (3)"},
		{Positions, Attrs{}, [][]int{{8}},
			"positions: input must be [N T ...] with at least 2 dimensions, got [8]"},
		{Positions, Attrs{}, [][]int{{8, 4}, {8, 4}},
			"positions: got 2 inputs, want 1"},
		{NarrowGrad, Attrs{}, [][]int{{1, 1}},
			"narrow_grad: not a forward op, it has no shape rule"},
		{ReLUGrad, Attrs{}, [][]int{{1}, {1}},
			"relu_grad: not a forward op, it has no shape rule"},
	} {
		_, err := Infer(tc.op, &tc.a, tc.in)
		if err == nil {
			t.Errorf("%v %v: no error, want %q", tc.op, tc.in, tc.want)
		} else if err.Error() != tc.want {
			t.Errorf("%v %v:\n got %q\nwant %q", tc.op, tc.in, err, tc.want)
		}
	}
}

func TestWorkspace(t *testing.T) {
	x, w, y := []int{64, 1, 28, 28}, []int{10, 1, 5, 5}, []int{64, 10, 24, 24}
	want := (25 + 10) * 64 * 24 * 24
	for _, tc := range []struct {
		op      Op
		in, out [][]int
	}{
		{Conv2D, [][]int{x, w, {10}}, [][]int{y}},
		{Conv2DGradInput, [][]int{y, w}, [][]int{x}},
		{Conv2DGradWeight, [][]int{y, x}, [][]int{w}},
	} {
		if got := Workspace(tc.op, &Attrs{}, tc.in, tc.out); got != want {
			t.Errorf("Workspace(%v) = %d, want %d", tc.op, got, want)
		}
	}
	// Grouped: col holds one group's channels.
	xg, wg, yg := []int{8, 6, 9, 9}, []int{4, 2, 3, 3}, []int{8, 4, 7, 7}
	wantG := (2*9 + 4) * 8 * 7 * 7
	a := &Attrs{Groups: 3}
	if got := Workspace(Conv2D, a, [][]int{xg, wg, nil}, [][]int{yg}); got != wantG {
		t.Errorf("Workspace(grouped conv2d) = %d, want %d", got, wantG)
	}
	if got := Workspace(Conv2DGradInput, a, [][]int{yg, wg}, [][]int{xg}); got != wantG {
		t.Errorf("Workspace(grouped conv2d_grad_input) = %d, want %d", got, wantG)
	}
	if got := Workspace(Conv2DGradWeight, a, [][]int{yg, xg}, [][]int{wg}); got != wantG {
		t.Errorf("Workspace(grouped conv2d_grad_weight) = %d, want %d", got, wantG)
	}
	if got := Workspace(Linear, &Attrs{}, [][]int{{64, 320}, {50, 320}}, [][]int{{64, 50}}); got != 0 {
		t.Errorf("Workspace(linear) = %d, want 0", got)
	}
}

func TestOptionalInputs(t *testing.T) {
	for _, tc := range []struct {
		op    Op
		omit  []int
		minIn int
	}{
		{Conv2D, []int{2}, 2},
		{Linear, []int{2}, 2},
		{ReLU, nil, 1},
		{BatchNormNorm, []int{2, 3, 4}, 2},
		{BatchNormEval, []int{3, 4, 5}, 3},
		{BatchNormGradInput, []int{4}, 4},
		{LayerNorm, []int{1, 2}, 1},
		{LayerNormGradInput, []int{3}, 3},
		{SGDStep, nil, 3},
		{Conv2DPoolGrad, []int{2}, 4},
	} {
		d := Lookup(tc.op)
		for i := -1; i <= len(d.In); i++ {
			if got, want := d.mayOmit(i), slices.Contains(tc.omit, i); got != want {
				t.Errorf("%v: mayOmit(%d) = %v, want %v", tc.op, i, got, want)
			}
		}
		if got := d.MinIn(); got != tc.minIn {
			t.Errorf("%v: MinIn() = %d, want %d", tc.op, got, tc.minIn)
		}
	}
}
