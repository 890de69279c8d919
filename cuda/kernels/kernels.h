// kernels.h — the ABI of gorun's CUDA kernels (cuda/kernels).
//
// Every kernel is `extern "C" __global__`, named gorun_<name>, and takes only
// float*, const float*, int* / const int* (int32), double* / const double*
// (the split sums' partials, device scratch), int, float and
// unsigned long long arguments, so the Go side launches them through the
// driver API (cuModuleGetFunction on the embedded PTX, cuLaunchKernel) with
// a plain argument list. All grids and blocks are one-dimensional.
//
// Launch geometry. Unless a kernel says otherwise:
//   ELEMENTWISE(n): block 256, grid ceil(n/256) (at least 1), dynamic shared
//   memory 0. These kernels use grid-stride loops, so a smaller grid (any
//   grid ≥ 1, any block ≤ 1024) is also correct.
//   ONE_BLOCK: grid 1, block exactly 256, dynamic shared memory 0 (the
//   kernel has a static __shared__ array of 256 entries and reduces in a
//   fixed order, so the result is deterministic run to run).
//   BLOCK_PER(m): grid m, block exactly 256, dynamic shared memory 0; block
//   b does item b and reduces in a fixed order (deterministic). (These
//   kernels loop over items with a grid stride and reduce correctly with
//   any block of at most 256 threads; the result's bits depend on the
//   block size, so the ABI fixes it.)
// A kernel with a count of 0 (an empty batch) may be skipped by the caller;
// launched anyway with grid 1 it writes nothing, except that reductions
// write their (empty) sum, and losses 0 (or leave an accumulated loss as is).
//
// Buffers are dense, row-major, fp32 unless said int32; a batched buffer's
// live part is its first N samples (partial batches just pass a smaller N).
// Every buffer a kernel touches, col included, has fewer than 2^31 elements
// (index arithmetic is 32-bit), and grid·block < 2^31.
// Unless said otherwise an output may not overlap an input; the elementwise
// kernels marked "in place ok" allow out == in (same pointer).
//
// Semantics follow gorun/ops (ops/*.go), op by op; the comments name the op.
//
// Convolution is lowered like ops/conv.go: with K = C·KH·KW and
// L = N·OH·OW, col is a [K, L] row-major matrix, rows ordered (c, ki, kj)
// (the weight's C, KH, KW), columns ordered (n, oy, ox). With cuBLAS
// (column-major) the Go side computes, as ops/conv.go does with ops/matmul:
//   forward:     tmp[O, L]  = W[O, K] · col[K, L]; then gorun_onl_to_nol
//                (tmp → y[N,O,OH,OW]; skip when N == 1: tmp is already y)
//                and gorun_bias_add(y, b, N, O, OH·OW).
//   grad input:  dyT = gorun_nol_to_onl(dy) (or dy itself when N == 1);
//                dcol[K, L] = Wᵀ · dyT; gorun_col2im(dcol → dx).
//   grad weight: col = im2col(x); dw[O, K] = dyT · colᵀ (beta 1 to
//                accumulate).
//   grad bias:   the split sum below over dy[N, O, OH·OW].
// A grouped convolution (G groups; C is then one group's input channels,
// W is [O, C·KH·KW] and K = C·KH·KW) runs the im2col/GEMM/col2im part once
// per group g, as ops/conv.go does: x and dx from the group's first channel
// (x + g·C·H·W, with cx = G·C channels per sample), and W's, tmp's and
// dyT's rows [g·O/G, (g+1)·O/G); the permutes and the bias cover all O.
// Linear: y = x·wᵀ by cuBLAS, then gorun_bias_add(y, b, N, O, 1); bias grad
// is the split sum over dy[N, O, 1].
//
// Split sum (bias gradients, and the finiteness check over a flat vector as
// [1, 1, len]): out[ch] = Σ_{n,k} x[n, ch, k] for x[N, C, plane], in double,
// deterministic (no atomics). One block per channel is too few when C is
// small and N·plane large, so each channel's N·plane elements, flattened in
// (n, k) order, are cut into S chunks of `chunk` elements (S·chunk ≥
// N·plane): S = 1 runs gorun_bias_grad alone; S > 1 runs
// gorun_bias_partial (C·S blocks, one partial per chunk) and then
// gorun_bias_finish (one block per channel adding its S partials). The Go
// side picks S from N·plane (cuda/geometry.go, splitSum).
// (Row-major X[m, n] = op(A)·op(B) is column-major Xᵀ = op(B)ᵀ·op(A)ᵀ:
// cublasSgemm(handle, opB, opA, n, m, k, &alpha, B, ldb, A, lda, &beta, X,
// n) with the row-major leading dimensions, as ops/matmul.go's arguments.)
//
// Dropout randomness is counter based: element (or plane) i draws
// u = gorun_uniform(seed, offset + i), a splitmix64 hash of the two, so a
// launch is reproducible from (seed, offset) alone and independent of the
// geometry. The caller advances offset by the number of draws (n for
// dropout, N·C for dropout2d) after each launch. It does not reproduce the
// CPU backend's stream.

#ifndef GORUN_KERNELS_H
#define GORUN_KERNELS_H

