//go:build cgo && amd64 && !purego

// Direct convolution (see conv.go): the forward pass, the weight gradient
// and the input gradient without im2col's copies and a matrix multiply.
// The plain bodies take every geometry; the AVX-512 bodies (level 2) and
// the AVX2 bodies (level 1: eight lanes, sixteen registers, maskload and
// maskstore for AVX-512's mask registers) take what conv.go's ConvFast
// says. All use fused multiply-adds in the same order (fmaf in plain C),
// so the levels agree bit for bit. Strides above 1 run the stride-1
// bodies' register tiles over copies of the input whose columns are split
// by phase (column j at j mod s), so that every tap of a vector of output
// columns reads consecutive floats.

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
	long n, c, o, h, w; // samples, input channels, output channels, input plane
	long kh, kw, p;     // kernel, padding
	long oh, ow;        // output plane
	long s;             // stride
} gorun_cgeom;

// valid reports whether output column ox reads an input column of the
// plane for kernel column kj.
static inline int valid(const gorun_cgeom *g, long ox, long kj) {
	long ix = ox * g->s + kj - g->p;
	return ix >= 0 && ix < g->w;
}

// ---- forward: y[n,o] = b[o] + Σ_{c,ki,kj} w[o,c,ki,kj]·x[n,c, s·oy+ki-p, s·ox+kj-p],
// added in the order c, ki, kj (rows reading only padding skipped); the
// same 3×3 convolutions wino_ok takes by Winograd's F(2×2, 3×3) instead ----

static inline __attribute__((always_inline)) void conv_fwd_c(gorun_cgeom g, const float *x, const float *w, const float *b, float *y) {
	long plane = g.oh * g.ow, hw = g.h * g.w;
	for (long n = 0; n < g.n; n++)
		for (long o = 0; o < g.o; o++) {
			const float *wo = w + o * g.c * g.kh * g.kw;
			float *yo = y + (n * g.o + o) * plane;
			for (long oy = 0; oy < g.oh; oy++)
				for (long ox = 0; ox < g.ow; ox++) {
					float acc = b ? b[o] : 0.0f;
					for (long c = 0; c < g.c; c++)
						for (long ki = 0; ki < g.kh; ki++) {
							long iy = oy * g.s + ki - g.p;
							if (iy < 0 || iy >= g.h)
								continue;
							const float *row = x + (n * g.c + c) * hw + iy * g.w;
							const float *wk = wo + (c * g.kh + ki) * g.kw;
							for (long kj = 0; kj < g.kw; kj++)
								if (valid(&g, ox, kj))
									acc = fmaf(wk[kj], row[ox * g.s + kj - g.p], acc);
						}
					yo[oy * g.ow + ox] = acc;
				}
		}
}

// lanemask returns the lanes of output columns [c0, c0+lanes) that exist
// and read inside the plane for kernel column kj.
static inline unsigned lanemask(const gorun_cgeom *g, long c0, long kj, long lanes) {
	long lo = g->p - kj, hi = g->w + g->p - kj; // ox range reading the plane
	if (lo < 0)
		lo = 0;
	if (hi > g->ow)
		hi = g->ow;
	lo -= c0;
	hi -= c0;
	if (lo < 0)
		lo = 0;
	if (hi > lanes)
		hi = lanes;
	if (hi <= lo)
		return 0;
	return ((1u << (hi - lo)) - 1u) << lo;
}

// outmask returns the lanes of output columns [c0, c0+lanes) that exist.
static inline unsigned outmask(long ow, long c0, long lanes) {
	long k = ow - c0 < lanes ? ow - c0 : lanes;
	return (1u << k) - 1u;
}

#define MAXKW 16

// Vector operations by width: Z sixteen lanes (zmm), Y eight (ymm, with
// AVX-512VL's masks), A eight with AVX2 alone (level 1: the masks are bit
// sets as Y's, turned into the vectors of maskload and maskstore). Zen 4
// runs a zmm operation as two halves, so a plane eight columns wide wastes
// half of every zmm but none of a ymm.
#define Z_TARGET "avx512f,avx512vl,fma"
#define Z_VT __m512
#define Z_MT __mmask16
#define Z_LANES 16
#define Z_SET1 _mm512_set1_ps
#define Z_ZERO _mm512_setzero_ps
#define Z_LOADZ _mm512_maskz_loadu_ps
#define Z_LOAD _mm512_load_ps
#define Z_LOADU _mm512_loadu_ps
#define Z_STORE _mm512_store_ps
#define Z_STOREM _mm512_mask_storeu_ps
#define Z_FMA _mm512_fmadd_ps
#define Z_ADD _mm512_add_ps
#define Z_SUB _mm512_sub_ps
#define Z_STOREU _mm512_storeu_ps
#define Y_TARGET "avx512f,avx512vl,fma"
#define Y_VT __m256
#define Y_MT __mmask8
#define Y_LANES 8
#define Y_SET1 _mm256_set1_ps
#define Y_ZERO _mm256_setzero_ps
#define Y_LOADZ _mm256_maskz_loadu_ps
#define Y_LOAD _mm256_load_ps
#define Y_LOADU _mm256_loadu_ps
#define Y_STORE _mm256_store_ps
#define Y_STOREM _mm256_mask_storeu_ps
#define Y_FMA _mm256_fmadd_ps
#define A_TARGET "avx2,fma"
#define A_VT __m256
#define A_MT unsigned char
#define A_LANES 8
#define A_SET1 _mm256_set1_ps
#define A_ZERO _mm256_setzero_ps
#define A_LOADZ(m, p) _mm256_maskload_ps((p), amask(m))
#define A_LOAD _mm256_load_ps
#define A_LOADU _mm256_loadu_ps
#define A_STORE _mm256_store_ps
#define A_STOREM astorem
#define A_FMA _mm256_fmadd_ps
#define A_ADD _mm256_add_ps
#define A_SUB _mm256_sub_ps
#define A_STOREU _mm256_storeu_ps

// amask returns bit set m's eight lanes (bit i, lane i) as the vector mask
// of _mm256_maskload_ps and _mm256_maskstore_ps.
__attribute__((target("avx2,fma"))) static inline __m256i amask(unsigned m) {
	const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), bit), bit);
}

// astorem stores v's lanes of bit set m at p (a plain store when all eight
// are set: Zen 3's masked stores are slow).
__attribute__((target("avx2,fma"))) static inline void astorem(float *p, unsigned m, __m256 v) {
	if ((m & 0xffu) == 0xffu)
		_mm256_storeu_ps(p, v);
	else
		_mm256_maskstore_ps(p, amask(m), v);
}

// FWD_ACC runs STMT for every (r, q) of a forward register tile.
#define FWD_ACC(OGC, RB, STMT)                                                                                      \
	_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int q = 0; q < OGC; q++) STMT;

// FWD_TAPS adds one kernel row's taps of one input channel, LOAD(r, kj)
// reading row r's window for kernel column kj.
#define FWD_TAPS(V, OGC, RB, LOAD)                                                                                  \
	for (long kj = 0; kj < g.kw; kj++) {                                                                          \
		V##_VT v[RB];                                                                                             \
		_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                                      \
			v[r] = LOAD;                                                                                          \
		_Pragma("GCC unroll 8") for (int q = 0; q < OGC; q++) {                                                   \
			V##_VT wv = V##_SET1(wk[kj * OGC + q]);                                                               \
			_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                                  \
				acc[r][q] = V##_FMA(wv, v[r], acc[r][q]);                                                         \
		}                                                                                                         \
	}

