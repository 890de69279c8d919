// batchnorm.cu — batch and layer normalisation (see kernels.h,
// ops/batchnorm.go and ops/layernorm.go). Batch norm's x is [N, C, L]; its
// per-channel sums take the split sum's chunks (as gorun_bias_partial /
// gorun_bias_finish, two sums at once), the rest is per channel
// (gorun_bn_params, in double) or elementwise. Layer norm works on rows,
// a block per row.
#include "common.cuh"

GORUN_KERNEL gorun_bn_partial(const float* a, const float* b, const float* save, double* part,
                              int n, int c, int plane, int s, int chunk, int mode) {
  __shared__ double red[GORUN_RED];
  int total = n * plane, step = blockDim.x;
  // Advancing by step elements of a channel: dr rows and dk positions, so
  // the address moves by da, plus wrap when the position passes the end of
  // the plane (gorun_bias_partial's walk).
  int dr = plane > 0 ? step / plane : 0, dk = step - dr * plane;
  long long da = (long long)dr * c * plane + dk, wrap = (long long)(c - 1) * plane;
  bool grad = mode != GORUN_BN_SUMS, ln = mode == GORUN_LN_GAMMA_SUMS;
  for (int blk = blockIdx.x; blk < c * s; blk += gridDim.x) {
    int ch = blk / s, j = blk - ch * s;
    long long lo64 = (long long)j * chunk;
    int lo = (int)min(lo64, (long long)total), hi = (int)min(lo64 + chunk, (long long)total);
    float mean = grad && !ln ? save[ch] : 0.0f;
    // Two accumulators per sum keep two loads and adds in flight.
    double p0 = 0, p1 = 0, q0 = 0, q1 = 0;
    int i = lo + threadIdx.x;
    if (i < hi) {
      int m = (hi - 1 - i) / step + 1; // the thread's elements i, i+step, … below hi
      int r = i / plane, k = i - r * plane;
      long long at = ((long long)r * c + ch) * plane + k;
      auto next = [&] {
        k += dk;
        at += da;
        r += dr;
        if (k >= plane) {
          k -= plane;
          at += wrap;
          r++;
        }
      };
      if (ln) {
        // x̂ = (x - mean_r)·invstd_r with the element's row r.
        for (; m > 0; m--) {
          float d0 = a[at], xh = (b[at] - save[2 * r]) * save[2 * r + 1];
          p0 += (double)d0;
          q0 += (double)d0 * (double)xh;
          next();
        }
      } else if (grad) {
        for (; m >= 2; m -= 2) {
          float d0 = a[at], x0 = b[at];
          next();
          float d1 = a[at], x1 = b[at];
          next();
          p0 += (double)d0;
          q0 += (double)d0 * (double)(x0 - mean);
          p1 += (double)d1;
          q1 += (double)d1 * (double)(x1 - mean);
        }
        if (m > 0) {
          float d0 = a[at], x0 = b[at];
          p0 += (double)d0;
          q0 += (double)d0 * (double)(x0 - mean);
        }
      } else {
        for (; m >= 2; m -= 2) {
          double v0 = (double)a[at];
          next();
          double v1 = (double)a[at];
          next();
          p0 += v0;
          q0 += v0 * v0;
          p1 += v1;
          q1 += v1 * v1;
        }
        if (m > 0) {
          double v0 = (double)a[at];
          p0 += v0;
          q0 += v0 * v0;
        }
      }
    }
    double t0 = gorun_block_sum(red, p0 + p1);
    double t1 = gorun_block_sum(red, q0 + q1);
    if (threadIdx.x == 0) {
      part[blk] = t0;
      part[c * s + blk] = t1;
    }
  }
}

GORUN_KERNEL gorun_bn_finish(const double* part, float* out, int c, int s, int count) {
  __shared__ double red[GORUN_RED];
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double v0 = 0, v1 = 0;
    for (int j = threadIdx.x; j < s; j += blockDim.x) {
      v0 += part[ch * s + j];
      v1 += part[c * s + ch * s + j];
    }
    double t0 = gorun_block_sum(red, v0);
    double t1 = gorun_block_sum(red, v1);
    if (threadIdx.x == 0) {
      out[ch] = (float)t0;
      out[c + ch] = (float)t1;
      if (count >= 0) out[2 * c + ch] = (float)count;
    }
  }
}

// gorun_inv_std is ops' invStd: 1/sqrt(v + eps), in double.
__device__ __forceinline__ double gorun_inv_std(double v, float eps) {
  return 1.0 / sqrt(v + (double)eps);
}

GORUN_KERNEL gorun_bn_params(const float* a, const float* b, const float* gamma,
                             const float* beta, float* save, float* par, int c, float eps,
                             int mode) {
  GORUN_FOR(j64, c) {
    int j = (int)j64;
    double g = gamma ? (double)gamma[j] : 1.0;
    switch (mode) {
    case GORUN_BN_NORM: {
      double s1 = a[j], s2 = a[c + j], cnt = a[2 * c + j], mean = 0, v = 0;
      if (!(cnt <= 0)) { // as ops' bnMoments: a NaN count goes on
        mean = s1 / cnt;
        v = s2 / cnt - mean * mean;
        if (v <= 0) v = 0; // max(v, 0) as Go's: -0 becomes 0, a NaN stays NaN
      }
      save[j] = (float)mean;
      save[c + j] = (float)v;
      save[2 * c + j] = (float)cnt;
      par[j] = (float)mean;
      par[c + j] = (float)(g * gorun_inv_std(v, eps));
      par[2 * c + j] = beta ? beta[j] : 0.0f;
      break;
    }
    case GORUN_BN_EVAL:
      par[j] = a[j];
      par[c + j] = (float)(g * gorun_inv_std((double)b[j], eps));
      par[2 * c + j] = beta ? beta[j] : 0.0f;
      break;
    case GORUN_BN_GRAD: {
      double is = gorun_inv_std((double)a[c + j], eps), cnt = a[2 * c + j], m0 = 0, m1 = 0;
      if (cnt > 0) {
        m0 = (double)b[j] / cnt;
        m1 = (double)b[c + j] / cnt * is * is;
      }
      par[j] = a[j];
      par[c + j] = (float)(g * is);
      par[2 * c + j] = (float)m0;
      par[3 * c + j] = (float)m1;
      break;
    }
    }
  }
}