#ifndef __CUDACC__
#include "host.h" // plain C++ build (hostcheck)
#endif

#define GORUN_KERNEL extern "C" __global__ void

// ---- elementwise -------------------------------------------------------

// ReLU: y[i] = max(x[i], 0), NaN stays NaN. ELEMENTWISE(n). In place ok.
GORUN_KERNEL gorun_relu(const float* x, float* y, int n);
// ReLUGrad: dx[i] = y[i] > 0 ? dy[i] : 0, or with dy2 (not NULL: a value's
// second gradient, the engine's fused Add) y[i] > 0 ? dy[i] + dy2[i] : 0.
// ELEMENTWISE(n). dx may be dy or dy2.
GORUN_KERNEL gorun_relu_grad(const float* dy, const float* dy2, const float* y, float* dx, int n);
// Unary ops, y[i] = f(x[i]), f chosen by op (GORUN_UNARY_*):
//   SIGMOID     1/(1+exp(-x)), in double (ops' Sigmoid)
//   TANH        tanh(x), in double (Tanh)
//   LEAKY_RELU  x > 0 ? x : alpha·x, NaN stays NaN (LeakyReLU, alpha = its
//               NegativeSlope)
//   SCALE       alpha·x (Scale, alpha = its Alpha)
//   GELU        x·Φ(x) = 0.5·x·(1+erf(x/√2)), in double (GELU)
//   GELU_TANH   0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))), in double (GELU
//               with Approximate)
//   ROUND_BF16  x rounded to the nearest bfloat16, ties to even, ±Inf past
//               the largest (Round with Precision BF16); NaN stays NaN
//   ROUND_FP16  x rounded to the nearest float16, ties to even, with its
//               subnormals, ±Inf from 65520 on (Round with Precision FP16)
//   SILU        x/(1+e), e = exp(-x) in double rounded to float, the rest
//               in float (SiLU)
// ELEMENTWISE(n). In place ok.
#define GORUN_UNARY_SIGMOID 0
#define GORUN_UNARY_TANH 1
#define GORUN_UNARY_LEAKY_RELU 2
#define GORUN_UNARY_SCALE 3
#define GORUN_UNARY_GELU 4
#define GORUN_UNARY_GELU_TANH 5
#define GORUN_UNARY_ROUND_BF16 7
#define GORUN_UNARY_ROUND_FP16 8
#define GORUN_UNARY_SILU 6
GORUN_KERNEL gorun_unary(const float* x, float* y, int n, int op, float alpha);
// Binary ops, out[i] = f(a[i], b[i]), f chosen by op (GORUN_BINARY_*):
//   ADD              a + b (Add)
//   SUB              a - b (Sub)
//   MUL              a·b (Mul)
//   SIGMOID_GRAD     a·(1-b)·b: a = dy, b = the Sigmoid output
//   TANH_GRAD        a·(1-b²): a = dy, b = the Tanh output
//   LEAKY_RELU_GRAD  b > 0 ? a : alpha·a: a = dy, b = the LeakyReLU input
//   GELU_GRAD        a·GELU'(b), in double: a = dy, b = the GELU input
//   GELU_TANH_GRAD   the same for GELU_TANH
//   SILU_GRAD        a·s·(1+b·(1-s)), s = 1/(1+e), e as SILU's: a = dy,
//                    b = the SiLU input
// alpha is used by LEAKY_RELU_GRAD only. ELEMENTWISE(n). out may be a or b.
#define GORUN_BINARY_ADD 0
#define GORUN_BINARY_SUB 1
#define GORUN_BINARY_MUL 2
#define GORUN_BINARY_SIGMOID_GRAD 3
#define GORUN_BINARY_TANH_GRAD 4
#define GORUN_BINARY_LEAKY_RELU_GRAD 5
#define GORUN_BINARY_GELU_GRAD 6
#define GORUN_BINARY_GELU_TANH_GRAD 7
#define GORUN_BINARY_SILU_GRAD 8
GORUN_KERNEL gorun_binary(const float* a, const float* b, float* out, int n, int op,
                          float alpha);
// dst[i] = src[i] (also Flatten when not aliased). ELEMENTWISE(n).
GORUN_KERNEL gorun_copy(const float* src, float* dst, int n);
// x[i] = value. ELEMENTWISE(n).
GORUN_KERNEL gorun_fill(float* x, int n, float value);
// x[i] *= s (e.g. 1/world for a mean all-reduce). ELEMENTWISE(n).
GORUN_KERNEL gorun_scale(float* x, int n, float s);
// dst[i] += src[i] (replica reduction, gradient accumulation).
// ELEMENTWISE(n).
GORUN_KERNEL gorun_accumulate(float* dst, const float* src, int n);
// dst[i] = fma(alpha, src[i], dst[i]). ELEMENTWISE(n).
GORUN_KERNEL gorun_axpy(float* dst, const float* src, int n, float alpha);

// ---- dropout -------------------------------------------------------------

