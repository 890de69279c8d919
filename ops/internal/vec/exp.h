// Cephes' expf polynomial in float32, shared by gelu.c and softmax.c: the
// scalar form (expf_s) and sixteen lanes (exp16) do the same float32
// operations in the same order, so they agree bit for bit with each other
// and with vec's expGo. Include after the fp-contract pragma.

#ifndef GORUN_VEC_EXP_H
#define GORUN_VEC_EXP_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define EXP_HI 88.0f // 2^fx stays finite: fx ≤ 127
#define EXP_LO -87.0f // and normal: fx ≥ -125
#define LOG2EF 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

// expf_s is e^x for x in [EXP_LO, EXP_HI] (the caller clamps).
static inline float expf_s(float x) {
	float fx = floorf(x * LOG2EF + 0.5f);
	x = x - fx * EXP_C1;
	x = x - fx * EXP_C2;
	float z = x * x;
	float y = P0;
	y = y * x + P1;
	y = y * x + P2;
	y = y * x + P3;
	y = y * x + P4;
	y = y * x + P5;
	y = y * z + x;
	y = y + 1.0f;
	int32_t n = (int32_t)fx + 127;
	union { int32_t i; float f; } p = {.i = n << 23};
	return y * p.f;
}

__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x) {
	__m512 fx = _mm512_roundscale_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2EF)), _mm512_set1_ps(0.5f)),
	                                 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	x = _mm512_sub_ps(x, _mm512_mul_ps(fx, _mm512_set1_ps(EXP_C1)));
	x = _mm512_sub_ps(x, _mm512_mul_ps(fx, _mm512_set1_ps(EXP_C2)));
	__m512 z = _mm512_mul_ps(x, x);
	__m512 y = _mm512_set1_ps(P0);
	y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(P1));
	y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(P2));
	y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(P3));
	y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(P4));
	y = _mm512_add_ps(_mm512_mul_ps(y, x), _mm512_set1_ps(P5));
	y = _mm512_add_ps(_mm512_mul_ps(y, z), x);
	y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
	__m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
	return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

#endif
