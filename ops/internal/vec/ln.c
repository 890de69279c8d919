//go:build cgo && amd64 && !purego

// Layer-normalisation kernels and column sums (see ln.go) over float32
// matrices of rows × d (or rows × cols) elements, row-major. Each kernel
// is one call for the whole matrix and has three bodies: AVX-512
// intrinsics (level 2), AVX2 (level 1) and plain C (level 0), with the
// float64 sums shared as below.
//
// Row sums (the moments of the forward pass and the two sums of the input
// gradient) convert every element to double and add in double: plain C in
// the Go loops' order, the AVX2 body (which serves level 2 too, as in
// bn.c: converting 4 floats at a time beat 8 on Zen 4) in its own fixed
// order of vector accumulators (8 for the moments; 4 for the gradient's
// two sums, where 8 pairs spilled registers and ran slower), a masked row
// tail adding zeros and a fixed final reduction, so a result depends only
// on d and the level.
// Column sums (the gamma, beta and bias gradients) add each column in row
// order at every level, vectorised across the columns: the same additions
// as the Go loops, so the same bits (the products summed are exact in
// double, two float32 factors, so a fused multiply-add gives the value of
// a multiply and an add). The elementwise outputs use the same single
// float32 operations in the same order at every level: bit-identical.

#include <immintrin.h>
#include <stdint.h>

#pragma GCC optimize("fp-contract=off")

// LN_TAIL is the mask of the first n (< 16) lanes.
#define LN_TAIL(n) ((__mmask16)((1u << (n)) - 1u))

// ln_sqrt is the correctly rounded square root (no libm, no errno).
static inline double ln_sqrt(double v) { return _mm_cvtsd_f64(_mm_sqrt_sd(_mm_setzero_pd(), _mm_set_sd(v))); }

// ---- AVX2 helpers ----

// ln_hsum4 returns (v0 + v2) + (v1 + v3).
__attribute__((target("avx2,fma"))) static inline double ln_hsum4(__m256d v) {
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// ln_hsum8 returns the sum of eight accumulators:
// ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)), then ln_hsum4.
__attribute__((target("avx2,fma"))) static inline double ln_hsum8(__m256d a0, __m256d a1, __m256d a2, __m256d a3,
                                                                   __m256d a4, __m256d a5, __m256d a6, __m256d a7) {
	return ln_hsum4(_mm256_add_pd(_mm256_add_pd(_mm256_add_pd(a0, a4), _mm256_add_pd(a1, a5)),
	                              _mm256_add_pd(_mm256_add_pd(a2, a6), _mm256_add_pd(a3, a7))));
}

// ln_mask4 is the load mask of the first r (1..4) of 4 lanes.
__attribute__((target("avx2,fma"))) static inline __m128i ln_mask4(long r) {
	return _mm_cmpgt_epi32(_mm_set1_epi32((int)r), _mm_setr_epi32(0, 1, 2, 3));
}

// ---- row moments: mean = Σx/d, s2 = Σ(x - mean)² in double ----

static inline void moments_c(const float *x, long d, double *mean, double *s2) {
	double s = 0;
	for (long j = 0; j < d; j++)
		s += (double)x[j];
	double m = s / (double)d, q = 0;
	for (long j = 0; j < d; j++) {
		double e = (double)x[j] - m;
		q += e * e;
	}
	*mean = m, *s2 = q;
}

__attribute__((target("avx2,fma"))) static inline void moments_avx2(const float *x, long d, double *mean,
                                                                     double *s2) {
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	long j = 0;
#define SSTEP(a, o) a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(x + j + (o))));
	for (; j + 32 <= d; j += 32) {
		SSTEP(a0, 0) SSTEP(a1, 4) SSTEP(a2, 8) SSTEP(a3, 12) SSTEP(a4, 16) SSTEP(a5, 20) SSTEP(a6, 24) SSTEP(a7, 28)
	}
	for (; j + 4 <= d; j += 4)
		SSTEP(a0, 0)
#undef SSTEP
	if (j < d)
		a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_maskload_ps(x + j, ln_mask4(d - j))));
	double m = ln_hsum8(a0, a1, a2, a3, a4, a5, a6, a7) / (double)d;
	const __m256d mv = _mm256_set1_pd(m);
	a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	j = 0;
