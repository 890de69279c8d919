//go:build cgo && amd64 && !purego

// Batch-normalisation kernels (see bn.go) over a float32 tensor seen as
// [n, ch, l]: channel j of sample i is the row of l elements at
// (i·ch + j)·l. Each kernel does channels j0 .. j0+nc-1 and has three
// bodies: AVX-512 intrinsics (level 2), AVX2 (level 1) and plain C
// (level 0), except the sums, whose AVX2 bodies serve level 2 too (below).
//
// The sums convert every element to double and add in double: each body in
// its own fixed order (several vector accumulators, masked row tails adding
// zeros, a fixed final reduction), so a result depends only on n, l and the
// level. The products summed are exact in double (two float32 factors), so
// a fused multiply-add gives the same value as a multiply and an add.
// The elementwise kernels compute each element with the same single
// float32 operations in the same order at every level: bit-identical.

#include <immintrin.h>
#include <stdint.h>

#pragma GCC optimize("fp-contract=off")

// BN_TAIL is the mask of the first n (< 16) lanes.
#define BN_TAIL(n) ((__mmask16)((1u << (n)) - 1u))

// ROW is channel j of sample i of p.
#define ROW(p, i, j) ((p) + ((i) * ch + (j)) * l)

// ---- AVX2 helpers ----