// The forward pass holds OGC output channels' accumulators for RB output
// rows of one lane block, so that each input load feeds OGC independent
// fused multiply-adds and each weight broadcast RB (one chain would wait on
// the FMA latency). Rows of the block past the plane, or reading padding,
// load zeros.
#define DEF_FWD(NAME, V, OGC, RB)                                                                                   \
	__attribute__((target(V##_TARGET))) static void NAME(gorun_cgeom g, const float *x,               \
	                                                                 const float *wp, const float *bp, float *y,  \
	                                                                 int slack) {                                 \
		long plane = g.oh * g.ow, hw = g.h * g.w, taps = g.c * g.kh * g.kw, groups = (g.o + OGC - 1) / OGC;       \
		for (long n = 0; n < g.n; n++)                                                                            \
			for (long c0 = 0; c0 < g.ow; c0 += V##_LANES) {                                                       \
				V##_MT out = (V##_MT)outmask(g.ow, c0, V##_LANES);                                                \
				V##_MT m[MAXKW];                                                                                  \
				int full = 1; /* plain loads read only the plane, or slack after it */                            \
				for (long kj = 0; kj < g.kw; kj++) {                                                              \
					m[kj] = (V##_MT)lanemask(&g, c0, kj, V##_LANES);                                              \
					full &= slack || m[kj] == (V##_MT)~0u;                                                        \
				}                                                                                                 \
				for (long gi = 0; gi < groups; gi++) {                                                            \
					long o0 = gi * OGC, og = g.o - o0 < OGC ? g.o - o0 : OGC;                                     \
					const float *wg = wp + gi * taps * OGC;                                                       \
					for (long oy0 = 0; oy0 < g.oh; oy0 += RB) {                                                   \
						V##_VT acc[RB][OGC];                                                                      \
						FWD_ACC(OGC, RB, acc[r][q] = V##_SET1(bp[o0 + q]))                                                            \
						if (full && g.p == 0 && oy0 + RB <= g.oh) {                                               \
							/* every row inside, every load plain: a tight loop over the taps */                  \
							const float *xc = x + n * g.c * hw + oy0 * g.w + c0;                                  \
							const float *wk = wg;                                                                 \
							for (long c = 0; c < g.c; c++, xc += hw)                                              \
								for (long ki = 0; ki < g.kh; ki++, wk += g.kw * OGC)                              \
									FWD_TAPS(V, OGC, RB, V##_LOADU(xc + (r + ki) * g.w + kj))                     \
						} else                                                                                    \
						for (long c = 0; c < g.c; c++)                                                            \
							for (long ki = 0; ki < g.kh; ki++) {                                                  \
								const float *rp[RB];                                                              \
								V##_MT rm[RB];                                                                    \
								int any = 0;                                                                      \
								_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {                            \
									long iy = oy0 + r + ki - g.p;                                                 \
									int ok = oy0 + r < g.oh && iy >= 0 && iy < g.h;                               \
									rp[r] = ok ? x + (n * g.c + c) * hw + iy * g.w + c0 - g.p : x;                \
									rm[r] = ok ? (V##_MT)~0u : 0;                                                 \
									any += ok;                                                                    \
								}                                                                                 \
								if (!any)                                                                         \
									continue;                                                                     \
								const float *wk = wg + (c * g.kh + ki) * g.kw * OGC;                              \
								if (any == RB && full) /* interior: plain loads */                                \
									FWD_TAPS(V, OGC, RB, V##_LOADU(rp[r] + kj))                                   \
								else                                                                              \
									FWD_TAPS(V, OGC, RB, V##_LOADZ(rm[r] & m[kj], rp[r] + kj))                    \
							}                                                                                     \
						FWD_ACC(OGC, RB, if (q < og && oy0 + r < g.oh) V##_STOREM(y + (n * g.o + o0 + q) * plane + (oy0 + r) * g.ow + c0, out, acc[r][q])) \
					}                                                                                             \
				}                                                                                                 \
			}                                                                                                     \
	}

DEF_FWD(fwd_z8, Z, 8, 1)
DEF_FWD(fwd_z5, Z, 5, 1)
DEF_FWD(fwd_y4, Y, 4, 2)
DEF_FWD(fwd_y5, Y, 5, 2)
DEF_FWD(fwd_y8, Y, 8, 2)
DEF_FWD(fwd_a4, A, 4, 2)
DEF_FWD(fwd_a5, A, 5, 2)

// DEF_FWDS is DEF_FWD for any stride over one sample's phase-split copy
// (phase_split): channel c's row r at x + c·cs + r·rl, kernel column kj's
// window of output columns at offset ko[kj] in a row, output row oy
// reading rows s·oy + ki. The copy holds the padding and enough rows and
// slack that every load is plain: rows of a register tile past the plane
// read zeros and are not stored.
#define DEF_FWDS(NAME, V, OGC, RB)                                                                                  \
	__attribute__((target(V##_TARGET))) static void NAME(gorun_cgeom g, const float *x, long rl,       \
	                                                                 long cs, const long *ko, const float *wp,     \
	                                                                 const float *bp, float *y) {                  \
		long plane = g.oh * g.ow, taps = g.c * g.kh * g.kw, groups = (g.o + OGC - 1) / OGC, sr = g.s * rl;        \
		for (long c0 = 0; c0 < g.ow; c0 += V##_LANES) {                                                           \
			V##_MT out = (V##_MT)outmask(g.ow, c0, V##_LANES);                                                    \
			for (long gi = 0; gi < groups; gi++) {                                                                \
				long o0 = gi * OGC, og = g.o - o0 < OGC ? g.o - o0 : OGC;                                         \
				for (long oy0 = 0; oy0 < g.oh; oy0 += RB) {                                                       \
					V##_VT acc[RB][OGC];                                                                          \
					FWD_ACC(OGC, RB, acc[r][q] = V##_SET1(bp[o0 + q]))                                                             \
					const float *xc = x + oy0 * sr + c0;                                                          \
					const float *wk = wp + gi * taps * OGC;                                                       \
					for (long c = 0; c < g.c; c++, xc += cs)                                                      \
						for (long ki = 0; ki < g.kh; ki++, wk += g.kw * OGC)                                      \
							FWD_TAPS(V, OGC, RB, V##_LOADU(xc + r * sr + ki * rl + ko[kj]))                       \
					FWD_ACC(OGC, RB, if (q < og && oy0 + r < g.oh) V##_STOREM(y + (o0 + q) * plane + (oy0 + r) * g.ow + c0, out, acc[r][q])) \
				}                                                                                                 \
			}                                                                                                     \
		}                                                                                                         \
	}

DEF_FWDS(fwds_z8, Z, 8, 1)
DEF_FWDS(fwds_z5, Z, 5, 1)
DEF_FWDS(fwds_y4, Y, 4, 2)
DEF_FWDS(fwds_y5, Y, 5, 2)
DEF_FWDS(fwds_y8, Y, 8, 2)
DEF_FWDS(fwds_a4, A, 4, 2)
DEF_FWDS(fwds_a5, A, 5, 2)

typedef void (*fwd_body)(gorun_cgeom, const float *, const float *, const float *, float *, int);
typedef void (*fwds_body)(gorun_cgeom, const float *, long, long, const long *, const float *, const float *, float *);
static const fwd_body fwd_bodies[] = {fwd_z8, fwd_z5, fwd_y4, fwd_y5, fwd_y8, fwd_a4, fwd_a5};
static const fwds_body fwds_bodies[] = {fwds_z8, fwds_z5, fwds_y4, fwds_y5, fwds_y8, fwds_a4, fwds_a5};

// fwd_pick returns the forward body for g (an index into fwd_bodies and
// fwds_bodies) and its channels a group: groups of 5 when that pads none
// and the other grouping would (the MNIST Net's 10 and 20); planes whose
// last sixteen-column block would be at most half full (8 columns, 24)
// take eight-lane vectors.
__attribute__((target("avx512f"))) static int fwd_pick(const gorun_cgeom *g, long *og) {
	if (g->ow % 16 != 0 && g->ow % 16 <= 8 && __builtin_cpu_supports("avx512vl")) {
		*og = g->o % 8 == 0 ? 8 : g->o % 5 == 0 && g->o % 4 != 0 ? 5 : 4;
		return *og == 8 ? 4 : *og == 5 ? 3 : 2;
	}
	*og = g->o % 5 == 0 && g->o % 8 != 0 ? 5 : 8;
	return *og == 5 ? 1 : 0;
}

// fwd_pick_avx2 is fwd_pick for the AVX2 bodies (level 1): eight lanes and
// sixteen registers, so tiles of two rows × 5 output channels where o is
// by 5s (the MNIST Net's 10 and 20: conv2's forward 92 GFLOP/s against 89
// by 4s, this machine's best of three), else two rows × 4 (10 and 8
// accumulators; 3 rows × 4 measured slower on conv2's 8-row planes, whose
// last tile of three would take the masked loads).
static int fwd_pick_avx2(const gorun_cgeom *g, long *og) {
	*og = g->o % 5 == 0 ? 5 : 4;
	return *og == 5 ? 6 : 5;
}

// zalloc64 returns n zeroed floats aligned to 64 bytes (n a multiple of
// 16), or NULL.
static float *zalloc64(long n) {
	float *p = aligned_alloc(64, n * sizeof(float));
	return p ? memset(p, 0, n * sizeof(float)) : NULL;
}

// pack_weights returns w[o][taps] and the biases b (zeros when NULL)
// regrouped for a body of og channels: tap t of group q at
// wp[(q·taps + t)·og], zero for channels past o, so that every group runs
// all og lanes; the biases follow at wp + groups·taps·og. NULL when out of
// memory.
static float *pack_weights(long o, long taps, long og, const float *w, const float *b) {
	long groups = (o + og - 1) / og;
	float *wp = calloc(groups * taps * og + groups * og, sizeof(float)), *bp = wp + groups * taps * og;
	if (!wp)
		return NULL;
	for (long i = 0; i < o; i++) {
		for (long t = 0; t < taps; t++)
			wp[((i / og) * taps + t) * og + i % og] = w[i * taps + t];
		bp[i] = b ? b[i] : 0.0f;
	}
	return wp;
}

__attribute__((target("avx512f"))) static int conv_fwd_strided_avx512(gorun_cgeom g, const float *x, const float *w,
                                                                       const float *b, float *y);

// ---- 1×1 kernels: a matrix product per sample ----

// pointwise reports whether pw_fwd takes g's forward pass: kernels 1×1
// without padding, any stride up to 16, output channels by 8s, output
// planes of at least 8 pixels. (With a stride the row bodies would copy
// every phase of x, and the channel bodies every column, for the one
// phase a 1×1 kernel reads: the ResNet's downsamples.)
static inline int pointwise(const gorun_cgeom *g) {
	return g->kh == 1 && g->kw == 1 && g->p == 0 && g->s <= MAXKW && g->o % 8 == 0 && g->oh * g->ow >= 8;
}

// DEF_PW is y[o][p] = b[o] + Σ_c w[o][c]·x[c][p] over one sample's
// contiguous planes (x[c] at x + c·xs, plane pixels in order), RB
// vectors of sixteen pixels × 8 output channels in registers, channels in
// order from the bias (conv_fwd_c's order for a 1×1 kernel). Weights
// packed by pack_weights (groups of 8). The last vector's lanes past the
// plane read up to fifteen floats past x's last plane and are not stored.
#define DEF_PW(NAME, RB)                                                                                            \
	__attribute__((target("avx512f,fma"))) static void NAME(long c, long o, long plane, const float *x, long xs,   \
	                                                        const float *wp, const float *bp, float *y) {          \
		for (long p0 = 0; p0 < plane; p0 += 16 * RB)                                                              \
			for (long o0 = 0; o0 < o; o0 += 8) {                                                                  \
				const float *wk = wp + o0 * c;                                                                    \
				__m512 acc[RB][8];                                                                                \
				FWD_ACC(8, RB, acc[r][q] = _mm512_set1_ps(bp[o0 + q]))                                            \
				for (long ci = 0; ci < c; ci++, wk += 8) {                                                        \
					__m512 v[RB];                                                                                 \
					_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                          \
						v[r] = _mm512_loadu_ps(x + ci * xs + p0 + 16 * r);                                        \
					_Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {                                         \
						__m512 wv = _mm512_set1_ps(wk[q]);                                                        \
						_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                      \
							acc[r][q] = _mm512_fmadd_ps(wv, v[r], acc[r][q]);                                     \
					}                                                                                             \
				}                                                                                                 \
				FWD_ACC(8, RB, if (p0 + 16 * r < plane) _mm512_mask_storeu_ps(y + (o0 + q) * plane + p0 + 16 * r,  \
				                                                             outmask(plane, p0 + 16 * r, 16), acc[r][q])) \
			}                                                                                                     \
	}

DEF_PW(pw_r1, 1)
DEF_PW(pw_r2, 2)

// pw_body runs DEF_PW with two vectors of pixels a tile for 32 or more
// input channels, one below (BenchmarkConv in ops: the ResNet's
// downsamples, forward over 16 channels 8 % faster with one, input
// gradient over 32 and 64 10 % faster with two).
static void pw_body(long c, long o, long plane, const float *x, long xs, const float *wp, const float *bp, float *y) {
	(c >= 32 ? pw_r2 : pw_r1)(c, o, plane, x, xs, wp, bp, y);
}

// pw_gather copies the pixels a 1×1 kernel with stride s reads of one
// sample's planes, x[c][s·oy][s·ox], into xs[c·cs + oy·ow + ox] (what lies
// between the planes is left as it is).
static void pw_gather(const gorun_cgeom *g, const float *x, float *xs, long cs) {
	for (long c = 0; c < g->c; c++)
		for (long oy = 0; oy < g->oh; oy++) {
			const float *row = x + (c * g->h + oy * g->s) * g->w;
			float *d = xs + c * cs + oy * g->ow;
			for (long ox = 0; ox < g->ow; ox++)
				d[ox] = row[ox * g->s];
		}
}

// pad_planes copies count planes of plane floats from src into d, one
// every ps floats (what lies between them is left as it is).
static void pad_planes(float *d, long ps, const float *src, long plane, long count) {
	for (long i = 0; i < count; i++)
		memcpy(d + i * ps, src + i * plane, plane * sizeof(float));
}

// pw_fwd runs pointwise's geometries: per sample a gather of the pixels
// read (with a stride) and the body over them, or the body over x itself.
// In place, the last vector reads past the sample's last plane; the slack
// after the callers' buffers is not promised, so the last sample goes
// through a copy when its planes are not whole vectors.
__attribute__((target("avx512f"))) static int pw_fwd(gorun_cgeom g, const float *x, const float *w, const float *b,
                                                      float *y) {
	long plane = g.oh * g.ow, hw = g.h * g.w;
	float *wp = pack_weights(g.o, g.c, 8, w, b), *xs = calloc(g.c * plane + 16, sizeof(float));
	if (!wp || !xs) {
		free(wp);
		free(xs);
		return -1;
	}
	for (long n = 0; n < g.n; n++) {
		const float *src = x + n * g.c * hw;
		if (g.s > 1)
			pw_gather(&g, src, xs, plane), src = xs;
		else if (n == g.n - 1 && plane % 16 != 0)
			src = memcpy(xs, src, g.c * plane * sizeof(float));
		pw_body(g.c, g.o, plane, src, plane, wp, wp + g.o * g.c, y + n * g.o * plane);
	}
	free(xs);
	free(wp);
	return 0;
}

// pointwise_dgrad reports whether pw_dgrad takes g's input gradient: 1×1
// kernels without padding with a stride from 2 to 16 (stride 1 is a
// "same" convolution, whose input gradient runs pw_fwd), input channels by
// 8s, output planes of at least 8 pixels.
static inline int pointwise_dgrad(const gorun_cgeom *g) {
	return g->kh == 1 && g->kw == 1 && g->p == 0 && g->s > 1 && g->s <= MAXKW && g->c % 8 == 0 && g->oh * g->ow >= 8;
}

// pw_dgrad is the input gradient of a 1×1 kernel without padding, input
// channels by 8s, any stride: per sample dxs[c][p] = Σ_o w[o][c]·dy[o][p]
// (o in order, from zero: conv_dgrad_sc's order for one tap) through
// pw_body, scattered to dx[c][s·oy][s·ox]; the pixels no output reads are
// zero.
__attribute__((target("avx512f"))) static int pw_dgrad(gorun_cgeom g, const float *dy, const float *w, float *dx) {
	long plane = g.oh * g.ow, hw = g.h * g.w, s = g.s;
	float *wt = malloc(g.o * g.c * sizeof(float));
	if (!wt)
		return -1;
	for (long o = 0; o < g.o; o++)
		for (long c = 0; c < g.c; c++)
			wt[c * g.o + o] = w[o * g.c + c];
	float *wp = pack_weights(g.c, g.o, 8, wt, NULL), *dd = malloc(g.c * plane * sizeof(float));
	float *dys = calloc(g.o * plane + 16, sizeof(float));
	free(wt);
	if (!wp || !dd || !dys) {
		free(wp);
		free(dd);
		free(dys);
		return -1;
	}
	for (long n = 0; n < g.n; n++) {
		memcpy(dys, dy + n * g.o * plane, g.o * plane * sizeof(float)); // slack after the last plane
		pw_body(g.o, g.c, plane, dys, plane, wp, wp + g.c * g.o, dd);
		float *dxn = dx + n * g.c * hw;
		memset(dxn, 0, g.c * hw * sizeof(float));
		for (long c = 0; c < g.c; c++)
			for (long oy = 0; oy < g.oh; oy++) {
				float *row = dxn + (c * g.h + oy * s) * g.w;
				const float *src = dd + c * plane + oy * g.ow;
				for (long ox = 0; ox < g.ow; ox++)
					row[ox * s] = src[ox];
			}
	}
	free(dys);
	free(dd);
	free(wp);
	return 0;
}

// ---- the forward pass over output channels, for planes under 8 columns ----

// fwd_by_o reports whether the forward body over output channels (fwdo)
// takes g: output planes under 16 columns (a row of 7 fills half a vector
// of columns, of 14 all but two lanes; a strided plane needs no
// phase-split copy), with output channels by 32s. It adds in conv_fwd_c's
// order. BenchmarkConv in ops: the ResNet's 7-column layer 0.75× lowering
// (1.10× by columns), its stride-2 14-column layer 0.69× (0.84×). Its
// stride-1 14-column layer stayed by columns until the outputs'
// transposition became a register one: forward 96–100 against 89 GFLOP/s,
// input gradient (dgrad_same) 97 against 90 (BenchmarkConv here).
static inline int fwd_by_o(const gorun_cgeom *g) {
	return g->ow < 16 && g->o % 32 == 0 && g->s <= MAXKW;
}

// DEF_FWDO defines a body that computes one sample's outputs pixel-major,
// yt[pixel][o], holding PIX pixels × 32 output channels in registers: each
// tap loads two vectors of weights (wt[tap][o], tap-major) and broadcasts
// PIX inputs for 2·PIX fused multiply-adds, from the bias, in the order c,
// ki, kj. KW is the kernel's width, or 0 for g.kw (a width known when
// compiled unrolls the kernel row). The input is a bordered copy: channel c
// at x + c·cs, row r at r·pw, every tap of every pixel inside it (pixels
// past the plane compute the first pixel of their tile again and are not
// stored).
#define DEF_FWDO(NAME, PIX, KW)                                                                                     \
	__attribute__((target("avx512f,fma"))) static void NAME(gorun_cgeom g, const float *x, long pw, long cs,       \
	                                                        const float *wt, const float *b, float *yt) {          \
		long plane = g.oh * g.ow, kw = KW ? KW : g.kw;                                                            \
		for (long p0 = 0; p0 < plane; p0 += PIX) {                                                                \
			const float *px[PIX];                                                                                 \
			for (int i = 0; i < PIX; i++) {                                                                       \
				long q = p0 + i < plane ? p0 + i : p0;                                                            \
				px[i] = x + (q / g.ow) * g.s * pw + (q % g.ow) * g.s;                                             \
			}                                                                                                     \
			for (long o0 = 0; o0 < g.o; o0 += 32) {                                                               \
				__m512 b0 = b ? _mm512_loadu_ps(b + o0) : _mm512_setzero_ps(),                                    \
				       b1 = b ? _mm512_loadu_ps(b + o0 + 16) : _mm512_setzero_ps();                               \
				__m512 acc[PIX][2];                                                                               \
				_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) acc[i][0] = b0, acc[i][1] = b1;             \
				const float *wk = wt + o0;                                                                        \
				for (long c = 0; c < g.c; c++)                                                                    \
					for (long ki = 0; ki < g.kh; ki++) {                                                          \
						long t = c * cs + ki * pw;                                                                \
						_Pragma("GCC unroll 5") for (long kj = 0; kj < kw; kj++, wk += g.o) {                     \
							__m512 w0 = _mm512_loadu_ps(wk), w1 = _mm512_loadu_ps(wk + 16);                       \
							_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) {                               \
								__m512 xv = _mm512_set1_ps(px[i][t + kj]);                                        \
								acc[i][0] = _mm512_fmadd_ps(w0, xv, acc[i][0]);                                   \
								acc[i][1] = _mm512_fmadd_ps(w1, xv, acc[i][1]);                                   \
							}                                                                                     \
						}                                                                                         \
					}                                                                                             \
				_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) if (p0 + i < plane) {                       \
					_mm512_storeu_ps(yt + (p0 + i) * g.o + o0, acc[i][0]);                                        \
					_mm512_storeu_ps(yt + (p0 + i) * g.o + o0 + 16, acc[i][1]);                                   \
				}                                                                                                 \
			}                                                                                                     \
		}                                                                                                         \
	}

DEF_FWDO(fwdo_8, 8, 0)
DEF_FWDO(fwdo_8k3, 8, 3)
DEF_FWDO(fwdo_7k3, 7, 3)

// fwdo runs the DEF_FWDO body for g: tiles of 7 pixels where they tile the
// plane and 8 would not (7×7 planes: 8 would idle 7 of 56 pixels), kernel
// rows unrolled for kernels 3 wide.
static void fwdo(gorun_cgeom g, const float *x, long pw, long cs, const float *wt, const float *b, float *yt) {
	long plane = g.oh * g.ow;
	if (g.kw != 3)
		fwdo_8(g, x, pw, cs, wt, b, yt);
	else if (plane % 8 != 0 && plane % 7 == 0)
		fwdo_7k3(g, x, pw, cs, wt, b, yt);
	else
		fwdo_8k3(g, x, pw, cs, wt, b, yt);
}

// transpose sets dst[j·ldd + i] = src[i·lds + j] for i < rows, j < cols,
// 16 × 16 blocks at a time through registers (the bodies over channels
// keep their sums pixel-major; a scalar loop cost a tenth of their time).
__attribute__((target("avx512f"))) static void transpose(const float *src, long rows, long cols, long lds, float *dst,
                                                         long ldd) {
	for (long i0 = 0; i0 < rows; i0 += 16) {
		long ni = rows - i0 < 16 ? rows - i0 : 16;
		__mmask16 sm = (__mmask16)((1u << ni) - 1u);
		for (long j0 = 0; j0 < cols; j0 += 16) {
			long nj = cols - j0 < 16 ? cols - j0 : 16;
			__mmask16 lm = (__mmask16)((1u << nj) - 1u);
			__m512 r[16], t[16];
			for (int i = 0; i < 16; i++)
				r[i] = i < ni ? _mm512_maskz_loadu_ps(lm, src + (i0 + i) * lds + j0) : _mm512_setzero_ps();
			for (int i = 0; i < 16; i += 2) {
				t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
				t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
			}
			for (int i = 0; i < 16; i += 4) {
				r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
				r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
				r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
				r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
			}
			for (int i = 0; i < 4; i++) {
				t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
				t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
				t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
				t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
			}
			for (int i = 0; i < 8; i++) {
				r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
				r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
			}
			for (int j = 0; j < nj; j++)
				_mm512_mask_storeu_ps(dst + (j0 + j) * ldd + i0, sm, r[j]);
		}
	}
}

// border_copy copies one sample's planes x[c][h][w] into xp[c][ph][pw]
// at row and column offset p; the border, left as it is, stays zero.
static void border_copy(const gorun_cgeom *g, const float *x, float *xp, long ph, long pw) {
	for (long c = 0; c < g->c; c++)
		for (long iy = 0; iy < g->h; iy++)
			memcpy(xp + (c * ph + iy + g->p) * pw + g->p, x + (c * g->h + iy) * g->w, g->w * sizeof(float));
}

// tap_major returns w[o][taps] as wt[tap][o] (NULL when out of memory).
static float *tap_major(long o, long taps, const float *w) {
	float *wt = malloc(o * taps * sizeof(float) + 1);
	if (wt)
		for (long i = 0; i < o; i++)
			for (long t = 0; t < taps; t++)
				wt[t * o + i] = w[i * taps + t];
	return wt;
}

// ---- Winograd F(2×2, 3×3): "same" 3×3 convolutions with stride 1 ----
//
// Each 2×2 tile of y is Aᵀ[Σ_c U_oc ⊙ V_c]A (+ b) over the 4×4 patch d_c of
// the zero-bordered input under it: U = G g Gᵀ (the kernel), V = Bᵀ d B,
// 16 products a tile and channel instead of 36 multiply-adds (Lavin and
// Gray, 2015). At every level the same float32 operations in the same
// order: G's rows (g0, ((g0 + g1) + g2)·½, ((g0 - g1) + g2)·½, g2) down the
// kernel's columns, then along its rows; Bᵀ's (d0 - d2, d1 + d2, d2 - d1,
// d1 - d3) down the patch's columns, then along its rows; M = Σ_c U·V with
// fused multiply-adds in c's order from zero; Aᵀ's ((m0 + m1) + m2,
// (m1 - m2) - m3) down M's columns, then along its rows; then + b.
// Output planes from 12 to 32 columns (a tile row in one vector), output
// channels by 8s, 16 or more input channels. BenchmarkConv (GFLOP/s of the direct convolution's
// count, best of eight, two rounds): the ResNet's 28-column layer forward
// 83–89 → 113–124, input gradient 87–88 → 106–119; its 14-column layer
// 97–104 → 97–119; its 7-column layer 102–106 → 71–77 (4×4 tiles cover
// 8×8: a third idle), so narrower planes keep the direct bodies; its stem
// (one input channel: the transforms are most of the work) 0.62 against
// 0.33 ms a step (probe over the engine's steps), so fewer than 16 input
// channels do too.
static inline int wino_ok(const gorun_cgeom *g) {
	return g->s == 1 && g->kh == 3 && g->kw == 3 && g->p == 1 && g->oh == g->h && g->ow == g->w && g->ow >= 12 &&
	       g->ow <= 32 && g->o % 8 == 0 && g->c >= 16;
}

// wino_dims is a Winograd pass's layout: th × tw tiles a sample, each
// sample bordered into ph × pw planes, nb samples a chunk whose tiles (tp,
// rounded up to 16) the transformed inputs and products hold.
typedef struct {
	long th, tw, ph, pw, nb, tp;
} wino_dims;

// wino_plan sizes a chunk so that its transformed inputs and products,
// 16·(C+O) floats a tile, stay within 512 KB (L2 is 1 MB a core here).
static wino_dims wino_plan(const gorun_cgeom *g) {
	wino_dims d;
	d.th = (g->oh + 1) / 2, d.tw = (g->ow + 1) / 2;
	d.ph = 2 * d.th + 2, d.pw = 2 * d.tw + 2;
	long per = d.th * d.tw, cap = 8192 / (g->c + g->o);
	d.nb = cap / per < 1 ? 1 : cap / per;
	if (d.nb > g->n)
		d.nb = g->n;
	d.tp = (d.nb * per + 15) / 16 * 16;
	return d;
}

// wino_filter sets u to G g Gᵀ of every kernel, u[ξ][o/8][c][o%8] (ξ = 4a + b).
static void wino_filter(long o, long c, const float *w, float *u) {
	for (long i = 0; i < o; i++)
		for (long j = 0; j < c; j++) {
			const float *k = w + (i * c + j) * 9;
			float r[4][3];
			for (int q = 0; q < 3; q++) {
				float g0 = k[q], g1 = k[3 + q], g2 = k[6 + q];
				r[0][q] = g0, r[1][q] = ((g0 + g1) + g2) * 0.5f, r[2][q] = ((g0 - g1) + g2) * 0.5f, r[3][q] = g2;
			}
			for (int a = 0; a < 4; a++) {
				float g0 = r[a][0], g1 = r[a][1], g2 = r[a][2];
				float v[4] = {g0, ((g0 + g1) + g2) * 0.5f, ((g0 - g1) + g2) * 0.5f, g2};
				for (int b = 0; b < 4; b++)
					u[(((a * 4 + b) * (o / 8) + i / 8) * c + j) * 8 + i % 8] = v[b];
			}
		}
}

// wino_border copies samples n0 .. n0+nb-1 of x into xp's planes at row and
// column offset 1 (the border, zeroed once, stays zero).
static void wino_border(const gorun_cgeom *g, const wino_dims *d, const float *x, long n0, long nb, float *xp) {
	for (long s = 0; s < nb; s++)
		for (long c = 0; c < g->c; c++)
			for (long iy = 0; iy < g->h; iy++)
				memcpy(xp + ((s * g->c + c) * d->ph + iy + 1) * d->pw + 1, x + (((n0 + s) * g->c + c) * g->h + iy) * g->w,
				       g->w * sizeof(float));
}

// wino_bufs are a Winograd forward's buffers: the transformed kernels u,
// the bordered inputs xp, the transformed inputs v and the products m.
typedef struct {
	float *u, *xp, *v, *m;
} wino_bufs;

// wino_alloc allocates them and transforms w into u (-1 when out of
// memory: wino_free frees what was allocated).
static int wino_alloc(const gorun_cgeom *g, const wino_dims *d, const float *w, wino_bufs *b) {
	b->u = malloc(16 * g->o * g->c * sizeof(float)), b->xp = calloc(d->nb * g->c * d->ph * d->pw + 64, sizeof(float));
	b->v = calloc(16 * g->c * d->tp, sizeof(float)), b->m = malloc(16 * g->o * d->tp * sizeof(float));
	if (!b->u || !b->xp || !b->v || !b->m)
		return -1;
	wino_filter(g->o, g->c, w, b->u);
	return 0;
}

static void wino_free(wino_bufs *b) { free(b->u), free(b->xp), free(b->v), free(b->m); }

// wino_c is the Winograd forward in plain C (levels 0 and 1).
static inline __attribute__((always_inline)) int wino_c(gorun_cgeom g, const float *x, const float *w, const float *b,
                                                        float *y) {
	wino_dims d = wino_plan(&g);
	long per = d.th * d.tw, plane = g.oh * g.ow, ob = g.o / 8;
	wino_bufs bf;
	float *u, *xp, *v, *m;
	int r = -1;
	if (wino_alloc(&g, &d, w, &bf))
		goto done;
	u = bf.u, xp = bf.xp, v = bf.v, m = bf.m;
	for (long n0 = 0; n0 < g.n; n0 += d.nb) {
		long nb = g.n - n0 < d.nb ? g.n - n0 : d.nb, nt = nb * per;
		wino_border(&g, &d, x, n0, nb, xp);
		for (long s = 0; s < nb; s++)
			for (long c = 0; c < g.c; c++)
				for (long th = 0; th < d.th; th++)
					for (long tw = 0; tw < d.tw; tw++) {
						const float *p = xp + ((s * g.c + c) * d.ph + 2 * th) * d.pw + 2 * tw;
						float t[4][4];
						for (int j = 0; j < 4; j++) {
							float d0 = p[j], d1 = p[d.pw + j], d2 = p[2 * d.pw + j], d3 = p[3 * d.pw + j];
							t[0][j] = d0 - d2, t[1][j] = d1 + d2, t[2][j] = d2 - d1, t[3][j] = d1 - d3;
						}
						long at = s * per + th * d.tw + tw;
						for (int a = 0; a < 4; a++) {
							float e[4] = {t[a][0] - t[a][2], t[a][1] + t[a][2], t[a][2] - t[a][1], t[a][1] - t[a][3]};
							for (int q = 0; q < 4; q++)
								v[((a * 4 + q) * g.c + c) * d.tp + at] = e[q];
						}
					}
		for (long xi = 0; xi < 16; xi++)
			for (long o = 0; o < g.o; o++)
				for (long t = 0; t < nt; t++) {
					float acc = 0.0f;
					for (long c = 0; c < g.c; c++)
						acc = fmaf(u[((xi * ob + o / 8) * g.c + c) * 8 + o % 8], v[(xi * g.c + c) * d.tp + t], acc);
					m[(xi * g.o + o) * d.tp + t] = acc;
				}
		for (long s = 0; s < nb; s++)
			for (long o = 0; o < g.o; o++)
				for (long th = 0; th < d.th; th++)
					for (long tw = 0; tw < d.tw; tw++) {
						long at = s * per + th * d.tw + tw;
						float sm[2][4];
						for (int j = 0; j < 4; j++) {
							float m0 = m[((0 + j) * g.o + o) * d.tp + at], m1 = m[((4 + j) * g.o + o) * d.tp + at];
							float m2 = m[((8 + j) * g.o + o) * d.tp + at], m3 = m[((12 + j) * g.o + o) * d.tp + at];
							sm[0][j] = (m0 + m1) + m2, sm[1][j] = (m1 - m2) - m3;
						}
						float *yo = y + ((n0 + s) * g.o + o) * plane;
						for (int a = 0; a < 2; a++) {
							long oy = 2 * th + a;
							if (oy >= g.oh)
								break;
							float q0 = (sm[a][0] + sm[a][1]) + sm[a][2], q1 = (sm[a][1] - sm[a][2]) - sm[a][3];
							if (b)
								q0 = q0 + b[o], q1 = q1 + b[o];
							yo[oy * g.ow + 2 * tw] = q0;
							if (2 * tw + 1 < g.ow)
								yo[oy * g.ow + 2 * tw + 1] = q1;
						}
					}
	}
	r = 0;
done:
	wino_free(&bf);
	return r;
}

// wino_gemm is the AVX-512 M = Σ_c U·V of one ξ over nt tiles: 8 output
// channels × 32 (then 16) tiles in registers.
__attribute__((target("avx512f,fma"))) static void wino_gemm(long o, long c, long tp, long nt, const float *u,
                                                             const float *v, float *m) {
	for (long o0 = 0; o0 < o; o0 += 8) {
		const float *uo = u + o0 * c;
		long t = 0;
		for (; t + 32 <= nt; t += 32) {
			__m512 acc[8][2];
			_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
			for (long cc = 0; cc < c; cc++) {
				__m512 v0 = _mm512_loadu_ps(v + cc * tp + t), v1 = _mm512_loadu_ps(v + cc * tp + t + 16);
				_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
					__m512 ub = _mm512_set1_ps(uo[cc * 8 + i]);
					acc[i][0] = _mm512_fmadd_ps(ub, v0, acc[i][0]);
					acc[i][1] = _mm512_fmadd_ps(ub, v1, acc[i][1]);
				}
			}
			_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
				_mm512_storeu_ps(m + (o0 + i) * tp + t, acc[i][0]);
				_mm512_storeu_ps(m + (o0 + i) * tp + t + 16, acc[i][1]);
			}
		}
		for (; t < nt; t += 16) {
			__m512 acc[8];
			_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
			for (long cc = 0; cc < c; cc++) {
				__m512 v0 = _mm512_loadu_ps(v + cc * tp + t);
				_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
					acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(uo[cc * 8 + i]), v0, acc[i]);
			}
			_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) _mm512_storeu_ps(m + (o0 + i) * tp + t, acc[i]);
		}
	}
}

// conv_wino_avx512 is wino_c with vectors: the transforms over the tiles of
// one tile row (lanes tw, columns split by parity with permutes), the
// products by wino_gemm.
__attribute__((target("avx512f,fma"))) static int conv_wino_avx512(gorun_cgeom g, const float *x, const float *w,
                                                                   const float *b, float *y) {
	wino_dims d = wino_plan(&g);
	long per = d.th * d.tw, plane = g.oh * g.ow, ob = g.o / 8;
	wino_bufs bf;
	float *u, *xp, *v, *m;
	int r = -1;
	if (wino_alloc(&g, &d, w, &bf))
		goto done;
	u = bf.u, xp = bf.xp, v = bf.v, m = bf.m;
	int ev[16], od[16], lo[16], hi[16];
	for (int l = 0; l < 16; l++)
		ev[l] = 2 * l, od[l] = 2 * l + 1, lo[l] = l / 2 + (l % 2) * 16, hi[l] = 8 + l / 2 + (l % 2) * 16;
	const __m512i iev = _mm512_loadu_si512(ev), iod = _mm512_loadu_si512(od), ilo = _mm512_loadu_si512(lo),
	              ihi = _mm512_loadu_si512(hi);
	const __mmask16 tm = (__mmask16)((1u << d.tw) - 1u);
	const __mmask16 c0 = (__mmask16)(g.ow >= 16 ? 0xffffu : (1u << g.ow) - 1u);
	const __mmask16 c1 = (__mmask16)(g.ow > 16 ? (1u << (g.ow - 16)) - 1u : 0u);
	for (long n0 = 0; n0 < g.n; n0 += d.nb) {
		long nb = g.n - n0 < d.nb ? g.n - n0 : d.nb, nt = nb * per;
		wino_border(&g, &d, x, n0, nb, xp);
		for (long s = 0; s < nb; s++)
			for (long c = 0; c < g.c; c++)
				for (long th = 0; th < d.th; th++) {
					const float *p = xp + ((s * g.c + c) * d.ph + 2 * th) * d.pw;
					__m512 dv[4][4]; // dv[i][j]: patch row i, column j, lane tw
					for (int i = 0; i < 4; i++) {
						const float *row = p + i * d.pw;
						__m512 a0 = _mm512_loadu_ps(row), a1 = _mm512_loadu_ps(row + 16);
						__m512 b0 = _mm512_loadu_ps(row + 2), b1 = _mm512_loadu_ps(row + 18);
						dv[i][0] = _mm512_permutex2var_ps(a0, iev, a1), dv[i][1] = _mm512_permutex2var_ps(a0, iod, a1);
						dv[i][2] = _mm512_permutex2var_ps(b0, iev, b1), dv[i][3] = _mm512_permutex2var_ps(b0, iod, b1);
					}
					__m512 t[4][4];
					for (int j = 0; j < 4; j++) {
						t[0][j] = _mm512_sub_ps(dv[0][j], dv[2][j]), t[1][j] = _mm512_add_ps(dv[1][j], dv[2][j]);
						t[2][j] = _mm512_sub_ps(dv[2][j], dv[1][j]), t[3][j] = _mm512_sub_ps(dv[1][j], dv[3][j]);
					}
					long at = s * per + th * d.tw;
					for (int a = 0; a < 4; a++) {
						__m512 e[4] = {_mm512_sub_ps(t[a][0], t[a][2]), _mm512_add_ps(t[a][1], t[a][2]),
						               _mm512_sub_ps(t[a][2], t[a][1]), _mm512_sub_ps(t[a][1], t[a][3])};
						for (int q = 0; q < 4; q++)
							_mm512_mask_storeu_ps(v + ((a * 4 + q) * g.c + c) * d.tp + at, tm, e[q]);
					}
				}
		for (long xi = 0; xi < 16; xi++)
			wino_gemm(g.o, g.c, d.tp, nt, u + xi * ob * g.c * 8, v + xi * g.c * d.tp, m + xi * g.o * d.tp);
		for (long s = 0; s < nb; s++)
			for (long o = 0; o < g.o; o++) {
				float *yo = y + ((n0 + s) * g.o + o) * plane;
				__m512 bias = b ? _mm512_set1_ps(b[o]) : _mm512_setzero_ps();
				for (long th = 0; th < d.th; th++) {
					long at = s * per + th * d.tw;
					__m512 sm[2][4];
					for (int j = 0; j < 4; j++) {
						__m512 m0 = _mm512_maskz_loadu_ps(tm, m + ((0 + j) * g.o + o) * d.tp + at);
						__m512 m1 = _mm512_maskz_loadu_ps(tm, m + ((4 + j) * g.o + o) * d.tp + at);
						__m512 m2 = _mm512_maskz_loadu_ps(tm, m + ((8 + j) * g.o + o) * d.tp + at);
						__m512 m3 = _mm512_maskz_loadu_ps(tm, m + ((12 + j) * g.o + o) * d.tp + at);
						sm[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
						sm[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
					}
					for (int a = 0; a < 2; a++) {
						long oy = 2 * th + a;
						if (oy >= g.oh)
							break;
						__m512 q0 = _mm512_add_ps(_mm512_add_ps(sm[a][0], sm[a][1]), sm[a][2]);
						__m512 q1 = _mm512_sub_ps(_mm512_sub_ps(sm[a][1], sm[a][2]), sm[a][3]);
						if (b)
							q0 = _mm512_add_ps(q0, bias), q1 = _mm512_add_ps(q1, bias);
						float *yr = yo + oy * g.ow;
						_mm512_mask_storeu_ps(yr, c0, _mm512_permutex2var_ps(q0, ilo, q1));
						if (c1)
							_mm512_mask_storeu_ps(yr + 16, c1, _mm512_permutex2var_ps(q0, ihi, q1));
					}
				}
			}
	}
	r = 0;
done:
	wino_free(&bf);
	return r;
}

// wino_gemm_a is wino_gemm with AVX2 (level 1): 4 output channels × 24
// tiles (then 8) in registers.
__attribute__((target("avx2,fma"))) static void wino_gemm_a(long o, long c, long tp, long nt, const float *u,
                                                            const float *v, float *m) {
	for (long o0 = 0; o0 < o; o0 += 4) {
		const float *uo = u + o0 / 8 * 8 * c + o0 % 8;
		long t = 0;
		for (; t + 24 <= nt; t += 24) {
			__m256 acc[4][3];
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = acc[i][2] = _mm256_setzero_ps();
			for (long cc = 0; cc < c; cc++) {
				const float *vc = v + cc * tp + t;
				__m256 v0 = _mm256_loadu_ps(vc), v1 = _mm256_loadu_ps(vc + 8), v2 = _mm256_loadu_ps(vc + 16);
				_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
					__m256 ub = _mm256_set1_ps(uo[cc * 8 + i]);
					acc[i][0] = _mm256_fmadd_ps(ub, v0, acc[i][0]);
					acc[i][1] = _mm256_fmadd_ps(ub, v1, acc[i][1]);
					acc[i][2] = _mm256_fmadd_ps(ub, v2, acc[i][2]);
				}
			}
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) for (int k = 0; k < 3; k++)
				_mm256_storeu_ps(m + (o0 + i) * tp + t + 8 * k, acc[i][k]);
		}
		for (; t < nt; t += 8) {
			__m256 acc[4];
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
			for (long cc = 0; cc < c; cc++) {
				__m256 v0 = _mm256_loadu_ps(v + cc * tp + t);
				_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
					acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(uo[cc * 8 + i]), v0, acc[i]);
			}
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) _mm256_storeu_ps(m + (o0 + i) * tp + t, acc[i]);
		}
	}
}

// a_evens and a_odds return the even and the odd elements of the sixteen
// floats lo, hi in order.
__attribute__((target("avx2,fma"))) static inline __m256 a_evens(__m256 lo, __m256 hi) {
	return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xd8));
}
__attribute__((target("avx2,fma"))) static inline __m256 a_odds(__m256 lo, __m256 hi) {
	return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xdd)), 0xd8));
}

