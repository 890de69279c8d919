// elementwise.cu — elementwise kernels and dropout (see kernels.h).
#include "common.cuh"

GORUN_KERNEL gorun_relu(const float* x, float* y, int n) {
  GORUN_FOR(i, n) {
    float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
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
    GORUN_FOR(i, n) { y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i]))); }
    break;
  case GORUN_UNARY_TANH:
    GORUN_FOR(i, n) { y[i] = (float)tanh((double)x[i]); }
    break;
  case GORUN_UNARY_LEAKY_RELU:
    GORUN_FOR(i, n) {
      float v = x[i];
      y[i] = v > 0.0f ? v : v * alpha; // NaN·alpha stays NaN
    }
    break;
  case GORUN_UNARY_SCALE:
    GORUN_FOR(i, n) { y[i] = alpha * x[i]; }
    break;
  case GORUN_UNARY_GELU:
    GORUN_FOR(i, n) {
      double f = x[i];
      y[i] = (float)(0.5 * f * (1 + erf(f * GORUN_INV_SQRT2)));
    }
    break;
  case GORUN_UNARY_GELU_TANH:
    GORUN_FOR(i, n) {
      double f = x[i];
      y[i] = (float)(0.5 * f * (1 + tanh(GORUN_GELU_K * (f + GORUN_GELU_C * f * f * f))));
    }
    break;
  case GORUN_UNARY_ROUND_BF16:
    GORUN_FOR(i, n) { y[i] = gorun_round_to(x[i], 7, -126, ldexp(511.0, 119)); }
    break;
  case GORUN_UNARY_ROUND_FP16:
    GORUN_FOR(i, n) { y[i] = gorun_round_to(x[i], 10, -14, 65520.0); }
    break;
  case GORUN_UNARY_SILU:
    GORUN_FOR(i, n) {
      float v = x[i];
      y[i] = v / (1.0f + (float)exp(-(double)v));
    }
    break;
  }
}

GORUN_KERNEL gorun_binary(const float* a, const float* b, float* out, int n, int op,
                          float alpha) {
  switch (op) {
  case GORUN_BINARY_ADD:
    GORUN_FOR(i, n) { out[i] = a[i] + b[i]; }
    break;
  case GORUN_BINARY_SUB:
    GORUN_FOR(i, n) { out[i] = a[i] - b[i]; }
    break;
  case GORUN_BINARY_MUL:
    GORUN_FOR(i, n) { out[i] = a[i] * b[i]; }
    break;
  case GORUN_BINARY_SIGMOID_GRAD:
    GORUN_FOR(i, n) {
      float y = b[i];
      out[i] = a[i] * (1.0f - y) * y;
    }
    break;
  case GORUN_BINARY_TANH_GRAD:
    GORUN_FOR(i, n) {
      float y = b[i];
      out[i] = a[i] * (1.0f - y * y);
    }
    break;
  case GORUN_BINARY_LEAKY_RELU_GRAD:
    GORUN_FOR(i, n) {
      float g = a[i];
      out[i] = b[i] > 0.0f ? g : g * alpha;
    }
    break;
  case GORUN_BINARY_GELU_GRAD:
    GORUN_FOR(i, n) {
      double f = b[i];
      double d = 0.5 * (1 + erf(f * GORUN_INV_SQRT2)) + f * GORUN_INV_SQRT_2PI * exp(-0.5 * f * f);
      out[i] = (float)((double)a[i] * d);
    }
    break;
  case GORUN_BINARY_GELU_TANH_GRAD:
    GORUN_FOR(i, n) {
      double f = b[i];
      double th = tanh(GORUN_GELU_K * (f + GORUN_GELU_C * f * f * f));
      double d = 0.5 * (1 + th) + 0.5 * f * (1 - th * th) * GORUN_GELU_K * (1 + GORUN_GELU_3C * f * f);
      out[i] = (float)((double)a[i] * d);
    }
    break;
  case GORUN_BINARY_SILU_GRAD:
    GORUN_FOR(i, n) {
      float v = b[i];
      float s = 1.0f / (1.0f + (float)exp(-(double)v));
      out[i] = a[i] * s * (1.0f + v * (1.0f - s));
    }
    break;
  }
}

GORUN_KERNEL gorun_copy(const float* src, float* dst, int n) {
  GORUN_FOR(i, n) { dst[i] = src[i]; }
}

GORUN_KERNEL gorun_fill(float* x, int n, float value) {
  GORUN_FOR(i, n) { x[i] = value; }
}

GORUN_KERNEL gorun_scale(float* x, int n, float s) {
  GORUN_FOR(i, n) { x[i] *= s; }
}

GORUN_KERNEL gorun_accumulate(float* dst, const float* src, int n) {
  GORUN_FOR(i, n) { dst[i] += src[i]; }
}

GORUN_KERNEL gorun_axpy(float* dst, const float* src, int n, float alpha) {
  GORUN_FOR(i, n) { dst[i] = fmaf(alpha, src[i], dst[i]); }
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
  GORUN_FOR(i, n) { dx[i] = dy[i] * mask[i]; }
}

GORUN_KERNEL gorun_dropout2d_grad(const float* dy, const float* mask, float* dx, int planes,
                                  int hw) {
  GORUN_FOR(i64, (long long)planes * hw) {
    int i = (int)i64;
    dx[i] = dy[i] * mask[i / hw];
  }
}
