// hostcheck.cc — compiles the CUDA kernels (../all.cu) as plain C++ through
// ../host.h and wraps each in an extern "C" hc_<name>(grid, block, args...)
// for the Go side. Kernels with __shared__ memory and __syncthreads run with
// launch_block (a std::thread per CUDA thread, blocks one at a time); the
// others with launch (every thread in turn).
#include "host.h"
#include "all.cu"
#include "hostcheck.h"
#include "sources.h"

const char* hc_sources_sha256() { return GORUN_KERNEL_SOURCES_SHA256; }

#define SEQ(...) gorun_host::launch(g, b, __VA_ARGS__)
#define BLK(...) gorun_host::launch_block(g, b, __VA_ARGS__)

void hc_relu(int g, int b, const float* x, float* y, int n) { SEQ(gorun_relu, x, y, n); }
void hc_relu_grad(int g, int b, const float* dy, const float* dy2, const float* y, float* dx, int n) {
  SEQ(gorun_relu_grad, dy, dy2, y, dx, n);
}
void hc_unary(int g, int b, const float* x, float* y, int n, int op, float alpha) {
  SEQ(gorun_unary, x, y, n, op, alpha);
}
void hc_binary(int g, int b, const float* a, const float* bb, float* out, int n, int op,
               float alpha) {
  SEQ(gorun_binary, a, bb, out, n, op, alpha);
}
void hc_copy(int g, int b, const float* src, float* dst, int n) { SEQ(gorun_copy, src, dst, n); }
void hc_fill(int g, int b, float* x, int n, float value) { SEQ(gorun_fill, x, n, value); }
void hc_scale(int g, int b, float* x, int n, float s) { SEQ(gorun_scale, x, n, s); }
void hc_accumulate(int g, int b, float* dst, const float* src, int n) {
  SEQ(gorun_accumulate, dst, src, n);
}
void hc_axpy(int g, int b, float* dst, const float* src, int n, float alpha) {
  SEQ(gorun_axpy, dst, src, n, alpha);
}

void hc_dropout(int g, int b, const float* x, float* y, float* mask, int n, float p, u64 seed,
                u64 offset) {
  SEQ(gorun_dropout, x, y, mask, n, p, seed, offset);
}
void hc_dropout2d(int g, int b, const float* x, float* y, float* mask, int planes, int hw,
                  float p, u64 seed, u64 offset) {
  SEQ(gorun_dropout2d, x, y, mask, planes, hw, p, seed, offset);
}
void hc_dropout_grad(int g, int b, const float* dy, const float* mask, float* dx, int n) {
  SEQ(gorun_dropout_grad, dy, mask, dx, n);
}
void hc_dropout2d_grad(int g, int b, const float* dy, const float* mask, float* dx, int planes,
                       int hw) {
  SEQ(gorun_dropout2d_grad, dy, mask, dx, planes, hw);
}

void hc_im2col(int g, int b, const float* x, float* col, int n, int c, int cx, int h, int w,
               int kh, int kw, int oh, int ow, int stride, int pad) {
  SEQ(gorun_im2col, x, col, n, c, cx, h, w, kh, kw, oh, ow, stride, pad);
}
void hc_col2im(int g, int b, const float* col, float* dx, int n, int c, int cx, int h, int w,
               int kh, int kw, int oh, int ow, int stride, int pad) {
  SEQ(gorun_col2im, col, dx, n, c, cx, h, w, kh, kw, oh, ow, stride, pad);
}
void hc_onl_to_nol(int g, int b, const float* src, float* dst, int n, int o, int plane) {
  SEQ(gorun_onl_to_nol, src, dst, n, o, plane);
}
void hc_nol_to_onl(int g, int b, const float* src, float* dst, int n, int o, int plane) {
  SEQ(gorun_nol_to_onl, src, dst, n, o, plane);
}
void hc_bias_add(int g, int b, float* y, const float* bias, int n, int c, int plane) {
  SEQ(gorun_bias_add, y, bias, n, c, plane);
}
void hc_bias_grad(int g, int b, const float* dy, float* db, int n, int c, int plane,
                  int accumulate) {
  BLK(gorun_bias_grad, dy, db, n, c, plane, accumulate);
}
void hc_bias_partial(int g, int b, const float* dy, double* part, int n, int c, int plane, int s,
                     int chunk) {
  BLK(gorun_bias_partial, dy, part, n, c, plane, s, chunk);
}
void hc_bias_finish(int g, int b, const double* part, float* db, int c, int s, int accumulate) {
  BLK(gorun_bias_finish, part, db, c, s, accumulate);
}

