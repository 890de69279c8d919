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