// conv_wino_a is wino_c with AVX2 (level 1): the transforms over blocks of
// eight tiles of a tile row (lanes tw, columns split by parity with
// shuffles), the products by wino_gemm_a. Each sample goes by groups of
// tile rows whose transformed inputs and products (16·(C+O) floats a tile)
// stay within about 128 KB (Zen 3's L2 is 512 KB a core; whole samples, as
// conv_wino_avx512 plans them, measured 70 µs a sample on the ResNet's
// 28-column layer against 58 by groups). Zen 3's masked stores are slow,
// so every block stores all eight lanes: those past a tile row land on the
// next row's tiles (written after them) or on sixteen tiles of slack
// after the group's, and in y on the next output row's first eight columns
// (written after them: a tile row's blocks go from the last), but for a
// plane's last row (the next plane's first was written by an earlier
// group).
__attribute__((target("avx2,fma"))) static int conv_wino_a(gorun_cgeom g, const float *x, const float *w,
                                                           const float *b, float *y) {
	wino_dims d = wino_plan(&g);
	long plane = g.oh * g.ow, ob = g.o / 8, want = 2048 / (g.c + g.o) > 24 ? 2048 / (g.c + g.o) : 24;
	long tr = want / d.tw > 1 ? want / d.tw : 1; // tile rows a group
	d.nb = 1, d.tp = (tr * d.tw + 7) / 8 * 8 + 16;
	wino_bufs bf;
	float *u, *xp, *v, *m;
	int r = -1;
	if (wino_alloc(&g, &d, w, &bf))
		goto done;
	u = bf.u, xp = bf.xp, v = bf.v, m = bf.m;
	for (long n = 0; n < g.n; n++) {
		wino_border(&g, &d, x, n, 1, xp);
		float *yn = y + n * g.o * plane;
		for (long th0 = 0; th0 < d.th; th0 += tr) {
			long nr = d.th - th0 < tr ? d.th - th0 : tr, nt = nr * d.tw;
			for (long c = 0; c < g.c; c++)
				for (long th = th0; th < th0 + nr; th++)
					for (long tw0 = 0; tw0 < d.tw; tw0 += 8) {
						/* patch rows of the tiles tw0 … tw0+7; past the plane's tiles, the
						   next row's (the copy has slack after its last plane) */
						const float *p = xp + (c * d.ph + 2 * th) * d.pw + 2 * tw0;
						__m256 dv[4][4]; // dv[i][j]: patch row i, column j, lane tw
						for (int i = 0; i < 4; i++) {
							const float *row = p + i * d.pw;
							__m256 a0 = _mm256_loadu_ps(row), a1 = _mm256_loadu_ps(row + 8);
							__m256 b0 = _mm256_loadu_ps(row + 2), b1 = _mm256_loadu_ps(row + 10);
							dv[i][0] = a_evens(a0, a1), dv[i][1] = a_odds(a0, a1);
							dv[i][2] = a_evens(b0, b1), dv[i][3] = a_odds(b0, b1);
						}
						__m256 t[4][4];
						for (int j = 0; j < 4; j++) {
							t[0][j] = _mm256_sub_ps(dv[0][j], dv[2][j]), t[1][j] = _mm256_add_ps(dv[1][j], dv[2][j]);
							t[2][j] = _mm256_sub_ps(dv[2][j], dv[1][j]), t[3][j] = _mm256_sub_ps(dv[1][j], dv[3][j]);
						}
						long at = (th - th0) * d.tw + tw0;
						for (int a = 0; a < 4; a++) {
							__m256 e[4] = {_mm256_sub_ps(t[a][0], t[a][2]), _mm256_add_ps(t[a][1], t[a][2]),
							               _mm256_sub_ps(t[a][2], t[a][1]), _mm256_sub_ps(t[a][1], t[a][3])};
							for (int q = 0; q < 4; q++)
								_mm256_storeu_ps(v + ((a * 4 + q) * g.c + c) * d.tp + at, e[q]);
						}
					}
			for (long xi = 0; xi < 16; xi++)
				wino_gemm_a(g.o, g.c, d.tp, nt, u + xi * ob * g.c * 8, v + xi * g.c * d.tp, m + xi * g.o * d.tp);
			for (long o = 0; o < g.o; o++) {
				float *yo = yn + o * plane;
				__m256 bias = b ? _mm256_set1_ps(b[o]) : _mm256_setzero_ps();
				for (long th = th0; th < th0 + nr; th++)
					for (long tw0 = (d.tw - 1) / 8 * 8; tw0 >= 0; tw0 -= 8) { // the last first: see above
						long at = (th - th0) * d.tw + tw0, st = 4 * g.o * d.tp; // from ξ to ξ + 4
						__m256 sm[2][4];
						for (int j = 0; j < 4; j++) {
							const float *mj = m + (j * g.o + o) * d.tp + at;
							__m256 m0 = _mm256_loadu_ps(mj), m1 = _mm256_loadu_ps(mj + st), m2 = _mm256_loadu_ps(mj + 2 * st),
							       m3 = _mm256_loadu_ps(mj + 3 * st);
							sm[0][j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
							sm[1][j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
						}
						long c0 = 2 * tw0; // the block's first output column
						for (int a = 0; a < 2; a++) {
							long oy = 2 * th + a;
							if (oy >= g.oh)
								break;
							int last = oy == g.oh - 1;
							unsigned k0 = last ? outmask(g.ow, c0, 8) : 0xffu;
							unsigned k1 = g.ow <= c0 + 8 ? 0 : last ? outmask(g.ow, c0 + 8, 8) : 0xffu;
							__m256 q0 = _mm256_add_ps(_mm256_add_ps(sm[a][0], sm[a][1]), sm[a][2]);
							__m256 q1 = _mm256_sub_ps(_mm256_sub_ps(sm[a][1], sm[a][2]), sm[a][3]);
							if (b)
								q0 = _mm256_add_ps(q0, bias), q1 = _mm256_add_ps(q1, bias);
							__m256 lo = _mm256_unpacklo_ps(q0, q1), hi = _mm256_unpackhi_ps(q0, q1);
							float *yr = yo + oy * g.ow + c0;
							astorem(yr, k0, _mm256_permute2f128_ps(lo, hi, 0x20));
							if (k1)
								astorem(yr + 8, k1, _mm256_permute2f128_ps(lo, hi, 0x31));
						}
					}
			}
		}
	}
	r = 0;
done:
	wino_free(&bf);
	return r;
}

// ---- weight gradient by Winograd F(2×2, 3×3) ----
//
// dw = Gᵀ[Σ_tiles (A dY Aᵀ) ⊙ (Bᵀ d B)]G summed over every 2×2 tile of dy
// (zero past the plane) and its 4×4 input patch d, 2.25 times fewer
// multiplies than the direct sums. Channel-last copies of x and dy let the
// transforms run with vectors over 16 channels: V[ξ][t][c] = Bᵀ d B in
// wino_c's order, dM[ξ][t][o] = A dY Aᵀ with A dY's rows (a, a + c,
// a - c, -c) then the same along the rows; dU[ξ][o][c] = Σ_t dM·V with
// fused multiply-adds from zero over a chunk's tiles in order, the
// chunks' sums added in order; then winow_out's Gᵀ dU G. Input and output
// channels by 16s (on wino_ok's geometries). BenchmarkConv, best of eight,
// three rounds: the ResNet's 28-column layer 105–107 → 116–123 GFLOP/s
// (direct count), its 14-column layer 99–107 → 169–173.

static inline int winow_ok(const gorun_cgeom *g) { return wino_ok(g) && g->c % 16 == 0 && g->o % 16 == 0; }

// winow_dims: th × tw tiles a sample; x bordered channel-last into ph × pw
// pixels, dy into qh × qw (zero past the plane); nb samples (nt tiles) a
// chunk. One sample a chunk: its transforms (16·(C+O) floats a tile, 400
// KB for the ResNet's 28-column layer) stay in L2, and BenchmarkConv
// measured chunks of 2, 5 and 10 samples slower (the transforms' stores
// then leave L2: 28 columns 43–75 GFLOP/s, 14 columns 50–96, against
// 57–123 and 116–173 with one).
typedef struct {
	long th, tw, ph, pw, qh, qw, nb, per;
} winow_dims;

static winow_dims winow_plan(const gorun_cgeom *g) {
	winow_dims d;
	d.th = (g->oh + 1) / 2, d.tw = (g->ow + 1) / 2, d.per = d.th * d.tw;
	d.ph = 2 * d.th + 2, d.pw = 2 * d.tw + 2, d.qh = 2 * d.th, d.qw = 2 * d.tw;
	d.nb = 1;
	return d;
}

// winow_out sets dw (or adds to it) Gᵀ X G of each tap's sums X =
// du[ξ][o][c]: G's columns (x0 + (x1 + x2)·½, (x1 - x2)·½, (x1 + x2)·½ + x3)
// down X's columns, then along its rows. Not inlined, so that no level's
// compiler fuses its multiply-adds.
__attribute__((noinline)) static void winow_out(long o, long c, const float *du, float *dw, int accumulate) {
	for (long i = 0; i < o; i++)
		for (long j = 0; j < c; j++) {
			float y[3][4];
			for (int b = 0; b < 4; b++) {
				float x0 = du[((0 + b) * o + i) * c + j], x1 = du[((4 + b) * o + i) * c + j];
				float x2 = du[((8 + b) * o + i) * c + j], x3 = du[((12 + b) * o + i) * c + j];
				y[0][b] = x0 + (x1 + x2) * 0.5f, y[1][b] = (x1 - x2) * 0.5f, y[2][b] = (x1 + x2) * 0.5f + x3;
			}
			float *d = dw + (i * c + j) * 9;
			for (int k = 0; k < 3; k++) {
				float r[3] = {y[k][0] + (y[k][1] + y[k][2]) * 0.5f, (y[k][1] - y[k][2]) * 0.5f,
				              (y[k][1] + y[k][2]) * 0.5f + y[k][3]};
				for (int l = 0; l < 3; l++)
					d[k * 3 + l] = accumulate ? d[k * 3 + l] + r[l] : r[l];
			}
		}
}

// winow_alloc allocates a Winograd weight gradient's buffers (NULL on failure
// leaves them all to free).
typedef struct {
	float *xq, *dq, *v, *m, *du;
} winow_bufs;

static int winow_alloc(const gorun_cgeom *g, const winow_dims *d, winow_bufs *b) {
	long nt = d->nb * d->per;
	b->xq = calloc(d->nb * d->ph * d->pw * g->c, sizeof(float));
	b->dq = calloc(d->nb * d->qh * d->qw * g->o, sizeof(float));
	b->v = malloc(16 * nt * g->c * sizeof(float)), b->m = malloc(16 * nt * g->o * sizeof(float));
	b->du = calloc(16 * g->o * g->c, sizeof(float));
	return b->xq && b->dq && b->v && b->m && b->du ? 0 : -1;
}

static void winow_free(winow_bufs *b) {
	free(b->xq), free(b->dq), free(b->v), free(b->m), free(b->du);
}

// winow_c is the Winograd weight gradient in plain C (levels 0 and 1).
static inline __attribute__((always_inline)) int winow_c(gorun_cgeom g, const float *dy, const float *x, float *dw,
                                                         int accumulate) {
	winow_dims d = winow_plan(&g);
	winow_bufs bf;
	int r = -1;
	long hw = g.h * g.w, plane = g.oh * g.ow, C = g.c, O = g.o;
	if (winow_alloc(&g, &d, &bf))
		goto done;
	for (long n0 = 0; n0 < g.n; n0 += d.nb) {
		long nb = g.n - n0 < d.nb ? g.n - n0 : d.nb, nt = nb * d.per;
		for (long s = 0; s < nb; s++) {
			for (long c = 0; c < C; c++)
				for (long iy = 0; iy < g.h; iy++)
					for (long ix = 0; ix < g.w; ix++)
						bf.xq[((s * d.ph + iy + 1) * d.pw + ix + 1) * C + c] = x[((n0 + s) * C + c) * hw + iy * g.w + ix];
			for (long o = 0; o < O; o++)
				for (long oy = 0; oy < g.oh; oy++)
					for (long ox = 0; ox < g.ow; ox++)
						bf.dq[((s * d.qh + oy) * d.qw + ox) * O + o] = dy[((n0 + s) * O + o) * plane + oy * g.ow + ox];
		}
		for (long s = 0; s < nb; s++)
			for (long th = 0; th < d.th; th++)
				for (long tw = 0; tw < d.tw; tw++) {
					long t = s * d.per + th * d.tw + tw;
					for (long c = 0; c < C; c++) {
						const float *p = bf.xq + ((s * d.ph + 2 * th) * d.pw + 2 * tw) * C + c;
						float u[4][4];
						for (int j = 0; j < 4; j++) {
							float d0 = p[j * C], d1 = p[(d.pw + j) * C], d2 = p[(2 * d.pw + j) * C], d3 = p[(3 * d.pw + j) * C];
							u[0][j] = d0 - d2, u[1][j] = d1 + d2, u[2][j] = d2 - d1, u[3][j] = d1 - d3;
						}
						for (int a = 0; a < 4; a++) {
							float e[4] = {u[a][0] - u[a][2], u[a][1] + u[a][2], u[a][2] - u[a][1], u[a][1] - u[a][3]};
							for (int q = 0; q < 4; q++)
								bf.v[((a * 4 + q) * nt + t) * C + c] = e[q];
						}
					}
					for (long o = 0; o < O; o++) {
						const float *q = bf.dq + ((s * d.qh + 2 * th) * d.qw + 2 * tw) * O + o;
						float a = q[0], b = q[O], c = q[d.qw * O], e = q[(d.qw + 1) * O];
						float rw[4][2] = {{a, b}, {a + c, b + e}, {a - c, b - e}, {-c, -e}};
						for (int i = 0; i < 4; i++) {
							float f[4] = {rw[i][0], rw[i][0] + rw[i][1], rw[i][0] - rw[i][1], -rw[i][1]};
							for (int j = 0; j < 4; j++)
								bf.m[((i * 4 + j) * nt + t) * O + o] = f[j];
						}
					}
				}
		for (long xi = 0; xi < 16; xi++)
			for (long o = 0; o < O; o++)
				for (long c = 0; c < C; c++) {
					float acc = 0.0f;
					for (long t = 0; t < nt; t++)
						acc = fmaf(bf.m[(xi * nt + t) * O + o], bf.v[(xi * nt + t) * C + c], acc);
					float *u = bf.du + (xi * O + o) * C + c;
					*u = *u + acc;
				}
	}
	winow_out(O, C, bf.du, dw, accumulate);
	r = 0;
done:
	winow_free(&bf);
	return r;
}

// winow_gemm adds Σ_t dM·V of one ξ over nt tiles to du: OB output channels
// × CV vectors of 16 input channels in registers.
#define DEF_WINOW_GEMM(NAME, OB, CV)                                                                                \
	__attribute__((target("avx512f,fma"))) static void NAME(long o, long c, long nt, const float *m, const float *v,  \
	                                                        float *du) {                                            \
		for (long o0 = 0; o0 < o; o0 += OB)                                                                         \
			for (long c0 = 0; c0 < c; c0 += 16 * CV) {                                                              \
				__m512 acc[OB][CV];                                                                                 \
				_Pragma("GCC unroll 16") for (int i = 0; i < OB; i++)                                               \
					_Pragma("GCC unroll 2") for (int k = 0; k < CV; k++) acc[i][k] = _mm512_setzero_ps();            \
				for (long t = 0; t < nt; t++) {                                                                     \
					__m512 vv[CV];                                                                                  \
					_Pragma("GCC unroll 2") for (int k = 0; k < CV; k++) vv[k] = _mm512_loadu_ps(v + t * c + c0 + 16 * k); \
					_Pragma("GCC unroll 16") for (int i = 0; i < OB; i++) {                                         \
						__m512 mb = _mm512_set1_ps(m[t * o + o0 + i]);                                              \
						_Pragma("GCC unroll 2") for (int k = 0; k < CV; k++) acc[i][k] =                            \
						    _mm512_fmadd_ps(mb, vv[k], acc[i][k]);                                                  \
					}                                                                                               \
				}                                                                                                   \
				_Pragma("GCC unroll 16") for (int i = 0; i < OB; i++)                                               \
					_Pragma("GCC unroll 2") for (int k = 0; k < CV; k++) {                                          \
						float *u = du + (o0 + i) * c + c0 + 16 * k;                                                 \
						_mm512_storeu_ps(u, _mm512_add_ps(_mm512_loadu_ps(u), acc[i][k]));                          \
					}                                                                                               \
			}                                                                                                       \
	}

DEF_WINOW_GEMM(winow_gemm16, 16, 1)
DEF_WINOW_GEMM(winow_gemm8x2, 8, 2)

// WINOW_TILES transforms one batch of nb samples for the Winograd weight
// gradient with V's vectors (conv_winow_avx512, conv_winow_a): the
// samples' planes transposed to channels last by TRANSPOSE, then each
// tile's input into bf.v and output gradient into bf.m, NEG negating a
// vector. One body for both widths, as DEF_FWD's.
#define WINOW_TILES(V, TRANSPOSE, NEG) \
	for (long s = 0; s < nb; s++) {                                                                                    \
		for (long iy = 0; iy < g.h; iy++)                                                                              \
			TRANSPOSE(x + (n0 + s) * C * hw + iy * g.w, C, g.w, hw, bf.xq + ((s * d.ph + iy + 1) * d.pw + 1) * C, C);  \
		for (long oy = 0; oy < g.oh; oy++)                                                                             \
			TRANSPOSE(dy + (n0 + s) * O * plane + oy * g.ow, O, g.ow, plane, bf.dq + (s * d.qh + oy) * d.qw * O, O);   \
	}                                                                                                                  \
	for (long s = 0; s < nb; s++)                                                                                      \
		for (long th = 0; th < d.th; th++)                                                                             \
			for (long tw = 0; tw < d.tw; tw++) {                                                                       \
				long t = s * d.per + th * d.tw + tw;                                                                   \
				for (long c = 0; c < C; c += V##_LANES) {                                                              \
					const float *p = bf.xq + ((s * d.ph + 2 * th) * d.pw + 2 * tw) * C + c;                            \
					V##_VT u[4][4];                                                                                    \
					for (int j = 0; j < 4; j++) {                                                                      \
						V##_VT d0 = V##_LOADU(p + j * C), d1 = V##_LOADU(p + (d.pw + j) * C);                          \
						V##_VT d2 = V##_LOADU(p + (2 * d.pw + j) * C), d3 = V##_LOADU(p + (3 * d.pw + j) * C);         \
						u[0][j] = V##_SUB(d0, d2), u[1][j] = V##_ADD(d1, d2);                                          \
						u[2][j] = V##_SUB(d2, d1), u[3][j] = V##_SUB(d1, d3);                                          \
					}                                                                                                  \
					for (int a = 0; a < 4; a++) {                                                                      \
						V##_VT e[4] = {V##_SUB(u[a][0], u[a][2]), V##_ADD(u[a][1], u[a][2]),                           \
						               V##_SUB(u[a][2], u[a][1]), V##_SUB(u[a][1], u[a][3])};                          \
						for (int q = 0; q < 4; q++)                                                                    \
							V##_STOREU(bf.v + ((a * 4 + q) * nt + t) * C + c, e[q]);                                   \
					}                                                                                                  \
				}                                                                                                      \
				for (long o = 0; o < O; o += V##_LANES) {                                                              \
					const float *q = bf.dq + ((s * d.qh + 2 * th) * d.qw + 2 * tw) * O + o;                            \
					V##_VT a = V##_LOADU(q), b = V##_LOADU(q + O), c = V##_LOADU(q + d.qw * O),                        \
					       e = V##_LOADU(q + (d.qw + 1) * O);                                                          \
					V##_VT rw[4][2] = {{a, b}, {V##_ADD(a, c), V##_ADD(b, e)},                                         \
					                   {V##_SUB(a, c), V##_SUB(b, e)}, {NEG(c), NEG(e)}};                              \
					for (int i = 0; i < 4; i++) {                                                                      \
						V##_VT f[4] = {rw[i][0], V##_ADD(rw[i][0], rw[i][1]), V##_SUB(rw[i][0], rw[i][1]),             \
						               NEG(rw[i][1])};                                                                 \
						for (int j = 0; j < 4; j++)                                                                    \
							V##_STOREU(bf.m + ((i * 4 + j) * nt + t) * O + o, f[j]);                                   \
					}                                                                                                  \
				}                                                                                                      \
			}

// conv_winow_avx512 is winow_c with vectors over 16 channels.
__attribute__((target("avx512f,fma"))) static int conv_winow_avx512(gorun_cgeom g, const float *dy, const float *x,
                                                                    float *dw, int accumulate) {
	winow_dims d = winow_plan(&g);
	winow_bufs bf;
	int r = -1;
	long hw = g.h * g.w, plane = g.oh * g.ow, C = g.c, O = g.o;
	if (winow_alloc(&g, &d, &bf))
		goto done;
	const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
#define NEG(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign))
	for (long n0 = 0; n0 < g.n; n0 += d.nb) {
		long nb = g.n - n0 < d.nb ? g.n - n0 : d.nb, nt = nb * d.per;
		WINOW_TILES(Z, transpose, NEG)
		for (long xi = 0; xi < 16; xi++) {
			const float *mx = bf.m + xi * nt * O, *vx = bf.v + xi * nt * C;
			float *ux = bf.du + xi * O * C;
			if (C % 32 == 0 && O % 8 == 0)
				winow_gemm8x2(O, C, nt, mx, vx, ux);
			else
				winow_gemm16(O, C, nt, mx, vx, ux);
		}
	}
#undef NEG
	winow_out(O, C, bf.du, dw, accumulate);
	r = 0;
done:
	winow_free(&bf);
	return r;
}

// transpose_a is transpose with AVX2 (level 1): 8 × 8 blocks through
// registers.
__attribute__((target("avx2,fma"))) static void transpose_a(const float *src, long rows, long cols, long lds, float *dst,
                                                            long ldd) {
	for (long i0 = 0; i0 < rows; i0 += 8) {
		long ni = rows - i0 < 8 ? rows - i0 : 8;
		for (long j0 = 0; j0 < cols; j0 += 8) {
			long nj = cols - j0 < 8 ? cols - j0 : 8;
			__m256i lm = amask(outmask(nj, 0, 8));
			__m256 r[8], t[8], q[8];
			for (int i = 0; i < 8; i++) {
				const float *sr = src + (i0 + i) * lds + j0;
				r[i] = i >= ni ? _mm256_setzero_ps() : nj == 8 ? _mm256_loadu_ps(sr) : _mm256_maskload_ps(sr, lm);
			}
			for (int i = 0; i < 8; i += 2)
				t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
			for (int i = 0; i < 8; i += 4) {
				q[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), q[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
				q[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), q[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
			}
			for (int j = 0; j < 4; j++)
				r[j] = _mm256_permute2f128_ps(q[j], q[j + 4], 0x20), r[j + 4] = _mm256_permute2f128_ps(q[j], q[j + 4], 0x31);
			unsigned sm = outmask(ni, 0, 8);
			for (int j = 0; j < nj; j++)
				astorem(dst + (j0 + j) * ldd + i0, sm, r[j]);
		}
	}
}

// winow_gemm_a adds Σ_t dM·V of one ξ over nt tiles to du with AVX2
// (level 1): 4 output channels × 16 input channels in registers.
__attribute__((target("avx2,fma"))) static void winow_gemm_a(long o, long c, long nt, const float *m, const float *v,
                                                             float *du) {
	for (long o0 = 0; o0 < o; o0 += 4)
		for (long c0 = 0; c0 < c; c0 += 16) {
			__m256 acc[4][2];
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
			for (long t = 0; t < nt; t++) {
				__m256 v0 = _mm256_loadu_ps(v + t * c + c0), v1 = _mm256_loadu_ps(v + t * c + c0 + 8);
				_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
					__m256 mb = _mm256_set1_ps(m[t * o + o0 + i]);
					acc[i][0] = _mm256_fmadd_ps(mb, v0, acc[i][0]);
					acc[i][1] = _mm256_fmadd_ps(mb, v1, acc[i][1]);
				}
			}
			_Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) for (int k = 0; k < 2; k++) {
				float *u = du + (o0 + i) * c + c0 + 8 * k;
				_mm256_storeu_ps(u, _mm256_add_ps(_mm256_loadu_ps(u), acc[i][k]));
			}
		}
}

// conv_winow_a is winow_c with AVX2 (level 1): conv_winow_avx512 with
// vectors of 8 channels.
__attribute__((target("avx2,fma"))) static int conv_winow_a(gorun_cgeom g, const float *dy, const float *x, float *dw,
                                                            int accumulate) {
	winow_dims d = winow_plan(&g);
	winow_bufs bf;
	int r = -1;
	long hw = g.h * g.w, plane = g.oh * g.ow, C = g.c, O = g.o;
	if (winow_alloc(&g, &d, &bf))
		goto done;
	const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
#define NEGA(v) _mm256_xor_ps(v, sign)
	for (long n0 = 0; n0 < g.n; n0 += d.nb) {
		long nb = g.n - n0 < d.nb ? g.n - n0 : d.nb, nt = nb * d.per;
		WINOW_TILES(A, transpose_a, NEGA)
		for (long xi = 0; xi < 16; xi++)
			winow_gemm_a(O, C, nt, bf.m + xi * nt * O, bf.v + xi * nt * C, bf.du + xi * O * C);
	}
#undef NEGA
	winow_out(O, C, bf.du, dw, accumulate);
	r = 0;
done:
	winow_free(&bf);
	return r;
}

// DEF_FWDOA is DEF_FWDO with AVX2 (level 1): PIX pixels × 16 output
// channels (two vectors) in registers, so that each tap's two vectors of
// weights feed 2·PIX fused multiply-adds.
#define DEF_FWDOA(NAME, PIX)                                                                                        \
	__attribute__((target("avx2,fma"))) static void NAME(gorun_cgeom g, const float *x, long pw, long cs,          \
	                                                     const float *wt, const float *b, float *yt) {             \
		long plane = g.oh * g.ow;                                                                                 \
		for (long p0 = 0; p0 < plane; p0 += PIX) {                                                                \
			const float *px[PIX];                                                                                 \
			for (int i = 0; i < PIX; i++) {                                                                       \
				long q = p0 + i < plane ? p0 + i : p0;                                                            \
				px[i] = x + (q / g.ow) * g.s * pw + (q % g.ow) * g.s;                                             \
			}                                                                                                     \
			for (long o0 = 0; o0 < g.o; o0 += 16) {                                                               \
				__m256 b0 = b ? _mm256_loadu_ps(b + o0) : _mm256_setzero_ps(),                                    \
				       b1 = b ? _mm256_loadu_ps(b + o0 + 8) : _mm256_setzero_ps();                                \
				__m256 acc[PIX][2];                                                                               \
				_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) acc[i][0] = b0, acc[i][1] = b1;             \
				const float *wk = wt + o0;                                                                        \
				for (long c = 0; c < g.c; c++)                                                                    \
					for (long ki = 0; ki < g.kh; ki++) {                                                          \
						long t = c * cs + ki * pw;                                                                \
						for (long kj = 0; kj < g.kw; kj++, wk += g.o) {                                           \
							__m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8);                        \
							_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) {                               \
								__m256 xv = _mm256_set1_ps(px[i][t + kj]);                                        \
								acc[i][0] = _mm256_fmadd_ps(w0, xv, acc[i][0]);                                   \
								acc[i][1] = _mm256_fmadd_ps(w1, xv, acc[i][1]);                                   \
							}                                                                                     \
						}                                                                                         \
					}                                                                                             \
				_Pragma("GCC unroll 8") for (int i = 0; i < PIX; i++) if (p0 + i < plane) {                       \
					_mm256_storeu_ps(yt + (p0 + i) * g.o + o0, acc[i][0]);                                        \
					_mm256_storeu_ps(yt + (p0 + i) * g.o + o0 + 8, acc[i][1]);                                    \
				}                                                                                                 \
			}                                                                                                     \
		}                                                                                                         \
	}