void hc_bn_partial(int g, int b, const float* a, const float* bb, const float* save,
                   double* part, int n, int c, int plane, int s, int chunk, int mode) {
  BLK(gorun_bn_partial, a, bb, save, part, n, c, plane, s, chunk, mode);
}
void hc_bn_finish(int g, int b, const double* part, float* out, int c, int s, int count) {
  BLK(gorun_bn_finish, part, out, c, s, count);
}
void hc_bn_params(int g, int b, const float* a, const float* bb, const float* gamma,
                  const float* beta, float* save, float* par, int c, float eps, int mode) {
  SEQ(gorun_bn_params, a, bb, gamma, beta, save, par, c, eps, mode);
}
void hc_bn_apply(int g, int b, const float* x, const float* par, const float* res, float* y, int n,
                 int c, int plane, int relu) {
  SEQ(gorun_bn_apply, x, par, res, y, n, c, plane, relu);
}
void hc_bn_grad_input(int g, int b, const float* dy, const float* x, const float* par,
                      float* dx, int n, int c, int plane) {
  SEQ(gorun_bn_grad_input, dy, x, par, dx, n, c, plane);
}
void hc_bn_grad_gamma(int g, int b, const float* gstats, const float* save, float* dgamma,
                      int c, float eps, int accumulate) {
  SEQ(gorun_bn_grad_gamma, gstats, save, dgamma, c, eps, accumulate);
}
void hc_bn_running(int g, int b, const float* save, float* running_mean, float* running_var,
                   float* tracked, int c, float momentum) {
  BLK(gorun_bn_running, save, running_mean, running_var, tracked, c, momentum);
}
void hc_layer_norm(int g, int b, const float* x, const float* gamma, const float* beta,
                   float* y, float* save, int rows, int d, float eps) {
  BLK(gorun_layer_norm, x, gamma, beta, y, save, rows, d, eps);
}
void hc_layer_norm_grad_input(int g, int b, const float* dy, const float* x, const float* save,
                              const float* gamma, float* dx, int rows, int d) {
  BLK(gorun_layer_norm_grad_input, dy, x, save, gamma, dx, rows, d);
}

void hc_maxpool2d(int g, int b, const float* x, float* y, int* idx, int planes, int h, int w,
                  int oh, int ow, int k, int s) {
  SEQ(gorun_maxpool2d, x, y, idx, planes, h, w, oh, ow, k, s);
}
void hc_maxpool2d_grad(int g, int b, const float* dy, const int* idx, float* dx, int planes,
                       int h, int w, int oh, int ow, int k, int s) {
  SEQ(gorun_maxpool2d_grad, dy, idx, dx, planes, h, w, oh, ow, k, s);
}
void hc_avgpool2d(int g, int b, const float* x, float* y, int planes, int h, int w, int oh,
                  int ow, int k, int s, int p) {
  SEQ(gorun_avgpool2d, x, y, planes, h, w, oh, ow, k, s, p);
}
void hc_avgpool2d_grad(int g, int b, const float* dy, float* dx, int planes, int h, int w,
                       int oh, int ow, int k, int s, int p) {
  SEQ(gorun_avgpool2d_grad, dy, dx, planes, h, w, oh, ow, k, s, p);
}
void hc_global_avgpool2d(int g, int b, const float* x, float* y, int planes, int hw) {
  SEQ(gorun_global_avgpool2d, x, y, planes, hw);
}
void hc_global_avgpool2d_grad(int g, int b, const float* dy, float* dx, int planes, int hw) {
  SEQ(gorun_global_avgpool2d_grad, dy, dx, planes, hw);
}

void hc_log_softmax(int g, int b, const float* x, float* y, int n, int c) {
  SEQ(gorun_log_softmax, x, y, n, c);
}
void hc_softmax(int g, int b, const float* x, float* y, int n, int c, int causal) {
  SEQ(gorun_softmax, x, y, n, c, causal);
}
void hc_log_softmax_grad(int g, int b, const float* dy, const float* y, float* dx, int n,
                         int c) {
  SEQ(gorun_log_softmax_grad, dy, y, dx, n, c);
}
void hc_softmax_grad(int g, int b, const float* dy, const float* y, float* dx, int n, int c) {
  SEQ(gorun_softmax_grad, dy, y, dx, n, c);
}