// Dropout (training): mask[i] = u_i < 1-p ? 1/(1-p) : 0 with
// u_i = gorun_uniform(seed, offset+i); y[i] = x[i]·mask[i]. p <= 0 gives
// mask 1 (use p = 0 for evaluation), p >= 1 mask 0. 1/(1-p) is rounded to
// float as ops/dropout.go does. ELEMENTWISE(n). y may be x. Draws n.
GORUN_KERNEL gorun_dropout(const float* x, float* y, float* mask, int n, float p,
                           unsigned long long seed, unsigned long long offset);
// Dropout2D: x[planes, hw] (planes = N·C); plane j keeps or drops as a
// whole: mask[j] from gorun_uniform(seed, offset+j) as above;
// y[j, :] = x[j, :]·mask[j]. ELEMENTWISE(planes·hw). y may be x.
// Draws planes.
GORUN_KERNEL gorun_dropout2d(const float* x, float* y, float* mask, int planes, int hw,
                             float p, unsigned long long seed, unsigned long long offset);
// DropoutGrad: dx[i] = dy[i]·mask[i]. ELEMENTWISE(n). dx may be dy.
GORUN_KERNEL gorun_dropout_grad(const float* dy, const float* mask, float* dx, int n);
// Dropout2DGrad: dx[j, k] = dy[j, k]·mask[j], dy[planes, hw].
// ELEMENTWISE(planes·hw). dx may be dy.
GORUN_KERNEL gorun_dropout2d_grad(const float* dy, const float* mask, float* dx, int planes,
                                  int hw);

// ---- convolution helpers (NCHW; see the layout notes above) -------------

// im2col: x[N,C,H,W] → col[C·KH·KW, N·OH·OW], zero where the window reaches
// into the padding; OH = (H+2·pad-KH)/stride+1, OW likewise (the caller
// passes them). stride is the resolved stride (ops' Stride 0 means 1).
// cx is the number of channels of a sample of x: C, or for one group of a
// grouped convolution all groups' channels (G·C, C being the group's), x
// then pointing at the group's first channel of sample 0.
// ELEMENTWISE(C·KH·KW·N·OH·OW).
GORUN_KERNEL gorun_im2col(const float* x, float* col, int n, int c, int cx, int h, int w,
                          int kh, int kw, int oh, int ow, int stride, int pad);
// col2im: dx[N,C,H,W] = the adjoint of im2col applied to col (each dx
// element sums the col entries that im2col copied from it); cx as im2col's
// (a group writes its C channels of each sample and no others).
// Overwrites dx (no clearing needed), no atomics. ELEMENTWISE(N·C·H·W).
GORUN_KERNEL gorun_col2im(const float* col, float* dx, int n, int c, int cx, int h, int w,
                          int kh, int kw, int oh, int ow, int stride, int pad);
// [O, N, plane] → [N, O, plane]: dst[(n·O+o)·plane+k] =
// src[(o·N+n)·plane+k] (conv forward output). ELEMENTWISE(N·O·plane).
GORUN_KERNEL gorun_onl_to_nol(const float* src, float* dst, int n, int o, int plane);
// [N, O, plane] → [O, N, plane] (ops/conv.go permuteDy).
// ELEMENTWISE(N·O·plane).
GORUN_KERNEL gorun_nol_to_onl(const float* src, float* dst, int n, int o, int plane);
// Bias add: y[n, c, k] += b[c] for y[N, C, plane] (conv: plane = OH·OW;
// linear: plane = 1, C = O). ELEMENTWISE(N·C·plane).
GORUN_KERNEL gorun_bias_add(float* y, const float* b, int n, int c, int plane);
// Bias grad (Conv2DGradBias, LinearGradBias): db[c] = Σ_{n,k} dy[n, c, k]
// (summed in double), or db[c] += (float)that when accumulate != 0.
// BLOCK_PER(C). The split sum with S = 1.
GORUN_KERNEL gorun_bias_grad(const float* dy, float* db, int n, int c, int plane,
                             int accumulate);
// Split sum, phase 1 of 2: part[ch·S + j] = Σ (in double) of elements
// [j·chunk, min((j+1)·chunk, N·plane)) of channel ch, element i of the
// channel being dy[(i/plane·C + ch)·plane + i%plane]; an empty range gives
// 0. BLOCK_PER(C·S): block b is chunk j = b mod S of channel ch = b / S.
// part holds C·S doubles.
GORUN_KERNEL gorun_bias_partial(const float* dy, double* part, int n, int c, int plane, int s,
                                int chunk);
// Split sum, phase 2 of 2: db[ch] = Σ_j part[ch·S + j] (in double, fixed
// order, rounded once to float), or db[ch] += (float)that when
// accumulate != 0. BLOCK_PER(C).
GORUN_KERNEL gorun_bias_finish(const double* part, float* db, int c, int s, int accumulate);

// ---- batch and layer normalisation (ops/batchnorm.go, ops/layernorm.go) -----
// Batch norm: x[N, C, L].
// L is the product of the trailing dimensions (1 for [N, C]). Per-channel
// sums use the split sum's chunking (S chunks of `chunk` elements, the same
// S and chunk as for a bias gradient over the channel's N·L elements, S = 1
// included): gorun_bn_partial writes two partials per chunk, gorun_bn_finish
// adds them per channel in a fixed order (deterministic, no atomics).
// gorun_bn_params derives per-channel float parameters (into device
// scratch, par) in double, as the CPU kernels do, and gorun_bn_apply /
// gorun_bn_grad_input apply them elementwise.

