// conv.cu — convolution and linear helpers around cuBLAS (see kernels.h for
// the col layout, which is ops/conv.go's). Index arithmetic is 32-bit: the
// ABI limits every buffer to fewer than 2^31 elements.
#include "common.cuh"

GORUN_KERNEL gorun_im2col(const float* x, float* col, int n, int c, int cx, int h, int w,
                          int kh, int kw, int oh, int ow, int stride, int pad) {
  int l = n * oh * ow, ohw = oh * ow, khw = kh * kw;
  GORUN_FOR(e64, (long long)c * khw * l) {
    int e = (int)e64;
    int r = e / l, j = e - r * l;
    int ci = r / khw, kk = r - ci * khw, ki = kk / kw, kj = kk - ki * kw;
    int ni = j / ohw, q = j - ni * ohw, oy = q / ow, ox = q - oy * ow;
    int iy = oy * stride - pad + ki, ix = ox * stride - pad + kj;
    float v = 0.0f;
    if (iy >= 0 && iy < h && ix >= 0 && ix < w) v = x[((ni * cx + ci) * h + iy) * w + ix];
    col[e] = v;
  }
}

GORUN_KERNEL gorun_col2im(const float* col, float* dx, int n, int c, int cx, int h, int w,
                          int kh, int kw, int oh, int ow, int stride, int pad) {
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
    dx[(ni * cx + ci) * hw + pos] = s;
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
  __shared__ double red[GORUN_RED];
  int total = n * plane;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double s = 0;
    // Thread t sums elements t, t+blockDim, … of the channel's n·plane.
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      int ni = i / plane, k = i - ni * plane;
      s += (double)dy[(ni * c + ch) * plane + k];
    }
    double t = gorun_block_sum(red, s);
    if (threadIdx.x == 0) db[ch] = accumulate ? db[ch] + (float)t : (float)t;
  }
}

// The split sum's first phase. Thread t of a block walks its chunk with a
// stride of blockDim.x flattened elements; (row, k) and the address advance
// by constants, with one conditional wrap, instead of a division per
// element. Four accumulators, taking every fourth element in turn, keep
// four loads and adds in flight rather than one dependent double add.
GORUN_KERNEL gorun_bias_partial(const float* dy, double* part, int n, int c, int plane, int s,
                                int chunk) {
  __shared__ double red[GORUN_RED];
  int total = n * plane, step = blockDim.x;
  // Advancing by step elements: dr rows and dk positions, so the address
  // moves by da, plus wrap when the position passes the end of the plane.
  int dr = plane > 0 ? step / plane : 0, dk = step - dr * plane;
  long long da = (long long)dr * c * plane + dk, wrap = (long long)(c - 1) * plane;
  for (int b = blockIdx.x; b < c * s; b += gridDim.x) {
    int ch = b / s, j = b - ch * s;
    long long lo64 = (long long)j * chunk;
    int lo = (int)min(lo64, (long long)total), hi = (int)min(lo64 + chunk, (long long)total);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = lo + threadIdx.x;
    if (i < hi) {
      // The thread's m elements: i, i+step, … below hi (counted, so that
      // no index runs past 2^31).
      int m = (hi - 1 - i) / step + 1;
      int r = i / plane, k = i - r * plane;
      long long a = ((long long)r * c + ch) * plane + k;
      auto next = [&] {
        k += dk;
        a += da;
        if (k >= plane) {
          k -= plane;
          a += wrap;
        }
      };
      for (; m >= 4; m -= 4) {
        float v0 = dy[a];
        next();
        float v1 = dy[a];
        next();
        float v2 = dy[a];
        next();
        float v3 = dy[a];
        next();
        s0 += (double)v0;
        s1 += (double)v1;
        s2 += (double)v2;
        s3 += (double)v3;
      }
      for (; m > 0; m--) {
        s0 += (double)dy[a];
        next();
      }
    }
    double t = gorun_block_sum(red, (s0 + s1) + (s2 + s3));
    if (threadIdx.x == 0) part[b] = t;
  }
}

GORUN_KERNEL gorun_bias_finish(const double* part, float* db, int c, int s, int accumulate) {
  __shared__ double red[GORUN_RED];
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double v = 0;
    for (int j = threadIdx.x; j < s; j += blockDim.x) v += part[ch * s + j];
    double t = gorun_block_sum(red, v);
    if (threadIdx.x == 0) db[ch] = accumulate ? db[ch] + (float)t : (float)t;
  }
}
