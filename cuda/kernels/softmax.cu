// softmax.cu — softmax, log-softmax, their gradients and the losses, over
// the last dimension: rows [N, C] (see kernels.h, ops/activation.go,
// ops/loss.go).
#include "common.cuh"

GORUN_KERNEL gorun_log_softmax(const float* x, float* y, int n, int c) {
  GORUN_FOR(r, n) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    float m = gorun_row_max(xr, c);
    float ls = (float)log(gorun_exp_sum(xr, c, m));
    for (int j = 0; j < c; j++) yr[j] = xr[j] - m - ls;
  }
}

GORUN_KERNEL gorun_softmax(const float* x, float* y, int n, int c, int causal) {
  GORUN_FOR(r, n) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    int k = c; // the columns the row covers
    if (causal > 0) {
      k = min((int)(r % causal) + 1, c);
      for (int j = k; j < c; j++) yr[j] = 0.0f;
    }
    float m = gorun_row_max(xr, k);
    double s = 0;
    for (int j = 0; j < k; j++) {
      double e = exp((double)(xr[j] - m));
      s += e;
      yr[j] = (float)e;
    }
    double inv = 1 / s;
    for (int j = 0; j < k; j++) yr[j] = (float)((double)yr[j] * inv);
  }
}

GORUN_KERNEL gorun_log_softmax_grad(const float* dy, const float* y, float* dx, int n, int c) {
  GORUN_FOR(r, n) {
    const float* gr = dy + r * c;
    const float* yr = y + r * c;
    float* dr = dx + r * c;
    double s = 0;
    for (int j = 0; j < c; j++) s += (double)gr[j];
    for (int j = 0; j < c; j++) dr[j] = gr[j] - (float)(exp((double)yr[j]) * s);
  }
}

GORUN_KERNEL gorun_softmax_grad(const float* dy, const float* y, float* dx, int n, int c) {
  GORUN_FOR(r, n) {
    const float* gr = dy + r * c;
    const float* yr = y + r * c;
    float* dr = dx + r * c;
    double s = 0;
    for (int j = 0; j < c; j++) s += (double)gr[j] * (double)yr[j];
    float st = (float)s;
    for (int j = 0; j < c; j++) dr[j] = yr[j] * (gr[j] - st);
  }
}

// gorun_block_sum_loss sums the threads' partial losses in a fixed order and
// writes loss[0] = -scale·Σ (or adds it). Every thread of the block calls it.
__device__ __forceinline__ void gorun_block_sum_loss(double* part, double mine, float* loss,
                                                     float scale, int accumulate) {
  part[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (unsigned int j = 0; j < blockDim.x; j++) s += part[j];
    double v = -(double)scale * s;
    loss[0] = accumulate ? (float)((double)loss[0] + v) : (float)v;
  }
}

GORUN_KERNEL gorun_nll_loss(const float* logp, const int* target, float* loss, int n, int c,
                            float scale, int accumulate, int has_ignore, int ignore_index) {
  __shared__ double part[GORUN_RED];
  if (blockIdx.x != 0) return;
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    int t = target[i];
    if (has_ignore && t == ignore_index) continue;
    if (t < 0 || t >= c)
      s += NAN;
    else
      s += (double)logp[(long long)i * c + t];
  }
  gorun_block_sum_loss(part, s, loss, scale, accumulate);
}

GORUN_KERNEL gorun_nll_loss_grad(const float* dloss, const int* target, float* dx, int n,
                                 int c, float scale, int has_ignore, int ignore_index) {
  float g = (float)(-(double)scale * (double)dloss[0]);
  GORUN_FOR(e64, (long long)n * c) {
    int e = (int)e64, i = e / c, t = target[i];
    dx[e] = t == e - i * c && !(has_ignore && t == ignore_index) ? g : 0.0f;
  }
}

GORUN_KERNEL gorun_cross_entropy(const float* logits, const int* target, float* loss,
                                 float* probs, int n, int c, float smoothing, float scale,
                                 int accumulate, int has_ignore, int ignore_index) {
  __shared__ double part[GORUN_RED];
  if (blockIdx.x != 0) return;
  double eps = smoothing, s = 0; // s: Σ log-likelihoods, negated at the end
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float* xr = logits + (long long)i * c;
    float* pr = probs + (long long)i * c;
    float m = gorun_row_max(xr, c);
    double es = gorun_exp_sum(xr, c, m), ls = log(es);
    int t = target[i];
    if (has_ignore && t == ignore_index) {
      // skipped: probs only
    } else if (t < 0 || t >= c) {
      s += NAN;
    } else if (eps == 0) {
      s += (double)(xr[t] - m) - ls;
    } else {
      double sx = 0; // Σ_j logp[j] + C·ls
      for (int j = 0; j < c; j++) sx += (double)(xr[j] - m);
      s += (1 - eps) * ((double)(xr[t] - m) - ls) + eps * (sx / c - ls);
    }
    double inv = 1 / es;
    for (int j = 0; j < c; j++) pr[j] = (float)(exp((double)(xr[j] - m)) * inv);
  }
  gorun_block_sum_loss(part, s, loss, scale, accumulate);
}

GORUN_KERNEL gorun_cross_entropy_grad(const float* dloss, const float* probs,
                                      const int* target, float* dx, int n, int c,
                                      float smoothing, float scale, int has_ignore,
                                      int ignore_index) {
  float g = (float)((double)scale * (double)dloss[0]);
  double eps = smoothing;
  // With ε = 0: off = 0 and hit = 1, so g·(p-0) = g·p exactly.
  float off = (float)(eps / c), hit = (float)(1 - eps + eps / c);
  GORUN_FOR(e64, (long long)n * c) {
    int e = (int)e64, i = e / c, t = target[i];
    dx[e] = has_ignore && t == ignore_index ? 0.0f : g * (probs[e] - (t == e - i * c ? hit : off));
  }
}

GORUN_KERNEL gorun_mse_loss(const float* pred, const float* target, float* loss, int n, int d,
                            float scale, int accumulate) {
  __shared__ double red[GORUN_RED];
  if (blockIdx.x != 0) return;
  long long total = (long long)n * d;
  double s = 0;
  for (long long i = threadIdx.x; i < total; i += blockDim.x) {
    double v = (double)pred[i] - (double)target[i];
    s += v * v;
  }
  double t = gorun_block_sum(red, s);
  if (threadIdx.x == 0) {
    double v = total > 0 ? (double)scale * (t / d) : 0.0;
    loss[0] = accumulate ? (float)((double)loss[0] + v) : (float)v;
  }
}

GORUN_KERNEL gorun_mse_loss_grad(const float* dloss, const float* pred, const float* target,
                                 float* dx, int n, int d, float scale) {
  if (d <= 0) return;
  float g = (float)(2 * (double)scale * (double)dloss[0] / d);
  GORUN_FOR(e, (long long)n * d) { dx[e] = g * (pred[e] - target[e]); }
}