#define GORUN_BN_SUMS 0       // gorun_bn_partial: Σa, Σa² (BatchNormStats)
#define GORUN_BN_GRAD_SUMS 1  // gorun_bn_partial: Σa, Σa·(b-mean) (BatchNormGradStats)
#define GORUN_LN_GAMMA_SUMS 2 // gorun_bn_partial: Σa, Σa·x̂ (LayerNormGradGamma)
#define GORUN_BN_NORM 0      // gorun_bn_params: BatchNormNorm
#define GORUN_BN_EVAL 1      // gorun_bn_params: BatchNormEval
#define GORUN_BN_GRAD 2      // gorun_bn_params: BatchNormGradInput

// Phase 1 of 2: block b = ch·S + j sums, in double, the elements
// [j·chunk, min((j+1)·chunk, N·L)) of channel ch (element i of the channel
// being a[(i/L·C + ch)·L + i%L], b likewise):
//   mode GORUN_BN_SUMS:      part[b] = Σa, part[C·S + b] = Σa² (b and save
//                            unused, may be null);
//   mode GORUN_BN_GRAD_SUMS: part[b] = Σa, part[C·S + b] = Σa·(b - mean),
//                            a = dy, b = x, mean = save[ch] (save[3, C]),
//                            the difference taken in float as ops does;
//   mode GORUN_LN_GAMMA_SUMS: as GRAD_SUMS with x̂ = (b - save[2·i])·
//                            save[2·i + 1] (in float) for b - mean, i the
//                            element's index along N: layer norm's
//                            dgamma over rows x[R, D] as [N = R, C = D,
//                            L = 1], save[R, 2] (mean, invstd) per row.
// An empty range gives 0. part holds 2·C·S doubles. BLOCK_PER(C·S).
// (LayerNormGradGamma finishes its second half, part + C·S, with
// gorun_bias_finish; LayerNormGradBeta is the split sum of dy as [R, D, 1].)
GORUN_KERNEL gorun_bn_partial(const float* a, const float* b, const float* save, double* part,
                              int n, int c, int plane, int s, int chunk, int mode);
// Phase 2 of 2: out[r·C + ch] = Σ_j part[r·C·S + ch·S + j] for rows r = 0, 1
// (in double, fixed order, rounded once to float); with count >= 0 also
// out[2·C + ch] = count (BatchNormStats' stats[3, C], count = N·L); with
// count < 0 only the two rows (BatchNormGradStats' gstats[2, C]).
// BLOCK_PER(C).
GORUN_KERNEL gorun_bn_finish(const double* part, float* out, int c, int s, int count);
// Per-channel parameters, in double from float inputs, rounded to float;
// one thread per channel, ELEMENTWISE(C). gamma and beta may be null (1
// and 0). par holds 4·C floats (device scratch); by mode:
//   GORUN_BN_NORM: a = stats[3, C] (Σx, Σx², count): mean = Σx/count,
//     var = max(Σx²/count - mean², 0) (both 0 when count <= 0);
//     save[3, C] = (mean, var, count); par rows = (mean, gamma/sqrt(var+eps),
//     beta). b unused.
//   GORUN_BN_EVAL: a = running_mean[C], b = running_var[C]; par rows =
//     (running_mean, gamma/sqrt(running_var+eps), beta). save unused.
//   GORUN_BN_GRAD: a = save[3, C], b = gstats[2, C]; with invstd =
//     1/sqrt(var+eps) and M = count: par rows = (mean, gamma·invstd,
//     gstats[0]/M, gstats[1]/M·invstd²), the last two 0 when M <= 0.
//     beta and save unused.
GORUN_KERNEL gorun_bn_params(const float* a, const float* b, const float* gamma,
                             const float* beta, float* save, float* par, int c, float eps,
                             int mode);
// y = (x - par[ch])·par[C + ch] + par[2·C + ch] (BatchNormNorm,
// BatchNormEval with GORUN_BN_NORM / GORUN_BN_EVAL's par), then + res[e]
// when res is not NULL, then ReLU's rule when relu is not 0 (the engine's
// fused batch norm, add and ReLU; each rounded as the separate kernels
// round). ELEMENTWISE(N·C·L). y may be x or res.
GORUN_KERNEL gorun_bn_apply(const float* x, const float* par, const float* res, float* y, int n,
                            int c, int plane, int relu);
// BatchNormGradInput with GORUN_BN_GRAD's par (mean, k, sub, slope):
// dx = k·(dy - sub - (x - mean)·slope). ELEMENTWISE(N·C·L). dx may be dy.
GORUN_KERNEL gorun_bn_grad_input(const float* dy, const float* x, const float* par, float* dx,
                                 int n, int c, int plane);
// BatchNormGradGamma: dgamma[ch] = gstats[C + ch]/sqrt(save[C + ch] + eps)
// (in double), or dgamma[ch] += (float)that when accumulate != 0.
// ELEMENTWISE(C). (BatchNormGradBeta is gorun_copy / gorun_accumulate of
// gstats' first row.)
GORUN_KERNEL gorun_bn_grad_gamma(const float* gstats, const float* save, float* dgamma, int c,
                                 float eps, int accumulate);
