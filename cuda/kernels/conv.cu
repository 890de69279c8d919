// conv.cu — convolution and linear helpers around cuBLAS (see kernels.h for
// the col layout, which is ops/conv.go's). Index arithmetic is 32-bit: the
// ABI limits every buffer to fewer than 2^31 elements.
#include "common.cuh"

GORUN_KERNEL gorun_im2col(const float* x, float* col, int n, int c, int h, int w, int kh,
                          int kw, int oh, int ow, int stride, int pad) {
  int l = n * oh * ow, ohw = oh * ow, khw = kh * kw;
  GORUN_FOR(e64, (long long)c * khw * l) {
    int e = (int)e64;
    int r = e / l, j = e - r * l;
    int ci = r / khw, kk = r - ci * khw, ki = kk / kw, kj = kk - ki * kw;
    int ni = j / ohw, q = j - ni * ohw, oy = q / ow, ox = q - oy * ow;
    int iy = oy * stride - pad + ki, ix = ox * stride - pad + kj;
    float v = 0.0f;
    if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[((ni * c + ci) * h + iy) * w + ix];
    col[e] = v;
  }
}

GORUN_KERNEL gorun_col2im(const float* col, float* dx, int n, int c, int h, int w, int kh,
                          int kw, int oh, int ow, int stride, int pad) {
  int l = n * oh * ow, hw = h * w;
  GORUN_FOR(e64, (long long)n * c * hw) {
    int e = (int)e64;
    int plane = e / hw, pos = e - plane * hw, iy = pos / w, ix = pos - iy * w;
    int ni = plane / c, ci = plane - ni * c;
    float s = 0.0f;
    for (int ki = 0; ki < kh; ki++) {
      int ty = iy + pad - ki; // = oy·stride
      if (ty < 0 || ty % stride != 0) continue;
      int oy = ty / stride;
      if (oy >= oh) continue;
      for (int kj = 0; kj < kw; kj++) {
        int tx = ix + pad - kj;
        if (tx < 0 || tx % stride != 0) continue;
        int ox = tx / stride;
        if (ox >= ow) continue;
        int r = (ci * kh + ki) * kw + kj;
        s += col[r * l + (ni * oh + oy) * ow + ox];
      }
    }
    dx[e] = s;
  }
}

GORUN_KERNEL gorun_onl_to_nol(const float* src, float* dst, int n, int o, int plane) {
  GORUN_FOR(e64, (long long)n * o * plane) {
    int e = (int)e64;
    int no = e / plane, k = e - no * plane, ni = no / o, oi = no - ni * o;
    dst[e] = src[(oi * n + ni) * plane + k];
  }
}

GORUN_KERNEL gorun_nol_to_onl(const float* src, float* dst, int n, int o, int plane) {
  GORUN_FOR(e64, (long long)n * o * plane) {
    int e = (int)e64;
    int on = e / plane, k = e - on * plane, oi = on / n, ni = on - oi * n;
    dst[e] = src[(ni * o + oi) * plane + k];
  }
}

GORUN_KERNEL gorun_bias_add(float* y, const float* b, int n, int c, int plane) {
  GORUN_FOR(e64, (long long)n * c * plane) {
    int e = (int)e64;
    y[e] += b[e / plane % c];
  }
}

GORUN_KERNEL gorun_bias_grad(const float* dy, float* db, int n, int c, int plane,
                             int accumulate) {
  __shared__ double part[GORUN_RED];
  int total = n * plane;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double s = 0;
    // Thread t sums elements t, t+blockDim, … of the channel's n·plane.
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      int ni = i / plane, k = i - ni * plane;
      s += (double)dy[(ni * c + ch) * plane + k];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      double t = 0;
      for (unsigned int j = 0; j < blockDim.x; j++) t += part[j];
      db[ch] = accumulate ? db[ch] + (float)t : (float)t;
    }
    __syncthreads();
  }
}
