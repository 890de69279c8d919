//go:build cgo && amd64 && !purego

// A tight loop of independent fused multiply-adds: the fp32 peak of one
// core, measured by BenchmarkSGEMMShapes next to the GEMMs it bounds.

#include <immintrin.h>

// Independent accumulators: at least FMA latency × FMAs per cycle (4 × 2 on
// current x86 cores), and few enough to stay in registers with the two
// operands (32 zmm with AVX-512, 16 ymm with AVX2).
#define CHAINS512 24
#define CHAINS256 12

// gorun_fma_peak_avx512 runs iters × CHAINS512 16-lane FMAs (768·iters flops)
// and returns a value that depends on all of them.
__attribute__((target("avx512f"))) float gorun_fma_peak_avx512(long iters) {
	__m512 acc[CHAINS512];
	__m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
#pragma GCC unroll 32
	for (int j = 0; j < CHAINS512; j++)
		acc[j] = _mm512_set1_ps((float)j);
	for (long i = 0; i < iters; i++) {
#pragma GCC unroll 32
		for (int j = 0; j < CHAINS512; j++)
			acc[j] = _mm512_fmadd_ps(acc[j], x, y);
	}
	__m512 s = acc[0];
#pragma GCC unroll 32
	for (int j = 1; j < CHAINS512; j++)
		s = _mm512_add_ps(s, acc[j]);
	return _mm512_reduce_add_ps(s);
}

// gorun_fma_peak_avx2 runs iters × CHAINS256 8-lane FMAs (192·iters flops).
__attribute__((target("avx2,fma"))) float gorun_fma_peak_avx2(long iters) {
	__m256 acc[CHAINS256];
	__m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
#pragma GCC unroll 32
	for (int j = 0; j < CHAINS256; j++)
		acc[j] = _mm256_set1_ps((float)j);
	for (long i = 0; i < iters; i++) {
#pragma GCC unroll 32
		for (int j = 0; j < CHAINS256; j++)
			acc[j] = _mm256_fmadd_ps(acc[j], x, y);
	}
	__m256 s = acc[0];
#pragma GCC unroll 32
	for (int j = 1; j < CHAINS256; j++)
		s = _mm256_add_ps(s, acc[j]);
	float t[8];
	_mm256_storeu_ps(t, s);
	return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
