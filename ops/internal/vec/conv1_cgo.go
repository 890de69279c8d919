//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
typedef struct {
	long n, o, h, w;
	long kh, kw, p;
	long oh, ow;
} gorun_c1geom;
int gorun_vec_conv1_fwd(int level, gorun_c1geom g, const float *x, const float *w, const float *b, float *y);
int gorun_vec_conv1_wgrad(int level, gorun_c1geom g, const float *dy, const float *x, float *dw, int accumulate);
*/
import "C"

// c1geom is g as the C struct, passed by value (a pointer would make every
// call allocate).
func c1geom(g *Conv1Geom) C.gorun_c1geom {
	return C.gorun_c1geom{n: C.long(g.N), o: C.long(g.O), h: C.long(g.H), w: C.long(g.W),
		kh: C.long(g.KH), kw: C.long(g.KW), p: C.long(g.P), oh: C.long(g.OH), ow: C.long(g.OW)}
}

func conv1Forward(lv int, g *Conv1Geom, x, w, b, y []float32) {
	var bp *C.float
	if b != nil {
		bp = fp(b)
	}
	if C.gorun_vec_conv1_fwd(C.int(lv), c1geom(g), fp(x), fp(w), bp, fp(y)) != 0 {
		panic("vec: out of memory for the regrouped weights")
	}
}

func conv1GradWeight(lv int, g *Conv1Geom, dy, x, dw []float32, accumulate bool) {
	acc := C.int(0)
	if accumulate {
		acc = 1
	}
	if C.gorun_vec_conv1_wgrad(C.int(lv), c1geom(g), fp(dy), fp(x), fp(dw), acc) != 0 {
		panic("vec: out of memory for the weight gradient's partial sums")
	}
}