// BatchNormRunning, in place: when c > 0 and save's count (save[2·C]) >= 1,
// tracked[0] += 1 and, with m = momentum (or 1/tracked[0] after the
// increment when momentum < 0), in double: running_mean = (1-m)·running_mean
// + m·mean, and where count > 1 running_var = (1-m)·running_var +
// m·var·count/(count-1). Otherwise nothing changes. ONE_BLOCK (any block
// size; every thread reads tracked before thread 0 writes it).
GORUN_KERNEL gorun_bn_running(const float* save, float* running_mean, float* running_var,
                              float* tracked, int c, float momentum);

// LayerNorm over rows x[R, D] (R = the product of the leading dimensions):
// per row, in double, mean = Σx/D, var = Σ(x-mean)²/D (two passes),
// invstd = 1/sqrt(var+eps); save[2·r] = mean, save[2·r+1] = invstd (as
// float); with m, k those floats, y = (x-m)·k without gamma and beta, else
// gamma·((x-m)·k) + beta (an absent one 1 or 0). BLOCK_PER(R); y may be x.
GORUN_KERNEL gorun_layer_norm(const float* x, const float* gamma, const float* beta, float* y,
                              float* save, int rows, int d, float eps);
// LayerNormGradInput: per row, with mean and k = invstd from save and
// g = dy·gamma: s0 = Σg, s1 = Σg·x̂ (in double, x̂ = (x-mean)·k in float),
// m0 = s0/D and m1 = s1/D (as float); dx = k·(g - m0 - (x-mean)·k·m1).
// gamma may be null (1). BLOCK_PER(R); dx may be dy.
GORUN_KERNEL gorun_layer_norm_grad_input(const float* dy, const float* x, const float* save,
                                         const float* gamma, float* dx, int rows, int d);

// ---- pooling ---------------------------------------------------------------

// MaxPool2D: x[planes, H, W] (planes = N·C) → y[planes, OH, OW] and
// idx[planes, OH, OW] (int32, position within the H×W plane), window k×k,
// stride s (resolved: ops' Stride 0 means s = k), no padding,
// OH = (H-k)/s+1, OW = (W-k)/s+1 (floor).
// First maximum in row-major window order wins; a NaN is always taken (the
// last NaN of the window), as ops/pool.go. ELEMENTWISE(planes·OH·OW).
GORUN_KERNEL gorun_maxpool2d(const float* x, float* y, int* idx, int planes, int h, int w,
                             int oh, int ow, int k, int s);
// MaxPool2DGrad: dx[planes, H, W] = Σ over the outputs j whose window
// covers the element and idx[j] points at it, of dy[j] (in increasing j, as
// the CPU kernel). One thread per dx element; overwrites all of dx; right
// for overlapping windows too; no atomics. ELEMENTWISE(planes·H·W).
GORUN_KERNEL gorun_maxpool2d_grad(const float* dy, const int* idx, float* dx, int planes,
                                  int h, int w, int oh, int ow, int k, int s);

// AvgPool2D: x[planes, H, W] → y[planes, OH, OW], each the float sum of its
// k×k window's elements inside the input (row by row, as ops/pool.go),
// times 1/k² in double (padding counts as zeros: count_include_pad), stride
// s (resolved: 0 means k), padding p. ELEMENTWISE(planes·OH·OW).
GORUN_KERNEL gorun_avgpool2d(const float* x, float* y, int planes, int h, int w, int oh,
                             int ow, int k, int s, int p);
// AvgPool2DGrad: dx[planes, H, W] = Σ over the outputs j whose window
// covers the element, in increasing j, of (float)(dy[j]/k²) (bit for bit
// the CPU kernel's scatter). Overwrites all of dx, no atomics.
// ELEMENTWISE(planes·H·W).
GORUN_KERNEL gorun_avgpool2d_grad(const float* dy, float* dx, int planes, int h, int w, int oh,
                                  int ow, int k, int s, int p);
// GlobalAvgPool2D: y[q] = (Σ_k x[q, k] in double, in order)/hw for
// x[planes, hw]. One thread per plane: ELEMENTWISE(planes).
GORUN_KERNEL gorun_global_avgpool2d(const float* x, float* y, int planes, int hw);
// GlobalAvgPool2DGrad: dx[q, k] = dy[q]/hw (in double). ELEMENTWISE(planes·hw).
GORUN_KERNEL gorun_global_avgpool2d_grad(const float* dy, float* dx, int planes, int hw);

// ---- softmax family, over the last dimension: rows x[N, C] -----------------
// N is the number of rows (the product of the leading dimensions). One
// thread per row (sums in double, as ops/activation.go): ELEMENTWISE(N).

