//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
void gorun_vec_gelu_tanh(int level, float *y, const float *x, long n);
void gorun_vec_gelu_tanh_grad(int level, float *dx, const float *dy, const float *x, long n);
*/
import "C"

func geluTanh(lv int, y, x []float32) {
	C.gorun_vec_gelu_tanh(C.int(lv), fp(y), fp(x), C.long(len(x)))
}

func geluTanhGrad(lv int, dx, dy, x []float32) {
	C.gorun_vec_gelu_tanh_grad(C.int(lv), fp(dx), fp(dy), fp(x), C.long(len(dy)))
}
