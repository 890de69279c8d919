//go:build cgo && amd64 && !purego

// Single-threaded float32 GEMM, C = alpha·op(A)·op(B) + beta·C, row-major.
//
// Blocking scheme (GotoBLAS/BLIS style, one core):
//
//   for jc over n in steps of NC            columns of C and op(B)
//     for pc over k in steps of KC          depth
//       pack op(B)[pc:pc+kc, jc:jc+nc] into NR-wide panels (kc×NR each,
//         row p of a panel = NR consecutive columns, zero-padded)
//       for ic over m in steps of MC        rows of C and op(A)
//         pack op(A)[ic:ic+mc, pc:pc+kc] into MR-tall panels (kc×MR each,
//           step p of a panel = MR consecutive rows, zero-padded)
//         for jr over nc in steps of NR     one B panel, kept hot in L1/L2
//           for ir over mc in steps of MR   A panels stream from L2
//             micro-kernel: MR×NR tile of C += A panel · B panel
//
// The micro-kernel keeps the whole MR×NR tile of C in vector registers and,
// for each p, loads one row of the B panel (NR floats), broadcasts each of
// the MR values of the A panel and does MR·NR/VL fused multiply-adds:
//
//   AVX-512: MR=10, NR=32: 20 zmm accumulators + 2 B vectors (of 32 zmm).
//            MR=10 fits the m of the MNIST Net's layers (10, 20, 50, 250);
//            m a multiple of 8 but not of 10 (a ResNet's 16, 32, 64 channels,
//            144 = 16·3·3) takes MR=8 instead, which pads no rows. Each
//            element of C sums over k in the same order either way, so the
//            choice changes no result.
//   AVX2:    MR=6,  NR=16: 12 ymm accumulators + 2 B vectors (of 16 ymm).
//   scalar:  MR=4,  NR=8:  portable C, left to the compiler.
//
// When op(B) = B (not transposed) and m is at most 4·MR, each B panel would
// be reused by at most 4 A panels, and packing it costs more than it saves
// (measured: conv2 forward, m=20, runs ~1.5× faster): the kernel reads B in
// place with its row stride, and only a ragged last panel is copied.
//
// When op(A) = A and op(B) = Bᵀ with m ≤ 64 and k ≥ 48 (weight gradients, linear
// forward: small m·n, long k), both operands have rows contiguous along k,
// and packing (a transpose of both) would dominate. The AVX-512 path then
// skips packing and takes dot products instead: a 5×5 tile of C in 25 zmm
// accumulators, 16 k per step (masked loads for the tail), KCD=2048 deep per
// pass, each accumulator summed horizontally in a fixed order at the end.
//
// alpha is applied to each kc-deep partial sum when it is added to C; the
// first depth block uses beta (C is not read when beta is 0), later ones add.
// The order of every floating-point operation depends only on the shapes
// and the instruction set, so results are bit-identical from call to call.
// (Plain C arithmetic is compiled with fp-contract=off, so a vectorized
// loop and its scalar remainder round alike whatever the alignment; fused
// multiply-adds appear only as explicit intrinsics.)
//
// Packing buffers are per thread (allocated once per OS thread, freed when
// it exits), so concurrent calls from different threads are safe.

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC optimize("fp-contract=off")

#define KC 256
#define MC 120 // a multiple of every MR below
#define NC 2048 // a multiple of every NR below
#define NR_MAX 32

#define BUF_A (MC * KC)
#define BUF_B (KC * NC)
#define BUF_E (KC * NR_MAX)
#define BUF_FLOATS (BUF_A + BUF_B + BUF_E)

#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef void (*kernel_fn)(long kc, const float *a, const float *b, long ldb,
                          float *c, long ldc, float alpha, float beta,
                          long mr, long nr);

// ---- per-thread packing buffers ----

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static __thread float *tls_buf;

static void buf_free(void *p) { free(p); }
static void buf_key_init(void) { pthread_key_create(&buf_key, buf_free); }

static float *thread_buf(void) {
	if (tls_buf)
		return tls_buf;
	pthread_once(&buf_once, buf_key_init);
	void *p;
	if (posix_memalign(&p, 64, BUF_FLOATS * sizeof(float)))
		return NULL;
	pthread_setspecific(buf_key, p);
	tls_buf = p;
	return tls_buf;
}

// ---- packing ----

// A tr8_fn transposes an 8×8 block: d[q*ds + i] = s[i*ls + q] for i, q < 8.
typedef void (*tr8_fn)(const float *s, long ls, float *d, long ds);

