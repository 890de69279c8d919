//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
typedef struct {
	float neglr, wd, mom, damp;
	int decay, momentum, first, nesterov;
} gorun_sgd;
void gorun_vec_sgd(int level, gorun_sgd a, float *p, const float *g, float *buf, long n);
*/
import "C"

func sgd(lv int, a *SGDArgs, p, g, buf []float32) {
	args := C.gorun_sgd{neglr: C.float(-a.LR), wd: C.float(a.WeightDecay), mom: C.float(a.Momentum),
		damp: C.float(a.Keep), decay: cbool(a.WeightDecay != 0), momentum: cbool(a.Momentum != 0),
		first: cbool(a.First), nesterov: cbool(a.Nesterov)}
	var bp *C.float
	if a.Momentum != 0 {
		bp = fp(buf)
	}
	C.gorun_vec_sgd(C.int(lv), args, fp(p), fp(g), bp, C.long(len(p)))
}