// hsum4 returns (v0 + v2) + (v1 + v3).
__attribute__((target("avx2,fma"))) static inline double hsum4(__m256d v) {
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// mask4 is the load mask of the first r (1..3) of 4 lanes.
__attribute__((target("avx2,fma"))) static inline __m128i mask4(long r) {
	return _mm_cmpgt_epi32(_mm_set1_epi32((int)r), _mm_setr_epi32(0, 1, 2, 3));
}

// Every body walks the tensor in memory order: sample by sample, the
// block's channels in turn. The vector bodies sum each row into fresh
// accumulators and add their total to the channel's running vector (for a
// chunk of BN_CHUNK channels at a time), so the order of each channel's
// additions is fixed by l and its rows' order. Plain C adds element by
// element, in the Go loops' order. Rows of one element (l = 1, an [n, ch]
// tensor) go one sample at a time across the channels at every level, in
// the Go loops' order too.
//
// Level 2 takes the AVX2 bodies for both sums: their cost is the float to
// double conversions, and on the AMD EPYC (Zen 4) gorun is developed on,
// which splits 512-bit work over 256-bit units, converting 8 floats at a
// time ran 10-20% slower than 4 at a time however the AVX-512 loop was
// arranged. The gradient sums take x - mean as fmsub(x, 1, mean), the same
// float32 value, which moves the subtraction off the units the conversions
// need (about 10% faster).

#define BN_CHUNK 64

// ---- sums: s1 = Σx, s2 = Σx² per channel ----

// SUMS_L1_BODY is sums for l = 1, channel by channel in the Go order
// (vectorised across the channels).
#define SUMS_L1_BODY                                                           \
	for (long c = 0; c < nc; c++)                                              \
		s1[c] = 0, s2[c] = 0;                                                  \
	for (long i = 0; i < n; i++) {                                             \
		const float *r = x + i * ch + j0;                                      \
		for (long c = 0; c < nc; c++) {                                        \
			double f = r[c];                                                   \
			s1[c] += f;                                                        \
			s2[c] += f * f;                                                    \
		}                                                                      \
	}

static void sums_c(const float *x, long n, long ch, long l, long j0, long nc, double *s1, double *s2) {
	if (l == 1) {
		SUMS_L1_BODY
		return;
	}
	for (long c = 0; c < nc; c++)
		s1[c] = 0, s2[c] = 0;
	for (long i = 0; i < n; i++)
		for (long c = 0; c < nc; c++) {
			const float *r = ROW(x, i, j0 + c);
			double a = s1[c], b = s2[c];
			for (long k = 0; k < l; k++) {
				double f = r[k];
				a += f;
				b += f * f;
			}
			s1[c] = a, s2[c] = b;
		}
}

__attribute__((target("avx2,fma"))) static void sums_avx2(const float *x, long n, long ch, long l, long j0, long nc,
                                                           double *s1, double *s2) {
	if (l == 1) {
		SUMS_L1_BODY
		return;
	}
	__m256d acc1[BN_CHUNK], acc2[BN_CHUNK];
	for (long c0 = 0; c0 < nc; c0 += BN_CHUNK) {
		long cn = nc - c0 < BN_CHUNK ? nc - c0 : BN_CHUNK;
		for (long c = 0; c < cn; c++)
			acc1[c] = _mm256_setzero_pd(), acc2[c] = _mm256_setzero_pd();
		for (long i = 0; i < n; i++)
			for (long c = 0; c < cn; c++) {
				const float *r = ROW(x, i, j0 + c0 + c);
				__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
				__m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;
				long k = 0;
				for (; k + 16 <= l; k += 16) {
					__m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(r + k)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(r + k + 4));
					__m256d v2 = _mm256_cvtps_pd(_mm_loadu_ps(r + k + 8)), v3 = _mm256_cvtps_pd(_mm_loadu_ps(r + k + 12));
					a0 = _mm256_add_pd(a0, v0), a1 = _mm256_add_pd(a1, v1);
					a2 = _mm256_add_pd(a2, v2), a3 = _mm256_add_pd(a3, v3);
					b0 = _mm256_fmadd_pd(v0, v0, b0), b1 = _mm256_fmadd_pd(v1, v1, b1);
					b2 = _mm256_fmadd_pd(v2, v2, b2), b3 = _mm256_fmadd_pd(v3, v3, b3);
				}
				for (; k + 4 <= l; k += 4) {
					__m256d v = _mm256_cvtps_pd(_mm_loadu_ps(r + k));
					a0 = _mm256_add_pd(a0, v), b0 = _mm256_fmadd_pd(v, v, b0);
				}
				if (k < l) {
					__m256d v = _mm256_cvtps_pd(_mm_maskload_ps(r + k, mask4(l - k)));
					a1 = _mm256_add_pd(a1, v), b1 = _mm256_fmadd_pd(v, v, b1);
				}
				acc1[c] = _mm256_add_pd(acc1[c], _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
				acc2[c] = _mm256_add_pd(acc2[c], _mm256_add_pd(_mm256_add_pd(b0, b1), _mm256_add_pd(b2, b3)));
			}
		for (long c = 0; c < cn; c++)
			s1[c0 + c] = hsum4(acc1[c]), s2[c0 + c] = hsum4(acc2[c]);
	}
}

void gorun_vec_bn_sums(int level, const float *x, long n, long ch, long l, long j0, long nc, double *s1, double *s2) {
	if (level >= 1)
		sums_avx2(x, n, ch, l, j0, nc, s1, s2);
	else
		sums_c(x, n, ch, l, j0, nc, s1, s2);
}

// ---- gradient sums: s0 = Σdy, s1 = Σdy·(x - mean) per channel, x - mean
// in float32 ----

#define GSUMS_L1_BODY                                                          \
	for (long c = 0; c < nc; c++)                                              \
		s0[c] = 0, s1[c] = 0;                                                  \
	for (long i = 0; i < n; i++) {                                             \
		const float *dr = dy + i * ch + j0, *xr = x + i * ch + j0;             \
		for (long c = 0; c < nc; c++) {                                        \
			double d = dr[c];                                                  \
			s0[c] += d;                                                        \
			s1[c] += d * (double)(xr[c] - mean[c]);                            \
		}                                                                      \
	}

static void gsums_c(const float *dy, const float *x, const float *mean, long n, long ch, long l, long j0, long nc,
                    double *s0, double *s1) {
	if (l == 1) {
		GSUMS_L1_BODY
		return;
	}
	for (long c = 0; c < nc; c++)
		s0[c] = 0, s1[c] = 0;
	for (long i = 0; i < n; i++)
		for (long c = 0; c < nc; c++) {
			const float m = mean[c];
			const float *dr = ROW(dy, i, j0 + c), *xr = ROW(x, i, j0 + c);
			double a = s0[c], b = s1[c];
			for (long k = 0; k < l; k++) {
				double d = dr[k];
				a += d;
				b += d * (double)(xr[k] - m);
			}
			s0[c] = a, s1[c] = b;
		}
}

__attribute__((target("avx2,fma"))) static void gsums_avx2(const float *dy, const float *x, const float *mean, long n,
                                                            long ch, long l, long j0, long nc, double *s0, double *s1) {
	if (l == 1) {
		GSUMS_L1_BODY
		return;
	}
	__m256d acc0[BN_CHUNK], acc1[BN_CHUNK];
	for (long c0 = 0; c0 < nc; c0 += BN_CHUNK) {
		long cn = nc - c0 < BN_CHUNK ? nc - c0 : BN_CHUNK;
		for (long c = 0; c < cn; c++)
			acc0[c] = _mm256_setzero_pd(), acc1[c] = _mm256_setzero_pd();
		for (long i = 0; i < n; i++)
			for (long c = 0; c < cn; c++) {
				const __m128 m = _mm_set1_ps(mean[c0 + c]), one = _mm_set1_ps(1);
				const float *dr = ROW(dy, i, j0 + c0 + c), *xr = ROW(x, i, j0 + c0 + c);
				__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
				__m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;
				long k = 0;
#define GSTEP4(a, b, o)                                                                        \
	{                                                                                          \
		__m256d d = _mm256_cvtps_pd(_mm_loadu_ps(dr + k + (o)));                               \
		__m256d t = _mm256_cvtps_pd(_mm_fmsub_ps(_mm_loadu_ps(xr + k + (o)), one, m));         \
		a = _mm256_add_pd(a, d), b = _mm256_fmadd_pd(d, t, b);                                 \
	}
				for (; k + 16 <= l; k += 16) {
					GSTEP4(a0, b0, 0) GSTEP4(a1, b1, 4) GSTEP4(a2, b2, 8) GSTEP4(a3, b3, 12)
				}
				for (; k + 4 <= l; k += 4)
					GSTEP4(a0, b0, 0)
#undef GSTEP4
				if (k < l) {
					// masked-off lanes: d = 0 and t = 0 (not -mean, which may be infinite)
					__m128i mk = mask4(l - k);
					__m256d d = _mm256_cvtps_pd(_mm_maskload_ps(dr + k, mk));
					__m128 t = _mm_and_ps(_mm_sub_ps(_mm_maskload_ps(xr + k, mk), m), _mm_castsi128_ps(mk));
					a1 = _mm256_add_pd(a1, d), b1 = _mm256_fmadd_pd(d, _mm256_cvtps_pd(t), b1);
				}
				acc0[c] = _mm256_add_pd(acc0[c], _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
				acc1[c] = _mm256_add_pd(acc1[c], _mm256_add_pd(_mm256_add_pd(b0, b1), _mm256_add_pd(b2, b3)));
			}
		for (long c = 0; c < cn; c++)
			s0[c0 + c] = hsum4(acc0[c]), s1[c0 + c] = hsum4(acc1[c]);
	}
}

void gorun_vec_bn_grad_sums(int level, const float *dy, const float *x, const float *mean, long n, long ch, long l,
                        long j0, long nc, double *s0, double *s1) {
	if (level >= 1)
		gsums_avx2(dy, x, mean, n, ch, l, j0, nc, s0, s1);
	else
		gsums_c(dy, x, mean, n, ch, l, j0, nc, s0, s1);
}

// ---- apply: y = (x - mean)·scale + shift (y may be x), then, when res is
// not NULL, + res, then, with relu, max(·, 0) as ReLU takes it (v < 0 → 0):
// batch norm with a residual add and a ReLU fused, each element rounded
// as the three ops round it one after another ----

#define APPLY_BODY                                                             \
	for (long i = 0; i < n; i++)                                               \
		for (long c = 0; c < nc; c++) {                                        \
			const float m = mean[c], s = scale[c], h = shift[c];               \
			const float *r = ROW(x, i, j0 + c);                                \
			const float *rr = res ? ROW(res, i, j0 + c) : NULL;                \
			float *yr = ROW(y, i, j0 + c);                                     \
			for (long k = 0; k < l; k++) {                                     \
				float v = (r[k] - m) * s + h;                                  \
				if (rr)                                                        \
					v = v + rr[k];                                             \
				yr[k] = relu && v < 0.0f ? 0.0f : v;                           \
			}                                                                  \
		}

static void apply_c(float *y, const float *x, const float *res, int relu, const float *mean, const float *scale,
                    const float *shift, long n, long ch, long l, long j0, long nc) { APPLY_BODY }

__attribute__((target("avx2,fma"))) static void apply_avx2(float *y, const float *x, const float *res, int relu,
                                                            const float *mean, const float *scale, const float *shift,
                                                            long n, long ch, long l, long j0, long nc) { APPLY_BODY }

// apply16 is one vector of apply's elements (mask mk): bn, the residual's
// vector (when rr), ReLU's select (when relu).
__attribute__((target("avx512f"))) static inline __m512 apply16(__m512 v, __m512 m, __m512 s, __m512 h,
                                                                 const float *rr, __mmask16 mk, int relu) {
	v = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v, m), s), h);
	if (rr)
		v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, rr));
	if (relu)
		v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
	return v;
}