void hc_nll_loss(int g, int b, const float* logp, const int* target, float* loss, int n,
                 int c, float scale, int accumulate, int has_ignore, int ignore_index) {
  BLK(gorun_nll_loss, logp, target, loss, n, c, scale, accumulate, has_ignore, ignore_index);
}
void hc_nll_loss_grad(int g, int b, const float* dloss, const int* target, float* dx, int n,
                      int c, float scale, int has_ignore, int ignore_index) {
  SEQ(gorun_nll_loss_grad, dloss, target, dx, n, c, scale, has_ignore, ignore_index);
}
void hc_cross_entropy(int g, int b, const float* logits, const int* target, float* loss,
                      float* probs, int n, int c, float smoothing, float scale, int accumulate,
                      int has_ignore, int ignore_index) {
  BLK(gorun_cross_entropy, logits, target, loss, probs, n, c, smoothing, scale, accumulate,
      has_ignore, ignore_index);
}
void hc_cross_entropy_grad(int g, int b, const float* dloss, const float* probs,
                           const int* target, float* dx, int n, int c, float smoothing,
                           float scale, int has_ignore, int ignore_index) {
  SEQ(gorun_cross_entropy_grad, dloss, probs, target, dx, n, c, smoothing, scale, has_ignore,
      ignore_index);
}
void hc_mse_loss(int g, int b, const float* pred, const float* target, float* loss, int n,
                 int d, float scale, int accumulate) {
  BLK(gorun_mse_loss, pred, target, loss, n, d, scale, accumulate);
}
void hc_mse_loss_grad(int g, int b, const float* dloss, const float* pred, const float* target,
                      float* dx, int n, int d, float scale) {
  SEQ(gorun_mse_loss_grad, dloss, pred, target, dx, n, d, scale);
}

void hc_sgd_step(int g, int b, float* param, const float* grad, float* buf, int n, float lr,
                 float momentum, float dampening, float weight_decay, int nesterov, int step) {
  SEQ(gorun_sgd_step, param, grad, buf, n, lr, momentum, dampening, weight_decay, nesterov,
      step);
}
void hc_adam_step(int g, int b, float* param, const float* grad, float* m, float* v, int n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                  int decoupled) {
  SEQ(gorun_adam_step, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step,
      decoupled);
}

void hc_gather_rows(int g, int b, const float* src, const int* idx, float* dst, int rows,
                    int cols) {
  SEQ(gorun_gather_rows, src, idx, dst, rows, cols);
}
void hc_gather_rows_int(int g, int b, const int* src, const int* idx, int* dst, int rows,
                        int cols) {
  SEQ(gorun_gather_rows_int, src, idx, dst, rows, cols);
}
void hc_copy_slice(int g, int b, const float* src, float* dst, int n, int len, int src_dim,
                   int src_off, int dst_dim, int dst_off) {
  SEQ(gorun_copy_slice, src, dst, n, len, src_dim, src_off, dst_dim, dst_off);
}
void hc_permute(int g, int b, const float* x, float* y, int n, int d0, int d1, int d2, int d3,
                int d4, int d5, int s0, int s1, int s2, int s3, int s4, int s5) {
  SEQ(gorun_permute, x, y, n, d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5);
}
void hc_embedding(int g, int b, const int* ids, const float* w, float* y, int n, int v, int d) {
  SEQ(gorun_embedding, ids, w, y, n, v, d);
}
void hc_embedding_grad(int g, int b, const int* ids, const float* dy, float* dw, int n, int v,
                       int d, int rows_per, int accumulate) {
  SEQ(gorun_embedding_grad, ids, dy, dw, n, v, d, rows_per, accumulate);
}
void hc_positions(int g, int b, int* pos, int n, int t) { SEQ(gorun_positions, pos, n, t); }
void hc_clip_grad_norm(int g, int b, float* x, const double* sq, int n, int s, float max_norm) {
  BLK(gorun_clip_grad_norm, x, sq, n, s, max_norm);
}
void hc_count_correct(int g, int b, const float* x, const int* target, int* count, int n,
                      int c, int accumulate) {
  BLK(gorun_count_correct, x, target, count, n, c, accumulate);
}
void hc_sum(int g, int b, const float* x, float* out, int n, int accumulate) {
  BLK(gorun_sum, x, out, n, accumulate);
}
