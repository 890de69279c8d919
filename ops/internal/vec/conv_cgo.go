//go:build cgo && amd64 && !purego

package vec

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
typedef struct {
	long n, c, o, h, w;
	long kh, kw, p;
	long oh, ow;
	long s;
} gorun_cgeom;
int gorun_vec_conv_fast(int level, gorun_cgeom g);
int gorun_vec_conv_fwd(int level, gorun_cgeom g, const float *x, const float *w, const float *b, float *y);
int gorun_vec_conv_wgrad(int level, gorun_cgeom g, const float *dy, const float *x, float *dw, int accumulate);
int gorun_vec_conv_dgrad(int level, gorun_cgeom g, const float *dy, const float *w, float *dx);
int gorun_vec_conv_pool_grad_ok(gorun_cgeom g);
int gorun_vec_conv_pool_grad(int level, gorun_cgeom g, const float *dy, const int *idx, const float *y,
                             const float *x, float *dw, float *db, int accumulate, float *work);
*/
import "C"

import "unsafe"

// cgeom is g as the C struct, passed by value (a pointer would make every
// call allocate).
func cgeom(g *ConvGeom) C.gorun_cgeom {
	return C.gorun_cgeom{n: C.long(g.N), c: C.long(g.C), o: C.long(g.O), h: C.long(g.H), w: C.long(g.W),
		kh: C.long(g.KH), kw: C.long(g.KW), p: C.long(g.P), oh: C.long(g.OH), ow: C.long(g.OW), s: C.long(g.stride())}
}

func convFast(lv int, g *ConvGeom) int { return int(C.gorun_vec_conv_fast(C.int(lv), cgeom(g))) }

func convForward(lv int, g *ConvGeom, x, w, b, y []float32) {
	var bp *C.float
	if b != nil {
		bp = fp(b)
	}
	if C.gorun_vec_conv_fwd(C.int(lv), cgeom(g), fp(x), fp(w), bp, fp(y)) != 0 {
		panic("vec: out of memory for the regrouped weights")
	}
}

func convGradWeight(lv int, g *ConvGeom, dy, x, dw []float32, accumulate bool) {
	if C.gorun_vec_conv_wgrad(C.int(lv), cgeom(g), fp(dy), fp(x), fp(dw), cbool(accumulate)) != 0 {
		panic("vec: out of memory for the weight gradient's partial sums")
	}
}

func convGradInput(lv int, g *ConvGeom, dy, w, dx []float32) {
	if C.gorun_vec_conv_dgrad(C.int(lv), cgeom(g), fp(dy), fp(w), fp(dx)) != 0 {
		panic("vec: out of memory for the regrouped weights")
	}
}

func convPoolGrad(lv int, g *ConvGeom, dy []float32, idx []int32, y, x, dw, db []float32, accumulate bool, work []float32) {
	var yp, dbp *C.float
	if y != nil {
		yp = fp(y)
	}
	if db != nil {
		dbp = fp(db)
	}
	ip := (*C.int)(unsafe.Pointer(unsafe.SliceData(idx)))
	if C.gorun_vec_conv_pool_grad(C.int(lv), cgeom(g), fp(dy), ip, yp, fp(x), fp(dw), dbp, cbool(accumulate), fp(work)) != 0 {
		panic("vec: out of memory for the weight gradient's partial sums")
	}
}

func convPoolGradOKC(g *ConvGeom) bool { return C.gorun_vec_conv_pool_grad_ok(cgeom(g)) != 0 }
