// data.cu — batch gathers, slices, embeddings and deterministic evaluation
// reductions.
#include "common.cuh"

GORUN_KERNEL gorun_gather_rows(const float* src, const int* idx, float* dst, int rows,
                               int cols) {
  GORUN_FOR(e64, (long long)rows * cols) {
    int e = (int)e64, i = e / cols;
    dst[e] = src[(long long)idx[i] * cols + (e - i * cols)];
  }
}

GORUN_KERNEL gorun_gather_rows_int(const int* src, const int* idx, int* dst, int rows,
                                   int cols) {
  GORUN_FOR(e64, (long long)rows * cols) {
    int e = (int)e64, i = e / cols;
    dst[e] = src[(long long)idx[i] * cols + (e - i * cols)];
  }
}

GORUN_KERNEL gorun_copy_slice(const float* src, float* dst, int n, int len, int src_dim,
                              int src_off, int dst_dim, int dst_off) {
  GORUN_FOR(e64, (long long)n * len) {
    int e = (int)e64, i = e / len, j = e - i * len;
    dst[(long long)i * dst_dim + dst_off + j] = src[(long long)i * src_dim + src_off + j];
  }
}

GORUN_KERNEL gorun_permute(const float* x, float* y, int n, int d0, int d1, int d2, int d3,
                           int d4, int d5, int s0, int s1, int s2, int s3, int s4, int s5) {
  GORUN_FOR(e64, n) {
    int e = (int)e64, src = 0, q;
    // y's index, last dimension first.
    q = e % d5; e /= d5; src += q * s5;
    q = e % d4; e /= d4; src += q * s4;
    q = e % d3; e /= d3; src += q * s3;
    q = e % d2; e /= d2; src += q * s2;
    q = e % d1; e /= d1; src += q * s1;
    src += e * s0;
    y[e64] = x[src];
  }
}

GORUN_KERNEL gorun_positions(int* pos, int n, int t) {
  GORUN_FOR(e64, (long long)n * t) {
    int e = (int)e64;
    pos[e] = e % t;
  }
}

GORUN_KERNEL gorun_embedding(const int* ids, const float* w, float* y, int n, int v, int d) {
  GORUN_FOR(e64, (long long)n * d) {
    int e = (int)e64, i = e / d, id = ids[i];
    y[e] = id >= 0 && id < v ? w[(long long)id * d + (e - i * d)] : 0.0f;
  }
}

GORUN_KERNEL gorun_embedding_grad(const int* ids, const float* dy, float* dw, int n, int v,
                                  int d, int rows_per, int accumulate) {
  if (d <= 0 || rows_per <= 0) return;
  int buckets = (v + rows_per - 1) / rows_per;
  GORUN_FOR(t64, (long long)buckets * d) {
    int t = (int)t64, b = t / d, k = t - b * d;
    int lo = b * rows_per, hi = min(lo + rows_per, v);
    if (!accumulate)
      for (int r = lo; r < hi; r++) dw[(long long)r * d + k] = 0.0f;
    // The ids in input order: each dw element gets its rows' adds in the
    // CPU kernel's order. A warp's threads share b (mostly), so they read
    // the same id.
    for (int i = 0; i < n; i++) {
      int id = ids[i];
      if (id >= lo && id < hi) dw[(long long)id * d + k] += dy[(long long)i * d + k];
    }
  }
}

GORUN_KERNEL gorun_count_correct(const float* x, const int* target, int* count, int n, int c,
                                 int accumulate) {
  __shared__ int part[GORUN_RED];
  if (blockIdx.x != 0) return;
  int k = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float* row = x + (long long)i * c;
    int best = 0;
    for (int j = 1; j < c; j++)
      if (row[j] > row[best]) best = j; // first maximum wins, as engine/runner
    if (best == target[i]) k++;
  }
  part[threadIdx.x] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    int t = 0;
    for (unsigned int j = 0; j < blockDim.x; j++) t += part[j];
    count[0] = accumulate ? count[0] + t : t;
  }
}

GORUN_KERNEL gorun_sum(const float* x, float* out, int n, int accumulate) {
  __shared__ double part[GORUN_RED];
  if (blockIdx.x != 0) return;
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (unsigned int j = 0; j < blockDim.x; j++) t += part[j];
    out[0] = accumulate ? (float)((double)out[0] + t) : (float)t;
  }
}
