// attention.cu — fused attention that never writes T×T (ops/attention.go,
// kernels.h): FlashAttention-2's forward (online softmax over key tiles,
// saving each row's logsumexp) and its backward from the logsumexp, as
// two kernels (dq; dk and dv) so that no atomics are needed. Scalar fp32:
// the same tiling the host check runs.
#include "common.cuh"

#define GORUN_ATT_LANES (GORUN_ATT_THREADS / GORUN_ATT_TILE) // threads per row
#define GORUN_ATT_PER (GORUN_ATT_DMAX / GORUN_ATT_LANES)     // dimensions per thread
// GORUN_ATT_LD is the row stride of the shared tiles: one more than a row,
// so that the threads of a warp reading one column of different rows (the
// scores' dot products) hit different banks.
#define GORUN_ATT_LD (GORUN_ATT_DMAX + 1)

// gorun_att_geom is where one (sample, head, tile) block's rows are.
struct gorun_att_geom {
  const float *q, *k, *v; // row 0 of the sample's q, k, v of the head
  long long ld, ldo;      // row strides of qkv and o
  long long o;            // offset of row 0 of the head in o (and do)
  long long lse;          // offset of the head's T logsumexps
  int row0;               // the tile's first row
};

__device__ __forceinline__ gorun_att_geom gorun_att_at(const float* qkv, long long blk, int t, int h,
                                                       int dh) {
  int tiles = (t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE;
  gorun_att_geom g;
  int tile = (int)(blk % tiles);
  long long bh = blk / tiles;
  int hd = (int)(bh % h);
  long long s = bh / h;
  g.ld = 3LL * h * dh;
  g.ldo = (long long)h * dh;
  g.q = qkv + s * t * g.ld + (long long)hd * dh;
  g.k = g.q + (long long)h * dh;
  g.v = g.q + 2LL * h * dh;
  g.o = s * t * g.ldo + (long long)hd * dh;
  g.lse = bh * t;
  g.row0 = tile * GORUN_ATT_TILE;
  return g;
}

// gorun_att_load copies rows row0 … row0+TILE-1 (dh each, row stride ld)
// of src into dst[TILE][LD], zeros past row t. Every thread calls it.
__device__ __forceinline__ void gorun_att_load(float (*dst)[GORUN_ATT_LD], const float* src,
                                               long long ld, int row0, int t, int dh) {
  for (int e = threadIdx.x; e < GORUN_ATT_TILE * dh; e += blockDim.x) {
    int r = e / dh, d = e % dh;
    dst[r][d] = row0 + r < t ? src[(long long)(row0 + r) * ld + d] : 0.0f;
  }
}

// gorun_att_dot is Σ_d a[d]·b[d] over dh, a float sum in increasing d.
__device__ __forceinline__ float gorun_att_dot(const float* a, const float* b, int dh) {
  float s = 0.0f;
  for (int d = 0; d < dh; d++) s += a[d] * b[d];
  return s;
}

// gorun_att_sees reports whether query row i sees key j.
__device__ __forceinline__ bool gorun_att_sees(int i, int j, int t, int causal) {
  return i < t && j < t && (!causal || j <= i);
}

GORUN_KERNEL gorun_attention(const float* qkv, float* o, float* lse, int n, int t, int h, int dh,
                             int causal, float scale) {
  __shared__ float qs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float ks[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float vs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float ps[GORUN_ATT_TILE][GORUN_ATT_TILE + 1];
  __shared__ float ms[GORUN_ATT_TILE], ls[GORUN_ATT_TILE], as[GORUN_ATT_TILE];
  const int tid = threadIdx.x, r = tid / GORUN_ATT_LANES, lane = tid % GORUN_ATT_LANES;
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    gorun_att_load(qs, g.q, g.ld, g.row0, t, dh);
    if (tid < GORUN_ATT_TILE) {
      ms[tid] = -INFINITY;
      ls[tid] = 0.0f;
    }
    float acc[GORUN_ATT_PER];
#pragma unroll
    for (int i = 0; i < GORUN_ATT_PER; i++) acc[i] = 0.0f;
    const int kend = causal ? min(t, g.row0 + GORUN_ATT_TILE) : t;
    for (int k0 = 0; k0 < kend; k0 += GORUN_ATT_TILE) {
      gorun_att_load(ks, g.k, g.ld, k0, t, dh);
      gorun_att_load(vs, g.v, g.ld, k0, t, dh);
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * GORUN_ATT_TILE; e += blockDim.x) {
        int i = e / GORUN_ATT_TILE, j = e % GORUN_ATT_TILE;
        ps[i][j] = gorun_att_sees(g.row0 + i, k0 + j, t, causal)
                       ? gorun_att_dot(qs[i], ks[j], dh) * scale
                       : -INFINITY;
      }
      __syncthreads();
      if (tid < GORUN_ATT_TILE) { // the online softmax of row tid
        float mo = ms[tid], mx = mo;
        for (int j = 0; j < GORUN_ATT_TILE; j++) mx = max(mx, ps[tid][j]);
        float sum = 0.0f;
        for (int j = 0; j < GORUN_ATT_TILE; j++) {
          float p = ps[tid][j] == -INFINITY ? 0.0f : expf(ps[tid][j] - mx);
          ps[tid][j] = p;
          sum += p;
        }
        float a = mo == -INFINITY ? 0.0f : expf(mo - mx);
        ms[tid] = mx;
        ls[tid] = ls[tid] * a + sum;
        as[tid] = a;
      }
      __syncthreads();
      const float a = as[r];
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) {
          float v = acc[i] * a;
          for (int j = 0; j < GORUN_ATT_TILE; j++) v += ps[r][j] * vs[j][d];
          acc[i] = v;
        }
      }
      __syncthreads(); // ks, vs and ps are overwritten next
    }
    const int row = g.row0 + r;
    if (row < t) {
      const float l = ls[r];
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) o[g.o + row * g.ldo + d] = acc[i] / l;
      }
      if (lane == 0) lse[g.lse + row] = ms[r] + logf(l);
    }
    __syncthreads(); // ms and ls are reset for the next tile
  }
}