__attribute__((target("avx512f"))) static void apply_avx512(float *y, const float *x, const float *res, int relu,
                                                             const float *mean, const float *scale, const float *shift,
                                                             long n, long ch, long l, long j0, long nc) {
	for (long i = 0; i < n; i++)
		for (long c = 0; c < nc; c++) {
			const __m512 m = _mm512_set1_ps(mean[c]), s = _mm512_set1_ps(scale[c]), h = _mm512_set1_ps(shift[c]);
			const float *r = ROW(x, i, j0 + c), *rr = res ? ROW(res, i, j0 + c) : NULL;
			float *yr = ROW(y, i, j0 + c);
			long k = 0;
			for (; k + 32 <= l; k += 32) {
				__m512 v0 = _mm512_loadu_ps(r + k), v1 = _mm512_loadu_ps(r + k + 16);
				_mm512_storeu_ps(yr + k, apply16(v0, m, s, h, rr ? rr + k : NULL, 0xffff, relu));
				_mm512_storeu_ps(yr + k + 16, apply16(v1, m, s, h, rr ? rr + k + 16 : NULL, 0xffff, relu));
			}
			for (; k < l; k += 16) {
				__mmask16 mk = l - k >= 16 ? (__mmask16)0xffff : BN_TAIL(l - k);
				__m512 v = _mm512_maskz_loadu_ps(mk, r + k);
				_mm512_mask_storeu_ps(yr + k, mk, apply16(v, m, s, h, rr ? rr + k : NULL, mk, relu));
			}
		}
}