// LogSoftmax: y = x - max - log Σ exp(x - max). y may be x.
GORUN_KERNEL gorun_log_softmax(const float* x, float* y, int n, int c);
// Softmax: y = exp(x - max) / Σ exp(x - max). y may be x. With causal > 0
// (Softmax's Causal: x is scores[..., T, T] with T = causal), row r covers
// its first min(r mod T + 1, C) columns only and y is 0 in the others.
GORUN_KERNEL gorun_softmax(const float* x, float* y, int n, int c, int causal);
// LogSoftmaxGrad: dx = dy - exp(y)·Σ_row dy. dx may be dy.
GORUN_KERNEL gorun_log_softmax_grad(const float* dy, const float* y, float* dx, int n, int c);
// SoftmaxGrad: dx = y·(dy - Σ_row dy·y). dx may be dy.
GORUN_KERNEL gorun_softmax_grad(const float* dy, const float* y, float* dx, int n, int c);

// ---- fused attention (ops/attention.go), FlashAttention-2's tiling ---------
// qkv[N, T, 3, H, dh] packed (q, k, v of every head of a position in one
// row of 3·H·dh), o[N, T, H·dh], lse[N, H, T], dqkv like qkv; dh ≤
// GORUN_ATT_DMAX (ops.AttentionMaxHeadDim). scale is 1/√dh; with causal != 0
// query row i sees keys j ≤ i. A block takes one tile of GORUN_ATT_TILE rows
// of one sample and head, GORUN_ATT_THREADS threads: GORUN_ATT_TILE rows of
// GORUN_ATT_THREADS / GORUN_ATT_TILE lanes, lane l owning the dimensions
// l, l + lanes, … of its row in registers. The other tiles of keys (or
// queries) pass through static shared memory, GORUN_ATT_TILE at a time;
// scores and probabilities exist for one GORUN_ATT_TILE² tile only, never
// T×T. Dot products over dh are float sums in increasing d. No atomics:
// dq and (dk, dv) are two kernels, each owning the rows it writes.
// Geometry ATTENTION(m): grid m (any m ≥ 1 is correct: blocks loop over the
// N·H·ceil(T/GORUN_ATT_TILE) tiles with a grid stride; the Go side launches
// one block per tile), block exactly GORUN_ATT_THREADS. These are the scalar
// kernels, which the host check runs too.
#define GORUN_ATT_TILE 16
#define GORUN_ATT_THREADS 128
#define GORUN_ATT_DMAX 128

// Attention forward, per query tile: over key tiles, s = scale·q·kᵀ (masked
// to -Inf), the online softmax (running row maximum m and sum l, the
// accumulator rescaled by exp(m_old − m_new)), acc += p·v; then o = acc/l
// and lse = m + log l. ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)).
GORUN_KERNEL gorun_attention(const float* qkv, float* o, float* lse, int n, int t, int h, int dh,
                             int causal, float scale);
// Attention forward with the products in bf16 on the tensor cores (wmma,
// sm_80+) and fp32 accumulation (torch.autocast's rule): q, k and v tiles
// rounded to bf16 (dh zero-padded to a multiple of 16), s = q·kᵀ per 16×32
// tile, the online softmax in fp32, p rounded to bf16 for p·v. Inputs and
// outputs fp32, as gorun_attention's; the host build runs the same tiling
// with scalar products of the same bf16 values.
// ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)).
GORUN_KERNEL gorun_attention_bf16(const float* qkv, float* o, float* lse, int n, int t, int h,
                                  int dh, int causal, float scale);
// AttentionGrad with the products in bf16 on the tensor cores and fp32
// accumulation, as gorun_attention_grad_q and gorun_attention_grad_kv
// (the same two-kernel split, tiles of 16 owned rows and 32 of the other
// side): s, dp and their transposes by wmma, p and ds in fp32 rounded to
// bf16 for the products that take them, D = Σ_d do·o in fp32.
// ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)) each.
GORUN_KERNEL gorun_attention_bf16_grad_q(const float* dout, const float* qkv, const float* o,
                                         const float* lse, float* dqkv, int n, int t, int h, int dh,
                                         int causal, float scale);
GORUN_KERNEL gorun_attention_bf16_grad_kv(const float* dout, const float* qkv, const float* o,
                                          const float* lse, float* dqkv, int n, int t, int h, int dh,
                                          int causal, float scale);
// AttentionGrad's dq, per query tile: D = Σ_d do·o per row, and over key
// tiles p = exp(scale·q·kᵀ − lse) (0 where masked), dp = do·vᵀ, ds =
// p·(dp − D), acc += ds·k; dq = scale·acc, written into dqkv's q part.
// ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)).
GORUN_KERNEL gorun_attention_grad_q(const float* dout, const float* qkv, const float* o,
                                    const float* lse, float* dqkv, int n, int t, int h, int dh,
                                    int causal, float scale);
// AttentionGrad's dk and dv, per key tile: over the query tiles that see
// it, p, dp, ds as above, dv += pᵀ·do, acc += dsᵀ·q; dk = scale·acc, both
// written into dqkv's k and v parts. ATTENTION(N·H·ceil(T/GORUN_ATT_TILE)).
GORUN_KERNEL gorun_attention_grad_kv(const float* dout, const float* qkv, const float* o,
                                     const float* lse, float* dqkv, int n, int t, int h, int dh,
                                     int causal, float scale);