// gorun_att_rowstats sets, for the query tile at row0, lses[i] = lse of row
// i (0 past t) and ds[i] = D = Σ_d do·o (do from dos, o from global memory,
// a float sum in increasing d). Threads below TILE do one row each; the
// caller syncs before and after.
__device__ __forceinline__ void gorun_att_rowstats(float* lses, float* ds,
                                                   float (*dos)[GORUN_ATT_LD], const float* o,
                                                   const float* lse, const gorun_att_geom& g,
                                                   int row0, int t, int dh) {
  int i = threadIdx.x;
  if (i >= GORUN_ATT_TILE) return;
  float l = 0.0f, d = 0.0f;
  if (row0 + i < t) {
    l = lse[g.lse + row0 + i];
    d = gorun_att_dot(dos[i], o + g.o + (long long)(row0 + i) * g.ldo, dh);
  }
  lses[i] = l;
  ds[i] = d;
}

GORUN_KERNEL gorun_attention_grad_q(const float* dout, const float* qkv, const float* o,
                                    const float* lse, float* dqkv, int n, int t, int h, int dh,
                                    int causal, float scale) {
  __shared__ float qs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float dos[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float ks[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float vs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float dss[GORUN_ATT_TILE][GORUN_ATT_TILE + 1];
  __shared__ float lses[GORUN_ATT_TILE], drow[GORUN_ATT_TILE];
  const int tid = threadIdx.x, r = tid / GORUN_ATT_LANES, lane = tid % GORUN_ATT_LANES;
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    gorun_att_load(qs, g.q, g.ld, g.row0, t, dh);
    gorun_att_load(dos, dout + g.o, g.ldo, g.row0, t, dh);
    __syncthreads();
    gorun_att_rowstats(lses, drow, dos, o, lse, g, g.row0, t, dh);
    float acc[GORUN_ATT_PER];
#pragma unroll
    for (int i = 0; i < GORUN_ATT_PER; i++) acc[i] = 0.0f;
    const int kend = causal ? min(t, g.row0 + GORUN_ATT_TILE) : t;
    for (int k0 = 0; k0 < kend; k0 += GORUN_ATT_TILE) {
      gorun_att_load(ks, g.k, g.ld, k0, t, dh);
      gorun_att_load(vs, g.v, g.ld, k0, t, dh);
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * GORUN_ATT_TILE; e += blockDim.x) {
        int i = e / GORUN_ATT_TILE, j = e % GORUN_ATT_TILE;
        float ds = 0.0f;
        if (gorun_att_sees(g.row0 + i, k0 + j, t, causal)) {
          float p = expf(gorun_att_dot(qs[i], ks[j], dh) * scale - lses[i]);
          ds = p * (gorun_att_dot(dos[i], vs[j], dh) - drow[i]);
        }
        dss[i][j] = ds;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) {
          float v = acc[i];
          for (int j = 0; j < GORUN_ATT_TILE; j++) v += dss[r][j] * ks[j][d];
          acc[i] = v;
        }
      }
      __syncthreads();
    }
    const int row = g.row0 + r;
    if (row < t) {
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) dqkv[(g.q - qkv) + row * g.ld + d] = acc[i] * scale;
      }
    }
    __syncthreads();
  }
}