DEF_FWDOA(fwdo_a5, 5)
DEF_FWDOA(fwdo_a6, 6)

// fwdo_a runs the DEF_FWDOA body for g: tiles of 5 pixels where they idle
// fewer than 6 would (7×7 planes: 1 of 50 against 5 of 54).
static void fwdo_a(gorun_cgeom g, const float *x, long pw, long cs, const float *wt, const float *b, float *yt) {
	long plane = g.oh * g.ow;
	if ((5 - plane % 5) % 5 * 6 < (6 - plane % 6) % 6 * 5)
		fwdo_a5(g, x, pw, cs, wt, b, yt);
	else
		fwdo_a6(g, x, pw, cs, wt, b, yt);
}

static int fwd_by_o_run(gorun_cgeom g, const float *x, const float *w, const float *b, float *y,
                        void (*fwdo)(gorun_cgeom, const float *, long, long, const float *, const float *, float *),
                        void (*tr)(const float *, long, long, long, float *, long));

// conv_fwd_by_o runs fwdo per sample over a zero-bordered copy (padding
// and stride both read through it) and transposes its outputs into y.
__attribute__((target("avx512f"))) static int conv_fwd_by_o(gorun_cgeom g, const float *x, const float *w,
                                                             const float *b, float *y) {
	return fwd_by_o_run(g, x, w, b, y, fwdo, transpose);
}

// fwd_by_o_run is conv_fwd_by_o with the body fwdo (or fwdo_a) and the
// transposition tr.
static int fwd_by_o_run(gorun_cgeom g, const float *x, const float *w, const float *b, float *y,
                        void (*fwdo)(gorun_cgeom, const float *, long, long, const float *, const float *, float *),
                        void (*tr)(const float *, long, long, long, float *, long)) {
	long taps = g.c * g.kh * g.kw, plane = g.oh * g.ow, hw = g.h * g.w;
	long pw = g.w + 2 * g.p, ph0 = g.h + 2 * g.p, need = (g.oh - 1) * g.s + g.kh, ph = need > ph0 ? need : ph0;
	float *wt = tap_major(g.o, taps, w), *xp = calloc(g.c * ph * pw + 16, sizeof(float)),
	      *yt = malloc(plane * g.o * sizeof(float));
	int r = -1;
	if (!wt || !xp || !yt)
		goto done;
	for (long n = 0; n < g.n; n++) {
		border_copy(&g, x + n * g.c * hw, xp, ph, pw);
		fwdo(g, xp, pw, ph * pw, wt, b, yt);
		float *yn = y + n * g.o * plane;
		tr(yt, plane, g.o, g.o, yn, plane);
	}
	r = 0;
done:
	free(yt);
	free(xp);
	free(wt);
	return r;
}

static int fwd_direct(gorun_cgeom g, const float *x, const float *w, const float *b, float *y, fwd_body body,
                      long og);

// conv_fwd_avx512 runs fwdo where fwd_by_o says, else the body fwd_pick
// chooses.
__attribute__((target("avx512f"))) static int conv_fwd_avx512(gorun_cgeom g, const float *x, const float *w,
                                                               const float *b, float *y) {
	if (wino_ok(&g))
		return conv_wino_avx512(g, x, w, b, y);
	if (pointwise(&g))
		return pw_fwd(g, x, w, b, y);
	if (fwd_by_o(&g))
		return conv_fwd_by_o(g, x, w, b, y);
	if (g.s != 1)
		return conv_fwd_strided_avx512(g, x, w, b, y);
	long og;
	fwd_body body = fwd_bodies[fwd_pick(&g, &og)];
	return fwd_direct(g, x, w, b, y, body, og);
}

// fwd_direct runs a stride-1 DEF_FWD body of og channels a group over x
// itself, or with padding over each sample copied into a zero-bordered
// plane.
static int fwd_direct(gorun_cgeom g, const float *x, const float *w, const float *b, float *y, fwd_body body,
                      long og) {
	long taps = g.c * g.kh * g.kw, groups = (g.o + og - 1) / og;
	float *wp = pack_weights(g.o, taps, og, w, b), *bp = wp + groups * taps * og;
	if (!wp)
		return -1;
	if (g.p == 0) {
		body(g, x, wp, bp, y, 0);
		free(wp);
		return 0;
	}
	// With padding, each sample is copied into a zero-bordered plane (and
	// sixteen floats of slack) that every load reads without a mask: a
	// masked load costs Zen 4 more than the copy. The taps that read the
	// border add w·0, as the masked loads did.
	long ph = g.h + 2 * g.p, pw = g.w + 2 * g.p;
	float *xp = calloc(g.c * ph * pw + 16, sizeof(float));
	if (!xp) {
		free(wp);
		return -1;
	}
	gorun_cgeom g1 = g;
	g1.n = 1, g1.h = ph, g1.w = pw, g1.p = 0;
	for (long n = 0; n < g.n; n++) {
		border_copy(&g, x + n * g.c * g.h * g.w, xp, ph, pw);
		body(g1, xp, wp, bp, y + n * g.o * g.oh * g.ow, 1);
	}
	free(xp);
	free(wp);
	return 0;
}

// ---- strides above 1: phase-split copies ----

// phases sets ps[q] to where column phase q (the padded columns j with
// j mod s = q) starts in a row of pw columns, and ko[kj] to where kernel
// column kj's window starts: padded column j lies at ps[j mod s] + j/s.
static void phases(long pw, long s, long kw, long *ps, long *ko) {
	for (long q = 0, at = 0; q < s; q++) {
		ps[q] = at;
		at += (pw - q + s - 1) / s;
	}
	for (long kj = 0; kj < kw; kj++)
		ko[kj] = ps[kj % s] + kj / s;
}

// strided_rows is how many rows a phase-split copy of g's input holds: the
// padded plane, and the rows that a two-row register tile past the last
// output row reads.
static long strided_rows(const gorun_cgeom *g) {
	long ph = g->h + 2 * g->p, need = g->s * ((g->oh + 1) / 2 * 2 - 1) + g->kh;
	return need > ph ? need : ph;
}

// phase_split copies one sample's planes x[c][h][w] into xs[c][nr][rl]
// (rl = w + 2p): row iy to row iy + p, column ix to ps[j mod s] + j/s with
// j = ix + p. Rows that no tap reads (padded row r with r mod s ≥ kh) and
// column phases that none reads (q ≥ kw) are skipped; the rest of xs (the
// padding) is left as it is: zero.
static void phase_split(const gorun_cgeom *g, const float *x, float *xs, long nr, long rl, const long *ps) {
	long map[g->w], m = 0; // where column ix goes, for the columns read
	for (long ix = 0, j = g->p; ix < g->w; ix++, j++)
		if (j % g->s < g->kw)
			map[m++] = (ps[j % g->s] + j / g->s) << 16 | ix;
	for (long c = 0; c < g->c; c++)
		for (long iy = 0; iy < g->h; iy++) {
			if ((iy + g->p) % g->s >= g->kh)
				continue;
			float *row = xs + (c * nr + iy + g->p) * rl;
			const float *src = x + (c * g->h + iy) * g->w;
			for (long i = 0; i < m; i++)
				row[map[i] >> 16] = src[map[i] & 0xffff];
		}
}

static int fwd_strided(gorun_cgeom g, const float *x, const float *w, const float *b, float *y, fwds_body body,
                       long og);

// conv_fwd_strided_avx512 copies each sample phase-split and runs the
// strided form of the body fwd_pick chooses.
__attribute__((target("avx512f"))) static int conv_fwd_strided_avx512(gorun_cgeom g, const float *x, const float *w,
                                                                       const float *b, float *y) {
	long og;
	fwds_body body = fwds_bodies[fwd_pick(&g, &og)];
	return fwd_strided(g, x, w, b, y, body, og);
}

// fwd_strided runs a DEF_FWDS body of og channels a group over each
// sample's phase-split copy.
static int fwd_strided(gorun_cgeom g, const float *x, const float *w, const float *b, float *y, fwds_body body,
                       long og) {
	long taps = g.c * g.kh * g.kw, groups = (g.o + og - 1) / og;
	long rl = g.w + 2 * g.p, nr = strided_rows(&g), ps[MAXKW], ko[MAXKW];
	phases(rl, g.s, g.kw, ps, ko);
	float *wp = pack_weights(g.o, taps, og, w, b), *xs = calloc(g.c * nr * rl + 64, sizeof(float));
	if (!wp || !xs) {
		free(wp);
		free(xs);
		return -1;
	}
	gorun_cgeom g1 = g;
	g1.n = 1;
	for (long n = 0; n < g.n; n++) {
		phase_split(&g, x + n * g.c * g.h * g.w, xs, nr, rl, ps);
		body(g1, xs, rl, nr * rl, ko, wp, wp + groups * taps * og, y + n * g.o * g.oh * g.ow);
	}
	free(xs);
	free(wp);
	return 0;
}

// ---- weight gradient: dw[o,c,ki,kj] (+)= Σ_{n,oy,ox} dy[n,o,oy,ox]·x[n,c,
// s·oy+ki-p, s·ox+kj-p], in sixteen partial sums (output column ox into
// partial ox mod wgrad_lanes; samples, rows and columns in order) combined
// pairwise as gorun_vec_sum ----

static float combine(float *p) {
	for (int s = 8; s >= 1; s /= 2)
		for (int i = 0; i < s; i++)
			p[i] = p[i] + p[i + s];
	return p[0];
}

// finish combines each tap's partial sums into dw.
static void finish(float *part, long taps, float *dw, int accumulate) {
	for (long t = 0; t < taps; t++) {
		float s = combine(part + t * 16);
		dw[t] = accumulate ? dw[t] + s : s;
	}
}

// wgrad_lanes is how many partial sums each tap of the weight gradient
// keeps: output column ox goes to partial ox mod wgrad_lanes. Eight when
// the last sixteen-column block of a row would be at most half full (8
// columns, 24), so that eight-lane vectors run it without idle lanes;
// sixteen otherwise. The partials are combined as sixteen, the upper eight
// zero.
static inline long wgrad_lanes(const gorun_cgeom *g) { return g->ow % 16 != 0 && g->ow % 16 <= 8 ? 8 : 16; }

// wgrad_by_o reports whether g's weight gradient adds in one sum per tap
// (samples, rows and columns in order, from zero; with 16 output channels,
// one per chunk of WO16 samples, then the chunks' sums in order) rather
// than sixteen partials: output planes narrower than 16 columns with output channels by
// 32s and kernels 3 wide, which the AVX-512 body below runs with vectors
// over the output channels (a row of 7 columns fills half a vector; a
// strided plane's columns need no phase-split copy). BenchmarkConv in ops:
// the ResNet's 7-column layers 48 and 23 µs a sample against 63 and 40
// lowered, its stride-2 14-column layer 0.72× lowering (0.95× by columns);
// its 1×1 downsample 7.7 against 5.6, so 1-wide kernels lower. Its
// stride-1 14-column layer took the flattened body (wgrad_flat) until dy's
// transposition became a register one: by o 83–100 against 63–69 GFLOP/s
// (BenchmarkConv here, best of ten, alternating). Wider planes stay with
// partials (21 and 28 columns by o measured 85–102 and 89–91 against
// 75–85 and 79–84: a tenth, for one float32 sum over 64 samples of 784
// pixels instead of sixteen). With 16 output channels (wgrado16: 3×3
// kernels over 16 or more input channels, planes up to 32 columns) the
// gain is a third, so those take sums over chunks: the ResNet's 28-column layer
// 99–100 against 77 GFLOP/s with partials; its stem (one input channel)
// measured 60–66 against 76–83 and keeps them. (Same convolutions that
// winow_ok takes, the 28-column layer among them, go by Winograd first.)
static inline int wgrad_o16(const gorun_cgeom *g) {
	return g->o == 16 && g->kh == 3 && g->kw == 3 && g->c >= 16 && g->ow <= 32 && g->s <= MAXKW;
}
static inline int wgrad_by_o(const gorun_cgeom *g) {
	return g->ow < 16 && g->o % 32 == 0 && g->kw == 3 && g->s <= MAXKW || wgrad_o16(g);
}

// WO16 is how many samples a chunk of wgrado16 holds: their dy (pixel-major)
// and bordered x stay in L2 (the ResNet's 28-column layer: 2, 4, 8 and 16
// measured 90–99, 99–100, 85–94 and 100 GFLOP/s), and each tap's float32
// sum runs over one chunk, the chunks' sums added in order.
#define WO16 4

// wgrad_flat reports whether g's weight gradient runs over flattened
// planes (DEF_WGRADF): stride 1, kernels 3 wide, output planes from 9 to
// 128 columns that sixteen-column vectors do not tile (a row's last block
// would idle lanes: 14 columns use 14 of 16, 28 use 28 of 32), output
// channels by 8s. Output pixel p = oy·ow + ox adds into partial p mod 16
// (samples, then pixels in order), so that the vectors run over the whole
// plane with no lane idle but the last vector's. BenchmarkConv: the
// ResNet's 28-column layer 78 → 81 GFLOP/s, its 14-column one 68 → 74.
static inline int wgrad_flat(const gorun_cgeom *g) {
	return g->s == 1 && g->kw == 3 && g->ow > 8 && g->ow <= 128 && g->ow % 16 != 0 && g->o % 8 == 0;
}

