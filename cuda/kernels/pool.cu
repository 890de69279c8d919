// pool.cu — max, average and global average pooling (see kernels.h and
// ops/pool.go). Index arithmetic is 32-bit: the ABI limits every buffer to
// fewer than 2^31 elements.
#include "common.cuh"

GORUN_KERNEL gorun_maxpool2d(const float* x, float* y, int* idx, int planes, int h, int w,
                             int oh, int ow, int k, int s) {
  int ohw = oh * ow;
  GORUN_FOR(e64, (long long)planes * ohw) {
    int e = (int)e64;
    int p = e / ohw, q = e - p * ohw, oy = q / ow, ox = q - oy * ow;
    const float* xp = x + p * h * w;
    int first = oy * s * w + ox * s, best = first;
    float m = -INFINITY;
    for (int ky = 0; ky < k; ky++) {
      int row = first + ky * w;
      for (int kx = 0; kx < k; kx++) {
        float v = xp[row + kx];
        if (v > m || v != v) { // the first maximum wins; a NaN is always taken
          m = v;
          best = row + kx;
        }
      }
    }
    y[e] = m;
    idx[e] = best;
  }
}

GORUN_KERNEL gorun_maxpool2d_grad(const float* dy, const int* idx, float* dx, int planes,
                                  int h, int w, int oh, int ow, int k, int s) {
  int hw = h * w, ohw = oh * ow;
  GORUN_FOR(e64, (long long)planes * hw) {
    int e = (int)e64;
    int p = e / hw, pos = e - p * hw, iy = pos / w, ix = pos - iy * w;
    // The outputs oy whose window rows [oy·s, oy·s+k) hold iy; likewise ox.
    int ylo = iy - k + 1 <= 0 ? 0 : (iy - k + 1 + s - 1) / s, yhi = min(iy / s, oh - 1);
    int xlo = ix - k + 1 <= 0 ? 0 : (ix - k + 1 + s - 1) / s, xhi = min(ix / s, ow - 1);
    const float* dyp = dy + p * ohw;
    const int* ip = idx + p * ohw;
    float g = 0.0f;
    // In increasing output order, as the CPU kernel adds: bit-identical.
    for (int oy = ylo; oy <= yhi; oy++)
      for (int ox = xlo; ox <= xhi; ox++) {
        int j = oy * ow + ox;
        if (ip[j] == pos) g += dyp[j];
      }
    dx[e] = g;
  }
}

GORUN_KERNEL gorun_avgpool2d(const float* x, float* y, int planes, int h, int w, int oh,
                             int ow, int k, int s, int p) {
  int ohw = oh * ow;
  double inv = 1.0 / (double)(k * k);
  GORUN_FOR(e64, (long long)planes * ohw) {
    int e = (int)e64;
    int q = e / ohw, r = e - q * ohw, oy = r / ow, ox = r - oy * ow;
    const float* xp = x + q * h * w;
    int y0 = max(oy * s - p, 0), y1 = min(oy * s - p + k, h);
    int x0 = max(ox * s - p, 0), x1 = min(ox * s - p + k, w);
    float sum = 0.0f; // in float, row by row, as the CPU kernel
    for (int iy = y0; iy < y1; iy++)
      for (int ix = x0; ix < x1; ix++) sum += xp[iy * w + ix];
    y[e] = (float)((double)sum * inv);
  }
}

GORUN_KERNEL gorun_avgpool2d_grad(const float* dy, float* dx, int planes, int h, int w, int oh,
                                  int ow, int k, int s, int p) {
  int hw = h * w, ohw = oh * ow;
  double inv = 1.0 / (double)(k * k);
  GORUN_FOR(e64, (long long)planes * hw) {
    int e = (int)e64;
    int q = e / hw, pos = e - q * hw, iy = pos / w, ix = pos - iy * w;
    // The outputs oy whose window rows [oy·s-p, oy·s-p+k) hold iy; likewise
    // ox.
    int ty = iy + p - k + 1, tx = ix + p - k + 1;
    int ylo = ty <= 0 ? 0 : (ty + s - 1) / s, yhi = min((iy + p) / s, oh - 1);
    int xlo = tx <= 0 ? 0 : (tx + s - 1) / s, xhi = min((ix + p) / s, ow - 1);
    const float* dyp = dy + q * ohw;
    float g = 0.0f;
    // In increasing output order, as the CPU kernel adds: bit-identical.
    for (int oy = ylo; oy <= yhi; oy++)
      for (int ox = xlo; ox <= xhi; ox++) g += (float)((double)dyp[oy * ow + ox] * inv);
    dx[e] = g;
  }
}

GORUN_KERNEL gorun_global_avgpool2d(const float* x, float* y, int planes, int hw) {
  double inv = 1.0 / (double)hw;
  GORUN_FOR(q64, planes) {
    int q = (int)q64;
    const float* xp = x + (long long)q * hw;
    double s = 0;
    for (int i = 0; i < hw; i++) s += (double)xp[i];
    y[q] = (float)(s * inv);
  }
}

GORUN_KERNEL gorun_global_avgpool2d_grad(const float* dy, float* dx, int planes, int hw) {
  double inv = 1.0 / (double)hw;
  GORUN_FOR(e64, (long long)planes * hw) {
    int e = (int)e64;
    dx[e] = (float)((double)dy[e / hw] * inv);
  }
}
