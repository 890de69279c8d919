//go:build cgo

package hostcheck

/*
#cgo CXXFLAGS: -std=c++17 -O2 -I${SRCDIR}/..
#cgo LDFLAGS: -lstdc++ -lm -lpthread
#include "hostcheck.h"
*/
import "C"

import "unsafe"

// Geom is a launch geometry: Grid blocks of Block threads, one-dimensional.
type Geom struct{ Grid, Block int }

// Elementwise returns kernels.h's ELEMENTWISE(n) geometry: blocks of 256
// threads, ceil(n/256) of them (at least one).
func Elementwise(n int) Geom { return Geom{max(1, (n+255)/256), 256} }

// OneBlock is kernels.h's ONE_BLOCK geometry: one block of 256 threads.
var OneBlock = Geom{1, 256}

// BlockPer returns kernels.h's BLOCK_PER(m) geometry: m blocks of 256
// threads.
func BlockPer(m int) Geom { return Geom{max(1, m), 256} }

func fp(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func dp(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&s[0]))
}

func ip(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(&s[0]))
}

func ci(v int) C.int { return C.int(v) }

func cb(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// ReLU launches gorun_relu.
func ReLU(g Geom, x, y []float32, n int) {
	C.hc_relu(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(n))
}

// ReLUGrad launches gorun_relu_grad.
func ReLUGrad(g Geom, dy, y, dx []float32, n int) { ReLUGradAdd(g, dy, nil, y, dx, n) }

// ReLUGradAdd launches gorun_relu_grad with a second gradient (nil: none).
func ReLUGradAdd(g Geom, dy, dy2, y, dx []float32, n int) {
	C.hc_relu_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(dy2), fp(y), fp(dx), ci(n))
}

// The op codes of gorun_unary and gorun_binary and the modes of the batch
// and layer norm kernels: kernels.h's GORUN_UNARY_*, GORUN_BINARY_*,
// GORUN_BN_* and GORUN_LN_* (kernels.h is C++, which cgo cannot read;
// Codes maps the macros' names to these values, and a test checks them
// against the header).
const (
	UnarySigmoid   = 0
	UnaryTanh      = 1
	UnaryLeakyReLU = 2
	UnaryScale     = 3
	UnaryGELU      = 4
	UnaryGELUTanh  = 5

	BinaryAdd           = 0
	BinarySub           = 1
	BinaryMul           = 2
	BinarySigmoidGrad   = 3
	BinaryTanhGrad      = 4
	BinaryLeakyReLUGrad = 5
	BinaryGELUGrad      = 6
	BinaryGELUTanhGrad  = 7

	BNSums     = 0
	BNGradSums = 1
	BNNorm     = 0
	BNEval     = 1
	BNGrad     = 2

	LNGammaSums = 2
)

// Codes maps kernels.h's op-code and mode macros to the constants above.
var Codes = map[string]int{
	"GORUN_UNARY_SIGMOID":          UnarySigmoid,
	"GORUN_UNARY_TANH":             UnaryTanh,
	"GORUN_UNARY_LEAKY_RELU":       UnaryLeakyReLU,
	"GORUN_UNARY_SCALE":            UnaryScale,
	"GORUN_UNARY_GELU":             UnaryGELU,
	"GORUN_UNARY_GELU_TANH":        UnaryGELUTanh,
	"GORUN_BINARY_ADD":             BinaryAdd,
	"GORUN_BINARY_SUB":             BinarySub,
	"GORUN_BINARY_MUL":             BinaryMul,
	"GORUN_BINARY_SIGMOID_GRAD":    BinarySigmoidGrad,
	"GORUN_BINARY_TANH_GRAD":       BinaryTanhGrad,
	"GORUN_BINARY_LEAKY_RELU_GRAD": BinaryLeakyReLUGrad,
	"GORUN_BINARY_GELU_GRAD":       BinaryGELUGrad,
	"GORUN_BINARY_GELU_TANH_GRAD":  BinaryGELUTanhGrad,
	"GORUN_BN_SUMS":                BNSums,
	"GORUN_BN_GRAD_SUMS":           BNGradSums,
	"GORUN_BN_NORM":                BNNorm,
	"GORUN_BN_EVAL":                BNEval,
	"GORUN_BN_GRAD":                BNGrad,
	"GORUN_LN_GAMMA_SUMS":          LNGammaSums,
}

