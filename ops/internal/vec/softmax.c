//go:build cgo && amd64 && !purego

// Softmax over rows in float32 (see softmax.go): each exponential by exp.h's
// polynomial, the sum in sixteen partial sums (element j of a row into
// partial j mod 16, combined pairwise), every body doing the same float32
// operations in the same order, so the levels agree bit for bit.

#include <immintrin.h>
#include <stdint.h>

#pragma GCC optimize("fp-contract=off")

#include "exp.h"

// sm_exp is e^d for d = x - max: a NaN stays NaN, below EXP_LO it is 0.
static inline float sm_exp(float d) {
	if (d != d)
		return d;
	if (d < EXP_LO)
		return 0.0f;
	return expf_s(d > EXP_HI ? EXP_HI : d);
}

static float sm_combine(float *p) {
	for (int w = 8; w >= 1; w /= 2)
		for (int i = 0; i < w; i++)
			p[i] = p[i] + p[i + w];
	return p[0];
}

// sm_keep is how many columns of row r count: all k, or with causal > 0
// (rows of causal×causal matrices) columns 0..r mod causal.
static inline long sm_keep(long r, long k, long causal) {
	if (causal <= 0)
		return k;
	long keep = r % causal + 1;
	return keep < k ? keep : k;
}

// sm_max is the row's maximum: NaN if it holds one (the last NaN wins, as
// ops' rowMax), else its largest value.
static inline float sm_max(const float *xr, long keep) {
	float m = xr[0];
	for (long j = 1; j < keep; j++)
		if (xr[j] > m || xr[j] != xr[j])
			m = xr[j];
	return m;
}

static void softmax_c(const float *x, float *y, long rows, long k, long causal, float *ms) {
	for (long r = 0; r < rows; r++) {
		const float *xr = x + r * k;
		float *yr = y + r * k;
		long keep = sm_keep(r, k, causal);
		float m = sm_max(xr, keep);
		float p[16] = {0};
		for (long j = 0; j < keep; j++) {
			float e = sm_exp(xr[j] - m);
			yr[j] = e;
			p[j & 15] += e;
		}
		float s = sm_combine(p), inv = 1.0f / s;
		for (long j = 0; j < keep; j++)
			yr[j] = yr[j] * inv;
		for (long j = keep; j < k; j++)
			yr[j] = 0.0f;
		if (ms) {
			ms[2 * r] = m;
			ms[2 * r + 1] = s;
		}
	}
}

__attribute__((target("avx512f"))) static void softmax_avx512(const float *x, float *y, long rows, long k,
                                                                long causal, float *ms) {
	const __m512 lo = _mm512_set1_ps(EXP_LO), hi = _mm512_set1_ps(EXP_HI), zero = _mm512_setzero_ps();
	for (long r = 0; r < rows; r++) {
		const float *xr = x + r * k;
		float *yr = y + r * k;
		long keep = sm_keep(r, k, causal);
		float m = sm_max(xr, keep);
		__m512 mv = _mm512_set1_ps(m), acc = zero;
		for (long j = 0; j < keep; j += 16) {
			__mmask16 t = keep - j >= 16 ? 0xffff : (__mmask16)((1u << (keep - j)) - 1u);
			__m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(t, xr + j), mv);
			__m512 c = _mm512_max_ps(_mm512_min_ps(d, hi), lo);
			__m512 e = exp16(c);
			e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(d, lo, _CMP_LT_OQ), zero);
			e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), d);
			e = _mm512_maskz_mov_ps(t, e);
			_mm512_mask_storeu_ps(yr + j, t, e);
			acc = _mm512_add_ps(acc, e);
		}
		float p[16];
		_mm512_storeu_ps(p, acc);
		float s = sm_combine(p);
		__m512 inv = _mm512_set1_ps(1.0f / s);
		for (long j = 0; j < keep; j += 16) {
			__mmask16 t = keep - j >= 16 ? 0xffff : (__mmask16)((1u << (keep - j)) - 1u);
			_mm512_mask_storeu_ps(yr + j, t, _mm512_mul_ps(_mm512_maskz_loadu_ps(t, yr + j), inv));
		}
		for (long j = keep; j < k; j++)
			yr[j] = 0.0f;
		if (ms) {
			ms[2 * r] = m;
			ms[2 * r + 1] = s;
		}
	}
}

void gorun_vec_softmax(int level, const float *x, float *y, long rows, long k, long causal, float *ms) {
	if (level == 2)
		softmax_avx512(x, y, rows, k, causal, ms);
	else
		softmax_c(x, y, rows, k, causal, ms);
}