GORUN_KERNEL gorun_attention_grad_kv(const float* dout, const float* qkv, const float* o,
                                     const float* lse, float* dqkv, int n, int t, int h, int dh,
                                     int causal, float scale) {
  __shared__ float ks[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float vs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float qs[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float dos[GORUN_ATT_TILE][GORUN_ATT_LD];
  __shared__ float ps[GORUN_ATT_TILE][GORUN_ATT_TILE + 1];
  __shared__ float dss[GORUN_ATT_TILE][GORUN_ATT_TILE + 1];
  __shared__ float lses[GORUN_ATT_TILE], drow[GORUN_ATT_TILE];
  const int tid = threadIdx.x, c = tid / GORUN_ATT_LANES, lane = tid % GORUN_ATT_LANES;
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    const int k0 = g.row0; // this block's keys
    gorun_att_load(ks, g.k, g.ld, k0, t, dh);
    gorun_att_load(vs, g.v, g.ld, k0, t, dh);
    float dk[GORUN_ATT_PER], dv[GORUN_ATT_PER];
#pragma unroll
    for (int i = 0; i < GORUN_ATT_PER; i++) dk[i] = dv[i] = 0.0f;
    for (int q0 = causal ? k0 : 0; q0 < t; q0 += GORUN_ATT_TILE) {
      gorun_att_load(qs, g.q, g.ld, q0, t, dh);
      gorun_att_load(dos, dout + g.o, g.ldo, q0, t, dh);
      __syncthreads();
      gorun_att_rowstats(lses, drow, dos, o, lse, g, q0, t, dh);
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * GORUN_ATT_TILE; e += blockDim.x) {
        int i = e / GORUN_ATT_TILE, j = e % GORUN_ATT_TILE;
        float p = 0.0f, ds = 0.0f;
        if (gorun_att_sees(q0 + i, k0 + j, t, causal)) {
          p = expf(gorun_att_dot(qs[i], ks[j], dh) * scale - lses[i]);
          ds = p * (gorun_att_dot(dos[i], vs[j], dh) - drow[i]);
        }
        ps[i][j] = p;
        dss[i][j] = ds;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) {
          float a = dv[i], b = dk[i];
          for (int j = 0; j < GORUN_ATT_TILE; j++) {
            a += ps[j][c] * dos[j][d];
            b += dss[j][c] * qs[j][d];
          }
          dv[i] = a;
          dk[i] = b;
        }
      }
      __syncthreads();
    }
    const int row = k0 + c;
    if (row < t) {
#pragma unroll
      for (int i = 0; i < GORUN_ATT_PER; i++) {
        int d = lane + GORUN_ATT_LANES * i;
        if (d < dh) {
          dqkv[(g.k - qkv) + row * g.ld + d] = dk[i] * scale;
          dqkv[(g.v - qkv) + row * g.ld + d] = dv[i];
        }
      }
    }
  }
}

// ---- the bf16 tensor-core forward (gorun_attention_bf16) -------------------
// The products q·kᵀ and p·v in bf16 on the tensor cores (wmma 16×16×16,
// sm_80 and later) with fp32 accumulation, torch.autocast's rule; the
// softmax, its statistics and the output accumulator in fp32. Tiles: 16
// query rows, GORUN_ATT_BF16_KEYS keys, the head dimension padded with
// zeros to a multiple of 16. The host build (no tensor cores) runs the
// same tiling with each 16×16 product a scalar loop over the same
// bf16-rounded values (gorun_att_mma), so the host check covers everything
// but the tensor cores themselves; the GPU check compares the two.
#define GORUN_ATT_BF16_KEYS 32

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <mma.h>
typedef __nv_bfloat16 gorun_bf16;
#else
#include <cstring>
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
typedef float gorun_bf16; // a float holding a bf16 value
#endif

