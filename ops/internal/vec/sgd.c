//go:build cgo && amd64 && !purego

// The SGD step (see sgd.go), as torch.optim.SGD's single-tensor loop: each
// element's weight decay, momentum buffer and update are fused
// multiply-adds (fmaf in the plain bodies, one instruction in the vector
// one), in the same order at every level, so the levels agree bit for bit.

#include <immintrin.h>
#include <math.h>

#pragma GCC optimize("fp-contract=off")

typedef struct {
	float neglr, wd, mom, damp;
	int decay, momentum, first, nesterov;
} gorun_sgd;

static inline __attribute__((always_inline)) void sgd_c(gorun_sgd a, float *p, const float *g, float *buf, long n) {
	for (long i = 0; i < n; i++) {
		float d = g[i];
		if (a.decay)
			d = fmaf(a.wd, p[i], d); // d_p.add(param, alpha=wd)
		if (a.momentum) {
			float b = a.first ? d : fmaf(a.damp, d, buf[i] * a.mom); // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
			buf[i] = b;
			d = a.nesterov ? fmaf(a.mom, b, d) : b;
		}
		p[i] = fmaf(a.neglr, d, p[i]); // param.add_(d_p, alpha=-lr)
	}
}

__attribute__((target("avx2,fma"))) static void sgd_avx2(gorun_sgd a, float *p, const float *g, float *buf, long n) {
	sgd_c(a, p, g, buf, n);
}
static void sgd_plain(gorun_sgd a, float *p, const float *g, float *buf, long n) { sgd_c(a, p, g, buf, n); }

__attribute__((target("avx512f"))) static void sgd_avx512(gorun_sgd a, float *p, const float *g, float *buf, long n) {
	const __m512 neglr = _mm512_set1_ps(a.neglr), wd = _mm512_set1_ps(a.wd), mom = _mm512_set1_ps(a.mom),
	             damp = _mm512_set1_ps(a.damp);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m512 pv = _mm512_maskz_loadu_ps(m, p + i), d = _mm512_maskz_loadu_ps(m, g + i);
		if (a.decay)
			d = _mm512_fmadd_ps(wd, pv, d);
		if (a.momentum) {
			__m512 b = a.first ? d : _mm512_fmadd_ps(damp, d, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, buf + i), mom));
			_mm512_mask_storeu_ps(buf + i, m, b);
			d = a.nesterov ? _mm512_fmadd_ps(mom, b, d) : b;
		}
		_mm512_mask_storeu_ps(p + i, m, _mm512_fmadd_ps(neglr, d, pv));
	}
}

void gorun_vec_sgd(int level, gorun_sgd a, float *p, const float *g, float *buf, long n) {
	switch (level) {
	case 2: sgd_avx512(a, p, g, buf, n); break;
	case 1: sgd_avx2(a, p, g, buf, n); break;
	default: sgd_plain(a, p, g, buf, n);
	}
}