GORUN_KERNEL gorun_bn_apply(const float* x, const float* par, const float* res, float* y, int n,
                            int c, int plane, int relu) {
  GORUN_FOR(e64, (long long)n * c * plane) {
    int e = (int)e64, ch = e / plane % c;
    float v = (x[e] - par[ch]) * par[c + ch] + par[2 * c + ch];
    if (res) v = v + res[e];
    y[e] = relu && v < 0.0f ? 0.0f : v;
  }
}

GORUN_KERNEL gorun_bn_grad_input(const float* dy, const float* x, const float* par, float* dx,
                                 int n, int c, int plane) {
  GORUN_FOR(e64, (long long)n * c * plane) {
    int e = (int)e64, ch = e / plane % c;
    dx[e] = par[c + ch] * (dy[e] - par[2 * c + ch] - (x[e] - par[ch]) * par[3 * c + ch]);
  }
}

GORUN_KERNEL gorun_bn_grad_gamma(const float* gstats, const float* save, float* dgamma, int c,
                                 float eps, int accumulate) {
  GORUN_FOR(j64, c) {
    int j = (int)j64;
    float v = (float)((double)gstats[c + j] * gorun_inv_std((double)save[c + j], eps));
    dgamma[j] = accumulate ? dgamma[j] + v : v;
  }
}

GORUN_KERNEL gorun_bn_running(const float* save, float* running_mean, float* running_var,
                              float* tracked, int c, float momentum) {
  if (blockIdx.x != 0) return;
  // The same condition in every thread: the block leaves together.
  if (c <= 0 || !(save[2 * c] >= 1.0f)) return; // no samples: nothing to learn from
  double t = (double)tracked[0] + 1;
  __syncthreads(); // every thread has read tracked before thread 0 writes it
  double m = momentum < 0.0f ? 1.0 / t : (double)momentum;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    running_mean[j] = (float)((1 - m) * (double)running_mean[j] + m * (double)save[j]);
    double cnt = save[2 * c + j];
    if (cnt > 1)
      running_var[j] = (float)((1 - m) * (double)running_var[j] + m * (double)save[c + j] * cnt / (cnt - 1));
  }
  if (threadIdx.x == 0) tracked[0] = (float)t;
}

// gorun_block_bcast returns, in every thread, thread 0's v: the block sum
// reaches only thread 0. bc is a __shared__ double; every thread must call
// it.
__device__ __forceinline__ double gorun_block_bcast(double* bc, double v) {
  if (threadIdx.x == 0) *bc = v;
  __syncthreads();
  double r = *bc;
  __syncthreads(); // bc may be written again after this
  return r;
}

GORUN_KERNEL gorun_layer_norm(const float* x, const float* gamma, const float* beta, float* y,
                              float* save, int rows, int d, float eps) {
  __shared__ double red[GORUN_RED];
  __shared__ double bc;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + (long long)r * d;
    float* yr = y + (long long)r * d;
    double s = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) s += (double)xr[j];
    double mean = gorun_block_bcast(&bc, gorun_block_sum(red, s)) / d;
    double s2 = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double e = (double)xr[j] - mean;
      s2 += e * e;
    }
    s2 = gorun_block_bcast(&bc, gorun_block_sum(red, s2));
    double is = 1 / sqrt(s2 / d + (double)eps);
    float m = (float)mean, k = (float)is;
    if (threadIdx.x == 0) {
      save[2 * r] = m;
      save[2 * r + 1] = k;
    }
    if (!gamma && !beta) {
      for (int j = threadIdx.x; j < d; j += blockDim.x) yr[j] = (xr[j] - m) * k;
    } else {
      for (int j = threadIdx.x; j < d; j += blockDim.x)
        yr[j] = (gamma ? gamma[j] : 1.0f) * ((xr[j] - m) * k) + (beta ? beta[j] : 0.0f);
    }
  }
}

GORUN_KERNEL gorun_layer_norm_grad_input(const float* dy, const float* x, const float* save,
                                         const float* gamma, float* dx, int rows, int d) {
  __shared__ double red[GORUN_RED];
  __shared__ double bc;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *gr = dy + (long long)r * d, *xr = x + (long long)r * d;
    float* dr = dx + (long long)r * d;
    float mean = save[2 * r], is = save[2 * r + 1];
    double s0 = 0, s1 = 0; // Σg, Σg·x̂
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      double gg = (double)gr[j] * (gamma ? (double)gamma[j] : 1.0);
      s0 += gg;
      s1 += gg * (double)((xr[j] - mean) * is);
    }
    s0 = gorun_block_bcast(&bc, gorun_block_sum(red, s0));
    s1 = gorun_block_bcast(&bc, gorun_block_sum(red, s1));
    float m0 = (float)(s0 / d), m1 = (float)(s1 / d);
    // A thread writes only the elements it read itself: dx may be dy.
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      float gg = gr[j] * (gamma ? gamma[j] : 1.0f);
      dr[j] = is * (gg - m0 - (xr[j] - mean) * is * m1);
    }
  }
}