// gorun_bf16_of rounds x to bf16 (to nearest, ties to even), as
// __float2bfloat16_rn does (NaN stays NaN).
__device__ __forceinline__ gorun_bf16 gorun_bf16_of(float x) {
#ifdef __CUDACC__
  return __float2bfloat16_rn(x);
#else
  unsigned int u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) {
    if (u & 0x007fffffu) u |= 0x00400000u; // a quiet NaN
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
  }
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// gorun_att_mma is one warp's C[16×16] = (acc ? C : 0) + A·B over ksteps
// steps of 16: A row-major bf16 (16 rows, stride lda), B element (k, j) at
// b[j·ldb + k] when bcol (col-major: keys' rows as Kᵀ), else at b[k·ldb +
// j]; C fp32 row-major in shared memory (stride ldc). Every thread of the
// warp calls it (wmma is warp-wide); the caller syncs before C is read.
__device__ __forceinline__ void gorun_att_mma(float* c, int ldc, const gorun_bf16* a, int lda,
                                              const gorun_bf16* b, int ldb, int bcol, int ksteps,
                                              int acc) {
#ifdef __CUDACC__
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> cf;
  if (acc) {
    wmma::load_matrix_sync(cf, c, ldc, wmma::mem_row_major);
  } else {
    wmma::fill_fragment(cf, 0.0f);
  }
  for (int k = 0; k < ksteps; k++) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> af;
    wmma::load_matrix_sync(af, a + 16 * k, lda);
    if (bcol) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf;
      wmma::load_matrix_sync(bf, b + 16 * k, ldb);
      wmma::mma_sync(cf, af, bf, cf);
    } else {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bf;
      wmma::load_matrix_sync(bf, b + 16 * k * ldb, ldb);
      wmma::mma_sync(cf, af, bf, cf);
    }
  }
  wmma::store_matrix_sync(c, cf, ldc, wmma::mem_row_major);
#else
  if (threadIdx.x % 32 != 0) return; // lane 0 stands for the warp
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float s = acc ? c[i * ldc + j] : 0.0f;
      for (int k = 0; k < 16 * ksteps; k++) s += a[i * lda + k] * (bcol ? b[j * ldb + k] : b[k * ldb + j]);
      c[i * ldc + j] = s;
    }
#endif
}