// Unary launches gorun_unary.
func Unary(g Geom, x, y []float32, n, op int, alpha float32) {
	C.hc_unary(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(n), ci(op), C.float(alpha))
}

// Binary launches gorun_binary.
func Binary(g Geom, a, b, out []float32, n, op int, alpha float32) {
	C.hc_binary(ci(g.Grid), ci(g.Block), fp(a), fp(b), fp(out), ci(n), ci(op), C.float(alpha))
}

// Copy launches gorun_copy.
func Copy(g Geom, src, dst []float32, n int) {
	C.hc_copy(ci(g.Grid), ci(g.Block), fp(src), fp(dst), ci(n))
}

// Fill launches gorun_fill.
func Fill(g Geom, x []float32, n int, value float32) {
	C.hc_fill(ci(g.Grid), ci(g.Block), fp(x), ci(n), C.float(value))
}

// Scale launches gorun_scale.
func Scale(g Geom, x []float32, n int, s float32) {
	C.hc_scale(ci(g.Grid), ci(g.Block), fp(x), ci(n), C.float(s))
}

// Accumulate launches gorun_accumulate.
func Accumulate(g Geom, dst, src []float32, n int) {
	C.hc_accumulate(ci(g.Grid), ci(g.Block), fp(dst), fp(src), ci(n))
}

// Axpy launches gorun_axpy.
func Axpy(g Geom, dst, src []float32, n int, alpha float32) {
	C.hc_axpy(ci(g.Grid), ci(g.Block), fp(dst), fp(src), ci(n), C.float(alpha))
}

// Dropout launches gorun_dropout.
func Dropout(g Geom, x, y, mask []float32, n int, p float32, seed, offset uint64) {
	C.hc_dropout(ci(g.Grid), ci(g.Block), fp(x), fp(y), fp(mask), ci(n), C.float(p), C.u64(seed), C.u64(offset))
}

// Dropout2D launches gorun_dropout2d.
func Dropout2D(g Geom, x, y, mask []float32, planes, hw int, p float32, seed, offset uint64) {
	C.hc_dropout2d(ci(g.Grid), ci(g.Block), fp(x), fp(y), fp(mask), ci(planes), ci(hw), C.float(p), C.u64(seed), C.u64(offset))
}

// DropoutGrad launches gorun_dropout_grad.
func DropoutGrad(g Geom, dy, mask, dx []float32, n int) {
	C.hc_dropout_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(mask), fp(dx), ci(n))
}

// Dropout2DGrad launches gorun_dropout2d_grad.
func Dropout2DGrad(g Geom, dy, mask, dx []float32, planes, hw int) {
	C.hc_dropout2d_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(mask), fp(dx), ci(planes), ci(hw))
}

// ConvGeom is the geometry arguments shared by gorun_im2col and
// gorun_col2im, in their order. CX, the channels of a sample of x, may be
// left 0 for C (an ungrouped convolution).
type ConvGeom struct {
	N, C, CX, H, W, KH, KW, OH, OW, Stride, Pad int
}

func (c ConvGeom) cx() int {
	if c.CX == 0 {
		return c.C
	}
	return c.CX
}

// Im2col launches gorun_im2col.
func Im2col(g Geom, x, col []float32, c ConvGeom) {
	C.hc_im2col(ci(g.Grid), ci(g.Block), fp(x), fp(col), ci(c.N), ci(c.C), ci(c.cx()), ci(c.H), ci(c.W), ci(c.KH), ci(c.KW), ci(c.OH), ci(c.OW), ci(c.Stride), ci(c.Pad))
}

