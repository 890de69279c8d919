// classifier.cu — the fused classifier (ops.CrossEntropyFused, llm.c's
// fused_classifier): cross-entropy's loss and its gradient in one pass
// over the logits, the probabilities never stored (see kernels.h,
// ops/classifier.go).
#include "common.cuh"

// gorun_block_max returns, in every thread, the largest of the block's
// threads' v (NaN when one is NaN, as gorun_row_max), combined by thread 0
// in a fixed order. mx is a __shared__ array of GORUN_RED floats; every
// thread must call it.
__device__ __forceinline__ float gorun_block_max(float* mx, float v) {
  mx[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = mx[0];
    for (unsigned int j = 1; j < blockDim.x; j++) {
      float u = mx[j];
      if (u > m || u != u) m = u;
    }
    mx[0] = m;
  }
  __syncthreads();
  float m = mx[0];
  __syncthreads(); // mx may be reused
  return m;
}

GORUN_KERNEL gorun_cross_entropy_fused(const float* logits, const int* target,
                                       const float* dloss, double* rowloss, float* dx, int n,
                                       int c, float smoothing, float scale, int has_ignore,
                                       int ignore_index) {
  __shared__ double red[GORUN_RED];
  __shared__ float mx[GORUN_RED];
  __shared__ double es_all[1];
  float g = (float)((double)scale * (double)dloss[0]);
  double eps = smoothing;
  // With ε = 0: off = 0 and hit = 1, so g·(p-0) = g·p exactly.
  float off = (float)(eps / c), hit = (float)(1 - eps + eps / c);
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = logits + (long long)i * c;
    float* dr = dx + (long long)i * c;
    int t = target[i];
    int skip = has_ignore && t == ignore_index;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
      float v = xr[j];
      if (v > m || v != v) m = v;
    }
    m = gorun_block_max(mx, m);
    double e = 0, sx = 0;
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
      float d = xr[j] - m;
      e += exp((double)d);
      sx += (double)d;
    }
    double es = gorun_block_sum(red, e);
    double sxs = eps != 0 ? gorun_block_sum(red, sx) : 0;
    if (threadIdx.x == 0) {
      double ls = log(es), l;
      if (skip)
        l = 0;
      else if (t < 0 || t >= c)
        l = NAN;
      else if (eps == 0)
        l = (double)(xr[t] - m) - ls;
      else
        l = (1 - eps) * ((double)(xr[t] - m) - ls) + eps * (sxs / c - ls);
      rowloss[i] = l;
      es_all[0] = es;
    }
    __syncthreads();
    double inv = 1 / es_all[0];
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
      float p = (float)(exp((double)(xr[j] - m)) * inv);
      dr[j] = skip ? 0.0f : g * (p - (j == t ? hit : off));
    }
    __syncthreads(); // es_all is the next row's
  }
}

GORUN_KERNEL gorun_cross_entropy_fused_loss(const double* rowloss, float* loss, int n,
                                            float scale, int accumulate) {
  __shared__ double red[GORUN_RED];
  if (blockIdx.x != 0) return;
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += rowloss[i];
  double total = gorun_block_sum(red, s);
  if (threadIdx.x == 0) {
    double v = -(double)scale * total;
    loss[0] = accumulate ? (float)((double)loss[0] + v) : (float)v;
  }
}
