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

// ---- 128-bit loads (llm.c's float4 / Packed128) ----------------------------
//
// The bandwidth-bound elementwise and optimizer kernels read and write
// their arrays four floats at a time (one 128-bit load or store each) when
// every array they touch is 16-byte aligned, then do the last n mod 4
// elements (and everything, when one is not aligned) one at a time. Each
// element is computed by the same function either way, so the results are
// the same bits; a grid-stride loop covers the vectors, another the tail,
// so any geometry stays correct. A null array (an absent optional input)
// counts as aligned and is neither read nor written.

// gorun_aligned16 reports whether p may be read as float4s.
__device__ __forceinline__ bool gorun_aligned16(const void* p) {
  return ((unsigned long long)p & 15ULL) == 0;
}

// gorun_ld4 loads float4 q of p (zeros for a null p); gorun_st4 stores it
// (nothing for a null p).
__device__ __forceinline__ float4 gorun_ld4(const float* p, long long q) {
  if (!p) {
    float4 z;
    z.x = z.y = z.z = z.w = 0.0f;
    return z;
  }
  return reinterpret_cast<const float4*>(p)[q];
}
__device__ __forceinline__ void gorun_st4(float* p, long long q, float4 v) {
  if (p) reinterpret_cast<float4*>(p)[q] = v;
}

// gorun_vec_count is how many float4s of n elements the vector loop does:
// n/4 when every array is aligned, else 0.
__device__ __forceinline__ long long gorun_vec_count(long long n, const void* a, const void* b,
                                                     const void* c, const void* d) {
  bool ok = gorun_aligned16(a) && gorun_aligned16(b) && gorun_aligned16(c) && gorun_aligned16(d);
  return ok ? n / 4 : 0;
}

// gorun_map1 writes y[i] = f(x[i]) for i < n (y may be x).
template <typename F>
__device__ __forceinline__ void gorun_map1(const float* x, float* y, long long n, F f) {
  long long n4 = gorun_vec_count(n, x, y, 0, 0);
  GORUN_FOR(q, n4) {
    float4 v = gorun_ld4(x, q), r;
    r.x = f(v.x);
    r.y = f(v.y);
    r.z = f(v.z);
    r.w = f(v.w);
    gorun_st4(y, q, r);
  }
  GORUN_FOR(j, n - 4 * n4) {
    long long i = 4 * n4 + j;
    y[i] = f(x[i]);
  }
}

// gorun_map2 writes out[i] = f(a[i], b[i]) for i < n (out may be a or b).
template <typename F>
__device__ __forceinline__ void gorun_map2(const float* a, const float* b, float* out,
                                           long long n, F f) {
  long long n4 = gorun_vec_count(n, a, b, out, 0);
  GORUN_FOR(q, n4) {
    float4 u = gorun_ld4(a, q), v = gorun_ld4(b, q), r;
    r.x = f(u.x, v.x);
    r.y = f(u.y, v.y);
    r.z = f(u.z, v.z);
    r.w = f(u.w, v.w);
    gorun_st4(out, q, r);
  }
  GORUN_FOR(j, n - 4 * n4) {
    long long i = 4 * n4 + j;
    out[i] = f(a[i], b[i]);
  }
}

// gorun_update4 runs f(p[i], g[i], s1[i], s2[i]) for i < n, f taking p,
// s1 and s2 by reference (an optimizer step: the parameter and two state
// arrays updated in place from the gradient). s1 and s2 may be null (f
// must then not use them).
template <typename F>
__device__ __forceinline__ void gorun_update4(float* p, const float* g, float* s1, float* s2,
                                              long long n, F f) {
  long long n4 = gorun_vec_count(n, p, g, s1, s2);
  GORUN_FOR(q, n4) {
    float4 pv = gorun_ld4(p, q), gv = gorun_ld4(g, q), av = gorun_ld4(s1, q),
           bv = gorun_ld4(s2, q);
    f(pv.x, gv.x, av.x, bv.x);
    f(pv.y, gv.y, av.y, bv.y);
    f(pv.z, gv.z, av.z, bv.z);
    f(pv.w, gv.w, av.w, bv.w);
    gorun_st4(p, q, pv);
    gorun_st4(s1, q, av);
    gorun_st4(s2, q, bv);
  }
  GORUN_FOR(j, n - 4 * n4) {
    long long i = 4 * n4 + j;
    float pi = p[i], a = s1 ? s1[i] : 0.0f, b = s2 ? s2[i] : 0.0f;
    f(pi, g[i], a, b);
    p[i] = pi;
    if (s1) s1[i] = a;
    if (s2) s2[i] = b;
  }
}

#endif // GORUN_COMMON_CUH