// wgrad_pw reports whether pw_wgrad takes g's weight gradient: 1×1
// kernels without padding, any stride up to 16, input and output channels
// by 4s, output planes of at least 8 pixels. It adds as wgrad_flat's
// geometries: output pixel p into partial p mod 16.
static inline int wgrad_pw(const gorun_cgeom *g) {
	return g->kh == 1 && g->kw == 1 && g->p == 0 && g->s <= MAXKW && g->o % 4 == 0 && g->c % 4 == 0 &&
	       g->oh * g->ow >= 8;
}

static inline __attribute__((always_inline)) void conv_wgrad_seq_c(gorun_cgeom g, const float *dy, const float *x, float *dw,
                                                                 int accumulate) {
	long plane = g.oh * g.ow, hw = g.h * g.w, nb = wgrad_o16(&g) ? WO16 : g.n > 0 ? g.n : 1;
	for (long o = 0; o < g.o; o++)
		for (long c = 0; c < g.c; c++)
			for (long ki = 0; ki < g.kh; ki++)
				for (long kj = 0; kj < g.kw; kj++) {
					float total = 0.0f;
					for (long n0 = 0; n0 < g.n; n0 += nb) {
						float acc = 0.0f;
						for (long n = n0; n < g.n && n < n0 + nb; n++)
							for (long oy = 0; oy < g.oh; oy++) {
								long iy = oy * g.s + ki - g.p;
								if (iy < 0 || iy >= g.h)
									continue;
								const float *row = x + (n * g.c + c) * hw + iy * g.w;
								const float *dyr = dy + (n * g.o + o) * plane + oy * g.ow;
								for (long ox = 0; ox < g.ow; ox++)
									if (valid(&g, ox, kj))
										acc = fmaf(dyr[ox], row[ox * g.s + kj - g.p], acc);
							}
						total = total + acc;
					}
					float *d = dw + ((o * g.c + c) * g.kh + ki) * g.kw + kj;
					*d = accumulate ? *d + total : total;
				}
}

// wgrad_part_c adds g's samples into the sixteen partial sums of each tap
// of part (output column ox into partial ox mod wgrad_lanes, or pixel
// oy·ow + ox mod 16 for wgrad_flat's and wgrad_pw's geometries), samples,
// rows and columns in order.
static inline __attribute__((always_inline)) void wgrad_part_c(gorun_cgeom g, const float *dy, const float *x, float *part) {
	long plane = g.oh * g.ow, hw = g.h * g.w, lm = wgrad_lanes(&g) - 1;
	int flat = wgrad_flat(&g) || wgrad_pw(&g); // partial (oy·ow + ox) mod 16
	for (long n = 0; n < g.n; n++)
		for (long o = 0; o < g.o; o++) {
			const float *dyo = dy + (n * g.o + o) * plane;
			for (long c = 0; c < g.c; c++)
				for (long ki = 0; ki < g.kh; ki++)
					for (long kj = 0; kj < g.kw; kj++) {
						float *pp = part + (((o * g.c + c) * g.kh + ki) * g.kw + kj) * 16;
						for (long oy = 0; oy < g.oh; oy++) {
							long iy = oy * g.s + ki - g.p;
							if (iy < 0 || iy >= g.h)
								continue;
							const float *row = x + (n * g.c + c) * hw + iy * g.w;
							for (long ox = 0; ox < g.ow; ox++)
								if (valid(&g, ox, kj))
								{
									long l = flat ? (oy * g.ow + ox) & 15 : ox & lm;
									pp[l] = fmaf(dyo[oy * g.ow + ox], row[ox * g.s + kj - g.p], pp[l]);
								}
						}
					}
		}
}

static inline __attribute__((always_inline)) int conv_wgrad_c(gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate) {
	if (winow_ok(&g))
		return winow_c(g, dy, x, dw, accumulate);
	if (wgrad_by_o(&g)) {
		conv_wgrad_seq_c(g, dy, x, dw, accumulate);
		return 0;
	}
	long taps = g.o * g.c * g.kh * g.kw;
	float *part = calloc(taps * 16, sizeof(float));
	if (!part)
		return -1;
	wgrad_part_c(g, dy, x, part);
	finish(part, taps, dw, accumulate);
	free(part);
	return 0;
}

// The weight gradient holds, for one input channel and kernel row, the
// partial sums of WG output channels (8 for kernels 3 wide, 4 for 5) × KWC kernel columns in registers
// across the rows and blocks of NB samples: each block loads WG rows of dy
// and KWC windows of x once for WG·KWC independent fused multiply-adds.
// KWC is a compile-time width (3 or 5: the kernels this path takes); the
// partial sums go through memory once per NB samples, which stay in L1.
#define NB 16

// WGRAD_BLOCK adds one block's products, DLOAD(q) reading dy's row for
// channel o0+q and XLOAD(kj) x's window for kernel column kj. The empty asm
// keeps each dy vector in a register: left alone, GCC folds the load into
// each of its KWC multiply-adds, and the loads, not the multiply-adds, then
// bound the body (BenchmarkConv: the 28-column layer's weight gradient 65
// → 78 GFLOP/s; DEF_WGRADO's 7-column one 74 → 92).
#define WGRAD_BLOCK(V, KWC, WG, DLOAD, XLOAD)                                                                       \
	{                                                                                                             \
		V##_VT v[KWC];                                                                                            \
		_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                                                  \
			v[kj] = XLOAD;                                                                                        \
		_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++) {                                                    \
			V##_VT d = DLOAD;                                                                                     \
			__asm__("" : "+v"(d)); /* one load for KWC products, not one folded into each */                     \
			_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                                              \
				acc[q][kj] = V##_FMA(d, v[kj], acc[q][kj]);                                                       \
		}                                                                                                         \
	}

// WGRAD_PART is where tap (o0 + q, c, ki, kj)'s sixteen partial sums lie;
// WGRAD_ACC runs STMT for every (q, kj) of a register tile: the partials
// are loaded into acc before a chunk's rows and stored after them.
#define WGRAD_PART(KWC, q, kj) (part + ((((o0 + (q)) * g.c + c) * g.kh + ki) * (KWC) + (kj)) * 16)
#define WGRAD_ACC(V, KWC, WG, STMT)                                                                                 \
	_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++) _Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) STMT;

#define DEF_WGRAD(NAME, V, KWC, WG)                                                                                     \
	__attribute__((target("avx512f,avx512vl,fma"))) static void NAME(gorun_cgeom g, const float *dy, const float *x,  \
	                                                                 float *part, int slack) {                     \
		long plane = g.oh * g.ow, hw = g.h * g.w, blocks = (g.ow + V##_LANES - 1) / V##_LANES;                    \
		V##_MT m[16][KWC], outm[16];                                                                              \
		int dfull[16], xfull[16], allfull = 1;                                                                    \
		for (long bi = 0; bi < blocks; bi++) {                                                                    \
			long c0 = bi * V##_LANES;                                                                             \
			outm[bi] = (V##_MT)outmask(g.ow, c0, V##_LANES);                                                      \
			dfull[bi] = outm[bi] == (V##_MT)~0u;                                                                  \
			xfull[bi] = 1; /* plain loads of x read only the plane, or slack after it */                         \
			for (long kj = 0; kj < KWC; kj++) {                                                                   \
				m[bi][kj] = (V##_MT)lanemask(&g, c0, kj, V##_LANES);                                              \
				xfull[bi] &= slack || m[bi][kj] == (V##_MT)~0u;                                                   \
			}                                                                                                     \
			allfull &= dfull[bi] && xfull[bi];                                                                    \
		}                                                                                                         \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += WG) {                                                           \
					long og = g.o - o0 < WG ? g.o - o0 : WG;                                                      \
					V##_VT acc[WG][KWC];                                                                          \
					WGRAD_ACC(V, KWC, WG, acc[q][kj] = q < og ? V##_LOAD(WGRAD_PART(KWC, q, kj)) : V##_ZERO())         \
					if (allfull && og == WG && g.p == 0) {                                                        \
						/* every load plain, every row inside: a tight loop over the rows */                      \
						for (long n = 0; n < g.n; n++) {                                                          \
							const float *row = x + (n * g.c + c) * hw + ki * g.w;                                 \
							const float *dyb = dy + (n * g.o + o0) * plane;                                       \
							for (long oy = 0; oy < g.oh; oy++, row += g.w, dyb += g.ow)                           \
								for (long c0 = 0; c0 < g.ow; c0 += V##_LANES)                                     \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADU(dyb + c0 + q * plane), V##_LOADU(row + c0 + kj)) \
						}                                                                                         \
					} else                                                                                        \
					for (long n = 0; n < g.n; n++)                                                                \
						for (long oy = 0; oy < g.oh; oy++) {                                                      \
							long iy = oy + ki - g.p;                                                              \
							if (iy < 0 || iy >= g.h)                                                              \
								continue;                                                                         \
							const float *row = x + (n * g.c + c) * hw + iy * g.w - g.p;                           \
							for (long bi = 0; bi < blocks; bi++) {                                                \
								long c0 = bi * V##_LANES;                                                         \
								const float *dyb = dy + (n * g.o + o0) * plane + oy * g.ow + c0;                  \
								if (og == WG && dfull[bi] && xfull[bi]) /* interior: plain loads */               \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADU(dyb + q * plane), V##_LOADU(row + c0 + kj))     \
								else if (xfull[bi])                                                               \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADZ(q < og ? outm[bi] : 0, dyb + q * plane),        \
									            V##_LOADU(row + c0 + kj))                                         \
								else                                                                              \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADZ(q < og ? outm[bi] : 0, dyb + q * plane),        \
									            V##_LOADZ(m[bi][kj], row + c0 + kj))                              \
							}                                                                                     \
						}                                                                                         \
					WGRAD_ACC(V, KWC, WG, if (q < og) V##_STORE(WGRAD_PART(KWC, q, kj), acc[q][kj]))                   \
				}                                                                                                 \
	}

DEF_WGRAD(wgrad_z3, Z, 3, 8)
DEF_WGRAD(wgrad_z5, Z, 5, 4)
DEF_WGRAD(wgrad_y3, Y, 3, 8)
DEF_WGRAD(wgrad_y5, Y, 5, 4)

// DEF_WGRADA is DEF_WGRAD with AVX2's eight lanes (level 1), over planes
// without padding (the callers copy padded ones into zero-bordered planes
// first): a register tile of WG output channels × KWC kernel columns, each
// block of eight columns loading WG rows of dy and KWC windows of x once.
// With sixteen partials a tap (wgrad_lanes), partials 0–7 and 8–15 are two
// passes, over the blocks of columns 16k … 16k+7 and 16k+8 … 16k+15 of
// every row, so that partial l still adds the columns ox ≡ l (mod 16) in
// order. Planes a whole number of blocks wide run a tight loop over the
// rows (the MNIST Net's conv2 and conv1: 0.70 and 0.77 of the time of the
// general loop, medians of 60 alternating calls). In a row's last, partial
// block the lanes past the plane load zeros from dy and from x both
// (whatever lies there, a NaN even, adds nothing); output channels past o
// load zeros from dy. HOLDX keeps the KWC
// windows of x in registers and loads each row of dy once for its KWC
// products (KWC + 1 registers besides the tile), else the WG rows of dy
// are kept and each window loaded once for its WG products (WG + 1).
#define WGRADA_BLOCK(KWC, WG, HOLDX, DLOAD, XLOAD)                                                                  \
	if (HOLDX) {                                                                                                  \
		__m256 v[KWC];                                                                                            \
		_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) v[kj] = XLOAD;                                   \
		_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++) {                                                    \
			__m256 d = DLOAD;                                                                                     \
			__asm__("" : "+x"(d)); /* one load for KWC products, not one folded into each */                      \
			_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) acc[q][kj] =                                 \
			    _mm256_fmadd_ps(d, v[kj], acc[q][kj]);                                                            \
		}                                                                                                         \
	} else {                                                                                                      \
		__m256 d[WG];                                                                                             \
		_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++) {                                                    \
			d[q] = DLOAD;                                                                                         \
			__asm__("" : "+x"(d[q]));                                                                             \
		}                                                                                                         \
		_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) {                                                \
			__m256 v = XLOAD;                                                                                     \
			__asm__("" : "+x"(v)); /* one load for WG products */                                                 \
			_Pragma("GCC unroll 8") for (int q = 0; q < WG; q++) acc[q][kj] = _mm256_fmadd_ps(d[q], v, acc[q][kj]); \
		}                                                                                                         \
	}

#define DEF_WGRADA(NAME, KWC, WG, HOLDX)                                                                            \
	__attribute__((target("avx2,fma"))) static void NAME(gorun_cgeom g, const float *dy, const float *x,           \
	                                                     float *part) {                                            \
		long plane = g.oh * g.ow, hw = g.h * g.w, nbk = (g.ow + 7) / 8, hs = wgrad_lanes(&g) / 8;                 \
		long full = g.ow / 8; /* blocks before full are whole */                                                  \
		__m256i tm = amask(outmask(g.ow, full * 8, 8));                                                           \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += WG) {                                                           \
					long og = g.o - o0 < WG ? g.o - o0 : WG;                                                      \
					for (long h = 0; h < hs; h++) {                                                               \
						__m256 acc[WG][KWC];                                                                      \
						WGRAD_ACC(A, KWC, WG, acc[q][kj] = q < og ? _mm256_loadu_ps(WGRAD_PART(KWC, q, kj) + 8 * h) \
						                                          : _mm256_setzero_ps())                          \
						if (full == nbk && og == WG) /* whole blocks, every channel: a tight loop */           \
							for (long n = 0; n < g.n; n++) {                                                      \
								const float *row = x + (n * g.c + c) * hw + ki * g.w;                             \
								const float *dyb = dy + (n * g.o + o0) * plane;                                   \
								for (long oy = 0; oy < g.oh; oy++, row += g.w, dyb += g.ow)                       \
									for (long c0 = 8 * h; c0 < g.ow; c0 += 8 * hs)                                \
										WGRADA_BLOCK(KWC, WG, HOLDX, _mm256_loadu_ps(dyb + q * plane + c0),      \
										             _mm256_loadu_ps(row + c0 + kj))                              \
							}                                                                                     \
						else                                                                                      \
						for (long n = 0; n < g.n; n++) {                                                          \
							const float *row = x + (n * g.c + c) * hw + ki * g.w;                                 \
							const float *dyb = dy + (n * g.o + o0) * plane;                                       \
							for (long oy = 0; oy < g.oh; oy++, row += g.w, dyb += g.ow)                           \
								for (long bi = h; bi < nbk; bi += hs) {                                           \
									long c0 = 8 * bi;                                                             \
									if (bi < full && og == WG)                                                    \
										WGRADA_BLOCK(KWC, WG, HOLDX, _mm256_loadu_ps(dyb + q * plane + c0),      \
										             _mm256_loadu_ps(row + c0 + kj))                              \
									else if (bi < full)                                                           \
										WGRADA_BLOCK(KWC, WG, HOLDX,                                              \
										             q < og ? _mm256_loadu_ps(dyb + q * plane + c0) : _mm256_setzero_ps(), \
										             _mm256_loadu_ps(row + c0 + kj))                              \
									else                                                                          \
										WGRADA_BLOCK(KWC, WG, HOLDX,                                              \
										             q < og ? _mm256_maskload_ps(dyb + q * plane + c0, tm)        \
										                    : _mm256_setzero_ps(),                                \
										             _mm256_maskload_ps(row + c0 + kj, tm))                       \
								}                                                                                 \
						}                                                                                         \
						WGRAD_ACC(A, KWC, WG, if (q < og) _mm256_storeu_ps(WGRAD_PART(KWC, q, kj) + 8 * h, acc[q][kj])) \
					}                                                                                             \
				}                                                                                                 \
	}

// Kernels 5 wide: 2 output channels × 5 columns (13 registers); 3 wide: 3
// × 3 (4 × 3 with x's windows kept measured 5.4 against 7.9 µs a sample on
// a 20×20 plane of 3 input and 10 output channels, padding 1).
DEF_WGRADA(wgrad_a3, 3, 3, 0)
DEF_WGRADA(wgrad_a5, 5, 2, 0)

// wgrad_part_a adds g's samples (at most NB: they stay in L2 across the
// kernel rows and channel groups) into part with the DEF_WGRADA body, over
// x itself or, with padding, over the samples copied into the zero-bordered
// planes xp (NB of them).
static void wgrad_part_a(gorun_cgeom g, const float *dy, const float *x, float *part, float *xp) {
	void (*body)(gorun_cgeom, const float *, const float *, float *) = g.kw == 3 ? wgrad_a3 : wgrad_a5;
	if (g.p == 0) {
		body(g, dy, x, part);
		return;
	}
	long ph = g.h + 2 * g.p, pw = g.w + 2 * g.p;
	for (long s = 0; s < g.n; s++)
		border_copy(&g, x + s * g.c * g.h * g.w, xp + s * g.c * ph * pw, ph, pw);
	g.h = ph, g.w = pw, g.p = 0;
	body(g, dy, xp, part);
}

// conv_wgrad_a is the stride-1 weight gradient of kernels 3 or 5 wide at
// level 1: NB samples at a time through wgrad_part_a.
static int conv_wgrad_a(gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate) {
	long taps = g.o * g.c * g.kh * g.kw, plane = g.oh * g.ow, hw = g.h * g.w;
	float *part = zalloc64(taps * 16), *xp = NULL;
	if (!part || g.p > 0 && !(xp = calloc(NB * g.c * (g.h + 2 * g.p) * (g.w + 2 * g.p) + 16, sizeof(float)))) {
		free(part);
		return -1;
	}
	for (long n0 = 0; n0 < g.n; n0 += NB) {
		gorun_cgeom gc = g;
		gc.n = g.n - n0 < NB ? g.n - n0 : NB;
		wgrad_part_a(gc, dy + n0 * g.o * plane, x + n0 * g.c * hw, part, xp);
	}
	free(xp);
	finish(part, taps, dw, accumulate);
	free(part);
	return 0;
}

// DEF_WGRADS is DEF_WGRAD for any stride over NB samples' phase-split
// copies (phase_split): sample n's channel c at x + (n·C + c)·cs, row r at
// r·rl, kernel column kj's window at ko[kj]; output row oy reads row
// s·oy + ki. Lanes past the plane load zeros from dy.
#define DEF_WGRADS(NAME, V, KWC, WG)                                                                                \
	__attribute__((target("avx512f,avx512vl,fma"))) static void NAME(gorun_cgeom g, const float *dy, const float *x,  \
	                                                                 long rl, long cs, const long *ko, float *part) {   \
		long plane = g.oh * g.ow, blocks = (g.ow + V##_LANES - 1) / V##_LANES;                                    \
		V##_MT outm[16];                                                                                          \
		int dfull[16];                                                                                            \
		for (long bi = 0; bi < blocks; bi++) {                                                                    \
			outm[bi] = (V##_MT)outmask(g.ow, bi * V##_LANES, V##_LANES);                                          \
			dfull[bi] = outm[bi] == (V##_MT)~0u;                                                                  \
		}                                                                                                         \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += WG) {                                                           \
					long og = g.o - o0 < WG ? g.o - o0 : WG;                                                      \
					V##_VT acc[WG][KWC];                                                                          \
					WGRAD_ACC(V, KWC, WG, acc[q][kj] = q < og ? V##_LOAD(WGRAD_PART(KWC, q, kj)) : V##_ZERO())         \
					for (long n = 0; n < g.n; n++)                                                                \
						for (long oy = 0; oy < g.oh; oy++) {                                                      \
							const float *row = x + (n * g.c + c) * cs + (oy * g.s + ki) * rl;                     \
							const float *dyr = dy + (n * g.o + o0) * plane + oy * g.ow;                           \
							for (long bi = 0; bi < blocks; bi++) {                                                \
								long c0 = bi * V##_LANES;                                                         \
								if (og == WG && dfull[bi])                                                        \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADU(dyr + c0 + q * plane), V##_LOADU(row + c0 + ko[kj])) \
								else                                                                              \
									WGRAD_BLOCK(V, KWC, WG, V##_LOADZ(q < og ? outm[bi] : 0, dyr + c0 + q * plane),   \
									            V##_LOADU(row + c0 + ko[kj]))                                     \
							}                                                                                     \
						}                                                                                         \
					WGRAD_ACC(V, KWC, WG, if (q < og) V##_STORE(WGRAD_PART(KWC, q, kj), acc[q][kj]))                   \
				}                                                                                                 \
	}

DEF_WGRADS(wgrads_z3, Z, 3, 8)
DEF_WGRADS(wgrads_z5, Z, 5, 4)
DEF_WGRADS(wgrads_y3, Y, 3, 8)
DEF_WGRADS(wgrads_y5, Y, 5, 4)

// DEF_WGRADF is the weight gradient of wgrad_flat's geometries over NB or
// fewer samples' shifted copies (flat_copy) and dy with plane stride ps: the copy of sample n's channel
// c for kernel column kj, at xs + ((n·C + c)·KWC + kj)·cs, holds at p +
// ki·ow the input that output pixel p's tap (ki, kj) reads (zero on the
// padding), so that every tap of a vector of sixteen consecutive output
// pixels reads sixteen consecutive floats of the copy, as of dy. The
// register tile is DEF_WGRAD's: WG output channels × KWC kernel columns.
#define DEF_WGRADF(NAME, KWC, WG)                                                                                   \
	__attribute__((target("avx512f,fma"))) static void NAME(gorun_cgeom g, const float *dy, long ps, const float *xs, \
	                                                        long cs, float *part) {                               \
		long plane = g.oh * g.ow;                                                                                 \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += WG) {                                                           \
					__m512 acc[WG][KWC];                                                                          \
					WGRAD_ACC(Z, KWC, WG, acc[q][kj] = Z_LOAD(WGRAD_PART(KWC, q, kj)))                            \
					for (long n = 0; n < g.n; n++) {                                                              \
						const float *dyb = dy + (n * g.o + o0) * ps;                                              \
						const float *xr = xs + (n * g.c + c) * KWC * cs + ki * g.ow;                              \
						for (long p = 0; p < plane; p += 16)                                                      \
							WGRAD_BLOCK(Z, KWC, WG, Z_LOAD(dyb + q * ps + p), Z_LOADU(xr + kj * cs + p))          \
					}                                                                                             \
					WGRAD_ACC(Z, KWC, WG, Z_STORE(WGRAD_PART(KWC, q, kj), acc[q][kj]))                            \
				}                                                                                                 \
	}

DEF_WGRADF(wgradf_k3, 3, 8)

// DEF_WGRADFA is DEF_WGRADF with AVX2's eight lanes (level 1) and
// DEF_WGRADA's register tile: partials 0–7 and 8–15 of each tap are two
// passes, over the vectors of pixels 16k … 16k+7 and 16k+8 … 16k+15. The
// plane's last vector, when partial, loads the lanes of x past the plane as
// zeros (dy's padding is zeros), so that nothing there adds to a partial.
#define DEF_WGRADFA(NAME, KWC, WG, HOLDX)                                                                           \
	__attribute__((target("avx2,fma"))) static void NAME(gorun_cgeom g, const float *dy, long ps, const float *xs, \
	                                                     long cs, float *part) {                                  \
		long plane = g.oh * g.ow, full = plane / 8 * 8;                                                           \
		__m256i tm = amask(outmask(plane, full, 8));                                                              \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += WG)                                                             \
					for (long h = 0; h < 2; h++) {                                                                \
						__m256 acc[WG][KWC];                                                                      \
						WGRAD_ACC(A, KWC, WG, acc[q][kj] = _mm256_loadu_ps(WGRAD_PART(KWC, q, kj) + 8 * h))       \
						for (long n = 0; n < g.n; n++) {                                                          \
							const float *dyb = dy + (n * g.o + o0) * ps;                                          \
							const float *xr = xs + (n * g.c + c) * KWC * cs + ki * g.ow;                          \
							long p = 8 * h;                                                                       \
							for (; p < full; p += 16)                                                             \
								WGRADA_BLOCK(KWC, WG, HOLDX, _mm256_loadu_ps(dyb + q * ps + p),                   \
								             _mm256_loadu_ps(xr + kj * cs + p))                                   \
							if (p < plane)                                                                        \
								WGRADA_BLOCK(KWC, WG, HOLDX, _mm256_loadu_ps(dyb + q * ps + p),                   \
								             _mm256_maskload_ps(xr + kj * cs + p, tm))                            \
						}                                                                                         \
						WGRAD_ACC(A, KWC, WG, _mm256_storeu_ps(WGRAD_PART(KWC, q, kj) + 8 * h, acc[q][kj]))       \
					}                                                                                             \
	}

// 4 output channels × 3 columns with x's windows kept (16 registers): the
// ResNet's stem 7.7 µs a sample against 9.8 with 2 × 3 and dy kept.
DEF_WGRADFA(wgradf_a3, 3, 4, 1)

// flat_rows is how many rows of ow floats a flat copy of g's channel holds
// (every row an output row's taps read), and flat_stride its floats with
// sixteen of slack (the last vector's lanes past the plane read it).
static inline long flat_rows(const gorun_cgeom *g) { return g->oh + g->kh - 1; }
static inline long flat_stride(const gorun_cgeom *g) { return flat_rows(g) * g->ow + 16; }

// flat_copy writes one sample's shifted copies for DEF_WGRADF: channel c's
// copy for kernel column kj, row r, column ox holds x[c][r - p][ox + kj - p]
// (zero outside the plane). Slack is left as it is (zero from calloc;
// dy's lanes there load zeros).
static void flat_copy(const gorun_cgeom *g, const float *x, float *xs) {
	long rows = flat_rows(g), cs = flat_stride(g), hw = g->h * g->w;
	for (long c = 0; c < g->c; c++)
		for (long kj = 0; kj < g->kw; kj++) {
			float *d = xs + (c * g->kw + kj) * cs;
			for (long r = 0; r < rows; r++, d += g->ow) {
				long iy = r - g->p;
				if (iy < 0 || iy >= g->h) {
					memset(d, 0, g->ow * sizeof(float));
					continue;
				}
				// columns ox in [lo, hi) read the plane at ox + kj - p
				long sh = kj - g->p, lo = sh < 0 ? -sh : 0, hi = g->w - sh < g->ow ? g->w - sh : g->ow;
				hi = hi < lo ? lo : hi;
				memset(d, 0, lo * sizeof(float));
				memcpy(d + lo, x + c * hw + iy * g->w + lo + sh, (hi - lo) * sizeof(float));
				memset(d + hi, 0, (g->ow - hi) * sizeof(float));
			}
		}
}

// conv_wgrad_flat runs wgrad_flat's geometries: chunks of samples whose
// copies fit in about 1 MB (L2; BenchmarkConv: 2 % faster than 512 KB),
// each copied by flat_copy and added into the partials by the body.
// Planes that are not a whole number of vectors have dy copied too, each
// plane padded with zeros to one, so that every load of dy is one aligned
// vector (a 14×14 plane's vectors would straddle cache lines: 3 % faster)
// and the lanes past the plane add dy·x = 0.
static int conv_wgrad_flat(gorun_cgeom g, const float *dy, const float *x, float *part,
                           void (*body)(gorun_cgeom, const float *, long, const float *, long, float *)) {
	long plane = g.oh * g.ow, ps = (plane + 15) & ~15L, hw = g.h * g.w, cs = flat_stride(&g), per = g.c * g.kw * cs;
	long nb = (1024 << 10) / ((per + g.o * ps) * (long)sizeof(float));
	nb = nb < 1 ? 1 : nb > NB ? NB : nb;
	float *xs = calloc(nb * per, sizeof(float)), *dp = ps == plane ? NULL : zalloc64(nb * g.o * ps);
	if (!xs || !dp && ps != plane) {
		free(xs);
		free(dp);
		return -1;
	}
	for (long n0 = 0; n0 < g.n; n0 += nb) {
		gorun_cgeom gc = g;
		gc.n = g.n - n0 < nb ? g.n - n0 : nb;
		for (long i = 0; i < gc.n; i++) {
			flat_copy(&g, x + (n0 + i) * g.c * hw, xs + i * per);
			if (dp) // the padding stays zero from zalloc64
				pad_planes(dp + i * g.o * ps, ps, dy + (n0 + i) * g.o * plane, plane, g.o);
		}
		body(gc, dp ? dp : dy + n0 * g.o * plane, ps, xs, cs, part);
	}
	free(dp);
	free(xs);
	return 0;
}

// DEF_WGRADO is the weight gradient of wgrad_by_o's geometries: for one
// input channel and kernel row it holds the sums of KWC kernel columns ×
// OBC blocks of sixteen output channels in registers over the rows and
// columns of NB samples, each output pixel loading OBC vectors of dy
// (stored pixel-major, dt[n][pixel][o]) and KWC broadcasts of x (a
// zero-bordered copy xp[n][c][ph][pw]) for OBC·KWC fused multiply-adds.
// The sums go through memory (pt[c][ki][kj][o]) once per NB samples.
#define DEF_WGRADO(NAME, KWC, OBC)                                                                                  \
	__attribute__((target("avx512f,fma"))) static void NAME(gorun_cgeom g, const float *dt, const float *xp, long ph, \
	                                                        long pw, float *pt) {                                  \
		long plane = g.oh * g.ow;                                                                                 \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long ki = 0; ki < g.kh; ki++)                                                                    \
				for (long o0 = 0; o0 < g.o; o0 += 16 * OBC) {                                                     \
					float *pk = pt + ((c * g.kh + ki) * KWC) * g.o + o0;                                          \
					__m512 acc[OBC][KWC];                                                                         \
					_Pragma("GCC unroll 4") for (int b = 0; b < OBC; b++)                                         \
						_Pragma("GCC unroll 4") for (int kj = 0; kj < KWC; kj++)                                  \
							acc[b][kj] = _mm512_loadu_ps(pk + kj * g.o + 16 * b);                                 \
					for (long n = 0; n < g.n; n++) {                                                              \
						const float *dn = dt + n * plane * g.o + o0;                                              \
						for (long oy = 0; oy < g.oh; oy++) {                                                      \
							const float *xr = xp + ((n * g.c + c) * ph + oy * g.s + ki) * pw;                     \
							for (long ox = 0; ox < g.ow; ox++, dn += g.o) {                                       \
								__m512 d[OBC];                                                                    \
								_Pragma("GCC unroll 4") for (int b = 0; b < OBC; b++)                             \
								{                                                                                 \
									d[b] = _mm512_loadu_ps(dn + 16 * b);                                          \
									__asm__("" : "+v"(d[b])); /* one load, not one folded into each product */   \
								}                                                                                 \
								_Pragma("GCC unroll 4") for (int kj = 0; kj < KWC; kj++) {                        \
									__m512 xv = _mm512_set1_ps(xr[ox * g.s + kj]);                                \
									_Pragma("GCC unroll 4") for (int b = 0; b < OBC; b++)                         \
										acc[b][kj] = _mm512_fmadd_ps(d[b], xv, acc[b][kj]);                       \
								}                                                                                 \
							}                                                                                     \
						}                                                                                         \
					}                                                                                             \
					_Pragma("GCC unroll 4") for (int b = 0; b < OBC; b++)                                         \
						_Pragma("GCC unroll 4") for (int kj = 0; kj < KWC; kj++)                                  \
							_mm512_storeu_ps(pk + kj * g.o + 16 * b, acc[b][kj]);                                 \
				}                                                                                                 \
	}

DEF_WGRADO(wgrado_k3b2, 3, 2)
DEF_WGRADO(wgrado_k3b4, 3, 4)

// wgrado16 is DEF_WGRADO for 16 output channels (one vector) and 3×3
// kernels: the sums of all nine taps of one input channel stay in
// registers (three would leave the multiply-adds waiting on each other),
// each output pixel loading one vector of dy and nine broadcasts of x. A
// chunk's sums start from zero and are added to pt once at its end, so
// that no float32 sum runs over more than WO16 samples.
__attribute__((target("avx512f,fma"))) static void wgrado16(gorun_cgeom g, const float *dt, const float *xp, long ph,
                                                            long pw, float *pt) {
	long plane = g.oh * g.ow;
	for (long c = 0; c < g.c; c++) {
		float *pk = pt + c * 9 * 16;
		__m512 acc[3][3];
		_Pragma("GCC unroll 3") for (int ki = 0; ki < 3; ki++)
			_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++)
				acc[ki][kj] = _mm512_setzero_ps();
		for (long n = 0; n < g.n; n++) {
			const float *dn = dt + n * plane * 16;
			for (long oy = 0; oy < g.oh; oy++) {
				const float *xr = xp + ((n * g.c + c) * ph + oy * g.s) * pw;
				for (long ox = 0; ox < g.ow; ox++, dn += 16) {
					__m512 d = _mm512_loadu_ps(dn);
					__asm__("" : "+v"(d)); /* one load, not one folded into each product */
					const float *xq = xr + ox * g.s;
					_Pragma("GCC unroll 3") for (int ki = 0; ki < 3; ki++)
						_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++)
							acc[ki][kj] = _mm512_fmadd_ps(d, _mm512_set1_ps(xq[ki * pw + kj]), acc[ki][kj]);
				}
			}
		}
		_Pragma("GCC unroll 3") for (int ki = 0; ki < 3; ki++)
			_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++) {
				float *p = pk + (ki * 3 + kj) * 16;
				_mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), acc[ki][kj]));
			}
	}
}

