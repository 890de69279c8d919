//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
void gorun_vec_softmax(int level, const float *x, float *y, long rows, long k, long causal, float *ms);
*/
import "C"

func softmax(lv int, x, y []float32, rows, k, causal int, ms []float32) {
	var mp *C.float
	if ms != nil {
		mp = fp(ms)
	}
	C.gorun_vec_softmax(C.int(lv), fp(x), fp(y), C.long(rows), C.long(k), C.long(causal), mp)
}