// ---- losses (scale = Ctx.LossScale, usually 1/global batch) -----------------
// The class losses take rows [N, C] (N positions, classes along the last
// dimension) and target[N]. A target outside [0, C) makes the loss NaN
// (the CPU kernel panics). With has_ignore != 0, a target equal to
// ignore_index is skipped: it adds 0 to the loss and gets a 0 gradient.

// NLLLoss: loss[0] = -scale·Σ_i logp[i, target[i]] (summed in double in a
// fixed order); with accumulate != 0, loss[0] += that. ONE_BLOCK.
GORUN_KERNEL gorun_nll_loss(const float* logp, const int* target, float* loss, int n, int c,
                            float scale, int accumulate, int has_ignore, int ignore_index);
// NLLLossGrad: dx[i, j] = j == target[i] ? -scale·dloss[0] : 0 (dloss is a
// device pointer to one float). ELEMENTWISE(N·C).
GORUN_KERNEL gorun_nll_loss_grad(const float* dloss, const int* target, float* dx, int n,
                                 int c, float scale, int has_ignore, int ignore_index);
// CrossEntropy with label smoothing ε (0 = none): probs = softmax(logits)
// per row, and loss[0] = scale·Σ_i ((1-ε)·(-logp_i[target_i]) +
// ε·mean_j(-logp_i[j])), logp = log_softmax(logits) (in double, fixed
// order); with accumulate != 0, loss[0] += that. probs is written at
// skipped positions too. ONE_BLOCK.
GORUN_KERNEL gorun_cross_entropy(const float* logits, const int* target, float* loss,
                                 float* probs, int n, int c, float smoothing, float scale,
                                 int accumulate, int has_ignore, int ignore_index);
// CrossEntropyGrad: dx[i, j] = g·(probs[i, j] - (j == target[i] ? hit :
// off)), g = scale·dloss[0], off = ε/C and hit = 1-ε+ε/C (computed in
// double, rounded to float); ε = 0 gives g·p and g·(p-1); 0 in the rows
// of skipped positions. ELEMENTWISE(N·C).
GORUN_KERNEL gorun_cross_entropy_grad(const float* dloss, const float* probs,
                                      const int* target, float* dx, int n, int c,
                                      float smoothing, float scale, int has_ignore,
                                      int ignore_index);
// MSELoss over pred[N, D] and target[N, D]: loss[0] = scale·(Σ (pred -
// target)², differences and sum in double, fixed order)/D (0 for N = 0);
// with accumulate != 0, loss[0] += that. ONE_BLOCK.
GORUN_KERNEL gorun_mse_loss(const float* pred, const float* target, float* loss, int n, int d,
                            float scale, int accumulate);
// MSELossGrad: dx = g·(pred - target), g = 2·scale·dloss[0]/D in double,
// rounded to float. ELEMENTWISE(N·D). dx may be pred.
GORUN_KERNEL gorun_mse_loss_grad(const float* dloss, const float* pred, const float* target,
                                 float* dx, int n, int d, float scale);

// ---- the fused classifier (classifier.cu; ops.CrossEntropyFused) ----------

// CrossEntropyFused's rows (llm.c's fused_classifier): one block per row i
// of logits[N, C] (a grid-stride loop over rows, so any grid is correct;
// block exactly 256): the row's maximum m (NaN when it holds one), Σ
// exp(x-m) and, with ε != 0, Σ (x-m), each summed in double in a fixed
// order (gorun_block_sum); rowloss[i] = the row's log-likelihood term as
// gorun_cross_entropy adds it (0 at a skipped position, NaN for a target
// outside [0, C)); then dx[i, j] = g·(p - (j == target[i] ? hit : off)),
// p = (float)(exp(x-m)/Σ), g = scale·dloss[0], off, hit as
// gorun_cross_entropy_grad (0 in skipped rows): the probabilities are
// never stored. dx may be logits (each element is read before its own
// thread overwrites it). rowloss holds N doubles (device scratch).
// BLOCK_PER(N).
GORUN_KERNEL gorun_cross_entropy_fused(const float* logits, const int* target,
                                       const float* dloss, double* rowloss, float* dx, int n,
                                       int c, float smoothing, float scale, int has_ignore,
                                       int ignore_index);
// CrossEntropyFused's loss: loss[0] = -scale·Σᵢ rowloss[i] (double, fixed
// order, rounded once); with accumulate != 0, loss[0] += that. ONE_BLOCK.
GORUN_KERNEL gorun_cross_entropy_fused_loss(const double* rowloss, float* loss, int n,
                                            float scale, int accumulate);

// ---- optimizers (in place; PyTorch's rules exactly as ops/optim.go) --------

// The update phase's kernels take halt, the device's halt flag
// (backend.Deferrer: the step's verdict kept on the device): when halt is
// not null and *halt != 0 they return without touching memory. halt null:
// they always run.

// The step's verdict: v[0] is the split sum of the synced gradients, v[1]
// the step's loss; v[2] (the halt flag) = 1 when either is not finite or
// (sticky != 0) when v[2] was not 0 already, else 0. One thread of
// ONE_BLOCK writes it.
GORUN_KERNEL gorun_step_verdict(float* v, int sticky);