#define MSTEP(a, o)                                                                                \
	{                                                                                              \
		__m256d e = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j + (o))), mv);                 \
		a = _mm256_fmadd_pd(e, e, a);                                                              \
	}
	for (; j + 32 <= d; j += 32) {
		MSTEP(a0, 0) MSTEP(a1, 4) MSTEP(a2, 8) MSTEP(a3, 12) MSTEP(a4, 16) MSTEP(a5, 20) MSTEP(a6, 24) MSTEP(a7, 28)
	}
	for (; j + 4 <= d; j += 4)
		MSTEP(a0, 0)
#undef MSTEP
	if (j < d) {
		__m128i mk = ln_mask4(d - j);
		__m256d e = _mm256_sub_pd(_mm256_cvtps_pd(_mm_maskload_ps(x + j, mk)), mv);
		e = _mm256_and_pd(e, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(mk))); // masked-off lanes: 0
		a1 = _mm256_fmadd_pd(e, e, a1);
	}
	*mean = m, *s2 = ln_hsum8(a0, a1, a2, a3, a4, a5, a6, a7);
}

// ---- forward: y = gamma·((x - m)·k) + beta, or (x - m)·k without gamma
// and beta (a missing gamma is 1, a missing beta 0) ----

#define LN_APPLY_C                                                                                 \
	if (!gamma && !beta)                                                                           \
		for (long j = 0; j < d; j++)                                                               \
			yr[j] = (xr[j] - m) * k;                                                               \
	else if (!gamma)                                                                               \
		for (long j = 0; j < d; j++)                                                               \
			yr[j] = 1.0f * ((xr[j] - m) * k) + beta[j];                                            \
	else if (!beta)                                                                                \
		for (long j = 0; j < d; j++)                                                               \
			yr[j] = gamma[j] * ((xr[j] - m) * k) + 0.0f;                                           \
	else                                                                                           \
		for (long j = 0; j < d; j++)                                                               \
			yr[j] = gamma[j] * ((xr[j] - m) * k) + beta[j];

// LN_FWD is the forward pass with row moments MOMENTS and row body APPLY.
#define LN_FWD(MOMENTS, APPLY)                                                                     \
	for (long r = 0; r < rows; r++) {                                                              \
		const float *xr = x + r * d;                                                               \
		float *yr = y + r * d;                                                                     \
		double mean, s2;                                                                           \
		MOMENTS(xr, d, &mean, &s2);                                                                \
		double is = 1 / ln_sqrt(s2 / (double)d + eps);                                             \
		const float m = (float)mean, k = (float)is;                                                \
		save[2 * r] = m, save[2 * r + 1] = k;                                                      \
		APPLY                                                                                      \
	}

static void fwd_c(float *y, float *save, const float *x, const float *gamma, const float *beta, long rows, long d,
                  double eps) {
	LN_FWD(moments_c, LN_APPLY_C)
}

__attribute__((target("avx2,fma"))) static void fwd_avx2(float *y, float *save, const float *x, const float *gamma,
                                                          const float *beta, long rows, long d, double eps) {
	LN_FWD(moments_avx2, LN_APPLY_C)
}

#define LN_APPLY_512                                                                               \
	{                                                                                              \
		const __m512 mv = _mm512_set1_ps(m), kv = _mm512_set1_ps(k);                               \
		const __m512 one = _mm512_set1_ps(1), zero = _mm512_setzero_ps();                          \
		for (long j = 0; j < d; j += 16) {                                                         \
			__mmask16 mk = d - j >= 16 ? (__mmask16)0xffff : LN_TAIL(d - j);                       \
			__m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, xr + j), mv), kv);    \
			if (gamma || beta) {                                                                   \
				__m512 g = gamma ? _mm512_maskz_loadu_ps(mk, gamma + j) : one;                     \
				__m512 b = beta ? _mm512_maskz_loadu_ps(mk, beta + j) : zero;                      \
				t = _mm512_add_ps(_mm512_mul_ps(g, t), b);                                         \
			}                                                                                      \
			_mm512_mask_storeu_ps(yr + j, mk, t);                                                  \
		}                                                                                          \
	}