// DEF_WGRADOA is DEF_WGRADO with AVX2 (level 1) for kernels 3 wide: the
// sums of KHC kernel rows (from ki0) × 3 columns × OBV vectors of 8 output
// channels of one input channel in registers, each output pixel loading
// OBV vectors of dy and 3·KHC broadcasts of x.
#define DEF_WGRADOA(NAME, KHC, OBV)                                                                                 \
	__attribute__((target("avx2,fma"))) static void NAME(gorun_cgeom g, const float *dt, const float *xp, long ph, \
	                                                     long pw, float *pt, long ki0) {                           \
		long plane = g.oh * g.ow;                                                                                 \
		for (long c = 0; c < g.c; c++)                                                                            \
			for (long o0 = 0; o0 < g.o; o0 += 8 * OBV) {                                                          \
				float *pk = pt + (c * g.kh + ki0) * 3 * g.o + o0;                                                 \
				__m256 acc[KHC][3][OBV];                                                                          \
				_Pragma("GCC unroll 3") for (int r = 0; r < KHC; r++)                                             \
					_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++)                                        \
						_Pragma("GCC unroll 4") for (int b = 0; b < OBV; b++)                                     \
							acc[r][kj][b] = _mm256_loadu_ps(pk + (r * 3 + kj) * g.o + 8 * b);                     \
				for (long n = 0; n < g.n; n++) {                                                                  \
					const float *dn = dt + n * plane * g.o + o0;                                                  \
					for (long oy = 0; oy < g.oh; oy++) {                                                          \
						const float *xr = xp + ((n * g.c + c) * ph + oy * g.s + ki0) * pw;                        \
						for (long ox = 0; ox < g.ow; ox++, dn += g.o) {                                           \
							__m256 d[OBV];                                                                        \
							_Pragma("GCC unroll 4") for (int b = 0; b < OBV; b++) {                               \
								d[b] = _mm256_loadu_ps(dn + 8 * b);                                               \
								__asm__("" : "+x"(d[b])); /* one load, not one folded into each product */       \
							}                                                                                     \
							const float *xq = xr + ox * g.s;                                                      \
							_Pragma("GCC unroll 3") for (int r = 0; r < KHC; r++)                                 \
								_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++) {                          \
									__m256 xv = _mm256_set1_ps(xq[r * pw + kj]);                                  \
									_Pragma("GCC unroll 4") for (int b = 0; b < OBV; b++)                         \
										acc[r][kj][b] = _mm256_fmadd_ps(d[b], xv, acc[r][kj][b]);                 \
								}                                                                                 \
						}                                                                                         \
					}                                                                                             \
				}                                                                                                 \
				_Pragma("GCC unroll 3") for (int r = 0; r < KHC; r++)                                             \
					_Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++)                                        \
						_Pragma("GCC unroll 4") for (int b = 0; b < OBV; b++)                                     \
							_mm256_storeu_ps(pk + (r * 3 + kj) * g.o + 8 * b, acc[r][kj][b]);                     \
			}                                                                                                     \
	}

// Two rows × 16 channels (12 sums): the ResNet's layers measured 64, 47 and
// 37 µs a sample (7 columns; 14, stride 2; 7, stride 2) against 68, 52 and
// 43 with all three rows × 8 channels and 104, 60 and 53 with one row × 32.
DEF_WGRADOA(wgrado_a2, 2, 2)
DEF_WGRADOA(wgrado_a1, 1, 2)

// wgrado_a runs the DEF_WGRADOA bodies over g's kernel rows, two at a time.
static void wgrado_a(gorun_cgeom g, const float *dt, const float *xp, long ph, long pw, float *pt) {
	long ki = 0;
	for (; ki + 2 <= g.kh; ki += 2)
		wgrado_a2(g, dt, xp, ph, pw, pt, ki);
	if (ki < g.kh)
		wgrado_a1(g, dt, xp, ph, pw, pt, ki);
}

static int wgrad_by_o_run(gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate,
                          void (*body)(gorun_cgeom, const float *, const float *, long, long, float *), long nb,
                          void (*tr)(const float *, long, long, long, float *, long));

// conv_wgrad_by_o runs DEF_WGRADO over chunks of NB samples: dy transposed
// pixel-major and x copied into zero-bordered planes (with the rows a
// stride skips past the end, so that row s·oy + ki always exists).
__attribute__((target("avx512f"))) static int conv_wgrad_by_o(gorun_cgeom g, const float *dy, const float *x, float *dw,
                                                               int accumulate) {
	int b4 = g.o % 64 == 0;
	void (*body)(gorun_cgeom, const float *, const float *, long, long, float *) =
	    wgrad_o16(&g) ? wgrado16 : b4 ? wgrado_k3b4 : wgrado_k3b2;
	long nb = wgrad_o16(&g) ? WO16 : NB; // samples a chunk
	return wgrad_by_o_run(g, dy, x, dw, accumulate, body, nb, transpose);
}

// wgrad_by_o_run is conv_wgrad_by_o with the body, chunk size nb and
// transposition tr given.
static int wgrad_by_o_run(gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate,
                          void (*body)(gorun_cgeom, const float *, const float *, long, long, float *), long nb,
                          void (*tr)(const float *, long, long, long, float *, long)) {
	long plane = g.oh * g.ow, hw = g.h * g.w, taps = g.c * g.kh * g.kw;
	long pw = g.w + 2 * g.p, ph0 = g.h + 2 * g.p, need = (g.oh - 1) * g.s + g.kh, ph = need > ph0 ? need : ph0;
	float *pt = calloc(taps * g.o, sizeof(float)), *dt = malloc(NB * plane * g.o * sizeof(float));
	float *xp = calloc(NB * g.c * ph * pw + 16, sizeof(float));
	if (!pt || !dt || !xp) {
		free(pt);
		free(dt);
		free(xp);
		return -1;
	}
	for (long n0 = 0; n0 < g.n; n0 += nb) {
		gorun_cgeom gc = g;
		gc.n = g.n - n0 < nb ? g.n - n0 : nb;
		for (long i = 0; i < gc.n; i++) {
			const float *dyn = dy + (n0 + i) * g.o * plane;
			tr(dyn, g.o, plane, plane, dt + i * plane * g.o, g.o);
			border_copy(&g, x + (n0 + i) * g.c * hw, xp + i * g.c * ph * pw, ph, pw);
		}
		body(gc, dt, xp, ph, pw, pt);
	}
	for (long o = 0; o < g.o; o++)
		for (long t = 0; t < taps; t++) {
			float *d = dw + o * taps + t;
			*d = accumulate ? *d + pt[t * g.o + o] : pt[t * g.o + o];
		}
	free(xp);
	free(dt);
	free(pt);
	return 0;
}

// pw_wgrad is wgrad_pw's weight gradient, dw[o][c] = Σ_n Σ_p dy[n][o][p]·
// xs[n][c][p] over the pixels the kernel reads (xs gathered by pw_gather),
// into sixteen partials per tap by pixel mod 16: chunks of samples whose
// copies fit in about 1 MB, dy and xs copied with planes padded with zeros
// to whole vectors, and register tiles of 4 output × 4 input channels, each
// vector of dy and of x loaded once for four multiply-adds.
__attribute__((target("avx512f,fma"))) static int pw_wgrad(gorun_cgeom g, const float *dy, const float *x,
                                                            float *part) {
	long plane = g.oh * g.ow, ps = (plane + 15) & ~15L, hw = g.h * g.w, per = (g.c + g.o) * ps;
	long nb = (1024 << 10) / (per * (long)sizeof(float));
	nb = nb < 1 ? 1 : nb > NB ? NB : nb;
	float *buf = zalloc64(nb * per); // the padding between planes stays zero
	if (!buf)
		return -1;
	for (long n0 = 0; n0 < g.n; n0 += nb) {
		long cn = g.n - n0 < nb ? g.n - n0 : nb;
		for (long i = 0; i < cn; i++) {
			pw_gather(&g, x + (n0 + i) * g.c * hw, buf + i * per, ps);
			pad_planes(buf + i * per + g.c * ps, ps, dy + (n0 + i) * g.o * plane, plane, g.o);
		}
		for (long o0 = 0; o0 < g.o; o0 += 4)
			for (long c0 = 0; c0 < g.c; c0 += 4) {
				__m512 acc[4][4];
				_Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
					acc[q][j] = _mm512_load_ps(part + ((o0 + q) * g.c + c0 + j) * 16);
				for (long i = 0; i < cn; i++) {
					const float *xs = buf + i * per + c0 * ps, *ds = buf + i * per + (g.c + o0) * ps;
					for (long p = 0; p < ps; p += 16) {
						__m512 v[4];
						_Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
							v[j] = _mm512_load_ps(xs + j * ps + p);
							__asm__("" : "+v"(v[j])); // one load for four products
						}
						_Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
							__m512 d = _mm512_load_ps(ds + q * ps + p);
							__asm__("" : "+v"(d));
							_Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
								acc[q][j] = _mm512_fmadd_ps(d, v[j], acc[q][j]);
						}
					}
				}
				_Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
					_mm512_store_ps(part + ((o0 + q) * g.c + c0 + j) * 16, acc[q][j]);
			}
	}
	free(buf);
	return 0;
}

// conv_wgrad_avx512 takes kernels 3 or 5 wide and planes up to 128
// columns, NB samples at a time (they stay in L1 or L2 between the kernel
// rows and channel groups); wgrad_lanes says the vector width. With
// padding, each chunk is first copied into zero-bordered planes (with
// slack after them) that x's loads read without a mask; dy's lanes past the
// plane load zeros, so the taps reading the border or slack add w·0.
__attribute__((target("avx512f"))) static int conv_wgrad_avx512(gorun_cgeom g, const float *dy, const float *x,
                                                                 float *dw, int accumulate) {
	if (winow_ok(&g))
		return conv_winow_avx512(g, dy, x, dw, accumulate);
	if (wgrad_by_o(&g))
		return conv_wgrad_by_o(g, dy, x, dw, accumulate);
	long taps = g.o * g.c * g.kh * g.kw, plane = g.oh * g.ow, hw = g.h * g.w;
	float *part = zalloc64(taps * 16);
	if (!part)
		return -1;
	if (wgrad_flat(&g) || wgrad_pw(&g)) {
		int err = wgrad_pw(&g) ? pw_wgrad(g, dy, x, part) : conv_wgrad_flat(g, dy, x, part, wgradf_k3);
		if (!err)
			finish(part, taps, dw, accumulate);
		free(part);
		return err;
	}
	int y = wgrad_lanes(&g) == 8;
	if (g.s != 1) {
		// NB samples at a time copied phase-split, as the strided forward
		void (*sbody)(gorun_cgeom, const float *, const float *, long, long, const long *, float *) =
		    g.kw == 3 ? (y ? wgrads_y3 : wgrads_z3) : (y ? wgrads_y5 : wgrads_z5);
		long rl = g.w + 2 * g.p, nr = strided_rows(&g), cs = nr * rl, ps[MAXKW], ko[MAXKW];
		phases(rl, g.s, g.kw, ps, ko);
		float *xs = calloc(NB * g.c * cs + 64, sizeof(float));
		if (!xs) {
			free(part);
			return -1;
		}
		for (long n0 = 0; n0 < g.n; n0 += NB) {
			gorun_cgeom gc = g;
			gc.n = g.n - n0 < NB ? g.n - n0 : NB;
			for (long i = 0; i < gc.n; i++)
				phase_split(&g, x + (n0 + i) * g.c * hw, xs + i * g.c * cs, nr, rl, ps);
			sbody(gc, dy + n0 * g.o * plane, xs, rl, cs, ko, part);
		}
		free(xs);
		finish(part, taps, dw, accumulate);
		free(part);
		return 0;
	}
	void (*body)(gorun_cgeom, const float *, const float *, float *, int) =
	    g.kw == 3 ? (y ? wgrad_y3 : wgrad_z3) : (y ? wgrad_y5 : wgrad_z5);
	long ph = g.h + 2 * g.p, pw = g.w + 2 * g.p;
	float *xp = NULL;
	if (g.p > 0 && !(xp = calloc(NB * g.c * ph * pw + 16, sizeof(float)))) {
		free(part);
		return -1;
	}
	for (long n0 = 0; n0 < g.n; n0 += NB) {
		gorun_cgeom gc = g;
		gc.n = g.n - n0 < NB ? g.n - n0 : NB;
		const float *dyc = dy + n0 * g.o * plane;
		if (!xp) {
			body(gc, dyc, x + n0 * g.c * hw, part, 0);
			continue;
		}
		for (long s = 0; s < gc.n; s++)
			border_copy(&g, x + (n0 + s) * g.c * hw, xp + s * g.c * ph * pw, ph, pw);
		gc.h = ph, gc.w = pw, gc.p = 0;
		body(gc, dyc, xp, part, 1);
	}
	free(xp);
	finish(part, taps, dw, accumulate);
	free(part);
	return 0;
}

