//go:build cgo && amd64 && !purego

// Vectorised float32 kernels for the memory-bound ops (see vec.go). Each
// kernel has three bodies: AVX-512 intrinsics (level 2), the same loop
// compiled for AVX2 (level 1) and plain C (level 0); the Go caller picks the
// level once (gorun_vec_level). Every body computes each element with the
// same single operation, so all levels give bit-identical results.

#include <immintrin.h>
#include <stdint.h>

#pragma GCC optimize("fp-contract=off")

int gorun_vec_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return 2;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return 1;
	return 0;
}

// tail returns the mask of the first n (< 16) lanes.
#define TAIL(n) ((__mmask16)((1u << (n)) - 1u))

// ---- ReLU: y = x < 0 ? 0 : x (NaN and -0 pass through) ----

#define RELU_BODY                                 \
	for (long i = 0; i < n; i++) {                \
		float v = x[i];                           \
		y[i] = v < 0.0f ? 0.0f : v;               \
	}

static void relu_c(float *y, const float *x, long n) { RELU_BODY }
__attribute__((target("avx2,fma"))) static void relu_avx2(float *y, const float *x, long n) { RELU_BODY }

__attribute__((target("avx512f"))) static void relu_avx512(float *y, const float *x, long n) {
	const __m512 z = _mm512_setzero_ps();
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_loadu_ps(x + i);
		_mm512_storeu_ps(y + i, _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), z));
	}
	if (i < n) {
		__mmask16 m = TAIL(n - i);
		__m512 v = _mm512_maskz_loadu_ps(m, x + i);
		_mm512_mask_storeu_ps(y + i, m, _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), z));
	}
}

void gorun_vec_relu(int level, float *y, const float *x, long n) {
	switch (level) {
	case 2: relu_avx512(y, x, n); break;
	case 1: relu_avx2(y, x, n); break;
	default: relu_c(y, x, n);
	}
}

// ---- ReLU gradient: dx = y > 0 ? dy : 0, or y > 0 ? dy + dy2 : 0 (the
// sum of a value's two gradients fused in) ----

#define RELUGRAD_BODY                                                 \
	for (long i = 0; i < n; i++)                                      \
		dx[i] = y[i] > 0.0f ? (dy2 ? dy[i] + dy2[i] : dy[i]) : 0.0f;

static void relugrad_c(float *dx, const float *dy, const float *dy2, const float *y, long n) { RELUGRAD_BODY }

// relugrad_avx2 with intrinsics: GCC vectorizes the plain loop (masked
// loads of dy) only without dy2, and the ResNet's residual sums take dy2
// (6 % of its level-1 training step ran the scalar loop).
__attribute__((target("avx2,fma"))) static void relugrad_avx2(float *dx, const float *dy, const float *dy2, const float *y,
                                                               long n) {
	const __m256 z = _mm256_setzero_ps();
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 k = _mm256_cmp_ps(_mm256_loadu_ps(y + i), z, _CMP_GT_OQ), d = _mm256_loadu_ps(dy + i);
		if (dy2)
			d = _mm256_add_ps(d, _mm256_loadu_ps(dy2 + i));
		_mm256_storeu_ps(dx + i, _mm256_and_ps(k, d));
	}
	dx += i, dy += i, y += i, n -= i;
	if (dy2)
		dy2 += i;
	RELUGRAD_BODY
}

__attribute__((target("avx512f"))) static inline __m512 relugrad16(__mmask16 k, const float *dy, const float *dy2) {
	__m512 d = _mm512_maskz_loadu_ps(k, dy);
	return dy2 ? _mm512_maskz_add_ps(k, d, _mm512_maskz_loadu_ps(k, dy2)) : d;
}