// Col2im launches gorun_col2im.
func Col2im(g Geom, col, dx []float32, c ConvGeom) {
	C.hc_col2im(ci(g.Grid), ci(g.Block), fp(col), fp(dx), ci(c.N), ci(c.C), ci(c.cx()), ci(c.H), ci(c.W), ci(c.KH), ci(c.KW), ci(c.OH), ci(c.OW), ci(c.Stride), ci(c.Pad))
}

// ONLToNOL launches gorun_onl_to_nol.
func ONLToNOL(g Geom, src, dst []float32, n, o, plane int) {
	C.hc_onl_to_nol(ci(g.Grid), ci(g.Block), fp(src), fp(dst), ci(n), ci(o), ci(plane))
}

// NOLToONL launches gorun_nol_to_onl.
func NOLToONL(g Geom, src, dst []float32, n, o, plane int) {
	C.hc_nol_to_onl(ci(g.Grid), ci(g.Block), fp(src), fp(dst), ci(n), ci(o), ci(plane))
}

// BiasAdd launches gorun_bias_add.
func BiasAdd(g Geom, y, b []float32, n, c, plane int) {
	C.hc_bias_add(ci(g.Grid), ci(g.Block), fp(y), fp(b), ci(n), ci(c), ci(plane))
}

// BiasGrad launches gorun_bias_grad.
func BiasGrad(g Geom, dy, db []float32, n, c, plane int, accumulate bool) {
	C.hc_bias_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(db), ci(n), ci(c), ci(plane), cb(accumulate))
}

// BiasPartial launches gorun_bias_partial.
func BiasPartial(g Geom, dy []float32, part []float64, n, c, plane, s, chunk int) {
	C.hc_bias_partial(ci(g.Grid), ci(g.Block), fp(dy), dp(part), ci(n), ci(c), ci(plane), ci(s), ci(chunk))
}

// BiasFinish launches gorun_bias_finish.
func BiasFinish(g Geom, part []float64, db []float32, c, s int, accumulate bool) {
	C.hc_bias_finish(ci(g.Grid), ci(g.Block), dp(part), fp(db), ci(c), ci(s), cb(accumulate))
}

// BNPartial launches gorun_bn_partial.
func BNPartial(g Geom, a, b, save []float32, part []float64, n, c, plane, s, chunk, mode int) {
	C.hc_bn_partial(ci(g.Grid), ci(g.Block), fp(a), fp(b), fp(save), dp(part), ci(n), ci(c), ci(plane), ci(s), ci(chunk), ci(mode))
}

// BNFinish launches gorun_bn_finish.
func BNFinish(g Geom, part []float64, out []float32, c, s, count int) {
	C.hc_bn_finish(ci(g.Grid), ci(g.Block), dp(part), fp(out), ci(c), ci(s), ci(count))
}

// BNParams launches gorun_bn_params.
func BNParams(g Geom, a, b, gamma, beta, save, par []float32, c int, eps float32, mode int) {
	C.hc_bn_params(ci(g.Grid), ci(g.Block), fp(a), fp(b), fp(gamma), fp(beta), fp(save), fp(par), ci(c), C.float(eps), ci(mode))
}

// BNApply launches gorun_bn_apply without a residual or ReLU.
func BNApply(g Geom, x, par, y []float32, n, c, plane int) {
	BNApplyAdd(g, x, par, nil, y, n, c, plane, false)
}

// BNApplyAdd launches gorun_bn_apply with a residual (nil: none) and
// ReLU's rule.
func BNApplyAdd(g Geom, x, par, res, y []float32, n, c, plane int, relu bool) {
	r := 0
	if relu {
		r = 1
	}
	C.hc_bn_apply(ci(g.Grid), ci(g.Block), fp(x), fp(par), fp(res), fp(y), ci(n), ci(c), ci(plane), ci(r))
}