GORUN_KERNEL gorun_attention_bf16(const float* qkv, float* o, float* lse, int n, int t, int h,
                                  int dh, int causal, float scale) {
  __shared__ __align__(32) gorun_bf16 qs[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 ks[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 vs[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) float ss[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) gorun_bf16 ps[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) float os[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ float ms[GORUN_ATT_TILE], ls[GORUN_ATT_TILE], as[GORUN_ATT_TILE];
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32;
  const int dp = (dh + 15) / 16 * 16; // dh padded for the 16×16×16 products
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    for (int e = tid; e < GORUN_ATT_TILE * dp; e += blockDim.x) {
      int r = e / dp, d = e % dp;
      int row = g.row0 + r;
      qs[r][d] = gorun_bf16_of(row < t && d < dh ? g.q[(long long)row * g.ld + d] : 0.0f);
      os[r][d] = 0.0f;
    }
    if (tid < GORUN_ATT_TILE) {
      ms[tid] = -INFINITY;
      ls[tid] = 0.0f;
    }
    const int kend = causal ? min(t, g.row0 + GORUN_ATT_TILE) : t;
    for (int k0 = 0; k0 < kend; k0 += GORUN_ATT_BF16_KEYS) {
      for (int e = tid; e < GORUN_ATT_BF16_KEYS * dp; e += blockDim.x) {
        int r = e / dp, d = e % dp;
        int row = k0 + r;
        bool in = row < t && d < dh;
        ks[r][d] = gorun_bf16_of(in ? g.k[(long long)row * g.ld + d] : 0.0f);
        vs[r][d] = gorun_bf16_of(in ? g.v[(long long)row * g.ld + d] : 0.0f);
      }
      __syncthreads();
      for (int w = warp; w < GORUN_ATT_BF16_KEYS / 16; w += warps)
        gorun_att_mma(&ss[0][16 * w], GORUN_ATT_BF16_KEYS, &qs[0][0], GORUN_ATT_DMAX, &ks[16 * w][0],
                      GORUN_ATT_DMAX, 1, dp / 16, 0);
      __syncthreads();
      if (tid < GORUN_ATT_TILE) { // the online softmax of row tid, in fp32
        const int row = g.row0 + tid;
        float mo = ms[tid], mx = mo;
        for (int j = 0; j < GORUN_ATT_BF16_KEYS; j++)
          if (gorun_att_sees(row, k0 + j, t, causal)) mx = max(mx, ss[tid][j] * scale);
        float sum = 0.0f;
        for (int j = 0; j < GORUN_ATT_BF16_KEYS; j++) {
          float p = 0.0f;
          if (gorun_att_sees(row, k0 + j, t, causal)) p = expf(ss[tid][j] * scale - mx);
          ps[tid][j] = gorun_bf16_of(p);
          sum += p;
        }
        float a = mo == -INFINITY ? 0.0f : expf(mo - mx);
        ms[tid] = mx;
        ls[tid] = ls[tid] * a + sum;
        as[tid] = a;
      }
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * dp; e += blockDim.x) os[e / dp][e % dp] *= as[e / dp];
      __syncthreads();
      for (int c = warp; c < dp / 16; c += warps)
        gorun_att_mma(&os[0][16 * c], GORUN_ATT_DMAX, &ps[0][0], GORUN_ATT_BF16_KEYS, &vs[0][16 * c],
                      GORUN_ATT_DMAX, 0, GORUN_ATT_BF16_KEYS / 16, 1);
      __syncthreads();
    }
    for (int e = tid; e < GORUN_ATT_TILE * dh; e += blockDim.x) {
      int r = e / dh, d = e % dh, row = g.row0 + r;
      if (row < t) o[g.o + row * g.ldo + d] = os[r][d] / ls[r];
    }
    if (tid < GORUN_ATT_TILE && g.row0 + tid < t) lse[g.lse + g.row0 + tid] = ms[tid] + logf(ls[tid]);
    __syncthreads();
  }
}

// ---- the bf16 tensor-core backward ---------------------------------------
// As gorun_attention_grad_q and gorun_attention_grad_kv, with the products
// (s = q·kᵀ, dp = do·vᵀ, ds·k; sᵀ = k·qᵀ, dpᵀ = v·doᵀ, pᵀ·do, dsᵀ·q) in
// bf16 on the tensor cores with fp32 accumulation, and p, ds, D and the
// accumulators in fp32 (p and ds rounded to bf16 for the products that
// take them). Tiles of 16 rows the block owns, 32 of the other side.

// gorun_att_load16 copies rows row0 … row0+rows-1 (dh each, stride ld) of
// src into dst (row stride GORUN_ATT_DMAX) rounded to bf16, zeros past row
// t and past dh up to dp. Every thread calls it.
__device__ __forceinline__ void gorun_att_load16(gorun_bf16* dst, const float* src, long long ld,
                                                 int row0, int rows, int t, int dh, int dp) {
  for (int e = threadIdx.x; e < rows * dp; e += blockDim.x) {
    int r = e / dp, d = e % dp, row = row0 + r;
    dst[r * GORUN_ATT_DMAX + d] =
        gorun_bf16_of(row < t && d < dh ? src[(long long)row * ld + d] : 0.0f);
  }
}

// gorun_att_stats16 sets lses[i] and drow[i] = Σ_d do·o (fp32, from global
// memory, increasing d) for rows row0 … row0+rows-1 (0 past t). Threads
// below rows do one row each; the caller syncs after.
__device__ __forceinline__ void gorun_att_stats16(float* lses, float* drow, const float* dout,
                                                  const float* o, const float* lse,
                                                  const gorun_att_geom& g, int row0, int rows, int t,
                                                  int dh) {
  int i = threadIdx.x;
  if (i >= rows) return;
  float l = 0.0f, d = 0.0f;
  if (row0 + i < t) {
    long long at = g.o + (long long)(row0 + i) * g.ldo;
    l = lse[g.lse + row0 + i];
    d = gorun_att_dot(dout + at, o + at, dh);
  }
  lses[i] = l;
  drow[i] = d;
}

GORUN_KERNEL gorun_attention_bf16_grad_q(const float* dout, const float* qkv, const float* o,
                                         const float* lse, float* dqkv, int n, int t, int h, int dh,
                                         int causal, float scale) {
  __shared__ __align__(32) gorun_bf16 qs[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 dos[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 ks[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 vs[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) float ss[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) float dps[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) gorun_bf16 dss[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) float acc[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ float lses[GORUN_ATT_TILE], drow[GORUN_ATT_TILE];
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32;
  const int dp = (dh + 15) / 16 * 16, halves = GORUN_ATT_BF16_KEYS / 16;
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    gorun_att_load16(&qs[0][0], g.q, g.ld, g.row0, GORUN_ATT_TILE, t, dh, dp);
    gorun_att_load16(&dos[0][0], dout + g.o, g.ldo, g.row0, GORUN_ATT_TILE, t, dh, dp);
    for (int e = tid; e < GORUN_ATT_TILE * dp; e += blockDim.x) acc[e / dp][e % dp] = 0.0f;
    gorun_att_stats16(lses, drow, dout, o, lse, g, g.row0, GORUN_ATT_TILE, t, dh);
    const int kend = causal ? min(t, g.row0 + GORUN_ATT_TILE) : t;
    for (int k0 = 0; k0 < kend; k0 += GORUN_ATT_BF16_KEYS) {
      gorun_att_load16(&ks[0][0], g.k, g.ld, k0, GORUN_ATT_BF16_KEYS, t, dh, dp);
      gorun_att_load16(&vs[0][0], g.v, g.ld, k0, GORUN_ATT_BF16_KEYS, t, dh, dp);
      __syncthreads();
      // s = q·kᵀ and dp = do·vᵀ, one 16×16 half each per warp.
      for (int w = warp; w < 2 * halves; w += warps) {
        int c = w % halves;
        if (w < halves)
          gorun_att_mma(&ss[0][16 * c], GORUN_ATT_BF16_KEYS, &qs[0][0], GORUN_ATT_DMAX, &ks[16 * c][0],
                        GORUN_ATT_DMAX, 1, dp / 16, 0);
        else
          gorun_att_mma(&dps[0][16 * c], GORUN_ATT_BF16_KEYS, &dos[0][0], GORUN_ATT_DMAX,
                        &vs[16 * c][0], GORUN_ATT_DMAX, 1, dp / 16, 0);
      }
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * GORUN_ATT_BF16_KEYS; e += blockDim.x) {
        int i = e / GORUN_ATT_BF16_KEYS, j = e % GORUN_ATT_BF16_KEYS;
        float ds = 0.0f;
        if (gorun_att_sees(g.row0 + i, k0 + j, t, causal)) {
          float p = expf(ss[i][j] * scale - lses[i]);
          ds = p * (dps[i][j] - drow[i]);
        }
        dss[i][j] = gorun_bf16_of(ds);
      }
      __syncthreads();
      for (int c = warp; c < dp / 16; c += warps)
        gorun_att_mma(&acc[0][16 * c], GORUN_ATT_DMAX, &dss[0][0], GORUN_ATT_BF16_KEYS, &ks[0][16 * c],
                      GORUN_ATT_DMAX, 0, halves, 1);
      __syncthreads();
    }
    for (int e = tid; e < GORUN_ATT_TILE * dh; e += blockDim.x) {
      int r = e / dh, d = e % dh, row = g.row0 + r;
      if (row < t) dqkv[(g.q - qkv) + row * g.ld + d] = acc[r][d] * scale;
    }
    __syncthreads();
  }
}

GORUN_KERNEL gorun_attention_bf16_grad_kv(const float* dout, const float* qkv, const float* o,
                                          const float* lse, float* dqkv, int n, int t, int h, int dh,
                                          int causal, float scale) {
  __shared__ __align__(32) gorun_bf16 ks[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 vs[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 qs[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) gorun_bf16 dos[GORUN_ATT_BF16_KEYS][GORUN_ATT_DMAX];
  __shared__ __align__(32) float sts[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) float dpts[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) gorun_bf16 pts[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) gorun_bf16 dsts[GORUN_ATT_TILE][GORUN_ATT_BF16_KEYS];
  __shared__ __align__(32) float dka[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ __align__(32) float dva[GORUN_ATT_TILE][GORUN_ATT_DMAX];
  __shared__ float lses[GORUN_ATT_BF16_KEYS], drow[GORUN_ATT_BF16_KEYS];
  const int tid = threadIdx.x, warp = tid / 32, warps = blockDim.x / 32;
  const int dp = (dh + 15) / 16 * 16, halves = GORUN_ATT_BF16_KEYS / 16;
  const long long blocks = (long long)n * h * ((t + GORUN_ATT_TILE - 1) / GORUN_ATT_TILE);
  for (long long blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    gorun_att_geom g = gorun_att_at(qkv, blk, t, h, dh);
    const int k0 = g.row0; // this block's keys
    gorun_att_load16(&ks[0][0], g.k, g.ld, k0, GORUN_ATT_TILE, t, dh, dp);
    gorun_att_load16(&vs[0][0], g.v, g.ld, k0, GORUN_ATT_TILE, t, dh, dp);
    for (int e = tid; e < GORUN_ATT_TILE * dp; e += blockDim.x) dka[e / dp][e % dp] = dva[e / dp][e % dp] = 0.0f;
    const int qstart = causal ? k0 / GORUN_ATT_BF16_KEYS * GORUN_ATT_BF16_KEYS : 0;
    for (int q0 = qstart; q0 < t; q0 += GORUN_ATT_BF16_KEYS) {
      gorun_att_load16(&qs[0][0], g.q, g.ld, q0, GORUN_ATT_BF16_KEYS, t, dh, dp);
      gorun_att_load16(&dos[0][0], dout + g.o, g.ldo, q0, GORUN_ATT_BF16_KEYS, t, dh, dp);
      gorun_att_stats16(lses, drow, dout, o, lse, g, q0, GORUN_ATT_BF16_KEYS, t, dh);
      __syncthreads();
      // sᵀ = k·qᵀ and dpᵀ = v·doᵀ (keys × queries), one 16×16 half each per warp.
      for (int w = warp; w < 2 * halves; w += warps) {
        int c = w % halves;
        if (w < halves)
          gorun_att_mma(&sts[0][16 * c], GORUN_ATT_BF16_KEYS, &ks[0][0], GORUN_ATT_DMAX, &qs[16 * c][0],
                        GORUN_ATT_DMAX, 1, dp / 16, 0);
        else
          gorun_att_mma(&dpts[0][16 * c], GORUN_ATT_BF16_KEYS, &vs[0][0], GORUN_ATT_DMAX,
                        &dos[16 * c][0], GORUN_ATT_DMAX, 1, dp / 16, 0);
      }
      __syncthreads();
      for (int e = tid; e < GORUN_ATT_TILE * GORUN_ATT_BF16_KEYS; e += blockDim.x) {
        int j = e / GORUN_ATT_BF16_KEYS, i = e % GORUN_ATT_BF16_KEYS; // key j, query i
        float p = 0.0f, ds = 0.0f;
        if (gorun_att_sees(q0 + i, k0 + j, t, causal)) {
          p = expf(sts[j][i] * scale - lses[i]);
          ds = p * (dpts[j][i] - drow[i]);
        }
        pts[j][i] = gorun_bf16_of(p);
        dsts[j][i] = gorun_bf16_of(ds);
      }
      __syncthreads();
      for (int w = warp; w < 2 * (dp / 16); w += warps) {
        int c = w % (dp / 16);
        if (w < dp / 16)
          gorun_att_mma(&dva[0][16 * c], GORUN_ATT_DMAX, &pts[0][0], GORUN_ATT_BF16_KEYS, &dos[0][16 * c],
                        GORUN_ATT_DMAX, 0, halves, 1);
        else
          gorun_att_mma(&dka[0][16 * c], GORUN_ATT_DMAX, &dsts[0][0], GORUN_ATT_BF16_KEYS, &qs[0][16 * c],
                        GORUN_ATT_DMAX, 0, halves, 1);
      }
      __syncthreads();
    }
    for (int e = tid; e < GORUN_ATT_TILE * dh; e += blockDim.x) {
      int r = e / dh, d = e % dh, row = k0 + r;
      if (row < t) {
        dqkv[(g.k - qkv) + row * g.ld + d] = dka[r][d] * scale;
        dqkv[(g.v - qkv) + row * g.ld + d] = dva[r][d];
      }
    }
    __syncthreads();
  }
}
