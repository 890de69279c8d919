// hostcheck.h — C declarations of hostcheck.cc's wrappers: one hc_<name>
// per kernel of ../kernels.h, taking the launch geometry (grid, block) and
// then the kernel's own arguments.
#ifndef GORUN_HOSTCHECK_H
#define GORUN_HOSTCHECK_H
#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long u64;

void hc_relu(int g, int b, const float* x, float* y, int n);
void hc_relu_grad(int g, int b, const float* dy, const float* dy2, const float* y, float* dx, int n);
void hc_unary(int g, int b, const float* x, float* y, int n, int op, float alpha);
void hc_binary(int g, int b, const float* a, const float* bb, float* out, int n, int op,
               float alpha);
void hc_copy(int g, int b, const float* src, float* dst, int n);
void hc_fill(int g, int b, float* x, int n, float value);
void hc_scale(int g, int b, float* x, int n, float s);
void hc_accumulate(int g, int b, float* dst, const float* src, int n);
void hc_axpy(int g, int b, float* dst, const float* src, int n, float alpha);

void hc_dropout(int g, int b, const float* x, float* y, float* mask, int n, float p, u64 seed,
                u64 offset);
void hc_dropout2d(int g, int b, const float* x, float* y, float* mask, int planes, int hw,
                  float p, u64 seed, u64 offset);
void hc_dropout_grad(int g, int b, const float* dy, const float* mask, float* dx, int n);
void hc_dropout2d_grad(int g, int b, const float* dy, const float* mask, float* dx, int planes,
                       int hw);

void hc_im2col(int g, int b, const float* x, float* col, int n, int c, int cx, int h, int w,
               int kh, int kw, int oh, int ow, int stride, int pad);
void hc_col2im(int g, int b, const float* col, float* dx, int n, int c, int cx, int h, int w,
               int kh, int kw, int oh, int ow, int stride, int pad);
void hc_onl_to_nol(int g, int b, const float* src, float* dst, int n, int o, int plane);
void hc_nol_to_onl(int g, int b, const float* src, float* dst, int n, int o, int plane);
void hc_bias_add(int g, int b, float* y, const float* bias, int n, int c, int plane);
void hc_bias_grad(int g, int b, const float* dy, float* db, int n, int c, int plane,
                  int accumulate);
void hc_bias_partial(int g, int b, const float* dy, double* part, int n, int c, int plane, int s,
                     int chunk);
void hc_bias_finish(int g, int b, const double* part, float* db, int c, int s, int accumulate);

void hc_bn_partial(int g, int b, const float* a, const float* bb, const float* save,
                   double* part, int n, int c, int plane, int s, int chunk, int mode);
void hc_bn_finish(int g, int b, const double* part, float* out, int c, int s, int count);
void hc_bn_params(int g, int b, const float* a, const float* bb, const float* gamma,
                  const float* beta, float* save, float* par, int c, float eps, int mode);
void hc_bn_apply(int g, int b, const float* x, const float* par, const float* res, float* y, int n,
                 int c, int plane, int relu);
void hc_bn_grad_input(int g, int b, const float* dy, const float* x, const float* par,
                      float* dx, int n, int c, int plane);
void hc_bn_grad_gamma(int g, int b, const float* gstats, const float* save, float* dgamma,
                      int c, float eps, int accumulate);
void hc_bn_running(int g, int b, const float* save, float* running_mean, float* running_var,
                   float* tracked, int c, float momentum);

void hc_layer_norm(int g, int b, const float* x, const float* gamma, const float* beta,
                   float* y, float* save, int rows, int d, float eps);
void hc_layer_norm_grad_input(int g, int b, const float* dy, const float* x, const float* save,
                              const float* gamma, float* dx, int rows, int d);

void hc_maxpool2d(int g, int b, const float* x, float* y, int* idx, int planes, int h, int w,
                  int oh, int ow, int k, int s);
void hc_maxpool2d_grad(int g, int b, const float* dy, const int* idx, float* dx, int planes,
                       int h, int w, int oh, int ow, int k, int s);
void hc_avgpool2d(int g, int b, const float* x, float* y, int planes, int h, int w, int oh,
                  int ow, int k, int s, int p);
void hc_avgpool2d_grad(int g, int b, const float* dy, float* dx, int planes, int h, int w,
                       int oh, int ow, int k, int s, int p);
void hc_global_avgpool2d(int g, int b, const float* x, float* y, int planes, int hw);
void hc_global_avgpool2d_grad(int g, int b, const float* dy, float* dx, int planes, int hw);

void hc_log_softmax(int g, int b, const float* x, float* y, int n, int c);
void hc_softmax(int g, int b, const float* x, float* y, int n, int c, int causal);
void hc_log_softmax_grad(int g, int b, const float* dy, const float* y, float* dx, int n,
                         int c);
void hc_softmax_grad(int g, int b, const float* dy, const float* y, float* dx, int n, int c);

void hc_nll_loss(int g, int b, const float* logp, const int* target, float* loss, int n,
                 int c, float scale, int accumulate, int has_ignore, int ignore_index);
void hc_nll_loss_grad(int g, int b, const float* dloss, const int* target, float* dx, int n,
                      int c, float scale, int has_ignore, int ignore_index);
void hc_cross_entropy(int g, int b, const float* logits, const int* target, float* loss,
                      float* probs, int n, int c, float smoothing, float scale, int accumulate,
                      int has_ignore, int ignore_index);
void hc_cross_entropy_grad(int g, int b, const float* dloss, const float* probs,
                           const int* target, float* dx, int n, int c, float smoothing,
                           float scale, int has_ignore, int ignore_index);
void hc_mse_loss(int g, int b, const float* pred, const float* target, float* loss, int n,
                 int d, float scale, int accumulate);
void hc_mse_loss_grad(int g, int b, const float* dloss, const float* pred, const float* target,
                      float* dx, int n, int d, float scale);

void hc_sgd_step(int g, int b, float* param, const float* grad, float* buf, int n, float lr,
                 float momentum, float dampening, float weight_decay, int nesterov, int step);
void hc_adam_step(int g, int b, float* param, const float* grad, float* m, float* v, int n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                  int decoupled);

void hc_gather_rows(int g, int b, const float* src, const int* idx, float* dst, int rows,
                    int cols);
void hc_gather_rows_int(int g, int b, const int* src, const int* idx, int* dst, int rows,
                        int cols);
void hc_copy_slice(int g, int b, const float* src, float* dst, int n, int len, int src_dim,
                   int src_off, int dst_dim, int dst_off);
void hc_permute(int g, int b, const float* x, float* y, int n, int d0, int d1, int d2, int d3,
                int d4, int d5, int s0, int s1, int s2, int s3, int s4, int s5);
void hc_embedding(int g, int b, const int* ids, const float* w, float* y, int n, int v, int d);
void hc_embedding_grad(int g, int b, const int* ids, const float* dy, float* dw, int n, int v,
                       int d, int rows_per, int accumulate);
void hc_positions(int g, int b, int* pos, int n, int t);
void hc_clip_grad_norm(int g, int b, float* x, const double* sq, int n, int s, float max_norm);
void hc_count_correct(int g, int b, const float* x, const int* target, int* count, int n,
                      int c, int accumulate);
void hc_sum(int g, int b, const float* x, float* out, int n, int accumulate);

// hc_sources_sha256 returns the stamp (sources.h) this build was compiled with.
const char* hc_sources_sha256(void);

#ifdef __cplusplus
}
#endif
#endif // GORUN_HOSTCHECK_H