// BNGradInput launches gorun_bn_grad_input.
func BNGradInput(g Geom, dy, x, par, dx []float32, n, c, plane int) {
	C.hc_bn_grad_input(ci(g.Grid), ci(g.Block), fp(dy), fp(x), fp(par), fp(dx), ci(n), ci(c), ci(plane))
}

// BNGradGamma launches gorun_bn_grad_gamma.
func BNGradGamma(g Geom, gstats, save, dgamma []float32, c int, eps float32, accumulate bool) {
	C.hc_bn_grad_gamma(ci(g.Grid), ci(g.Block), fp(gstats), fp(save), fp(dgamma), ci(c), C.float(eps), cb(accumulate))
}

// BNRunning launches gorun_bn_running.
func BNRunning(g Geom, save, runningMean, runningVar, tracked []float32, c int, momentum float32) {
	C.hc_bn_running(ci(g.Grid), ci(g.Block), fp(save), fp(runningMean), fp(runningVar), fp(tracked), ci(c), C.float(momentum))
}

// LayerNorm launches gorun_layer_norm.
func LayerNorm(g Geom, x, gamma, beta, y, save []float32, rows, d int, eps float32) {
	C.hc_layer_norm(ci(g.Grid), ci(g.Block), fp(x), fp(gamma), fp(beta), fp(y), fp(save), ci(rows), ci(d), C.float(eps))
}

// LayerNormGradInput launches gorun_layer_norm_grad_input.
func LayerNormGradInput(g Geom, dy, x, save, gamma, dx []float32, rows, d int) {
	C.hc_layer_norm_grad_input(ci(g.Grid), ci(g.Block), fp(dy), fp(x), fp(save), fp(gamma), fp(dx), ci(rows), ci(d))
}

// MaxPool2D launches gorun_maxpool2d.
func MaxPool2D(g Geom, x, y []float32, idx []int32, planes, h, w, oh, ow, k, s int) {
	C.hc_maxpool2d(ci(g.Grid), ci(g.Block), fp(x), fp(y), ip(idx), ci(planes), ci(h), ci(w), ci(oh), ci(ow), ci(k), ci(s))
}

// MaxPool2DGrad launches gorun_maxpool2d_grad.
func MaxPool2DGrad(g Geom, dy []float32, idx []int32, dx []float32, planes, h, w, oh, ow, k, s int) {
	C.hc_maxpool2d_grad(ci(g.Grid), ci(g.Block), fp(dy), ip(idx), fp(dx), ci(planes), ci(h), ci(w), ci(oh), ci(ow), ci(k), ci(s))
}

// AvgPool2D launches gorun_avgpool2d.
func AvgPool2D(g Geom, x, y []float32, planes, h, w, oh, ow, k, s, p int) {
	C.hc_avgpool2d(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(planes), ci(h), ci(w), ci(oh), ci(ow), ci(k), ci(s), ci(p))
}

// AvgPool2DGrad launches gorun_avgpool2d_grad.
func AvgPool2DGrad(g Geom, dy, dx []float32, planes, h, w, oh, ow, k, s, p int) {
	C.hc_avgpool2d_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(dx), ci(planes), ci(h), ci(w), ci(oh), ci(ow), ci(k), ci(s), ci(p))
}

// GlobalAvgPool2D launches gorun_global_avgpool2d.
func GlobalAvgPool2D(g Geom, x, y []float32, planes, hw int) {
	C.hc_global_avgpool2d(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(planes), ci(hw))
}

// GlobalAvgPool2DGrad launches gorun_global_avgpool2d_grad.
func GlobalAvgPool2DGrad(g Geom, dy, dx []float32, planes, hw int) {
	C.hc_global_avgpool2d_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(dx), ci(planes), ci(hw))
}

// LogSoftmax launches gorun_log_softmax.
func LogSoftmax(g Geom, x, y []float32, n, c int) {
	C.hc_log_softmax(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(n), ci(c))
}

