// data.cu — batch gathers and deterministic evaluation reductions.
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
