//go:build cgo && amd64 && !purego

// Direct convolution of single-channel inputs (see conv1.go): a network's
// first layer on greyscale images, where im2col would copy each input
// element KH·KW times to feed a matrix multiply with k = KH·KW. Both
// bodies use fused multiply-adds in the same order (fmaf in plain C), so
// the levels agree bit for bit.

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	long n, o, h, w;   // samples, output channels, input plane
	long kh, kw, p;    // kernel, padding (stride 1)
	long oh, ow;       // output plane
} gorun_c1geom;

// valid reports whether output column ox reads an input column of the
// plane for kernel column kj.
static inline int valid(const gorun_c1geom *g, long ox, long kj) {
	long ix = ox + kj - g->p;
	return ix >= 0 && ix < g->w;
}

// ---- forward: y[n,o] = b[o] + Σ_{ki,kj} w[o,ki,kj]·x[n, oy+ki-p, ox+kj-p],
// added in the order ki, kj (rows reading only padding skipped) ----

static inline __attribute__((always_inline)) void conv1_fwd_c(gorun_c1geom g, const float *x, const float *w, const float *b, float *y) {
	long plane = g.oh * g.ow;
	for (long n = 0; n < g.n; n++)
		for (long o = 0; o < g.o; o++) {
			const float *wo = w + o * g.kh * g.kw;
			float *yo = y + (n * g.o + o) * plane;
			for (long oy = 0; oy < g.oh; oy++)
				for (long ox = 0; ox < g.ow; ox++) {
					float acc = b ? b[o] : 0.0f;
					for (long ki = 0; ki < g.kh; ki++) {
						long iy = oy + ki - g.p;
						if (iy < 0 || iy >= g.h)
							continue;
						const float *row = x + n * g.h * g.w + iy * g.w;
						for (long kj = 0; kj < g.kw; kj++)
							if (valid(&g, ox, kj))
								acc = fmaf(wo[ki * g.kw + kj], row[ox + kj - g.p], acc);
					}
					yo[oy * g.ow + ox] = acc;
				}
		}
}

// lanemask returns the lanes of output columns [c0, c0+16) that exist and
// read inside the plane for kernel column kj.
__attribute__((target("avx512f"))) static inline __mmask16 lanemask(const gorun_c1geom *g, long c0, long kj) {
	long lo = g->p - kj, hi = g->w + g->p - kj; // ox range reading the plane
	if (lo < 0)
		lo = 0;
	if (hi > g->ow)
		hi = g->ow;
	lo -= c0;
	hi -= c0;
	if (lo < 0)
		lo = 0;
	if (hi > 16)
		hi = 16;
	if (hi <= lo)
		return 0;
	return (__mmask16)(((1u << (hi - lo)) - 1u) << lo);
}

#define MAXKW 16

// The forward pass holds OGC output channels' accumulators for one
// sixteen-column block of one output row, so that each input load feeds OGC
// independent fused multiply-adds (one chain would wait on the FMA latency).

#define DEF_FWD(NAME, OGC) \
__attribute__((target("avx512f"))) static int NAME(gorun_c1geom g, const float *x, const float *w, \
                                                                const float *b, float *y) { \
	long plane = g.oh * g.ow, taps = g.kh * g.kw, groups = (g.o + OGC - 1) / OGC; \
	/* The weights and biases regrouped: tap t of group q at wp[(q·taps + t)·OGC], */ \
	/* zero for channels past O, so every group runs all OGC lanes. */ \
	float *wp = calloc(groups * taps * OGC + groups * OGC, sizeof(float)), *bp = wp + groups * taps * OGC; \
	if (!wp) \
		return -1; \
	for (long o = 0; o < g.o; o++) { \
		for (long t = 0; t < taps; t++) \
			wp[((o / OGC) * taps + t) * OGC + o % OGC] = w[o * taps + t]; \
		bp[o] = b ? b[o] : 0.0f; \
	} \
	for (long n = 0; n < g.n; n++) \
		for (long c0 = 0; c0 < g.ow; c0 += 16) { \
			__mmask16 out = g.ow - c0 >= 16 ? 0xffff : (__mmask16)((1u << (g.ow - c0)) - 1u); \
			__mmask16 m[MAXKW]; \
			for (long kj = 0; kj < g.kw; kj++) \
				m[kj] = lanemask(&g, c0, kj); \
			for (long gi = 0; gi < groups; gi++) { \
				long o0 = gi * OGC, og = g.o - o0 < OGC ? g.o - o0 : OGC; \
				const float *wg = wp + gi * taps * OGC; \
				for (long oy = 0; oy < g.oh; oy++) { \
					__m512 acc[OGC]; \
_Pragma("GCC unroll 8") \
					for (int q = 0; q < OGC; q++) \
						acc[q] = _mm512_set1_ps(bp[o0 + q]); \
					for (long ki = 0; ki < g.kh; ki++) { \
						long iy = oy + ki - g.p; \
						if (iy < 0 || iy >= g.h) \
							continue; \
						const float *row = x + n * g.h * g.w + iy * g.w + c0 - g.p; \
						const float *wk = wg + ki * g.kw * OGC; \
						for (long kj = 0; kj < g.kw; kj++) { \
							__m512 v = _mm512_maskz_loadu_ps(m[kj], row + kj); \
_Pragma("GCC unroll 8") \
							for (int q = 0; q < OGC; q++) \
								acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(wk[kj * OGC + q]), v, acc[q]); \
						} \
					} \
					float *yo = y + (n * g.o + o0) * plane + oy * g.ow + c0; \
_Pragma("GCC unroll 8") \
					for (int q = 0; q < OGC; q++) \
						if (q < og) \
							_mm512_mask_storeu_ps(yo + q * plane, out, acc[q]); \
				} \
			} \
		} \
	free(wp); \
	return 0; \
} \