// Softmax launches gorun_softmax.
func Softmax(g Geom, x, y []float32, n, c, causal int) {
	C.hc_softmax(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(n), ci(c), ci(causal))
}

// LogSoftmaxGrad launches gorun_log_softmax_grad.
func LogSoftmaxGrad(g Geom, dy, y, dx []float32, n, c int) {
	C.hc_log_softmax_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(y), fp(dx), ci(n), ci(c))
}

// SoftmaxGrad launches gorun_softmax_grad.
func SoftmaxGrad(g Geom, dy, y, dx []float32, n, c int) {
	C.hc_softmax_grad(ci(g.Grid), ci(g.Block), fp(dy), fp(y), fp(dx), ci(n), ci(c))
}

// NLLLoss launches gorun_nll_loss.
func NLLLoss(g Geom, logp []float32, target []int32, loss []float32, n, c int, scale float32, accumulate, hasIgnore bool, ignoreIndex int) {
	C.hc_nll_loss(ci(g.Grid), ci(g.Block), fp(logp), ip(target), fp(loss), ci(n), ci(c), C.float(scale), cb(accumulate), cb(hasIgnore), ci(ignoreIndex))
}

// NLLLossGrad launches gorun_nll_loss_grad.
func NLLLossGrad(g Geom, dloss []float32, target []int32, dx []float32, n, c int, scale float32, hasIgnore bool, ignoreIndex int) {
	C.hc_nll_loss_grad(ci(g.Grid), ci(g.Block), fp(dloss), ip(target), fp(dx), ci(n), ci(c), C.float(scale), cb(hasIgnore), ci(ignoreIndex))
}

// CrossEntropy launches gorun_cross_entropy.
func CrossEntropy(g Geom, logits []float32, target []int32, loss, probs []float32, n, c int, smoothing, scale float32, accumulate, hasIgnore bool, ignoreIndex int) {
	C.hc_cross_entropy(ci(g.Grid), ci(g.Block), fp(logits), ip(target), fp(loss), fp(probs), ci(n), ci(c), C.float(smoothing), C.float(scale), cb(accumulate), cb(hasIgnore), ci(ignoreIndex))
}

// CrossEntropyGrad launches gorun_cross_entropy_grad.
func CrossEntropyGrad(g Geom, dloss, probs []float32, target []int32, dx []float32, n, c int, smoothing, scale float32, hasIgnore bool, ignoreIndex int) {
	C.hc_cross_entropy_grad(ci(g.Grid), ci(g.Block), fp(dloss), fp(probs), ip(target), fp(dx), ci(n), ci(c), C.float(smoothing), C.float(scale), cb(hasIgnore), ci(ignoreIndex))
}

// MSELoss launches gorun_mse_loss.
func MSELoss(g Geom, pred, target, loss []float32, n, d int, scale float32, accumulate bool) {
	C.hc_mse_loss(ci(g.Grid), ci(g.Block), fp(pred), fp(target), fp(loss), ci(n), ci(d), C.float(scale), cb(accumulate))
}

// MSELossGrad launches gorun_mse_loss_grad.
func MSELossGrad(g Geom, dloss, pred, target, dx []float32, n, d int, scale float32) {
	C.hc_mse_loss_grad(ci(g.Grid), ci(g.Block), fp(dloss), fp(pred), fp(target), fp(dx), ci(n), ci(d), C.float(scale))
}

// SGDStep launches gorun_sgd_step.
func SGDStep(g Geom, param, grad, buf []float32, n int, lr, momentum, dampening, weightDecay float32, nesterov bool, step int) {
	C.hc_sgd_step(ci(g.Grid), ci(g.Block), fp(param), fp(grad), fp(buf), ci(n), C.float(lr), C.float(momentum), C.float(dampening), C.float(weightDecay), cb(nesterov), ci(step))
}