// ---- input gradient: dx[n,c,iy,ix] = Σ_{kj} (Σ_{o,ki} w[o,c,ki,kj]·dy[n,o,
// iy+p-ki, ix+p-kj]), the inner sums over o then ki (rows outside dy
// skipped) from zero, the outer over the kernel columns that reach ix, in
// order, from zero ----

// dgrad_scatter reports whether the AVX-512 input gradient below takes g
// (which then adds in its order, the plain bodies' too). Same convolutions
// of planes under 8 columns with input channels by 32s and kernels 3 wide
// go to the forward body over output channels instead (dgrad_same; the
// ResNet's 7-column layer: 1.1× faster).
static inline int dgrad_scatter(const gorun_cgeom *g) {
	int by_o = g->kw == 3 && g->w < 8 && g->c % 32 == 0 && g->oh == g->h && g->ow == g->w;
	return g->s == 1 && (g->kw == 3 || g->kw == 5) && g->ow <= 8 && g->w <= 16 && !by_o;
}

// dgrad_same reports whether g is a "same" convolution (output plane the
// input's) that dgrad_scatter does not take: its input gradient is then
// the forward convolution of dy with the weights transposed and flipped,
// same padding, and runs as conv_fwd does (in its order, at every level).
static inline int dgrad_same(const gorun_cgeom *g) {
	return g->s == 1 && !dgrad_scatter(g) && g->oh == g->h && g->ow == g->w;
}

// dgrad_as_fwd computes the input gradient of a same convolution with the
// forward body fwd: dx = conv(dy, w'), w'[c,o,ki,kj] = w[o,c,KH-1-ki,KW-1-kj].
static int dgrad_as_fwd(int (*fwd)(gorun_cgeom, const float *, const float *, const float *, float *), gorun_cgeom g,
                        const float *dy, const float *w, float *dx) {
	long k = g.kh * g.kw;
	float *wt = malloc(g.o * g.c * k * sizeof(float));
	if (!wt)
		return -1;
	for (long o = 0; o < g.o; o++)
		for (long c = 0; c < g.c; c++)
			for (long t = 0; t < k; t++)
				wt[(c * g.o + o) * k + (k - 1 - t)] = w[(o * g.c + c) * k + t];
	gorun_cgeom gt = g;
	gt.c = g.o, gt.o = g.c, gt.h = g.oh, gt.w = g.ow, gt.oh = g.h, gt.ow = g.w;
	int r = fwd(gt, dy, wt, NULL, dx);
	free(wt);
	return r;
}

static inline __attribute__((always_inline)) void conv_dgrad_c(gorun_cgeom g, const float *dy, const float *w, float *dx) {
	long plane = g.oh * g.ow, hw = g.h * g.w;
	for (long n = 0; n < g.n; n++)
		for (long c = 0; c < g.c; c++)
			for (long iy = 0; iy < g.h; iy++)
				for (long ix = 0; ix < g.w; ix++) {
					float total = 0.0f;
					for (long kj = 0; kj < g.kw; kj++) {
						long ox = ix + g.p - kj;
						if (ox < 0 || ox >= g.ow)
							continue;
						float s = 0.0f;
						for (long o = 0; o < g.o; o++)
							for (long ki = 0; ki < g.kh; ki++) {
								long oy = iy + g.p - ki;
								if (oy < 0 || oy >= g.oh)
									continue;
								s = fmaf(w[((o * g.c + c) * g.kh + ki) * g.kw + kj], dy[(n * g.o + o) * plane + oy * g.ow + ox], s);
							}
						total = total + s;
					}
					dx[(n * g.c + c) * hw + iy * g.w + ix] = total;
				}
}

// The AVX-512 input gradient takes planes of dy at most eight columns wide
// and of dx at most sixteen: for CG input channels of one row of dx it
// holds CG × KWC eight-lane sums over (o, ki), lane ox (each dy row loaded
// once for CG·KWC fused multiply-adds); kernel column kj's sums land on
// dx columns ox + kj - p, placed by one permute each.
#define DEF_DGRAD(NAME, KWC, CG)                                                                                    \
	__attribute__((target("avx512f,avx512vl,fma"))) static int NAME(gorun_cgeom g, const float *dy, const float *w,   \
	                                                            float *dx) {                                       \
		long plane = g.oh * g.ow, hw = g.h * g.w, groups = (g.c + CG - 1) / CG;                                   \
		/* w regrouped: (o, ki, group) then channel q and column kj, zero past C. */                              \
		float *wp = calloc(g.o * g.kh * groups * CG * KWC, sizeof(float));                                        \
		if (!wp)                                                                                                  \
			return -1;                                                                                            \
		for (long o = 0; o < g.o; o++)                                                                            \
			for (long c = 0; c < g.c; c++)                                                                        \
				for (long ki = 0; ki < g.kh; ki++)                                                                \
					for (long kj = 0; kj < KWC; kj++)                                                             \
						wp[(((o * g.kh + ki) * groups + c / CG) * CG + c % CG) * KWC + kj] =                      \
						    w[((o * g.c + c) * g.kh + ki) * KWC + kj];                                            \
		__mmask8 outm = (__mmask8)outmask(g.ow, 0, 8);                                                            \
		__mmask16 pm[KWC], store = (__mmask16)((1u << g.w) - 1u);                                                 \
		__m512i idx[KWC];                                                                                         \
		for (long kj = 0; kj < KWC; kj++) {                                                                       \
			long sh = kj - g.p, lo = sh < 0 ? 0 : sh, hi = g.ow + sh < g.w ? g.ow + sh : g.w;                     \
			pm[kj] = hi > lo ? (__mmask16)(((1u << (hi - lo)) - 1u) << lo) : 0;                                   \
			int ix[16];                                                                                           \
			for (int l = 0; l < 16; l++)                                                                          \
				ix[l] = (int)((l - sh) & 15);                                                                     \
			idx[kj] = _mm512_loadu_si512(ix);                                                                     \
		}                                                                                                         \
		for (long n = 0; n < g.n; n++)                                                                            \
			for (long gi = 0; gi < groups; gi++) {                                                                \
				long c0 = gi * CG, cg = g.c - c0 < CG ? g.c - c0 : CG;                                            \
				for (long iy = 0; iy < g.h; iy++) {                                                               \
					__m256 acc[CG][KWC];                                                                          \
					_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++)                                          \
						_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                                  \
							acc[q][kj] = _mm256_setzero_ps();                                                     \
					for (long o = 0; o < g.o; o++)                                                                \
						for (long ki = 0; ki < g.kh; ki++) {                                                      \
							long oy = iy + g.p - ki;                                                              \
							if (oy < 0 || oy >= g.oh)                                                             \
								continue;                                                                         \
							__m256 d = _mm256_maskz_loadu_ps(outm, dy + (n * g.o + o) * plane + oy * g.ow);       \
							const float *wk = wp + ((o * g.kh + ki) * groups + gi) * CG * KWC;                    \
							_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++)                                  \
								_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                          \
									acc[q][kj] = _mm256_fmadd_ps(_mm256_set1_ps(wk[q * KWC + kj]), d, acc[q][kj]); \
						}                                                                                         \
					_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++) {                                        \
						if (q >= cg)                                                                              \
							break;                                                                                \
						__m512 row = _mm512_setzero_ps();                                                         \
						_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                                  \
							row = _mm512_add_ps(row, _mm512_maskz_permutexvar_ps(pm[kj], idx[kj],                 \
							                                                     _mm512_castps256_ps512(acc[q][kj]))); \
						_mm512_mask_storeu_ps(dx + (n * g.c + c0 + q) * hw + iy * g.w, store, row);               \
					}                                                                                             \
				}                                                                                                 \
			}                                                                                                     \
		free(wp);                                                                                                 \
		return 0;                                                                                                 \
	}

DEF_DGRAD(dgrad_k3, 3, 8)
DEF_DGRAD(dgrad_k5, 5, 4)
DEF_DGRAD(dgrad_k5c5, 5, 5)

// DEF_DGRADA is DEF_DGRAD with AVX2's eight lanes (level 1): sixteen
// registers hold RB rows of dx × CG channels × KWC kernel columns of sums
// (each weight broadcast feeds RB rows), and kernel column kj's sums are
// placed on a row of dx (up to sixteen columns) by two permutes, one for
// each half, whose lanes without a sum are cleared (+0, as the AVX-512
// body's masked permutes give). dy is copied a sample at a time into rows
// of eight floats (zeros past ow) with kh - 1 zero rows above and more
// below, so that every load is plain: a row of dy outside the plane reads
// zeros, which add w·0 to a sum that is never -0.
#define DEF_DGRADA(NAME, KWC, CG, RB)                                                                              \
	__attribute__((target("avx2,fma"))) static int NAME(gorun_cgeom g, const float *dy, const float *w, float *dx) { \
		long plane = g.oh * g.ow, hw = g.h * g.w, groups = (g.c + CG - 1) / CG, top = g.kh - 1;                   \
		long qh = top + g.h + RB + g.p; /* rows of the copy: row r holds dy row r - top */                        \
		float *wp = calloc(g.o * g.kh * groups * CG * KWC, sizeof(float)), *dq = calloc(g.o * qh * 8, sizeof(float)); \
		if (!wp || !dq) {                                                                                         \
			free(wp);                                                                                             \
			free(dq);                                                                                             \
			return -1;                                                                                            \
		}                                                                                                         \
		for (long o = 0; o < g.o; o++)                                                                            \
			for (long c = 0; c < g.c; c++)                                                                        \
				for (long ki = 0; ki < g.kh; ki++)                                                                \
					for (long kj = 0; kj < KWC; kj++)                                                             \
						wp[(((o * g.kh + ki) * groups + c / CG) * CG + c % CG) * KWC + kj] =                      \
						    w[((o * g.c + c) * g.kh + ki) * KWC + kj];                                            \
		__m256i ilo[KWC], ihi[KWC];                                                                               \
		__m256 mlo[KWC], mhi[KWC];                                                                                \
		for (long kj = 0; kj < KWC; kj++) {                                                                       \
			int il[8], ih[8], ml[8], mh[8];                                                                       \
			for (long l = 0; l < 8; l++) {                                                                        \
				long ol = l + g.p - kj, oh = ol + 8;                                                              \
				il[l] = (int)(ol & 7), ml[l] = ol >= 0 && ol < g.ow && l < g.w ? -1 : 0;                          \
				ih[l] = (int)(oh & 7), mh[l] = oh >= 0 && oh < g.ow && l + 8 < g.w ? -1 : 0;                      \
			}                                                                                                     \
			ilo[kj] = _mm256_loadu_si256((const __m256i *)il), ihi[kj] = _mm256_loadu_si256((const __m256i *)ih); \
			mlo[kj] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)ml));                               \
			mhi[kj] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)mh));                               \
		}                                                                                                         \
		unsigned slo = outmask(g.w, 0, 8), shi = g.w > 8 ? outmask(g.w, 8, 8) : 0;                                \
		for (long n = 0; n < g.n; n++) {                                                                          \
			for (long o = 0; o < g.o; o++)                                                                        \
				for (long oy = 0; oy < g.oh; oy++)                                                                \
					memcpy(dq + (o * qh + top + oy) * 8, dy + (n * g.o + o) * plane + oy * g.ow, g.ow * sizeof(float)); \
			for (long gi = 0; gi < groups; gi++) {                                                                \
				long c0 = gi * CG, cg = g.c - c0 < CG ? g.c - c0 : CG;                                            \
				for (long iy0 = 0; iy0 < g.h; iy0 += RB) {                                                        \
					__m256 acc[RB][CG][KWC];                                                                      \
					_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                          \
						_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++)                                      \
							_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++)                              \
								acc[r][q][kj] = _mm256_setzero_ps();                                              \
					/* ki's rows: dy rows iy0 + r + p - ki, at copy rows iy0 + r + p - ki + top */                \
					long k0 = iy0 + g.p - g.oh + 1 > 0 ? iy0 + g.p - g.oh + 1 : 0; /* below: rows past dy */      \
					long k1 = iy0 + RB - 1 + g.p < g.kh - 1 ? iy0 + RB - 1 + g.p : g.kh - 1; /* above */          \
					for (long o = 0; o < g.o; o++)                                                                \
						for (long ki = k0; ki <= k1; ki++) {                                                      \
							const float *dr = dq + (o * qh + iy0 + g.p - ki + top) * 8;                           \
							__m256 d[RB];                                                                         \
							_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) d[r] = _mm256_loadu_ps(dr + 8 * r); \
							const float *wk = wp + ((o * g.kh + ki) * groups + gi) * CG * KWC;                    \
							_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++)                                  \
								_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) {                        \
									__m256 wv = _mm256_set1_ps(wk[q * KWC + kj]);                                 \
									_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                          \
										acc[r][q][kj] = _mm256_fmadd_ps(wv, d[r], acc[r][q][kj]);                 \
								}                                                                                 \
						}                                                                                         \
					_Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)                                          \
						_Pragma("GCC unroll 8") for (int q = 0; q < CG; q++) {                                    \
							if (q >= cg || iy0 + r >= g.h)                                                        \
								break;                                                                            \
							__m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();                            \
							_Pragma("GCC unroll 8") for (int kj = 0; kj < KWC; kj++) {                            \
								lo = _mm256_add_ps(lo, _mm256_and_ps(_mm256_permutevar8x32_ps(acc[r][q][kj], ilo[kj]), mlo[kj])); \
								hi = _mm256_add_ps(hi, _mm256_and_ps(_mm256_permutevar8x32_ps(acc[r][q][kj], ihi[kj]), mhi[kj])); \
							}                                                                                     \
							float *dr = dx + (n * g.c + c0 + q) * hw + (iy0 + r) * g.w;                           \
							astorem(dr, slo, lo);                                                                 \
							if (shi)                                                                              \
								astorem(dr + 8, shi, hi);                                                         \
						}                                                                                         \
				}                                                                                                 \
			}                                                                                                     \
		}                                                                                                         \
		free(dq);                                                                                                 \
		free(wp);                                                                                                 \
		return 0;                                                                                                 \
	}

// 2 rows × 1 channel × 5 columns; 2 × 2 × 3 (the MNIST Net's conv2, 5
// wide, and 10 output channels over 10 input on 8×8 planes, 3 wide: 0.63
// and 0.70 of the time of one row × 2 channels × 5 columns and 1 × 4 × 3
// without the copy, medians of 60 alternating calls).
DEF_DGRADA(dgrad_a5, 5, 1, 2)
DEF_DGRADA(dgrad_a3, 3, 2, 2)

// ---- input gradient with stride s > 1: dx[n,c,iy,ix] = Σ_o Σ_{ki,kj}
// w[o,c,ki,kj]·dy[n,o,(iy+p-ki)/s,(ix+p-kj)/s] over the taps whose
// quotients are whole and inside dy, added from zero over o, then ki
// downwards, then kj downwards ----

static inline __attribute__((always_inline)) void conv_dgrad_sc(gorun_cgeom g, const float *dy, const float *w, float *dx) {
	long plane = g.oh * g.ow, hw = g.h * g.w;
	for (long n = 0; n < g.n; n++)
		for (long c = 0; c < g.c; c++)
			for (long iy = 0; iy < g.h; iy++)
				for (long ix = 0; ix < g.w; ix++) {
					float acc = 0.0f;
					for (long o = 0; o < g.o; o++)
						for (long ki = g.kh - 1; ki >= 0; ki--) {
							long ry = iy + g.p - ki;
							if (ry < 0 || ry % g.s != 0 || ry / g.s >= g.oh)
								continue;
							for (long kj = g.kw - 1; kj >= 0; kj--) {
								long rx = ix + g.p - kj;
								if (rx < 0 || rx % g.s != 0 || rx / g.s >= g.ow)
									continue;
								acc = fmaf(w[((o * g.c + c) * g.kh + ki) * g.kw + kj],
								           dy[(n * g.o + o) * plane + ry / g.s * g.ow + rx / g.s], acc);
							}
						}
					dx[(n * g.c + c) * hw + iy * g.w + ix] = acc;
				}
}

// ---- input gradient of 3×3 kernels with stride 2 and padding 1 (the
// ResNet's downsampling convolutions), input channels by 16s ----
//
// dx pixel (2m+a, 2n+b) takes the taps ki ≡ a+1, kj ≡ b+1 (mod 2) of dy
// pixels (m, n), (m, n+1), (m+1, n), (m+1, n+1): nine taps per 2×2 block of
// dx, each a fused multiply-add of a weight vector (16 input channels, one
// per lane) by a broadcast dy element, over o, then ki, then kj downwards
// (conv_dgrad_sc's order). DEF_DGRAD_S2 holds R blocks along a row (4R
// sums) and the nine weight vectors of output channel o in registers; dy
// is a copy bordered by a zero row and column, so the blocks at the bottom
// and right edge read zeros for the taps outside dy (which add w·0 to a
// sum that is never −0, so change nothing). The sums land pixel-major in
// dt[pixel][c] and are transposed into dx.

// dgrad_s2 reports whether the body below takes g.
static inline int dgrad_s2(const gorun_cgeom *g) {
	return g->s == 2 && g->kh == 3 && g->kw == 3 && g->p == 1 && g->c % 16 == 0 && g->oh == (g->h + 1) / 2 &&
	       g->ow == (g->w + 1) / 2;
}

#define DEF_DGRAD_S2(NAME, R)                                                                                      \
	__attribute__((target("avx512f,fma"))) static void NAME(long c, long o, long rows, long nb, const float *dyp,    \
	                                                        long rw, long cs, const float *wp, float *dt, long tw) { \
		for (long m = 0; m < rows; m++)                                                                           \
			for (long b0 = 0; b0 < nb; b0++)                                                                      \
				for (long c0 = 0; c0 < c; c0 += 16) {                                                             \
					__m512 s00[R], s01[R], s10[R], s11[R];                                                        \
					_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) s00[r] = s01[r] = s10[r] = s11[r] =        \
					    _mm512_setzero_ps();                                                                      \
					const float *d0 = dyp + m * rw + b0 * R, *wk = wp + c0 * o * 9;                                \
					for (long k = 0; k < o; k++, d0 += cs, wk += 9 * 16) {                                        \
						__m512 w0 = _mm512_load_ps(wk), w1 = _mm512_load_ps(wk + 16), w2 = _mm512_load_ps(wk + 32), \
						       w3 = _mm512_load_ps(wk + 48), w4 = _mm512_load_ps(wk + 64),                        \
						       w5 = _mm512_load_ps(wk + 80), w6 = _mm512_load_ps(wk + 96),                        \
						       w7 = _mm512_load_ps(wk + 112), w8 = _mm512_load_ps(wk + 128);                      \
						_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                     \
							__m512 a = _mm512_set1_ps(d0[r]), b = _mm512_set1_ps(d0[r + 1]),                      \
							       e = _mm512_set1_ps(d0[rw + r]), f = _mm512_set1_ps(d0[rw + r + 1]);            \
							s00[r] = _mm512_fmadd_ps(w4, a, s00[r]);                                              \
							s01[r] = _mm512_fmadd_ps(w5, a, s01[r]);                                              \
							s01[r] = _mm512_fmadd_ps(w3, b, s01[r]);                                              \
							s10[r] = _mm512_fmadd_ps(w7, a, s10[r]);                                              \
							s10[r] = _mm512_fmadd_ps(w1, e, s10[r]);                                              \
							s11[r] = _mm512_fmadd_ps(w8, a, s11[r]);                                              \
							s11[r] = _mm512_fmadd_ps(w6, b, s11[r]);                                              \
							s11[r] = _mm512_fmadd_ps(w2, e, s11[r]);                                              \
							s11[r] = _mm512_fmadd_ps(w0, f, s11[r]);                                              \
						}                                                                                         \
					}                                                                                             \
					_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                         \
						float *t = dt + (2 * m * tw + 2 * (b0 * R + r)) * c + c0;                                 \
						_mm512_storeu_ps(t, s00[r]);                                                              \
						_mm512_storeu_ps(t + c, s01[r]);                                                          \
						_mm512_storeu_ps(t + tw * c, s10[r]);                                                     \
						_mm512_storeu_ps(t + tw * c + c, s11[r]);                                                 \
					}                                                                                             \
				}                                                                                                 \
	}

// S2R blocks a row: 2 and 3 (no columns wasted on 14-column planes) measured
// slower than 4 on both of the ResNet's layers (BenchmarkConv: 61 and 55
// against 70 and 80 GFLOP/s), as each block loads the nine weights again.
#define S2R 4
DEF_DGRAD_S2(dgrad_s2_body, S2R)

// conv_dgrad_s2 runs the DEF_DGRAD_S2 body one sample at a time.
__attribute__((target("avx512f"))) static int conv_dgrad_s2(gorun_cgeom g, const float *dy, const float *w, float *dx) {
	long nb = (g.ow + S2R - 1) / S2R, rw = nb * S2R + 1, cs = (g.oh + 1) * rw, tw = 2 * nb * S2R, hw = g.h * g.w;
	long plane = g.oh * g.ow;
	// w regrouped: (16-channel group, o, tap) then the channel's lane.
	float *wp = zalloc64(g.c * g.o * 9), *dyp = zalloc64((g.o * cs + 15) / 16 * 16),
	      *dt = malloc(2 * (g.oh + 1) * tw * g.c * sizeof(float));
	int ret = -1;
	if (!wp || !dyp || !dt)
		goto done;
	for (long o = 0; o < g.o; o++)
		for (long c = 0; c < g.c; c++)
			for (long t = 0; t < 9; t++)
				wp[((c / 16 * g.o + o) * 9 + t) * 16 + c % 16] = w[(o * g.c + c) * 9 + t];
	for (long n = 0; n < g.n; n++) {
		for (long o = 0; o < g.o; o++)
			for (long oy = 0; oy < g.oh; oy++)
				memcpy(dyp + o * cs + oy * rw, dy + (n * g.o + o) * plane + oy * g.ow, g.ow * sizeof(float));
		dgrad_s2_body(g.c, g.o, g.oh, nb, dyp, rw, cs, wp, dt, tw);
		float *dxn = dx + n * g.c * hw;
		for (long iy = 0; iy < g.h; iy++)
			transpose(dt + iy * tw * g.c, g.w, g.c, g.c, dxn + iy * g.w, hw);
	}
	ret = 0;
done:
	free(dt);
	free(dyp);
	free(wp);
	return ret;
}

// dphase is one phase (a, b) of a strided input gradient: gp, its
// geometry as a forward convolution of dy (sub-kernel gp.kh × gp.kw, one
// sample, gp.oh × gp.ow outputs: the dx elements at rows iy0 + s·i and
// columns ix0 + s·j), where its window starts in the bordered copy of dy,
// and its body and packed weights (body -1: fwdo, the weights tap-major).
typedef struct {
	gorun_cgeom gp;
	long iy0, ix0, at, og;
	int body;
	float *wp;
} dphase;

// conv_dgrad_strided_avx512 splits dx by phase: the elements with
// (iy+p) mod s = a and (ix+p) mod s = b take the kernel taps ki ≡ a, kj ≡ b
// (mod s), and over them dx's phase (a, b) is a stride-1 convolution of dy
// with that sub-kernel flipped. Each phase runs a forward body over one
// sample's dy copied into zero-bordered planes, then is scattered into dx;
// phases with no taps are zeros.