DEF_FWD(conv1_fwd_avx512_g8, 8)
DEF_FWD(conv1_fwd_avx512_g5, 5)

// conv1_fwd_avx512 groups the output channels by 5 when that pads none and
// 8 would (the MNIST Net's 10), else by 8.
__attribute__((target("avx512f"))) static int conv1_fwd_avx512(gorun_c1geom g, const float *x, const float *w,
                                                                const float *b, float *y) {
	if (g.o % 5 == 0 && g.o % 8 != 0)
		return conv1_fwd_avx512_g5(g, x, w, b, y);
	return conv1_fwd_avx512_g8(g, x, w, b, y);
}

// ---- weight gradient: dw[o,ki,kj] (+)= Σ_{n,oy,ox} dy[n,o,oy,ox]·x[n, oy+ki-p,
// ox+kj-p], in sixteen partial sums (output column ox into partial
// ox mod 16 of its sixteen-column block, samples, rows and blocks in
// order) combined pairwise as gorun_vec_sum ----

static float combine(float *p) {
	for (int s = 8; s >= 1; s /= 2)
		for (int i = 0; i < s; i++)
			p[i] = p[i] + p[i + s];
	return p[0];
}

static inline __attribute__((always_inline)) int conv1_wgrad_c(gorun_c1geom g, const float *dy, const float *x, float *dw, int accumulate) {
	long taps = g.o * g.kh * g.kw, plane = g.oh * g.ow;
	float *part = calloc(taps * 16, sizeof(float));
	if (!part)
		return -1;
	for (long n = 0; n < g.n; n++)
		for (long o = 0; o < g.o; o++) {
			const float *dyo = dy + (n * g.o + o) * plane;
			for (long ki = 0; ki < g.kh; ki++)
				for (long kj = 0; kj < g.kw; kj++) {
					float *pp = part + ((o * g.kh + ki) * g.kw + kj) * 16;
					for (long oy = 0; oy < g.oh; oy++) {
						long iy = oy + ki - g.p;
						if (iy < 0 || iy >= g.h)
							continue;
						const float *row = x + n * g.h * g.w + iy * g.w;
						for (long ox = 0; ox < g.ow; ox++)
							if (valid(&g, ox, kj))
								pp[ox & 15] = fmaf(dyo[oy * g.ow + ox], row[ox + kj - g.p], pp[ox & 15]);
					}
				}
		}
	for (long t = 0; t < taps; t++) {
		float s = combine(part + t * 16);
		dw[t] = accumulate ? dw[t] + s : s;
	}
	free(part);
	return 0;
}

// The weight gradient holds, for one kernel row, the partial sums of WG
// output channels × KWC kernel columns in registers across all output rows
// and blocks of a sample: each block loads WG rows of dy and KWC windows of
// x once for WG·KWC independent fused multiply-adds. KWC is a compile-time
// width (3 or 5: the kernels this path takes).
#define WG 4