__attribute__((target("avx512f"))) static void relugrad_avx512(float *dx, const float *dy, const float *dy2, const float *y,
                                                                long n) {
	const __m512 z = _mm512_setzero_ps();
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		__mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), z, _CMP_GT_OQ);
		_mm512_storeu_ps(dx + i, relugrad16(k, dy + i, dy2 ? dy2 + i : NULL));
	}
	if (i < n) {
		__mmask16 m = TAIL(n - i);
		__mmask16 k = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, y + i), z, _CMP_GT_OQ);
		_mm512_mask_storeu_ps(dx + i, m, relugrad16(k, dy + i, dy2 ? dy2 + i : NULL));
	}
}

void gorun_vec_relu_grad(int level, float *dx, const float *dy, const float *dy2, const float *y, long n) {
	switch (level) {
	case 2: relugrad_avx512(dx, dy, dy2, y, n); break;
	case 1: relugrad_avx2(dx, dy, dy2, y, n); break;
	default: relugrad_c(dx, dy, dy2, y, n);
	}
}

// ---- z = x + y; d += s is add with z = x = d ----

#define ADD_BODY                                  \
	for (long i = 0; i < n; i++)                  \
		z[i] = x[i] + y[i];

static void add_c(float *z, const float *x, const float *y, long n) { ADD_BODY }
__attribute__((target("avx2,fma"))) static void add_avx2(float *z, const float *x, const float *y, long n) { ADD_BODY }

__attribute__((target("avx512f"))) static void add_avx512(float *z, const float *x, const float *y, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(z + i, _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
	if (i < n) {
		__mmask16 m = TAIL(n - i);
		_mm512_mask_storeu_ps(z + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
	}
}

void gorun_vec_add(int level, float *z, const float *x, const float *y, long n) {
	switch (level) {
	case 2: add_avx512(z, x, y, n); break;
	case 1: add_avx2(z, x, y, n); break;
	default: add_c(z, x, y, n);
	}
}

// ---- plane scaling: y[p·hw + i] = x[p·hw + i] · s[p] (Dropout2D and its
// gradient: one multiply an element) ----

#define SCALE_PLANES_BODY                                 \
	for (long p = 0; p < planes; p++) {                   \
		float m = s[p];                                   \
		for (long i = 0; i < hw; i++)                     \
			y[p * hw + i] = x[p * hw + i] * m;            \
	}

static void scale_planes_c(float *y, const float *x, const float *s, long planes, long hw) { SCALE_PLANES_BODY }
__attribute__((target("avx2,fma"))) static void scale_planes_avx2(float *y, const float *x, const float *s, long planes,
                                                                  long hw) { SCALE_PLANES_BODY }

__attribute__((target("avx512f"))) static void scale_planes_avx512(float *y, const float *x, const float *s,
                                                                     long planes, long hw) {
	for (long p = 0; p < planes; p++) {
		__m512 m = _mm512_set1_ps(s[p]);
		const float *xp = x + p * hw;
		float *yp = y + p * hw;
		long i = 0;
		for (; i + 16 <= hw; i += 16)
			_mm512_storeu_ps(yp + i, _mm512_mul_ps(_mm512_loadu_ps(xp + i), m));
		if (i < hw) {
			__mmask16 t = TAIL(hw - i);
			_mm512_mask_storeu_ps(yp + i, t, _mm512_mul_ps(_mm512_maskz_loadu_ps(t, xp + i), m));
		}
	}
}

void gorun_vec_scale_planes(int level, float *y, const float *x, const float *s, long planes, long hw) {
	switch (level) {
	case 2: scale_planes_avx512(y, x, s, planes, hw); break;
	case 1: scale_planes_avx2(y, x, s, planes, hw); break;
	default: scale_planes_c(y, x, s, planes, hw);
	}
}

// ---- 2×2 max pooling, stride 2 ----
//
// For each output (oy, ox) of each plane: the first maximum of the window
// in the order x[2oy][2ox], x[2oy][2ox+1], x[2oy+1][2ox], x[2oy+1][2ox+1]
// (the pairs are compared first, then the pairs' winners, the later one
// winning only when strictly greater: the first maximum in that order), and
// its index in the plane. A window holding a NaN is done by maxpool_window,
// which takes the last NaN, as PyTorch's CPU kernel.

static inline void maxpool_window(const float *r0, const float *r1, long j, long w, int32_t base,
                                  float *y, int32_t *idx) {
	float v[4] = {r0[j], r0[j + 1], r1[j], r1[j + 1]};
	int32_t at[4] = {base + (int32_t)j, base + (int32_t)j + 1, base + (int32_t)(w + j), base + (int32_t)(w + j) + 1};
	float m = v[0];
	int32_t b = at[0];
	for (int q = 1; q < 4; q++)
		if (v[q] > m || v[q] != v[q]) {
			m = v[q];
			b = at[q];
		}
	*y = m;
	*idx = b;
}

static void maxpool_c(const float *x, float *y, int32_t *idx, long planes, long h, long w, long oh, long ow) {
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * h * w;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = xp + 2 * oy * w, *r1 = r0 + w;
			float *yr = y + (p * oh + oy) * ow;
			int32_t *ir = idx + (p * oh + oy) * ow;
			int32_t base = (int32_t)(2 * oy * w);
			for (long ox = 0; ox < ow; ox++)
				maxpool_window(r0, r1, 2 * ox, w, base, yr + ox, ir + ox);
		}
	}
}

