//go:build cgo && amd64 && !purego

// GELU with the tanh approximation and its gradient, in float32 (see
// gelu.go). 1 ± tanh(u) from e^{2u} (see sp_s) with Cephes' expf polynomial; every
// body does the same float32 operations in the same order (no contraction
// into fused multiply-adds), so the levels agree bit for bit.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#pragma GCC optimize("fp-contract=off")

#include "exp.h"

#define GELU_K 0.7978845608028654f // sqrt(2/π)
#define GELU_C 0.044715f
// sp_s sets s = 1 - tanh(u) and p = 1 + tanh(u) from E = e^{2u}: s = 2/(1+E),
// p = s·E, and 1 - tanh² = s·p, so GELU needs neither 1 + tanh nor 1 - tanh²
// through the cancellation of 1 ± tanh near ∓1. Past the exponential's
// range tanh is ±1 exactly (s, p = 0, 2 or 2, 0), as float32's tanh is
// there, so ±Inf inputs give what PyTorch's formula gives (Inf·0 = NaN
// where it has one). A NaN u gives NaN.
static inline void sp_s(float u, float *s, float *p) {
	float t = 2.0f * u;
	if (t > EXP_HI) {
		*s = 0.0f;
		*p = 2.0f;
		return;
	}
	if (t < EXP_LO) {
		*s = 2.0f;
		*p = 0.0f;
		return;
	}
	float e = expf_s(t);
	*s = 2.0f / (1.0f + e);
	*p = *s * e;
}

#define GELU_BODY                                                   \
	for (long i = 0; i < n; i++) {                                  \
		float f = x[i];                                             \
		float s, p;                                                 \
		sp_s(GELU_K * (f + GELU_C * f * f * f), &s, &p);            \
		y[i] = 0.5f * f * p;                                        \
	}

#define GELUGRAD_BODY                                                          \
	for (long i = 0; i < n; i++) {                                             \
		float f = x[i];                                                        \
		float s, p;                                                            \
		sp_s(GELU_K * (f + GELU_C * f * f * f), &s, &p);                       \
		float a = 0.5f * p;                                                    \
		float b = 0.5f * f * (s * p) * GELU_K;                                 \
		b = b * (1.0f + 3.0f * GELU_C * f * f);                                \
		dx[i] = dy[i] * (a + b);                                               \
	}

static void gelu_c(float *y, const float *x, long n) { GELU_BODY }
static void gelugrad_c(float *dx, const float *dy, const float *x, long n) { GELUGRAD_BODY }
__attribute__((target("avx2,fma"))) static void gelu_avx2(float *y, const float *x, long n) { GELU_BODY }
__attribute__((target("avx2,fma"))) static void gelugrad_avx2(float *dx, const float *dy, const float *x, long n) { GELUGRAD_BODY }

// The AVX-512 bodies: the scalar code above, sixteen lanes at a time.

// sp16 is sp_s, sixteen lanes at a time.
__attribute__((target("avx512f"))) static inline void sp16(__m512 u, __m512 *s, __m512 *p) {
	__m512 t = _mm512_mul_ps(_mm512_set1_ps(2.0f), u);
	__mmask16 hi = _mm512_cmp_ps_mask(t, _mm512_set1_ps(EXP_HI), _CMP_GT_OQ);
	__mmask16 lo = _mm512_cmp_ps_mask(t, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ);
	// The lanes past the range are replaced below; clamp them so that the
	// exponential stays finite (NaN lanes stay NaN: min/max return their
	// second operand on a NaN, so it is put back).
	__m512 c = _mm512_min_ps(t, _mm512_set1_ps(EXP_HI));
	c = _mm512_max_ps(c, _mm512_set1_ps(EXP_LO));
	c = _mm512_mask_mov_ps(c, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t);
	__m512 e = exp16(c);
	__m512 sv = _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
	__m512 pv = _mm512_mul_ps(sv, e);
	sv = _mm512_mask_mov_ps(sv, hi, _mm512_setzero_ps());
	pv = _mm512_mask_mov_ps(pv, hi, _mm512_set1_ps(2.0f));
	sv = _mm512_mask_mov_ps(sv, lo, _mm512_set1_ps(2.0f));
	pv = _mm512_mask_mov_ps(pv, lo, _mm512_setzero_ps());
	*s = sv;
	*p = pv;
}

__attribute__((target("avx512f"))) static inline __m512 gelu16(__m512 f) {
	__m512 f3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_C), f), f);
	f3 = _mm512_mul_ps(f3, f);
	__m512 s, p;
	sp16(_mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_add_ps(f, f3)), &s, &p);
	return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), f), p);
}

__attribute__((target("avx512f"))) static inline __m512 gelugrad16(__m512 g, __m512 f) {
	__m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
	__m512 f3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_C), f), f);
	f3 = _mm512_mul_ps(f3, f);
	__m512 s, p; // 1 - tanh, 1 + tanh
	sp16(_mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_add_ps(f, f3)), &s, &p);
	__m512 a = _mm512_mul_ps(half, p);
	__m512 b = _mm512_mul_ps(_mm512_mul_ps(half, f), _mm512_mul_ps(s, p));
	b = _mm512_mul_ps(b, _mm512_set1_ps(GELU_K));
	__m512 q = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(3.0f * GELU_C), f), f);
	b = _mm512_mul_ps(b, _mm512_add_ps(one, q));
	return _mm512_mul_ps(g, _mm512_add_ps(a, b));
}

__attribute__((target("avx512f"))) static void gelu_avx512(float *y, const float *x, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

__attribute__((target("avx512f"))) static void gelugrad_avx512(float *dx, const float *dy, const float *x, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dx + i, gelugrad16(_mm512_loadu_ps(dy + i), _mm512_loadu_ps(x + i)));
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(dx + i, m, gelugrad16(_mm512_maskz_loadu_ps(m, dy + i), _mm512_maskz_loadu_ps(m, x + i)));
	}
}

void gorun_vec_gelu_tanh(int level, float *y, const float *x, long n) {
	switch (level) {
	case 2: gelu_avx512(y, x, n); break;
	case 1: gelu_avx2(y, x, n); break;
	default: gelu_c(y, x, n);
	}
}

void gorun_vec_gelu_tanh_grad(int level, float *dx, const float *dy, const float *x, long n) {
	switch (level) {
	case 2: gelugrad_avx512(dx, dy, x, n); break;
	case 1: gelugrad_avx2(dx, dy, x, n); break;
	default: gelugrad_c(dx, dy, x, n);
	}
}