__attribute__((target("avx512f"))) static int conv_dgrad_strided_avx512(gorun_cgeom g, const float *dy, const float *w,
                                                                         float *dx) {
	long s = g.s, km = (g.kh + s - 1) / s, kn = (g.kw + s - 1) / s, t = km - 1, l = kn - 1;
	long uh = (g.h + g.p + s - 1) / s, uw = (g.w + g.p + s - 1) / s;
	long nrd = t + (g.oh > uh ? g.oh : uh) + 2, rld = l + (g.ow > uw ? g.ow : uw) + 1, cs = nrd * rld;
	long hw = g.h * g.w, plane = g.oh * g.ow, ko[MAXKW];
	for (long kj = 0; kj < MAXKW; kj++)
		ko[kj] = kj;
	float *dyp = calloc(g.o * cs + 64, sizeof(float)), *out = malloc(g.c * (uh + 1) * (uw + 1) * sizeof(float));
	float *wt = malloc(g.c * g.o * km * kn * sizeof(float) + 1);
	dphase *ph = calloc(s * s, sizeof(dphase));
	int r = -1;
	if (!dyp || !out || !wt || !ph)
		goto done;
	for (long a = 0; a < s; a++)
		for (long b = 0; b < s; b++) {
			dphase *f = ph + a * s + b;
			long u0 = g.p > a ? (g.p - a + s - 1) / s : 0, v0 = g.p > b ? (g.p - b + s - 1) / s : 0;
			f->gp = (gorun_cgeom){.n = 1, .c = g.o, .o = g.c, .s = 1};
			f->gp.kh = a < g.kh ? (g.kh - a + s - 1) / s : 0, f->gp.kw = b < g.kw ? (g.kw - b + s - 1) / s : 0;
			f->gp.oh = (g.h + g.p - a + s - 1) / s - u0, f->gp.ow = (g.w + g.p - b + s - 1) / s - v0;
			f->iy0 = s * u0 + a - g.p, f->ix0 = s * v0 + b - g.p;
			if (f->gp.oh <= 0 || f->gp.ow <= 0 || !f->gp.kh || !f->gp.kw)
				continue;
			f->at = (t - f->gp.kh + 1 + u0) * rld + l - f->gp.kw + 1 + v0;
			for (long c = 0; c < g.c; c++)
				for (long o = 0; o < g.o; o++)
					for (long i = 0; i < f->gp.kh; i++)
						for (long j = 0; j < f->gp.kw; j++)
							wt[((c * g.o + o) * f->gp.kh + i) * f->gp.kw + j] =
							    w[((o * g.c + c) * g.kh + a + s * (f->gp.kh - 1 - i)) * g.kw + b + s * (f->gp.kw - 1 - j)];
			if (fwd_by_o(&f->gp)) {
				f->body = -1;
				f->wp = tap_major(g.c, g.o * f->gp.kh * f->gp.kw, wt);
			} else {
				f->body = fwd_pick(&f->gp, &f->og);
				f->wp = pack_weights(g.c, g.o * f->gp.kh * f->gp.kw, f->og, wt, NULL);
			}
			if (!f->wp)
				goto done;
		}
	for (long n = 0; n < g.n; n++) {
		for (long o = 0; o < g.o; o++)
			for (long oy = 0; oy < g.oh; oy++)
				memcpy(dyp + o * cs + (t + oy) * rld + l, dy + (n * g.o + o) * plane + oy * g.ow, g.ow * sizeof(float));
		float *dxn = dx + n * g.c * hw;
		for (long k = 0; k < s * s; k++) {
			dphase *f = ph + k;
			if (f->gp.oh <= 0 || f->gp.ow <= 0)
				continue;
			float *d = dxn + f->iy0 * g.w + f->ix0;
			if (!f->wp) { // no taps
				for (long c = 0; c < g.c; c++)
					for (long i = 0; i < f->gp.oh; i++)
						for (long j = 0; j < f->gp.ow; j++)
							d[c * hw + s * (i * g.w + j)] = 0.0f;
				continue;
			}
			if (f->body < 0) {
				fwdo(f->gp, dyp + f->at, rld, cs, f->wp, NULL, out);
				for (long i = 0; i < f->gp.oh; i++)
					for (long j = 0; j < f->gp.ow; j++)
						for (long c = 0; c < g.c; c++)
							d[c * hw + s * (i * g.w + j)] = out[(i * f->gp.ow + j) * g.c + c];
				continue;
			}
			long taps = g.o * f->gp.kh * f->gp.kw, groups = (g.c + f->og - 1) / f->og;
			fwds_bodies[f->body](f->gp, dyp + f->at, rld, cs, ko, f->wp, f->wp + groups * taps * f->og, out);
			for (long c = 0; c < g.c; c++)
				for (long i = 0; i < f->gp.oh; i++)
					for (long j = 0; j < f->gp.ow; j++)
						d[c * hw + s * (i * g.w + j)] = out[(c * f->gp.oh + i) * f->gp.ow + j];
		}
	}
	r = 0;
done:
	if (ph)
		for (long i = 0; i < s * s; i++)
			free(ph[i].wp);
	free(ph);
	free(wt);
	free(out);
	free(dyp);
	return r;
}

static inline int strided_ok(const gorun_cgeom *g);

// wgrad_a reports whether conv_wgrad_a takes g's weight gradient at level 1:
// stride 1, kernels 3 or 5 wide, sums by column (not over flattened planes,
// not by output channel, not by Winograd).
static inline int wgrad_a(const gorun_cgeom *g) {
	return g->s == 1 && (g->kw == 3 || g->kw == 5) && !winow_ok(g) && !wgrad_by_o(g) && !wgrad_flat(g) &&
	       !wgrad_pw(g);
}

// wgrad_flat_a reports whether conv_wgrad_avx2 runs g's weight gradient over
// flattened planes (DEF_WGRADFA).
static inline int wgrad_flat_a(const gorun_cgeom *g) { return wgrad_flat(g) && !winow_ok(g) && !wgrad_by_o(g); }

// Level 1 (AVX2 with FMA) runs the AVX2 bodies where they take g: the
// forward of every geometry strided_ok takes (Winograd's by conv_wino_a,
// fwd_by_o's by fwdo_a), the weight gradient by Winograd (conv_winow_a),
// over the output channels (wgrad_by_o's but 16 output channels: wgrado_a)
// and at stride 1 for kernels 3 or 5 wide (by columns, wgrad_a, or over
// flattened planes, wgrad_flat_a), the input gradient of dgrad_scatter's
// geometries and, through the forward, of same convolutions; elsewhere the
// plain loops compiled for AVX2 (fmaf becomes one instruction). Level 0
// runs the plain loops for any x86-64 (fmaf from libm, exact but slow).
__attribute__((target("avx2,fma"))) static int conv_fwd_avx2(gorun_cgeom g, const float *x, const float *w,
                                                             const float *b, float *y) {
	if (wino_ok(&g))
		return conv_wino_a(g, x, w, b, y);
	if (fwd_by_o(&g))
		return fwd_by_o_run(g, x, w, b, y, fwdo_a, transpose_a);
	if (strided_ok(&g)) {
		long og;
		int i = fwd_pick_avx2(&g, &og);
		return g.s == 1 ? fwd_direct(g, x, w, b, y, fwd_bodies[i], og) : fwd_strided(g, x, w, b, y, fwds_bodies[i], og);
	}
	conv_fwd_c(g, x, w, b, y);
	return 0;
}
static int conv_fwd_plain(gorun_cgeom g, const float *x, const float *w, const float *b, float *y) {
	if (wino_ok(&g))
		return wino_c(g, x, w, b, y);
	conv_fwd_c(g, x, w, b, y);
	return 0;
}
__attribute__((target("avx2,fma"))) static int conv_wgrad_avx2(gorun_cgeom g, const float *dy, const float *x,
                                                               float *dw, int accumulate) {
	if (winow_ok(&g))
		return conv_winow_a(g, dy, x, dw, accumulate);
	if (wgrad_by_o(&g) && !wgrad_o16(&g))
		return wgrad_by_o_run(g, dy, x, dw, accumulate, wgrado_a, NB, transpose_a);
	if (wgrad_a(&g))
		return conv_wgrad_a(g, dy, x, dw, accumulate);
	if (wgrad_flat_a(&g)) {
		long taps = g.o * g.c * g.kh * g.kw;
		float *part = zalloc64(taps * 16);
		if (!part)
			return -1;
		int err = conv_wgrad_flat(g, dy, x, part, wgradf_a3);
		if (!err)
			finish(part, taps, dw, accumulate);
		free(part);
		return err;
	}
	return conv_wgrad_c(g, dy, x, dw, accumulate);
}
static int conv_wgrad_plain(gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate) {
	return conv_wgrad_c(g, dy, x, dw, accumulate);
}
__attribute__((target("avx2,fma"))) static void conv_dgrad_avx2(gorun_cgeom g, const float *dy, const float *w,
                                                                float *dx) {
	if (g.s != 1)
		conv_dgrad_sc(g, dy, w, dx);
	else
		conv_dgrad_c(g, dy, w, dx);
}
static void conv_dgrad_plain(gorun_cgeom g, const float *dy, const float *w, float *dx) {
	if (g.s != 1)
		conv_dgrad_sc(g, dy, w, dx);
	else
		conv_dgrad_c(g, dy, w, dx);
}

// strided_ok reports whether the AVX-512 bodies take g's stride: up to 16,
// on planes up to 4096 columns (phase_split's column map).
static inline int strided_ok(const gorun_cgeom *g) { return g->s == 1 || g->s <= MAXKW && g->w <= 4096; }

// AVX2_DEPTH bounds the depth (the terms of each output's sum: C·KH·KW for
// the forward pass and the weight gradient, O·KH·KW for the input
// gradient) of the convolutions whose passes level 1 runs with its AVX2
// bodies rather than lowering: deeper, the matrix multiply of lowering
// catches up. BenchmarkConv's medians over 60 alternating calls here (AMD
// EPYC Zen 3, AVX2 without AVX-512): the MNIST Net's conv2 (depth 250 and
// 500) forward 0.42–0.49× lowering's time, weight gradient 0.78–0.83×,
// input gradient 0.54–0.60×; the ResNet's 7-column layer (576) forward by
// DEF_FWD 1.11–1.13×, input gradient 1.15–1.27× (fwdo_a takes both now),
// weight gradient by wgrado_a 1.0×.
#define AVX2_DEPTH 512

// fwd_fast_avx2 reports whether conv_fwd_avx2 runs g's forward pass with
// the AVX2 bodies and faster than lowering: Winograd's geometries (the
// ResNet's 28- and 14-column layers: 0.55× lowering's time, input gradients
// 0.52–0.59×); fwd_by_o's (its 7-column layer 0.74×, input gradient
// 0.64–0.79×; its stride-2 layers 0.54–0.63×); stride 1, kernels wider
// than one column (1×1 kernels lower to a matrix product anyway) and depth
// up to AVX2_DEPTH.
static int fwd_fast_avx2(const gorun_cgeom *g) {
	return g->s == 1 && g->kw > 1 && (wino_ok(g) || g->c * g->kh * g->kw <= AVX2_DEPTH) || fwd_by_o(g);
}

// conv_fast_avx2 is gorun_vec_conv_fast at level 1: the forward where
// fwd_fast_avx2 says; the weight gradient by Winograd (the ResNet's 28- and
// 14-column layers: 0.52–0.64× lowering's time), and with depth up to
// AVX2_DEPTH over the output channels (wgrado_a: its stride-2 layers
// 0.62–0.68×; its 7-column layer, depth 576, 1.0×) and of stride 1 and
// kernels 3 or 5 wide by columns (wgrad_a) or over flattened planes
// (wgrad_flat_a); the input gradient of the geometries dgrad_scatter takes
// (depth up to AVX2_DEPTH), and of same convolutions whose transposed
// forward fwd_fast_avx2 takes.
static int conv_fast_avx2(const gorun_cgeom *g) {
	int r = 0;
	if (fwd_fast_avx2(g))
		r |= 1;
	int by_o = wgrad_by_o(g) && !wgrad_o16(g);
	if ((wgrad_a(g) || wgrad_flat_a(g) || by_o) && g->c * g->kh * g->kw <= AVX2_DEPTH || winow_ok(g))
		r |= 2;
	gorun_cgeom gt = *g;
	gt.c = g->o, gt.o = g->c, gt.h = g->oh, gt.w = g->ow, gt.oh = g->h, gt.ow = g->w;
	if (dgrad_scatter(g) && g->o * g->kh * g->kw <= AVX2_DEPTH || dgrad_same(g) && fwd_fast_avx2(&gt))
		r |= 4;
	return r;
}

// gorun_vec_conv_fast reports which passes the AVX-512 bodies take at
// level: bit 0 the forward, bit 1 the weight gradient, bit 2 the input
// gradient.
//
// The weight gradient's body takes planes narrower than 8 columns too (the
// single-channel path sends it them), but slower there than im2col and a
// matrix multiply (BenchmarkConv in ops: the ResNet's 7-column layer, 92
// against 60 µs a sample), so the bit is clear for them. The strided input
// gradient takes every geometry, but where the kernel is narrower than the
// stride (phases without taps) lowering measured faster, so the bit is
// clear there, except for 1×1 kernels without padding (the ResNet's
// downsamples), which pw_dgrad runs (0.7× lowering).
int gorun_vec_conv_fast(int level, gorun_cgeom g) {
	if (level == 1)
		return conv_fast_avx2(&g);
	if (level < 2 || !strided_ok(&g))
		return 0;
	int vl = __builtin_cpu_supports("avx512vl"), k35 = g.kw == 3 || g.kw == 5, r = 1;
	if (k35 && g.ow <= 128 && g.ow >= 8 || wgrad_by_o(&g) || wgrad_pw(&g))
		r |= 2;
	if (dgrad_scatter(&g) && vl || dgrad_same(&g) || g.s > 1 && g.kh >= g.s && g.kw >= g.s || pointwise_dgrad(&g))
		r |= 4;
	return r;
}

int gorun_vec_conv_fwd(int level, gorun_cgeom g, const float *x, const float *w, const float *b, float *y) {
	if (level == 2 && !strided_ok(&g))
		level = 1;
	switch (level) {
	case 2: return conv_fwd_avx512(g, x, w, b, y);
	case 1: return conv_fwd_avx2(g, x, w, b, y);
	default: return conv_fwd_plain(g, x, w, b, y);
	}
}

int gorun_vec_conv_wgrad(int level, gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate) {
	if (level == 2 && !wgrad_by_o(&g) && !wgrad_pw(&g) && !((g.kw == 3 || g.kw == 5) && g.ow <= 128 && strided_ok(&g) &&
	                    (wgrad_lanes(&g) == 16 || __builtin_cpu_supports("avx512vl"))))
		level = 1;
	switch (level) {
	case 2: return conv_wgrad_avx512(g, dy, x, dw, accumulate);
	case 1: return conv_wgrad_avx2(g, dy, x, dw, accumulate);
	default: return conv_wgrad_plain(g, dy, x, dw, accumulate);
	}
}


int gorun_vec_conv_dgrad(int level, gorun_cgeom g, const float *dy, const float *w, float *dx) {
	if (dgrad_same(&g))
		return dgrad_as_fwd(level == 2 ? conv_fwd_avx512 : level == 1 ? conv_fwd_avx2 : conv_fwd_plain, g, dy, w, dx);
	if (level == 2 && pointwise_dgrad(&g))
		return pw_dgrad(g, dy, w, dx);
	if (level == 2 && dgrad_s2(&g))
		return conv_dgrad_s2(g, dy, w, dx);
	if (level == 2 && g.s != 1 && strided_ok(&g))
		return conv_dgrad_strided_avx512(g, dy, w, dx);
	if (level == 2 && !(gorun_vec_conv_fast(level, g) & 4))
		level = 1;
	switch (level) {
	case 2: // groups of 5 channels where that pads none and 4 would (the MNIST Net's 10)
		if (g.kw == 3)
			return dgrad_k3(g, dy, w, dx);
		return g.c % 5 == 0 && g.c % 4 != 0 ? dgrad_k5c5(g, dy, w, dx) : dgrad_k5(g, dy, w, dx);
	case 1:
		if (dgrad_scatter(&g))
			return g.kw == 3 ? dgrad_a3(g, dy, w, dx) : dgrad_a5(g, dy, w, dx);
		conv_dgrad_avx2(g, dy, w, dx);
		break;
	default: conv_dgrad_plain(g, dy, w, dx);
	}
	return 0;
}

// ---- Conv2DPool's parameter gradients: the weight and bias gradients of a
// convolution whose output was max-pooled 2×2 (and, with y, clamped by a
// ReLU), from the gradient of the pooled output; the dense gradient of the
// convolution's output is built CP_NB samples at a time in the caller's
// scratch and summed from there, into the weight gradient's sixteen
// partials per tap and the bias's float64 plane sums, which carry from one
// chunk to the next: every partial adds the same products in the same
// order as gorun_vec_conv_wgrad and gorun_vec_bias_grad over the whole
// dense gradient, so the bits are theirs ----

void gorun_vec_relu_grad(int level, float *dx, const float *dy, const float *dy2, const float *y, long n);
void gorun_vec_maxpool2x2_grad(int level, const float *dy, const int32_t *idx, float *dx, long planes, long h, long w,
                               long oh, long ow);
float gorun_vec_sum(int level, const float *x, long n);

#define CP_NB 16

// gorun_vec_conv_pool_grad_ok reports whether g (one input channel, stride
// 1) is a geometry whose weight gradient adds by column into sixteen
// partials at every level (not by output channel, not flattened, not 1×1),
// so that its sums can carry from chunk to chunk. It reads the geometry
// only: every machine fuses the same plans.
int gorun_vec_conv_pool_grad_ok(gorun_cgeom g) {
	return g.c == 1 && g.s == 1 && g.kw <= MAXKW && !wgrad_by_o(&g) && !wgrad_flat(&g) && !wgrad_pw(&g) && !winow_ok(&g);
}

__attribute__((target("avx2,fma"))) static void wgrad_part_avx2(gorun_cgeom g, const float *dy, const float *x, float *part) {
	wgrad_part_c(g, dy, x, part);
}
static void wgrad_part_plain(gorun_cgeom g, const float *dy, const float *x, float *part) { wgrad_part_c(g, dy, x, part); }

// wgrad_part_avx512 adds g's samples (at most NB) into part as
// conv_wgrad_avx512's stride-1 bodies do, copying them into the
// zero-bordered planes xp first when g has padding.
__attribute__((target("avx512f"))) static void wgrad_part_avx512(gorun_cgeom g, const float *dy, const float *x, float *part,
                                                                 float *xp) {
	int y = wgrad_lanes(&g) == 8;
	void (*body)(gorun_cgeom, const float *, const float *, float *, int) =
	    g.kw == 3 ? (y ? wgrad_y3 : wgrad_z3) : (y ? wgrad_y5 : wgrad_z5);
	if (!xp) {
		body(g, dy, x, part, 0);
		return;
	}
	long ph = g.h + 2 * g.p, pw = g.w + 2 * g.p;
	for (long s = 0; s < g.n; s++)
		border_copy(&g, x + s * g.c * g.h * g.w, xp + s * g.c * ph * pw, ph, pw);
	g.h = ph, g.w = pw, g.p = 0;
	body(g, dy, xp, part, 1);
}

// gorun_vec_conv_pool_grad sets dw (and db, unless NULL) to the weight and
// bias gradients of convolution g (gorun_vec_conv_pool_grad_ok) whose
// output [n,o,oh,ow] was max-pooled 2×2 with stride 2 into
// [n,o,oh/2,ow/2] (idx as gorun_vec_maxpool2x2's) and, when y is not
// NULL, clamped by a ReLU whose output is y: dy is the gradient of that
// last output. work holds CP_NB samples of the convolution's gradient, 8
// planes, and CP_NB samples of the pooled gradient. Accumulate adds to dw
// and db. Returns -1 when out of memory.
int gorun_vec_conv_pool_grad(int level, gorun_cgeom g, const float *dy, const int32_t *idx, const float *y,
                             const float *x, float *dw, float *db, int accumulate, float *work) {
	long taps = g.o * g.c * g.kh * g.kw, plane = g.oh * g.ow, hw = g.h * g.w;
	long ph = g.oh / 2, pw = g.ow / 2, pooled = g.o * ph * pw;
	int wl = level; // the weight gradient's level, as gorun_vec_conv_wgrad picks it
	if (wl == 2 && !((g.kw == 3 || g.kw == 5) && g.ow <= 128 && (wgrad_lanes(&g) == 16 || __builtin_cpu_supports("avx512vl"))))
		wl = 1;
	if (wl == 1 && !wgrad_a(&g))
		wl = -1; // the loops compiled for AVX2
	float *part = zalloc64(taps * 16);
	double *bsum = calloc(g.o + 1, sizeof(double));
	float *xp = NULL;
	if (wl >= 1 && g.p > 0)
		xp = calloc(CP_NB * g.c * (g.h + 2 * g.p) * (g.w + 2 * g.p) + 16, sizeof(float));
	if (!part || !bsum || (wl >= 1 && g.p > 0 && !xp)) {
		free(part), free(bsum), free(xp);
		return -1;
	}
	// dc, then 8 planes that the bodies' masked loads for channels past o
	// read (with a zero mask) after the chunk's last sample, zeroed so that
	// their pages are present (a masked load from a page never touched
	// takes a slow assist on every call), then dz.
	float *dc = work, *dz = work + (CP_NB * g.o + 8) * plane;
	memset(dc + CP_NB * g.o * plane, 0, 8 * plane * sizeof(float));
	for (long n0 = 0; n0 < g.n; n0 += CP_NB) {
		gorun_cgeom gc = g;
		gc.n = g.n - n0 < CP_NB ? g.n - n0 : CP_NB;
		const float *dp = dy + n0 * pooled;
		if (y) {
			gorun_vec_relu_grad(level, dz, dp, NULL, y + n0 * pooled, gc.n * pooled);
			dp = dz;
		}
		gorun_vec_maxpool2x2_grad(level, dp, idx + n0 * pooled, dc, gc.n * g.o, g.oh, g.ow, ph, pw);
		const float *xc = x + n0 * g.c * hw;
		switch (wl) {
		case 2: wgrad_part_avx512(gc, dc, xc, part, xp); break;
		case 1: wgrad_part_a(gc, dc, xc, part, xp); break;
		case -1: wgrad_part_avx2(gc, dc, xc, part); break;
		default: wgrad_part_plain(gc, dc, xc, part);
		}
		if (db)
			for (long j = 0; j < g.o; j++)
				for (long i = 0; i < gc.n; i++)
					bsum[j] += (double)gorun_vec_sum(level, dc + (i * g.o + j) * plane, plane);
	}
	finish(part, taps, dw, accumulate);
	if (db)
		for (long j = 0; j < g.o; j++)
			db[j] = accumulate ? db[j] + (float)bsum[j] : (float)bsum[j];
	free(part), free(bsum), free(xp);
	return 0;
}