__attribute__((target("avx512f"))) static void maxpool_avx512(const float *x, float *y, int32_t *idx, long planes,
                                                                long h, long w, long oh, long ow) {
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	const __m512i one = _mm512_set1_epi32(1);
	const __m512i wv = _mm512_set1_epi32((int32_t)w);
	for (long p = 0; p < planes; p++) {
		const float *xp = x + p * h * w;
		for (long oy = 0; oy < oh; oy++) {
			const float *r0 = xp + 2 * oy * w, *r1 = r0 + w;
			float *yr = y + (p * oh + oy) * ow;
			int32_t *ir = idx + (p * oh + oy) * ow;
			int32_t base = (int32_t)(2 * oy * w);
			for (long ox = 0; ox < ow; ox += 16) {
				long cnt = ow - ox < 16 ? ow - ox : 16; // outputs in this block
				long j = 2 * ox;
				// the window's 2·cnt columns: m0 covers the first 16, m1 the rest
				__mmask16 m0 = cnt >= 8 ? 0xffff : TAIL(2 * cnt);
				__mmask16 m1 = cnt == 16 ? 0xffff : cnt > 8 ? TAIL(2 * cnt - 16) : 0;
				__m512 a0 = _mm512_maskz_loadu_ps(m0, r0 + j), a1 = _mm512_maskz_loadu_ps(m1, r0 + j + 16);
				__m512 b0 = _mm512_maskz_loadu_ps(m0, r1 + j), b1 = _mm512_maskz_loadu_ps(m1, r1 + j + 16);
				__mmask16 nan = _mm512_cmp_ps_mask(a0, a0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a1, a1, _CMP_UNORD_Q) |
				                _mm512_cmp_ps_mask(b0, b0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b1, b1, _CMP_UNORD_Q);
				if (nan) {
					for (long q = 0; q < cnt; q++)
						maxpool_window(r0, r1, j + 2 * q, w, base, yr + ox + q, ir + ox + q);
					continue;
				}
				__m512 ta = _mm512_permutex2var_ps(a0, even, a1), tb = _mm512_permutex2var_ps(a0, odd, a1);
				__m512 ba = _mm512_permutex2var_ps(b0, even, b1), bb = _mm512_permutex2var_ps(b0, odd, b1);
				__mmask16 tk = _mm512_cmp_ps_mask(tb, ta, _CMP_GT_OQ);
				__mmask16 bk = _mm512_cmp_ps_mask(bb, ba, _CMP_GT_OQ);
				__m512 top = _mm512_mask_mov_ps(ta, tk, tb), bot = _mm512_mask_mov_ps(ba, bk, bb);
				__mmask16 rk = _mm512_cmp_ps_mask(bot, top, _CMP_GT_OQ);
				__m512 best = _mm512_mask_mov_ps(top, rk, bot);
				// index: base + j + 2·lane (even's entries), +1 for the odd column, +w for the bottom row
				__m512i at = _mm512_add_epi32(_mm512_set1_epi32(base + (int32_t)j), even);
				__m512i toff = _mm512_maskz_mov_epi32(tk, one), boff = _mm512_add_epi32(wv, _mm512_maskz_mov_epi32(bk, one));
				at = _mm512_add_epi32(at, _mm512_mask_mov_epi32(toff, rk, boff));
				__mmask16 mo = cnt == 16 ? 0xffff : TAIL(cnt);
				_mm512_mask_storeu_ps(yr + ox, mo, best);
				_mm512_mask_storeu_epi32(ir + ox, mo, at);
			}
		}
	}
}

