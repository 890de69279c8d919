//go:build cgo && amd64 && !purego

package vec

/*
#cgo noescape gorun_vec_bn_sums
#cgo nocallback gorun_vec_bn_sums
#cgo noescape gorun_vec_bn_grad_sums
#cgo nocallback gorun_vec_bn_grad_sums
#cgo noescape gorun_vec_bn_apply
#cgo nocallback gorun_vec_bn_apply
#cgo noescape gorun_vec_bn_grad_input
#cgo nocallback gorun_vec_bn_grad_input
void gorun_vec_bn_sums(int level, const float *x, long n, long ch, long l, long j0, long nc, double *s1, double *s2);
void gorun_vec_bn_grad_sums(int level, const float *dy, const float *x, const float *mean, long n, long ch, long l,
                        long j0, long nc, double *s0, double *s1);
void gorun_vec_bn_apply(int level, float *y, const float *x, const float *res, int relu, const float *mean,
                        const float *scale, const float *shift, long n, long ch, long l, long j0, long nc);
void gorun_vec_bn_grad_input(int level, float *dx, const float *dy, const float *x, const float *mean, const float *k,
                         const float *sub, const float *slope, long n, long ch, long l, long j0, long nc);
*/
import "C"

import "unsafe"

// The C functions keep no pointer past the call (noescape), so the
// per-channel slices of a caller may live on its stack.

func dp(s []float64) *C.double { return (*C.double)(unsafe.Pointer(unsafe.SliceData(s))) }

func bnSums(lv int, s1, s2 []float64, x []float32, n, ch, l, j0, nc int) {
	C.gorun_vec_bn_sums(C.int(lv), fp(x), C.long(n), C.long(ch), C.long(l), C.long(j0), C.long(nc), dp(s1), dp(s2))
}

func bnGradSums(lv int, s0, s1 []float64, dy, x, mean []float32, n, ch, l, j0, nc int) {
	C.gorun_vec_bn_grad_sums(C.int(lv), fp(dy), fp(x), fp(mean), C.long(n), C.long(ch), C.long(l), C.long(j0), C.long(nc),
		dp(s0), dp(s1))
}

func bnApply(lv int, y, x, res []float32, relu bool, mean, scale, shift []float32, n, ch, l, j0, nc int) {
	C.gorun_vec_bn_apply(C.int(lv), fp(y), fp(x), fp(res), cbool(relu), fp(mean), fp(scale), fp(shift), C.long(n),
		C.long(ch), C.long(l), C.long(j0), C.long(nc))
}

func bnGradInput(lv int, dx, dy, x, mean, k, sub, slope []float32, n, ch, l, j0, nc int) {
	C.gorun_vec_bn_grad_input(C.int(lv), fp(dx), fp(dy), fp(x), fp(mean), fp(k), fp(sub), fp(slope), C.long(n), C.long(ch),
		C.long(l), C.long(j0), C.long(nc))
}
