// elementwise.cu — elementwise kernels and dropout (see kernels.h). The
// bandwidth-bound ones read and write four floats at a time where their
// arrays are aligned (gorun_map1, gorun_map2 in common.cuh).
#include "common.cuh"

GORUN_KERNEL gorun_relu(const float* x, float* y, int n) {
  gorun_map1(x, y, n, [](float v) { return v < 0.0f ? 0.0f : v; });
}

GORUN_KERNEL gorun_relu_grad(const float* dy, const float* dy2, const float* y, float* dx, int n) {
  GORUN_FOR(i, n) { dx[i] = y[i] > 0.0f ? (dy2 ? dy[i] + dy2[i] : dy[i]) : 0.0f; }
}

// GELU's constants, as ops/activation.go's (3·C written out, as Go folds
// the constant 3·geluC exactly before rounding it).
#define GORUN_GELU_K 0.7978845608028654       // sqrt(2/π)
#define GORUN_GELU_C 0.044715
#define GORUN_GELU_3C 0.134145
#define GORUN_INV_SQRT2 0.7071067811865476    // 1/sqrt(2)
#define GORUN_INV_SQRT_2PI 0.3989422804014327 // 1/sqrt(2π)

// gorun_round_to rounds v to the nearest number with frac fraction bits
// whose exponent is at least minexp (below it, the subnormals' quantum
// 2^(minexp-frac)), ties to even, and to ±Inf from inf_from on: bfloat16
// (7, -126, (2-2⁻⁸)·2¹²⁷) and float16 (10, -14, 65520), as ops.RoundBF16
// and ops.RoundFP16. In double, where a/q and the rounded product are
// exact. NaN, ±Inf and ±0 stay.
__device__ static float gorun_round_to(float v, int frac, int minexp, double inf_from) {
  double a = fabs((double)v);
  if (a != a || a == 0.0) return v;
  if (a >= inf_from) return (float)copysign(HUGE_VAL, (double)v);
  int e;
  frexp(a, &e); // a in [2^(e-1), 2^e)
  int qe = e - 1 - frac;
  if (qe < minexp - frac) qe = minexp - frac;
  double q = ldexp(1.0, qe);
  return (float)copysign(rint(a / q) * q, (double)v);
}

// The op is the same for every thread: one loop per op keeps the loops
// free of a per-element switch.
GORUN_KERNEL gorun_unary(const float* x, float* y, int n, int op, float alpha) {
  switch (op) {
  case GORUN_UNARY_SIGMOID:
    gorun_map1(x, y, n, [](float v) { return (float)(1.0 / (1.0 + exp(-(double)v))); });
    break;
  case GORUN_UNARY_TANH:
    gorun_map1(x, y, n, [](float v) { return (float)tanh((double)v); });
    break;
  case GORUN_UNARY_LEAKY_RELU:
    gorun_map1(x, y, n, [=](float v) { return v > 0.0f ? v : v * alpha; }); // NaN·alpha stays NaN
    break;
  case GORUN_UNARY_SCALE:
    gorun_map1(x, y, n, [=](float v) { return alpha * v; });
    break;
  case GORUN_UNARY_GELU:
    gorun_map1(x, y, n, [](float v) {
      double f = v;
      return (float)(0.5 * f * (1 + erf(f * GORUN_INV_SQRT2)));
    });
    break;
  case GORUN_UNARY_GELU_TANH:
    gorun_map1(x, y, n, [](float v) {
      double f = v;
      return (float)(0.5 * f * (1 + tanh(GORUN_GELU_K * (f + GORUN_GELU_C * f * f * f))));
    });
    break;
  case GORUN_UNARY_ROUND_BF16:
    GORUN_FOR(i, n) { y[i] = gorun_round_to(x[i], 7, -126, ldexp(511.0, 119)); }
    break;
  case GORUN_UNARY_ROUND_FP16:
    GORUN_FOR(i, n) { y[i] = gorun_round_to(x[i], 10, -14, 65520.0); }
    break;
  case GORUN_UNARY_SILU:
    gorun_map1(x, y, n, [](float v) { return v / (1.0f + (float)exp(-(double)v)); });
    break;
  }
}

