// pool.cu — max pooling (see kernels.h and ops/pool.go). Index arithmetic
// is 32-bit: the ABI limits every buffer to fewer than 2^31 elements.
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