void gorun_vec_maxpool2x2(int level, const float *x, float *y, int32_t *idx, long planes, long h, long w, long oh, long ow) {
	if (level == 2)
		maxpool_avx512(x, y, idx, planes, h, w, oh, ow);
	else
		maxpool_c(x, y, idx, planes, h, w, oh, ow);
}

// ---- its gradient: each window's four elements of dx written once (the
// chosen one dy + 0, so that -0 becomes +0 as 0 + dy gives, the others 0),
// the rows and columns no window covers 0: no clearing pass, no scatter. idx
// is as the pooling wrote it (inside its window). ----

static void maxpool_grad_rest(float *dp, long h, long w, long oh, long ow) {
	for (long r = 0; r < 2 * oh; r++)
		for (long c = 2 * ow; c < w; c++)
			dp[r * w + c] = 0;
	for (long r = 2 * oh; r < h; r++)
		for (long c = 0; c < w; c++)
			dp[r * w + c] = 0;
}

static void maxpool_grad_c(const float *dy, const int32_t *idx, float *dx, long planes, long h, long w, long oh,
                           long ow) {
	for (long p = 0; p < planes; p++) {
		float *dp = dx + p * h * w;
		for (long oy = 0; oy < oh; oy++) {
			float *r0 = dp + 2 * oy * w, *r1 = r0 + w;
			const float *g = dy + (p * oh + oy) * ow;
			const int32_t *ir = idx + (p * oh + oy) * ow;
			int32_t base = (int32_t)(2 * oy * w);
			for (long ox = 0; ox < ow; ox++) {
				long j = 2 * ox;
				int32_t d = ir[ox] - base - (int32_t)j;
				float v = g[ox] + 0.0f;
				r0[j] = d == 0 ? v : 0;
				r0[j + 1] = d == 1 ? v : 0;
				r1[j] = d == (int32_t)w ? v : 0;
				r1[j + 1] = d == (int32_t)w + 1 ? v : 0;
			}
		}
		maxpool_grad_rest(dp, h, w, oh, ow);
	}
}