static void tr8_scalar(const float *s, long ls, float *d, long ds) {
	for (long q = 0; q < 8; q++)
		for (long i = 0; i < 8; i++)
			d[q * ds + i] = s[i * ls + q];
}

__attribute__((target("avx2"))) static inline void
tr8_avx(const float *s, long ls, float *d, long ds) {
	__m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls);
	__m256 r2 = _mm256_loadu_ps(s + 2 * ls), r3 = _mm256_loadu_ps(s + 3 * ls);
	__m256 r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
	__m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
	__m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
	__m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
	__m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
	__m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
	__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
	__m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
	__m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
	__m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
	_mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
	_mm256_storeu_ps(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
	_mm256_storeu_ps(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
	_mm256_storeu_ps(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
	_mm256_storeu_ps(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
	_mm256_storeu_ps(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
	_mm256_storeu_ps(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
	_mm256_storeu_ps(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// pack_t copies a rows×cols block transposed: d[q*ds + i] = s[i*ls + q],
// 8×8 blocks at a time.
static ALWAYS_INLINE void pack_t(const float *s, long ls, long rows, long cols,
                                 float *d, long ds, tr8_fn tr8) {
	long i0 = 0;
	for (; i0 + 8 <= rows; i0 += 8) {
		long q0 = 0;
		for (; q0 + 8 <= cols; q0 += 8)
			tr8(s + i0 * ls + q0, ls, d + q0 * ds + i0, ds);
		for (long i = i0; i < i0 + 8; i++)
			for (long q = q0; q < cols; q++)
				d[q * ds + i] = s[i * ls + q];
	}
	for (long i = i0; i < rows; i++)
		for (long q = 0; q < cols; q++)
			d[q * ds + i] = s[i * ls + q];
}

// pack_a copies op(A)[0:mc, 0:kc] (a points at its top-left element) into
// MR-tall panels: out[ir*kc + p*MR + r] = op(A)[ir+r, p], zero for rows ≥ mc.
static ALWAYS_INLINE void pack_a(int trans, const float *a, long lda, long mc,
                                 long kc, const long MR, float *restrict out,
                                 tr8_fn tr8) {
	for (long ir = 0; ir < mc; ir += MR) {
		long mr = mc - ir < MR ? mc - ir : MR;
		float *o = out + ir * kc;
		if (!trans) {
			pack_t(a + ir * lda, lda, mr, kc, o, MR, tr8);
			for (long p = 0; p < kc; p++)
				for (long r = mr; r < MR; r++)
					o[p * MR + r] = 0;
		} else if (mr == MR) {
			for (long p = 0; p < kc; p++)
				__builtin_memcpy(o + p * MR, a + p * lda + ir, MR * sizeof(float));
		} else {
			for (long p = 0; p < kc; p++) {
				const float *src = a + p * lda + ir;
				for (long r = 0; r < mr; r++)
					o[p * MR + r] = src[r];
				for (long r = mr; r < MR; r++)
					o[p * MR + r] = 0;
			}
		}
	}
}

// pack_b copies op(B)[0:kc, 0:nc] (b points at its top-left element) into
// NR-wide panels: out[jr*kc + p*NR + j] = op(B)[p, jr+j], zero for cols ≥ nc.
static ALWAYS_INLINE void pack_b(int trans, const float *b, long ldb, long kc,
                                 long nc, const long NR, float *restrict out,
                                 tr8_fn tr8) {
	for (long jr = 0; jr < nc; jr += NR) {
		long nr = nc - jr < NR ? nc - jr : NR;
		float *o = out + jr * kc;
		if (!trans) {
			for (long p = 0; p < kc; p++) {
				const float *src = b + p * ldb + jr;
				if (nr == NR) {
					for (long j = 0; j < NR; j++)
						o[p * NR + j] = src[j];
				} else {
					for (long j = 0; j < nr; j++)
						o[p * NR + j] = src[j];
					for (long j = nr; j < NR; j++)
						o[p * NR + j] = 0;
				}
			}
		} else {
			pack_t(b + jr * ldb, ldb, nr, kc, o, NR, tr8);
			for (long p = 0; p < kc; p++)
				for (long j = nr; j < NR; j++)
					o[p * NR + j] = 0;
		}
	}
}

// store_edge writes an alpha-scaled MR×NR tile t (row stride NR) into the
// mr×nr corner of C.
static ALWAYS_INLINE void store_edge(const float *t, const long NR, float *c,
                                     long ldc, float beta, long mr, long nr) {
	for (long r = 0; r < mr; r++) {
		float *cr = c + r * ldc;
		const float *tr = t + r * NR;
		if (beta == 0)
			for (long j = 0; j < nr; j++)
				cr[j] = tr[j];
		else
			for (long j = 0; j < nr; j++)
				cr[j] = tr[j] + beta * cr[j];
	}
}

// ---- driver ----

static ALWAYS_INLINE void driver(int transA, int transB, long m, long n, long k,
                                 float alpha, const float *A, long lda,
                                 const float *B, long ldb, float beta, float *C,
                                 long ldc, float *buf, const long MR,
                                 const long NR, kernel_fn kern, tr8_fn tr8) {
	float *bufA = buf, *bufB = buf + BUF_A, *bufE = buf + BUF_A + BUF_B;
	// B is read in place when each of its panels meets only one A panel.
	int direct = !transB && m <= 4 * MR;
	for (long jc = 0; jc < n; jc += NC) {
		long nc = n - jc < NC ? n - jc : NC;
		for (long pc = 0; pc < k; pc += KC) {
			long kc = k - pc < KC ? k - pc : KC;
			float bet = pc == 0 ? beta : 1.0f;
			const float *Bblk = transB ? B + jc * ldb + pc : B + pc * ldb + jc;
			if (!direct)
				pack_b(transB, Bblk, ldb, kc, nc, NR, bufB, tr8);
			for (long ic = 0; ic < m; ic += MC) {
				long mc = m - ic < MC ? m - ic : MC;
				const float *Ablk = transA ? A + pc * lda + ic : A + ic * lda + pc;
				pack_a(transA, Ablk, lda, mc, kc, MR, bufA, tr8);
				for (long jr = 0; jr < nc; jr += NR) {
					long nr = nc - jr < NR ? nc - jr : NR;
					const float *bp = bufB + jr * kc;
					long bs = NR;
					if (direct) {
						if (nr == NR) {
							bp = Bblk + jr;
							bs = ldb;
						} else {
							pack_b(0, Bblk + jr, ldb, kc, nr, NR, bufE, tr8);
							bp = bufE;
						}
					}
					float *cp = C + ic * ldc + jc + jr;
					for (long ir = 0; ir < mc; ir += MR) {
						long mr = mc - ir < MR ? mc - ir : MR;
						kern(kc, bufA + ir * kc, bp, bs, cp + ir * ldc, ldc, alpha, bet, mr, nr);
					}
				}
			}
		}
	}
}

// ---- dot-product driver, for op(A) = A and op(B) = Bᵀ ----

typedef void (*dot_fn)(long kc, const float *a, long lda, const float *b,
                       long ldb, float *c, long ldc, float alpha, float beta,
                       long mr, long nr);

#define KCD 2048
#define DOT_MAX_M 64 // A's m×KCD block stays in L2
// DOT_MIN_K is the shortest k the dot-product path takes: below it the
// horizontal sums of its 25 accumulators outweigh the few vector steps, and
// packing wins (BenchmarkSGEMMShapes: attention scores 64×64×32 go from 23 %
// to 81 % of the core's peak; the MNIST Net's fc2, k = 50, stays on the dot
// path, where it is faster).
#define DOT_MIN_K 48

// dot_driver computes C = alpha·A·Bᵀ + beta·C where rows of both A and B are
// contiguous along k: each element of C is a dot product, and the kernel
// computes an MRD×NRD tile of them, KCD deep at a time, without packing.
static ALWAYS_INLINE void dot_driver(long m, long n, long k, float alpha,
                                     const float *A, long lda, const float *B,
                                     long ldb, float beta, float *C, long ldc,
                                     const long MRD, const long NRD, dot_fn kern) {
	for (long pc = 0; pc < k; pc += KCD) {
		long kc = k - pc < KCD ? k - pc : KCD;
		float bet = pc == 0 ? beta : 1.0f;
		for (long jr = 0; jr < n; jr += NRD) {
			long nr = n - jr < NRD ? n - jr : NRD;
			for (long ir = 0; ir < m; ir += MRD) {
				long mr = m - ir < MRD ? m - ir : MRD;
				kern(kc, A + ir * lda + pc, lda, B + jr * ldb + pc, ldb,
				     C + ir * ldc + jr, ldc, alpha, bet, mr, nr);
			}
		}
	}
}

// ---- AVX-512 ----

#define MR512 10
#define MR512_8 8 // for m a multiple of 8 but not of 10 (16, 32, 64, 144)
#define NR512 32

// DEF_KERN512 defines an AVX-512 micro-kernel of MRX×32 (MRX ≤ 14: 2·MRX
// accumulators + 2 B vectors of 32 zmm).
#define DEF_KERN512(NAME, MRX) \
__attribute__((target("avx512f"))) static void \
NAME(long kc, const float *restrict a, const float *restrict b, long ldb, \
            float *restrict c, long ldc, float alpha, float beta, long mr, long nr) { \
	__m512 acc[MRX][2]; \
_Pragma("GCC unroll 16") \
	for (int r = 0; r < MRX; r++) \
		acc[r][0] = acc[r][1] = _mm512_setzero_ps(); \
	for (long p = 0; p < kc; p++) { \
		__m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16); \
_Pragma("GCC unroll 16") \
		for (int r = 0; r < MRX; r++) { \
			__m512 av = _mm512_set1_ps(a[r]); \
			acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]); \
			acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]); \
		} \
		a += MRX; \
		b += ldb; \
	} \
	__m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta); \
	if (mr == MRX && nr == NR512) { \
_Pragma("GCC unroll 16") \
		for (int r = 0; r < MRX; r++) { \
			float *cr = c + r * ldc; \
			__m512 x0 = _mm512_mul_ps(va, acc[r][0]), x1 = _mm512_mul_ps(va, acc[r][1]); \
			if (beta != 0) { \
				x0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr), x0); \
				x1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cr + 16), x1); \
			} \
			_mm512_storeu_ps(cr, x0); \
			_mm512_storeu_ps(cr + 16, x1); \
		} \
		return; \
	} \
	float t[MRX * NR512] __attribute__((aligned(64))); \