__attribute__((target("avx512f,avx2,fma"))) static void fwd_avx512(float *y, float *save, const float *x,
                                                                    const float *gamma, const float *beta, long rows,
                                                                    long d, double eps) {
	LN_FWD(moments_avx2, LN_APPLY_512)
}

void gorun_vec_ln(int level, float *y, float *save, const float *x, const float *gamma, const float *beta, long rows,
                  long d, double eps) {
	switch (level) {
	case 2: fwd_avx512(y, save, x, gamma, beta, rows, d, eps); break;
	case 1: fwd_avx2(y, save, x, gamma, beta, rows, d, eps); break;
	default: fwd_c(y, save, x, gamma, beta, rows, d, eps);
	}
}

// ---- input gradient: per row s0 = Σg, s1 = Σg·x̂ (g = dy·gamma in
// double, x̂ = (x - mean)·is in float32), then dx = is·((dy·gamma - m0) -
// x̂·m1) with m0 = s0/d, m1 = s1/d in float32 ----

static inline void gsums_c(const float *g, const float *x, const float *gamma, long d, float mean, float is,
                           double *s0, double *s1) {
	double a = 0, b = 0;
	for (long j = 0; j < d; j++) {
		double gg = (double)g[j] * (gamma ? (double)gamma[j] : 1.0);
		a += gg;
		b += gg * (double)((x[j] - mean) * is);
	}
	*s0 = a, *s1 = b;
}

__attribute__((target("avx2,fma"))) static inline void gsums_avx2(const float *g, const float *x, const float *gamma,
                                                                   long d, float mean, float is, double *s0,
                                                                   double *s1) {
	const __m128 m = _mm_set1_ps(mean), k = _mm_set1_ps(is);
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	__m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;
	long j = 0;
#define GSTEP(a, b, o)                                                                             \
	{                                                                                              \
		__m256d gg = _mm256_cvtps_pd(_mm_loadu_ps(g + j + (o)));                                   \
		if (gamma)                                                                                 \
			gg = _mm256_mul_pd(gg, _mm256_cvtps_pd(_mm_loadu_ps(gamma + j + (o))));                \
		__m256d t = _mm256_cvtps_pd(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(x + j + (o)), m), k));      \
		a = _mm256_add_pd(a, gg), b = _mm256_fmadd_pd(gg, t, b);                                   \
	}
	for (; j + 16 <= d; j += 16) {
		GSTEP(a0, b0, 0) GSTEP(a1, b1, 4) GSTEP(a2, b2, 8) GSTEP(a3, b3, 12)
	}
	for (; j + 4 <= d; j += 4)
		GSTEP(a0, b0, 0)
#undef GSTEP
	if (j < d) {
		// masked-off lanes: gg = 0 and t = 0 (not -mean·is, which may be infinite)
		__m128i mk = ln_mask4(d - j);
		__m256d gg = _mm256_cvtps_pd(_mm_maskload_ps(g + j, mk));
		if (gamma)
			gg = _mm256_mul_pd(gg, _mm256_cvtps_pd(_mm_maskload_ps(gamma + j, mk)));
		__m128 t = _mm_and_ps(_mm_mul_ps(_mm_sub_ps(_mm_maskload_ps(x + j, mk), m), k), _mm_castsi128_ps(mk));
		a1 = _mm256_add_pd(a1, gg), b1 = _mm256_fmadd_pd(gg, _mm256_cvtps_pd(t), b1);
	}
	*s0 = ln_hsum4(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
	*s1 = ln_hsum4(_mm256_add_pd(_mm256_add_pd(b0, b1), _mm256_add_pd(b2, b3)));
}

#define GI_APPLY_C                                                                                 \
	if (gamma)                                                                                     \
		for (long j = 0; j < d; j++)                                                               \
			dr[j] = is * ((gr[j] * gamma[j] - m0) - ((xr[j] - mean) * is) * m1);                   \
	else                                                                                           \
		for (long j = 0; j < d; j++)                                                               \
			dr[j] = is * ((gr[j] * 1.0f - m0) - ((xr[j] - mean) * is) * m1);