GORUN_KERNEL gorun_binary(const float* a, const float* b, float* out, int n, int op,
                          float alpha) {
  switch (op) {
  case GORUN_BINARY_ADD:
    gorun_map2(a, b, out, n, [](float u, float v) { return u + v; });
    break;
  case GORUN_BINARY_SUB:
    gorun_map2(a, b, out, n, [](float u, float v) { return u - v; });
    break;
  case GORUN_BINARY_MUL:
    gorun_map2(a, b, out, n, [](float u, float v) { return u * v; });
    break;
  case GORUN_BINARY_SIGMOID_GRAD:
    gorun_map2(a, b, out, n, [](float g, float y) { return g * (1.0f - y) * y; });
    break;
  case GORUN_BINARY_TANH_GRAD:
    gorun_map2(a, b, out, n, [](float g, float y) { return g * (1.0f - y * y); });
    break;
  case GORUN_BINARY_LEAKY_RELU_GRAD:
    gorun_map2(a, b, out, n, [=](float g, float y) { return y > 0.0f ? g : g * alpha; });
    break;
  case GORUN_BINARY_GELU_GRAD:
    gorun_map2(a, b, out, n, [](float g, float x) {
      double f = x;
      double d = 0.5 * (1 + erf(f * GORUN_INV_SQRT2)) + f * GORUN_INV_SQRT_2PI * exp(-0.5 * f * f);
      return (float)((double)g * d);
    });
    break;
  case GORUN_BINARY_GELU_TANH_GRAD:
    gorun_map2(a, b, out, n, [](float g, float x) {
      double f = x;
      double th = tanh(GORUN_GELU_K * (f + GORUN_GELU_C * f * f * f));
      double d = 0.5 * (1 + th) + 0.5 * f * (1 - th * th) * GORUN_GELU_K * (1 + GORUN_GELU_3C * f * f);
      return (float)((double)g * d);
    });
    break;
  case GORUN_BINARY_SILU_GRAD:
    gorun_map2(a, b, out, n, [](float g, float v) {
      float s = 1.0f / (1.0f + (float)exp(-(double)v));
      return g * s * (1.0f + v * (1.0f - s));
    });
    break;
  }
}

GORUN_KERNEL gorun_copy(const float* src, float* dst, int n) {
  gorun_map1(src, dst, n, [](float v) { return v; });
}

GORUN_KERNEL gorun_fill(float* x, int n, float value) {
  GORUN_FOR(i, n) { x[i] = value; }
}

GORUN_KERNEL gorun_scale(float* x, int n, float s) {
  gorun_map1(x, x, n, [=](float v) { return v * s; });
}

GORUN_KERNEL gorun_accumulate(float* dst, const float* src, int n) {
  gorun_map2(dst, src, dst, n, [](float d, float v) { return d + v; });
}

GORUN_KERNEL gorun_axpy(float* dst, const float* src, int n, float alpha) {
  gorun_map2(dst, src, dst, n, [=](float d, float v) { return fmaf(alpha, v, d); });
}

GORUN_KERNEL gorun_dropout(const float* x, float* y, float* mask, int n, float p,
                           unsigned long long seed, unsigned long long offset) {
  GORUN_FOR(i, n) {
    float m = gorun_keep_mask(p, seed, offset + (unsigned long long)i);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

GORUN_KERNEL gorun_dropout2d(const float* x, float* y, float* mask, int planes, int hw,
                             float p, unsigned long long seed, unsigned long long offset) {
  GORUN_FOR(i64, (long long)planes * hw) {
    int i = (int)i64, j = i / hw;
    float m = gorun_keep_mask(p, seed, offset + (unsigned long long)j);
    if (i - j * hw == 0) mask[j] = m;
    y[i] = x[i] * m;
  }
  // Planes of no elements still get their masks.
  if (hw == 0) {
    GORUN_FOR(j, planes) { mask[j] = gorun_keep_mask(p, seed, offset + (unsigned long long)j); }
  }
}

GORUN_KERNEL gorun_dropout_grad(const float* dy, const float* mask, float* dx, int n) {
  gorun_map2(dy, mask, dx, n, [](float g, float m) { return g * m; });
}

GORUN_KERNEL gorun_dropout2d_grad(const float* dy, const float* mask, float* dx, int planes,
                                  int hw) {
  GORUN_FOR(i64, (long long)planes * hw) {
    int i = (int)i64;
    dx[i] = dy[i] * mask[i / hw];
  }
}
