// common.cuh — device helpers shared by the kernels (not part of the ABI).
#ifndef GORUN_COMMON_CUH
#define GORUN_COMMON_CUH

#include "kernels.h"

// GORUN_FOR(i, n) loops i over [0, n) with a grid-stride loop, so any
// one-dimensional geometry covers all n elements.
#define GORUN_FOR(i, n)                                                         \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
       i += (long long)blockDim.x * gridDim.x)

// GORUN_RED is the size of the static shared arrays of the reducing kernels:
// the most threads a block of theirs may have (the ABI says exactly 256).
#define GORUN_RED 256

// gorun_block_sum returns, in thread 0, the sum of the block's threads' v,
// added in a fixed order, so the result is the same run to run: thread u
// adds the values of threads 16u … 16u+15, then thread 0 adds those 16
// sums (two short serial runs, three barriers). red is a __shared__ array
// of GORUN_RED doubles; every thread must call it; blockDim.x must be at
// most GORUN_RED (any count, not only a multiple of 16). red may be reused
// after it returns; other threads get an unspecified value.
#define GORUN_RED_FAN 16
__device__ __forceinline__ double gorun_block_sum(double* red, double v) {
  unsigned int t = threadIdx.x, nt = blockDim.x;
  red[t] = v;
  __syncthreads();
  unsigned int lo = t * GORUN_RED_FAN;
  if (lo < nt) {
    double s = red[lo];
    for (unsigned int j = lo + 1; j < lo + GORUN_RED_FAN && j < nt; j++) s += red[j];
    red[lo] = s; // only this thread reads or writes red[lo … lo+15]
  }
  __syncthreads();
  double s = 0;
  if (t == 0) {
    s = red[0];
    for (unsigned int j = GORUN_RED_FAN; j < nt; j += GORUN_RED_FAN) s += red[j];
  }
  __syncthreads();
  return s;
}

// gorun_mix64 is splitmix64's output function (a bijective 64-bit mixer).
__device__ __forceinline__ unsigned long long gorun_mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// gorun_uniform returns draw number i of the stream of seed: a double in
// [0, 1) with 53 random bits, the i-th output of a splitmix64 generator
// whose state starts at mix64(seed). Counter based: no state to carry.
__device__ __forceinline__ double gorun_uniform(unsigned long long seed, unsigned long long i) {
  unsigned long long h = gorun_mix64(gorun_mix64(seed) + 0x9E3779B97F4A7C15ULL * (i + 1));
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

// gorun_keep_mask returns the dropout mask value of draw i: 1/(1-p) (rounded
// to float as ops/dropout.go) when the draw keeps, else 0; 1 when p <= 0,
// 0 when p >= 1.
__device__ __forceinline__ float gorun_keep_mask(float p, unsigned long long seed,
                                                 unsigned long long i) {
  if (!(p > 0.0f)) return 1.0f;
  if (p >= 1.0f) return 0.0f;
  double keep = 1.0 - (double)p;
  return gorun_uniform(seed, i) < keep ? 1.0f / (float)keep : 0.0f;
}

// gorun_row_max is ops' rowMax: the largest element, NaN when there is one.
__device__ __forceinline__ float gorun_row_max(const float* row, int c) {
  float m = row[0];
  for (int j = 1; j < c; j++) {
    float v = row[j];
    if (v > m || v != v) m = v;
  }
  return m;
}

// gorun_exp_sum is ops' expSum: Σ exp(v - m) in double.
__device__ __forceinline__ double gorun_exp_sum(const float* row, int c, float m) {
  double s = 0;
  for (int j = 0; j < c; j++) s += exp((double)(row[j] - m));
  return s;
}

#endif // GORUN_COMMON_CUH