#define LN_GI(SUMS, APPLY)                                                                         \
	for (long r = 0; r < rows; r++) {                                                              \
		const float *xr = x + r * d, *gr = dy + r * d;                                             \
		float *dr = dx + r * d;                                                                    \
		const float mean = save[2 * r], is = save[2 * r + 1];                                      \
		double s0, s1;                                                                             \
		SUMS(gr, xr, gamma, d, mean, is, &s0, &s1);                                                \
		const float m0 = (float)(s0 / (double)d), m1 = (float)(s1 / (double)d);                    \
		APPLY                                                                                      \
	}

static void gi_c(float *dx, const float *dy, const float *x, const float *save, const float *gamma, long rows,
                 long d) {
	LN_GI(gsums_c, GI_APPLY_C)
}

__attribute__((target("avx2,fma"))) static void gi_avx2(float *dx, const float *dy, const float *x, const float *save,
                                                         const float *gamma, long rows, long d) {
	LN_GI(gsums_avx2, GI_APPLY_C)
}

#define GI_APPLY_512                                                                               \
	{                                                                                              \
		const __m512 mv = _mm512_set1_ps(mean), kv = _mm512_set1_ps(is);                           \
		const __m512 m0v = _mm512_set1_ps(m0), m1v = _mm512_set1_ps(m1), one = _mm512_set1_ps(1);  \
		for (long j = 0; j < d; j += 16) {                                                         \
			__mmask16 mk = d - j >= 16 ? (__mmask16)0xffff : LN_TAIL(d - j);                       \
			__m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, gr + j),                            \
			                         gamma ? _mm512_maskz_loadu_ps(mk, gamma + j) : one);          \
			__m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, xr + j), mv), kv);    \
			__m512 o = _mm512_mul_ps(kv, _mm512_sub_ps(_mm512_sub_ps(g, m0v), _mm512_mul_ps(t, m1v))); \
			_mm512_mask_storeu_ps(dr + j, mk, o);                                                  \
		}                                                                                          \
	}

__attribute__((target("avx512f,avx2,fma"))) static void gi_avx512(float *dx, const float *dy, const float *x,
                                                                   const float *save, const float *gamma, long rows,
                                                                   long d) {
	LN_GI(gsums_avx2, GI_APPLY_512)
}

void gorun_vec_ln_grad_input(int level, float *dx, const float *dy, const float *x, const float *save,
                             const float *gamma, long rows, long d) {
	switch (level) {
	case 2: gi_avx512(dx, dy, x, save, gamma, rows, d); break;
	case 1: gi_avx2(dx, dy, x, save, gamma, rows, d); break;
	default: gi_c(dx, dy, x, save, gamma, rows, d);
	}
}

// ---- column sums: s[j] = Σ_r x[r, j], or with save, Σ_r dy[r, j]·x̂[r, j]
// (x̂ = (x - save[2r])·save[2r+1] in float32); each column in row order ----

// ln_put stores the n sums t into out, or adds them with acc.
static inline void ln_put(float *out, const double *t, long n, int acc) {
	for (long c = 0; c < n; c++)
		if (acc)
			out[c] += (float)t[c];
		else
			out[c] = (float)t[c];
}

#define CS_BLOCK 64

static void colsums_c(float *out, const float *dy, const float *x, const float *save, long rows, long cols, int acc) {
	double t[CS_BLOCK];
	for (long j0 = 0; j0 < cols; j0 += CS_BLOCK) {
		long n = cols - j0 < CS_BLOCK ? cols - j0 : CS_BLOCK;
		for (long c = 0; c < n; c++)
			t[c] = 0;
		for (long r = 0; r < rows; r++) {
			const float *dr = dy + r * cols + j0;
			if (x) {
				const float m = save[2 * r], k = save[2 * r + 1], *xr = x + r * cols + j0;
				for (long c = 0; c < n; c++)
					t[c] += (double)dr[c] * (double)((xr[c] - m) * k);
			} else
				for (long c = 0; c < n; c++)
					t[c] += (double)dr[c];
		}
		ln_put(out + j0, t, n, acc);
	}
}

// CS_TERM is the 4 terms of columns j+o .. j+o+3 of row r (mask mk for
// the last, partial group of columns: its other lanes are never stored).
#define CS_TERM(o, LOAD)                                                                           \
	(x ? _mm256_mul_pd(_mm256_cvtps_pd(LOAD(dr + (o))),                                            \
	                   _mm256_cvtps_pd(_mm_mul_ps(_mm_sub_ps(LOAD(xr + (o)), mv), kv)))                \
	   : _mm256_cvtps_pd(LOAD(dr + (o))))