__attribute__((target("avx512f"))) static void maxpool_grad_avx512(const float *dy, const int32_t *idx, float *dx,
                                                                     long planes, long h, long w, long oh, long ow) {
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
	const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
	const __m512i wv = _mm512_set1_epi32((int32_t)w), w1 = _mm512_set1_epi32((int32_t)w + 1);
	for (long p = 0; p < planes; p++) {
		float *dp = dx + p * h * w;
		for (long oy = 0; oy < oh; oy++) {
			float *r0 = dp + 2 * oy * w, *r1 = r0 + w;
			const float *g = dy + (p * oh + oy) * ow;
			const int32_t *ir = idx + (p * oh + oy) * ow;
			int32_t base = (int32_t)(2 * oy * w);
			for (long ox = 0; ox < ow; ox += 16) {
				long cnt = ow - ox < 16 ? ow - ox : 16;
				long j = 2 * ox;
				__mmask16 mo = cnt == 16 ? 0xffff : TAIL(cnt);
				__mmask16 m0 = cnt >= 8 ? 0xffff : TAIL(2 * cnt);
				__mmask16 m1 = cnt == 16 ? 0xffff : cnt > 8 ? TAIL(2 * cnt - 16) : 0;
				__m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(mo, g + ox), _mm512_setzero_ps());
				__m512i d = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mo, ir + ox),
				                             _mm512_add_epi32(_mm512_set1_epi32(base + (int32_t)j), even));
				__m512 a = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(d, zero), v);
				__m512 b = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(d, one), v);
				__m512 c = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(d, wv), v);
				__m512 e = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(d, w1), v);
				_mm512_mask_storeu_ps(r0 + j, m0, _mm512_permutex2var_ps(a, lo, b));
				_mm512_mask_storeu_ps(r0 + j + 16, m1, _mm512_permutex2var_ps(a, hi, b));
				_mm512_mask_storeu_ps(r1 + j, m0, _mm512_permutex2var_ps(c, lo, e));
				_mm512_mask_storeu_ps(r1 + j + 16, m1, _mm512_permutex2var_ps(c, hi, e));
			}
		}
		maxpool_grad_rest(dp, h, w, oh, ow);
	}
}

void gorun_vec_maxpool2x2_grad(int level, const float *dy, const int32_t *idx, float *dx, long planes, long h, long w,
                               long oh, long ow) {
	if (level == 2)
		maxpool_grad_avx512(dy, idx, dx, planes, h, w, oh, ow);
	else
		maxpool_grad_c(dy, idx, dx, planes, h, w, oh, ow);
}

// ---- sum: 16 partial sums (element i into partial i mod 16; a tail of r
// elements into partials 0..r-1), combined pairwise: ((p0+p8)+(p4+p12))… ----

static float combine16(float *p) {
	for (int w = 8; w >= 1; w /= 2)
		for (int i = 0; i < w; i++)
			p[i] = p[i] + p[i + w];
	return p[0];
}

static float sum_c(const float *x, long n) {
	float p[16] = {0};
	for (long i = 0; i < n; i++)
		p[i & 15] += x[i];
	return combine16(p);
}

__attribute__((target("avx512f"))) static float sum_avx512(const float *x, long n) {
	__m512 acc = _mm512_setzero_ps();
	long i = 0;
	for (; i + 16 <= n; i += 16)
		acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
	if (i < n)
		acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(TAIL(n - i), x + i));
	float p[16];
	_mm512_storeu_ps(p, acc);
	return combine16(p);
}

// sum_avx2 is sum_avx512 with the sixteen partials in two vectors (level
// 1: the plain loop, even compiled for AVX2, adds one element at a time;
// this is 3–5× faster on 576- and 4096-float planes, Conv2DPoolGrad's bias
// sums among them).
__attribute__((target("avx2"))) static float sum_avx2(const float *x, long n) {
	__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
	long i = 0;
	for (; i + 16 <= n; i += 16)
		a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i)), a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
	float p[16];
	_mm256_storeu_ps(p, a0);
	_mm256_storeu_ps(p + 8, a1);
	for (long k = 0; i < n; i++, k++) // the tail into partials 0 … n-i-1
		p[k] += x[i];
	return combine16(p);
}

float gorun_vec_sum(int level, const float *x, long n) {
	if (level == 2)
		return sum_avx512(x, n);
	if (level == 1)
		return sum_avx2(x, n);
	return sum_c(x, n);
}

// ---- bias gradient: db[j] (+)= Σ_i sum(dy[i, j, :]), each plane summed as
// gorun_vec_sum, the planes added in float64 in sample order ----

void gorun_vec_bias_grad(int level, const float *dy, long n, long o, long plane, float *db, int accumulate) {
	for (long j = 0; j < o; j++) {
		double s = 0;
		for (long i = 0; i < n; i++)
			s += (double)gorun_vec_sum(level, dy + (i * o + j) * plane, plane);
		db[j] = accumulate ? db[j] + (float)s : (float)s;
	}
}