#define DEF_WGRAD(NAME, KWC)                                                                                \
	__attribute__((target("avx512f"))) static void NAME(gorun_c1geom g, const float *dy, const float *x,   \
	                                                    float *part) {                                      \
		long plane = g.oh * g.ow, blocks = (g.ow + 15) / 16;                                                \
		__mmask16 m[8][KWC], outm[8];                                                                       \
		_Pragma("GCC unroll 16")                                                                            \
		for (long bi = 0; bi < blocks; bi++) {                                                              \
			long c0 = bi * 16;                                                                              \
			outm[bi] = g.ow - c0 >= 16 ? 0xffff : (__mmask16)((1u << (g.ow - c0)) - 1u);                    \
			for (long kj = 0; kj < KWC; kj++)                                                               \
				m[bi][kj] = lanemask(&g, c0, kj);                                                           \
		}                                                                                                   \
		for (long n = 0; n < g.n; n++)                                                                      \
			for (long ki = 0; ki < g.kh; ki++)                                                              \
				for (long o0 = 0; o0 < g.o; o0 += WG) {                                                     \
					long og = g.o - o0 < WG ? g.o - o0 : WG;                                                \
					__m512 acc[WG][KWC];                                                                    \
					_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++)                                    \
						_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                            \
							acc[q][kj] = q < og ? _mm512_load_ps(part + (((o0 + q) * g.kh + ki) * KWC + kj) * 16) \
							                    : _mm512_setzero_ps();                                       \
					for (long oy = 0; oy < g.oh; oy++) {                                                    \
						long iy = oy + ki - g.p;                                                            \
						if (iy < 0 || iy >= g.h)                                                            \
							continue;                                                                       \
						const float *row = x + n * g.h * g.w + iy * g.w - g.p;                              \
						for (long bi = 0; bi < blocks; bi++) {                                              \
							long c0 = bi * 16;                                                              \
							__m512 d[WG], v[KWC];                                                           \
							_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++)                            \
								d[q] = _mm512_maskz_loadu_ps(q < og ? outm[bi] : 0,                         \
								                             dy + (n * g.o + o0 + q) * plane + oy * g.ow + c0); \
							_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                        \
								v[kj] = _mm512_maskz_loadu_ps(m[bi][kj], row + c0 + kj);                    \
							_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++)                            \
								_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                    \
									acc[q][kj] = _mm512_fmadd_ps(d[q], v[kj], acc[q][kj]);                  \
						}                                                                                   \
					}                                                                                       \
					_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++)                                    \
						_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                            \
							if (q < og) _mm512_store_ps(part + (((o0 + q) * g.kh + ki) * KWC + kj) * 16, acc[q][kj]);   \
				}                                                                                           \
	}

DEF_WGRAD(wgrad_avx512_k3, 3)
DEF_WGRAD(wgrad_avx512_k5, 5)

__attribute__((target("avx512f"))) static int conv1_wgrad_avx512(gorun_c1geom g, const float *dy, const float *x,
                                                                  float *dw, int accumulate) {
	long taps = g.o * g.kh * g.kw;
	float *part = aligned_alloc(64, taps * 16 * sizeof(float));
	if (!part)
		return -1;
	memset(part, 0, taps * 16 * sizeof(float));
	if (g.kw == 3)
		wgrad_avx512_k3(g, dy, x, part);
	else
		wgrad_avx512_k5(g, dy, x, part);
	for (long t = 0; t < taps; t++) {
		float s = combine(part + t * 16);
		dw[t] = accumulate ? dw[t] + s : s;
	}
	free(part);
	return 0;
}

// The plain bodies, compiled for AVX2 with FMA (fmaf becomes one
// instruction) and for any x86-64 (fmaf from libm, exact but slow).
__attribute__((target("avx2,fma"))) static void conv1_fwd_avx2(gorun_c1geom g, const float *x, const float *w,
                                                               const float *b, float *y) {
	conv1_fwd_c(g, x, w, b, y);
}
static void conv1_fwd_plain(gorun_c1geom g, const float *x, const float *w, const float *b, float *y) {
	conv1_fwd_c(g, x, w, b, y);
}
__attribute__((target("avx2,fma"))) static int conv1_wgrad_avx2(gorun_c1geom g, const float *dy, const float *x,
                                                                float *dw, int accumulate) {
	return conv1_wgrad_c(g, dy, x, dw, accumulate);
}
static int conv1_wgrad_plain(gorun_c1geom g, const float *dy, const float *x, float *dw, int accumulate) {
	return conv1_wgrad_c(g, dy, x, dw, accumulate);
}

int gorun_vec_conv1_fwd(int level, gorun_c1geom g, const float *x, const float *w, const float *b, float *y) {
	switch (level) {
	case 2: return conv1_fwd_avx512(g, x, w, b, y);
	case 1: conv1_fwd_avx2(g, x, w, b, y); break;
	default: conv1_fwd_plain(g, x, w, b, y);
	}
	return 0;
}

int gorun_vec_conv1_wgrad(int level, gorun_c1geom g, const float *dy, const float *x, float *dw, int accumulate) {
	// The AVX-512 body takes kernels 3 or 5 wide and planes up to 128
	// columns (8 blocks); the others take the plain body.
	if (level == 2 && !((g.kw == 3 || g.kw == 5) && g.ow <= 128))
		level = 1;
	switch (level) {
	case 2: return conv1_wgrad_avx512(g, dy, x, dw, accumulate);
	case 1: return conv1_wgrad_avx2(g, dy, x, dw, accumulate);
	default: return conv1_wgrad_plain(g, dy, x, dw, accumulate);
	}
}