_Pragma("GCC unroll 16") \
	for (int r = 0; r < MRX; r++) { \
		_mm512_store_ps(t + r * NR512, _mm512_mul_ps(va, acc[r][0])); \
		_mm512_store_ps(t + r * NR512 + 16, _mm512_mul_ps(va, acc[r][1])); \
	} \
	store_edge(t, NR512, c, ldc, beta, mr, nr); \
} \

DEF_KERN512(kern_avx512, MR512)
DEF_KERN512(kern_avx512_8, MR512_8)

#define MRD512 5
#define NRD512 5

// kern_dot_avx512: 5×5 tile of dot products, 16 k at a time: 25 zmm
// accumulators, 5 rows of B in registers, one row of A loaded at a time.
// Rows past mr or nr repeat the last one; their results are dropped.
__attribute__((target("avx512f"))) static void
kern_dot_avx512(long kc, const float *a, long lda, const float *b, long ldb,
                float *c, long ldc, float alpha, float beta, long mr, long nr) {
	const float *ap[MRD512], *bp[NRD512];
	for (long r = 0; r < MRD512; r++)
		ap[r] = a + (r < mr ? r : mr - 1) * lda;
	for (long j = 0; j < NRD512; j++)
		bp[j] = b + (j < nr ? j : nr - 1) * ldb;
	__m512 acc[MRD512][NRD512];
#pragma GCC unroll 32
	for (int r = 0; r < MRD512; r++)
#pragma GCC unroll 32
		for (int j = 0; j < NRD512; j++)
			acc[r][j] = _mm512_setzero_ps();
	long p = 0;
	__mmask16 mask = 0xffff;
	for (;;) {
		if (p + 16 > kc) {
			if (p >= kc)
				break;
			mask = (__mmask16)((1u << (kc - p)) - 1);
		}
		__m512 bv[NRD512];
#pragma GCC unroll 32
		for (int j = 0; j < NRD512; j++)
			bv[j] = _mm512_maskz_loadu_ps(mask, bp[j] + p);
#pragma GCC unroll 32
		for (int r = 0; r < MRD512; r++) {
			__m512 av = _mm512_maskz_loadu_ps(mask, ap[r] + p);
#pragma GCC unroll 32
			for (int j = 0; j < NRD512; j++)
				acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
		}
		p += 16;
	}
	float t[MRD512][NRD512];
#pragma GCC unroll 32
	for (int r = 0; r < MRD512; r++)
#pragma GCC unroll 32
		for (int j = 0; j < NRD512; j++)
			t[r][j] = alpha * _mm512_reduce_add_ps(acc[r][j]);
	for (long r = 0; r < mr; r++)
		for (long j = 0; j < nr; j++) {
			float *x = c + r * ldc + j;
			*x = beta == 0 ? t[r][j] : t[r][j] + beta * *x;
		}
}