// SGDStep over n elements: d = grad + wd·param; buf = d on step 1 (step <=
// 1), else momentum·buf + (1-dampening)·d; d = nesterov ? d + momentum·buf
// : buf; param -= lr·d. With momentum == 0 buf is not touched (may be 0).
// Nothing while *halt != 0. ELEMENTWISE(n).
GORUN_KERNEL gorun_sgd_step(float* param, const float* grad, float* buf, int n, float lr,
                            float momentum, float dampening, float weight_decay,
                            int nesterov, int step, const float* halt);
// AdamStep over n elements (t = step, 1-based; bias corrections computed in
// double from t): g = grad + wd·param; m = β1·m + (1-β1)·g;
// v = β2·v + (1-β2)·g²; param -= (lr/(1-β1ᵗ))·m / (sqrt(v)/sqrt(1-β2ᵗ) + eps).
// With decoupled != 0, AdamWStep: g = grad, and param is first multiplied
// by (float)(1 - lr·wd) (in double). Nothing while *halt != 0.
// ELEMENTWISE(n).
GORUN_KERNEL gorun_adam_step(float* param, const float* grad, float* m, float* v, int n,
                             float lr, float beta1, float beta2, float eps,
                             float weight_decay, int step, int decoupled, const float* halt);
// ClipGradNorm over x[n], in place, after gorun_bn_partial in mode
// GORUN_BN_SUMS over x as [1, 1, n] in S chunks: sq = that partials' second
// half (S partial sums of squares). Every block adds the S partials in the
// same fixed order (double), t, and scales its elements by
// coef = (float)min(max_norm/(sqrt(t) + 1e-6), 1) (NaN stays NaN).
// Nothing while *halt != 0. ELEMENTWISE(n) with any grid (fewer blocks
// redo the S-term sum less often); block at most 256 threads.
GORUN_KERNEL gorun_clip_grad_norm(float* x, const double* sq, int n, int s, float max_norm,
                                  const float* halt);

// ---- data and evaluation ---------------------------------------------------

// dst[i, :] = src[idx[i], :] for i < rows; src and dst are [*, cols].
// ELEMENTWISE(rows·cols).
GORUN_KERNEL gorun_gather_rows(const float* src, const int* idx, float* dst, int rows,
                               int cols);
// The same for int32 rows (labels: cols = 1).
GORUN_KERNEL gorun_gather_rows_int(const int* src, const int* idx, int* dst, int rows,
                                   int cols);
// dst[i·dst_dim + dst_off + j] = src[i·src_dim + src_off + j] for i < n,
// j < len: a slice along dimension 1 (in elements, the inner dimensions
// folded in). Concat is two (a and b into their places), Narrow one,
// NarrowGrad one after clearing dx.
// ELEMENTWISE(n·len).
GORUN_KERNEL gorun_copy_slice(const float* src, float* dst, int n, int len, int src_dim,
                              int src_off, int dst_dim, int dst_off);
// Permute: y = x with its dimensions reordered, for y's shape
// [d0, …, d5] (a rank below 6 padded with leading 1s) and, for each of
// y's dimensions, the stride s0 … s5 of the x dimension it comes from (in
// elements; 0 for the padding): y[i0, …, i5] = x[Σ ik·sk]. n is y's
// elements (d0·…·d5). ELEMENTWISE(n).
GORUN_KERNEL gorun_permute(const float* x, float* y, int n, int d0, int d1, int d2, int d3,
                           int d4, int d5, int s0, int s1, int s2, int s3, int s4, int s5);
// Positions: pos[i, j] = j for pos[N, T] (int32). ELEMENTWISE(N·T).
GORUN_KERNEL gorun_positions(int* pos, int n, int t);
// Embedding: y[i, :] = w[ids[i], :] for i < n, w[V, D]; a row of zeros
// for an id outside [0, V). ELEMENTWISE(n·D).
GORUN_KERNEL gorun_embedding(const int* ids, const float* w, float* y, int n, int v, int d);
// EmbeddingGradWeight: dw[V, D] = Σ over i < n with ids[i] = v of dy[i, :]
// (float adds in increasing i, as the CPU kernel: the same bits), ids
// outside [0, V) adding nothing; with accumulate != 0 added to dw, else
// dw is overwritten (rows without ids get 0). Thread t owns column t mod D
// of rows [b·rows_per, (b+1)·rows_per), b = t / D, and scans all ids: no
// atomics. ELEMENTWISE(ceil(V/rows_per)·D).
GORUN_KERNEL gorun_embedding_grad(const int* ids, const float* dy, float* dw, int n, int v,
                                  int d, int rows_per, int accumulate);
// count[0] = number of rows i of x[N, C] whose argmax (first maximum wins)
// equals target[i]; with accumulate != 0, count[0] += that. ONE_BLOCK.
GORUN_KERNEL gorun_count_correct(const float* x, const int* target, int* count, int n, int c,
                                 int accumulate);
// out[0] = Σ x[i] summed in double in a fixed order (rounded once to
// float); with accumulate != 0, out[0] += that. ONE_BLOCK. (The CUDA device
// checks finiteness with the split sum instead, which spreads a long
// vector over many blocks.)
GORUN_KERNEL gorun_sum(const float* x, float* out, int n, int accumulate);

#endif // GORUN_KERNELS_H