void gorun_vec_bn_apply(int level, float *y, const float *x, const float *res, int relu, const float *mean,
                        const float *scale, const float *shift, long n, long ch, long l, long j0, long nc) {
	switch (level) {
	case 2: apply_avx512(y, x, res, relu, mean, scale, shift, n, ch, l, j0, nc); break;
	case 1: apply_avx2(y, x, res, relu, mean, scale, shift, n, ch, l, j0, nc); break;
	default: apply_c(y, x, res, relu, mean, scale, shift, n, ch, l, j0, nc);
	}
}

// ---- input gradient: dx = k·((dy - sub) - (x - mean)·slope) ----

#define GRADIN_BODY                                                            \
	for (long i = 0; i < n; i++)                                               \
		for (long c = 0; c < nc; c++) {                                        \
			const float m = mean[c], g = k[c], b = sub[c], s = slope[c];       \
			const float *dr = ROW(dy, i, j0 + c), *xr = ROW(x, i, j0 + c);     \
			float *o = ROW(dx, i, j0 + c);                                     \
			for (long q = 0; q < l; q++)                                       \
				o[q] = g * ((dr[q] - b) - (xr[q] - m) * s);                    \
		}

static void gradin_c(float *dx, const float *dy, const float *x, const float *mean, const float *k,
                     const float *sub, const float *slope, long n, long ch, long l, long j0, long nc) { GRADIN_BODY }

__attribute__((target("avx2,fma"))) static void gradin_avx2(float *dx, const float *dy, const float *x,
                                                             const float *mean, const float *k, const float *sub,
                                                             const float *slope, long n, long ch, long l, long j0,
                                                             long nc) { GRADIN_BODY }

__attribute__((target("avx512f"))) static inline __m512 gradin16(__m512 d, __m512 v, __m512 m, __m512 g, __m512 b,
                                                                  __m512 s) {
	return _mm512_mul_ps(g, _mm512_sub_ps(_mm512_sub_ps(d, b), _mm512_mul_ps(_mm512_sub_ps(v, m), s)));
}

__attribute__((target("avx512f"))) static void gradin_avx512(float *dx, const float *dy, const float *x,
                                                              const float *mean, const float *k, const float *sub,
                                                              const float *slope, long n, long ch, long l, long j0,
                                                              long nc) {
	for (long i = 0; i < n; i++)
		for (long c = 0; c < nc; c++) {
			const __m512 m = _mm512_set1_ps(mean[c]), g = _mm512_set1_ps(k[c]);
			const __m512 b = _mm512_set1_ps(sub[c]), s = _mm512_set1_ps(slope[c]);
			const float *dr = ROW(dy, i, j0 + c), *xr = ROW(x, i, j0 + c);
			float *o = ROW(dx, i, j0 + c);
			long q = 0;
			for (; q + 32 <= l; q += 32) {
				__m512 r0 = gradin16(_mm512_loadu_ps(dr + q), _mm512_loadu_ps(xr + q), m, g, b, s);
				__m512 r1 = gradin16(_mm512_loadu_ps(dr + q + 16), _mm512_loadu_ps(xr + q + 16), m, g, b, s);
				_mm512_storeu_ps(o + q, r0);
				_mm512_storeu_ps(o + q + 16, r1);
			}
			for (; q < l; q += 16) {
				__mmask16 mk = l - q >= 16 ? (__mmask16)0xffff : BN_TAIL(l - q);
				__m512 r = gradin16(_mm512_maskz_loadu_ps(mk, dr + q), _mm512_maskz_loadu_ps(mk, xr + q), m, g, b, s);
				_mm512_mask_storeu_ps(o + q, mk, r);
			}
		}
}

void gorun_vec_bn_grad_input(int level, float *dx, const float *dy, const float *x, const float *mean, const float *k,
                         const float *sub, const float *slope, long n, long ch, long l, long j0, long nc) {
	switch (level) {
	case 2: gradin_avx512(dx, dy, x, mean, k, sub, slope, n, ch, l, j0, nc); break;
	case 1: gradin_avx2(dx, dy, x, mean, k, sub, slope, n, ch, l, j0, nc); break;
	default: gradin_c(dx, dy, x, mean, k, sub, slope, n, ch, l, j0, nc);
	}
}