__attribute__((target("avx512f"))) static void
sgemm_avx512(int transA, int transB, long m, long n, long k, float alpha,
             const float *A, long lda, const float *B, long ldb, float beta,
             float *C, long ldc, float *buf) {
	if (transB && !transA && m <= DOT_MAX_M && k >= DOT_MIN_K)
		dot_driver(m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, MRD512, NRD512, kern_dot_avx512);
	else if (m % MR512_8 == 0 && m % MR512 != 0)
		driver(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf,
		       MR512_8, NR512, kern_avx512_8, tr8_avx);
	else
		driver(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf,
		       MR512, NR512, kern_avx512, tr8_avx);
}

// ---- AVX2 + FMA ----

#define MR256 6
#define NR256 16

__attribute__((target("avx2,fma"))) static void
kern_avx2(long kc, const float *restrict a, const float *restrict b, long ldb,
          float *restrict c, long ldc, float alpha, float beta, long mr, long nr) {
	__m256 acc[MR256][2];
#pragma GCC unroll 16
	for (int r = 0; r < MR256; r++)
		acc[r][0] = acc[r][1] = _mm256_setzero_ps();
	for (long p = 0; p < kc; p++) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 16
		for (int r = 0; r < MR256; r++) {
			__m256 av = _mm256_broadcast_ss(a + r);
			acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
			acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
		}
		a += MR256;
		b += ldb;
	}
	__m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
	if (mr == MR256 && nr == NR256) {
#pragma GCC unroll 16
		for (int r = 0; r < MR256; r++) {
			float *cr = c + r * ldc;
			__m256 x0 = _mm256_mul_ps(va, acc[r][0]), x1 = _mm256_mul_ps(va, acc[r][1]);
			if (beta != 0) {
				x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), x0);
				x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), x1);
			}
			_mm256_storeu_ps(cr, x0);
			_mm256_storeu_ps(cr + 8, x1);
		}
		return;
	}
	float t[MR256 * NR256] __attribute__((aligned(32)));