// AdamStep launches gorun_adam_step.
func AdamStep(g Geom, param, grad, m, v []float32, n int, lr, beta1, beta2, eps, weightDecay float32, step int, decoupled bool) {
	C.hc_adam_step(ci(g.Grid), ci(g.Block), fp(param), fp(grad), fp(m), fp(v), ci(n), C.float(lr), C.float(beta1), C.float(beta2), C.float(eps), C.float(weightDecay), ci(step), cb(decoupled))
}

// GatherRows launches gorun_gather_rows.
func GatherRows(g Geom, src []float32, idx []int32, dst []float32, rows, cols int) {
	C.hc_gather_rows(ci(g.Grid), ci(g.Block), fp(src), ip(idx), fp(dst), ci(rows), ci(cols))
}

// GatherRowsInt launches gorun_gather_rows_int.
func GatherRowsInt(g Geom, src, idx, dst []int32, rows, cols int) {
	C.hc_gather_rows_int(ci(g.Grid), ci(g.Block), ip(src), ip(idx), ip(dst), ci(rows), ci(cols))
}

// CopySlice launches gorun_copy_slice.
func CopySlice(g Geom, src, dst []float32, n, length, srcDim, srcOff, dstDim, dstOff int) {
	C.hc_copy_slice(ci(g.Grid), ci(g.Block), fp(src), fp(dst), ci(n), ci(length), ci(srcDim), ci(srcOff), ci(dstDim), ci(dstOff))
}

// Permute launches gorun_permute with y's dimensions dims and their
// strides in x.
func Permute(g Geom, x, y []float32, n int, dims, strides [6]int) {
	C.hc_permute(ci(g.Grid), ci(g.Block), fp(x), fp(y), ci(n), ci(dims[0]), ci(dims[1]), ci(dims[2]), ci(dims[3]), ci(dims[4]), ci(dims[5]),
		ci(strides[0]), ci(strides[1]), ci(strides[2]), ci(strides[3]), ci(strides[4]), ci(strides[5]))
}

// Embedding launches gorun_embedding.
func Embedding(g Geom, ids []int32, w, y []float32, n, v, d int) {
	C.hc_embedding(ci(g.Grid), ci(g.Block), ip(ids), fp(w), fp(y), ci(n), ci(v), ci(d))
}

// EmbeddingGrad launches gorun_embedding_grad.
func EmbeddingGrad(g Geom, ids []int32, dy, dw []float32, n, v, d, rowsPer int, accumulate bool) {
	C.hc_embedding_grad(ci(g.Grid), ci(g.Block), ip(ids), fp(dy), fp(dw), ci(n), ci(v), ci(d), ci(rowsPer), cb(accumulate))
}

// Positions launches gorun_positions.
func Positions(g Geom, pos []int32, n, t int) {
	C.hc_positions(ci(g.Grid), ci(g.Block), ip(pos), ci(n), ci(t))
}

// ClipGradNorm launches gorun_clip_grad_norm.
func ClipGradNorm(g Geom, x []float32, sq []float64, n, s int, maxNorm float32) {
	C.hc_clip_grad_norm(ci(g.Grid), ci(g.Block), fp(x), dp(sq), ci(n), ci(s), C.float(maxNorm))
}

// CountCorrect launches gorun_count_correct.
func CountCorrect(g Geom, x []float32, target, count []int32, n, c int, accumulate bool) {
	C.hc_count_correct(ci(g.Grid), ci(g.Block), fp(x), ip(target), ip(count), ci(n), ci(c), cb(accumulate))
}

// Sum launches gorun_sum.
func Sum(g Geom, x, out []float32, n int, accumulate bool) {
	C.hc_sum(ci(g.Grid), ci(g.Block), fp(x), fp(out), ci(n), cb(accumulate))
}

// SourcesSHA256 returns the SHA-256 of the kernel sources this package was
// compiled from, as cuda/kernels/stamp.sh wrote it into sources.h.
func SourcesSHA256() string { return C.GoString(C.hc_sources_sha256()) }
