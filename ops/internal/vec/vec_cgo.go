//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
#include <stdint.h>
int gorun_vec_level(void);
void gorun_vec_relu(int level, float *y, const float *x, long n);
void gorun_vec_relu_grad(int level, float *dx, const float *dy, const float *dy2, const float *y, long n);
void gorun_vec_add(int level, float *z, const float *x, const float *y, long n);
float gorun_vec_sum(int level, const float *x, long n);
void gorun_vec_bias_grad(int level, const float *dy, long n, long o, long plane, float *db, int accumulate);
void gorun_vec_maxpool2x2(int level, const float *x, float *y, int32_t *idx, long planes, long h, long w, long oh, long ow);
void gorun_vec_scale_planes(int level, float *y, const float *x, const float *s, long planes, long hw);
void gorun_vec_maxpool2x2_grad(int level, const float *dy, const int32_t *idx, float *dx, long planes, long h, long w, long oh, long ow);
*/
import "C"

import "unsafe"

// level is the best C kernel this CPU runs.
var level = int(C.gorun_vec_level())

func fp(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

// cbool is b as a C flag.
func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func relu(lv int, y, x []float32) {
	C.gorun_vec_relu(C.int(lv), fp(y), fp(x), C.long(len(x)))
}

func reluGrad(lv int, dx, dy, dy2, y []float32) {
	C.gorun_vec_relu_grad(C.int(lv), fp(dx), fp(dy), fp(dy2), fp(y), C.long(len(dy)))
}

func add(lv int, z, x, y []float32) {
	C.gorun_vec_add(C.int(lv), fp(z), fp(x), fp(y), C.long(len(x)))
}

func maxPool2x2(lv int, x, y []float32, idx []int32, planes, h, w, oh, ow int) {
	C.gorun_vec_maxpool2x2(C.int(lv), fp(x), fp(y), (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(idx))),
		C.long(planes), C.long(h), C.long(w), C.long(oh), C.long(ow))
}

func scalePlanes(lv int, y, x, s []float32, hw int) {
	C.gorun_vec_scale_planes(C.int(lv), fp(y), fp(x), fp(s), C.long(len(s)), C.long(hw))
}

func maxPool2x2Grad(lv int, dy []float32, idx []int32, dx []float32, planes, h, w, oh, ow int) {
	C.gorun_vec_maxpool2x2_grad(C.int(lv), fp(dy), (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(idx))), fp(dx),
		C.long(planes), C.long(h), C.long(w), C.long(oh), C.long(ow))
}

func sum(lv int, x []float32) float32 {
	return float32(C.gorun_vec_sum(C.int(lv), fp(x), C.long(len(x))))
}

func biasGrad(lv int, dy []float32, n, o, plane int, db []float32, accumulate bool) {
	C.gorun_vec_bias_grad(C.int(lv), fp(dy), C.long(n), C.long(o), C.long(plane), fp(db), cbool(accumulate))
}