#pragma GCC unroll 16
	for (int r = 0; r < MR256; r++) {
		_mm256_store_ps(t + r * NR256, _mm256_mul_ps(va, acc[r][0]));
		_mm256_store_ps(t + r * NR256 + 8, _mm256_mul_ps(va, acc[r][1]));
	}
	store_edge(t, NR256, c, ldc, beta, mr, nr);
}

__attribute__((target("avx2,fma"))) static void
sgemm_avx2(int transA, int transB, long m, long n, long k, float alpha,
           const float *A, long lda, const float *B, long ldb, float beta,
           float *C, long ldc, float *buf) {
	driver(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf,
	       MR256, NR256, kern_avx2, tr8_avx);
}

// ---- portable ----

#define MRS 4
#define NRS 8

static void kern_scalar(long kc, const float *restrict a, const float *restrict b,
                        long ldb, float *restrict c, long ldc, float alpha,
                        float beta, long mr, long nr) {
	float t[MRS * NRS] = {0};
	for (long p = 0; p < kc; p++) {
		for (int r = 0; r < MRS; r++)
			for (int j = 0; j < NRS; j++)
				t[r * NRS + j] += a[r] * b[j];
		a += MRS;
		b += ldb;
	}
	for (int i = 0; i < MRS * NRS; i++)
		t[i] *= alpha;
	store_edge(t, NRS, c, ldc, beta, mr, nr);
}

static void sgemm_scalar(int transA, int transB, long m, long n, long k,
                         float alpha, const float *A, long lda, const float *B,
                         long ldb, float beta, float *C, long ldc, float *buf) {
	driver(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf,
	       MRS, NRS, kern_scalar, tr8_scalar);
}

// ---- entry points ----

// gorun_sgemm runs the kernel of the given level (package vec's Level, which
// the Go side passes, or lower: 2 AVX-512, 1 AVX2+FMA, 0 portable). m, n, k are positive and the matrices are in bounds (checked by the
// Go caller). It returns 0, or -1 if the packing buffer could not be
// allocated.
int gorun_sgemm(int level, int transA, int transB, long m, long n, long k,
                float alpha, const float *A, long lda, const float *B, long ldb,
                float beta, float *C, long ldc) {
	float *buf = thread_buf();
	if (!buf)
		return -1;
	switch (level) {
	case 2:
		sgemm_avx512(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf);
		break;
	case 1:
		sgemm_avx2(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf);
		break;
	default:
		sgemm_scalar(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, buf);
	}
	return 0;
}