#define CS_LOADU(p) _mm_loadu_ps(p)
#define CS_LOADM(p) _mm_maskload_ps(p, mk)

__attribute__((target("avx2,fma"))) static void colsums_avx2(float *out, const float *dy, const float *x,
                                                              const float *save, long rows, long cols, int acc) {
	double t[32];
	__m128 mv = _mm_setzero_ps(), kv = mv;
	long j = 0;
	for (; j + 32 <= cols; j += 32) {
		__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
		for (long r = 0; r < rows; r++) {
			const float *dr = dy + r * cols + j, *xr = x ? x + r * cols + j : 0;
			if (x)
				mv = _mm_set1_ps(save[2 * r]), kv = _mm_set1_ps(save[2 * r + 1]);
			a0 = _mm256_add_pd(a0, CS_TERM(0, CS_LOADU)), a1 = _mm256_add_pd(a1, CS_TERM(4, CS_LOADU));
			a2 = _mm256_add_pd(a2, CS_TERM(8, CS_LOADU)), a3 = _mm256_add_pd(a3, CS_TERM(12, CS_LOADU));
			a4 = _mm256_add_pd(a4, CS_TERM(16, CS_LOADU)), a5 = _mm256_add_pd(a5, CS_TERM(20, CS_LOADU));
			a6 = _mm256_add_pd(a6, CS_TERM(24, CS_LOADU)), a7 = _mm256_add_pd(a7, CS_TERM(28, CS_LOADU));
		}
		_mm256_storeu_pd(t, a0), _mm256_storeu_pd(t + 4, a1), _mm256_storeu_pd(t + 8, a2);
		_mm256_storeu_pd(t + 12, a3), _mm256_storeu_pd(t + 16, a4), _mm256_storeu_pd(t + 20, a5);
		_mm256_storeu_pd(t + 24, a6), _mm256_storeu_pd(t + 28, a7);
		ln_put(out + j, t, 32, acc);
	}
	for (; j < cols; j += 4) {
		long n = cols - j < 4 ? cols - j : 4;
		__m128i mk = ln_mask4(n);
		__m256d a = _mm256_setzero_pd();
		for (long r = 0; r < rows; r++) {
			const float *dr = dy + r * cols + j, *xr = x ? x + r * cols + j : 0;
			if (x)
				mv = _mm_set1_ps(save[2 * r]), kv = _mm_set1_ps(save[2 * r + 1]);
			a = _mm256_add_pd(a, CS_TERM(0, CS_LOADM));
		}
		_mm256_storeu_pd(t, a);
		ln_put(out + j, t, n, acc);
	}
}

// gorun_vec_ln_col_sums sets out[j] (adds with acc) to the column sums of
// dy [rows, cols], or with x, of dy·x̂. Level 2 takes the AVX2 body.
void gorun_vec_ln_col_sums(int level, float *out, const float *dy, const float *x, const float *save, long rows,
                           long cols, int acc) {
	if (level >= 1)
		colsums_avx2(out, dy, x, save, rows, cols, acc);
	else
		colsums_c(out, dy, x, save, rows, cols, acc);
}

// gorun_vec_ln_row_sums is for the tests: out[2r], out[2r+1] get row r's
// (mean, s2) of x as the forward pass computes them, or with grad, its
// (s0, s1) of dy = a as the input gradient does.
void gorun_vec_ln_row_sums(int level, int grad, const float *a, const float *x, const float *save,
                           const float *gamma, long rows, long d, double *out) {
	for (long r = 0; r < rows; r++) {
		if (!grad && level >= 1)
			moments_avx2(a + r * d, d, out + 2 * r, out + 2 * r + 1);
		else if (!grad)
			moments_c(a + r * d, d, out + 2 * r, out + 2 * r + 1);
		else if (level >= 1)
			gsums_avx2(a + r * d, x + r * d, gamma, d, save[2 * r], save[2 * r + 1], out + 2 * r, out + 2 * r + 1);
		else
			gsums_c(a + r * d, x + r * d, gamma, d, save[2 * r], save[2 * r + 1], out + 2 * r, out + 2 * r + 1);
	}
}
