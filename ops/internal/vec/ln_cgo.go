//go:build cgo && amd64 && !purego

package vec

/*
#cgo noescape gorun_vec_ln
#cgo nocallback gorun_vec_ln
#cgo noescape gorun_vec_ln_grad_input
#cgo nocallback gorun_vec_ln_grad_input
#cgo noescape gorun_vec_ln_col_sums
#cgo nocallback gorun_vec_ln_col_sums
void gorun_vec_ln(int level, float *y, float *save, const float *x, const float *gamma, const float *beta, long rows,
                  long d, double eps);
void gorun_vec_ln_grad_input(int level, float *dx, const float *dy, const float *x, const float *save,
                             const float *gamma, long rows, long d);
void gorun_vec_ln_col_sums(int level, float *out, const float *dy, const float *x, const float *save, long rows,
                           long cols, int acc);
void gorun_vec_ln_row_sums(int level, int grad, const float *a, const float *x, const float *save,
                           const float *gamma, long rows, long d, double *out);
*/
import "C"

// The C functions keep no pointer past the call (noescape); a nil slice
// (gamma, beta, x) reaches C as NULL.

func ln(lv int, y, save, x, gamma, beta []float32, rows, d int, eps float64) {
	C.gorun_vec_ln(C.int(lv), fp(y), fp(save), fp(x), fp(gamma), fp(beta), C.long(rows), C.long(d), C.double(eps))
}

func lnGradInput(lv int, dx, dy, x, save, gamma []float32, rows, d int) {
	C.gorun_vec_ln_grad_input(C.int(lv), fp(dx), fp(dy), fp(x), fp(save), fp(gamma), C.long(rows), C.long(d))
}

func colSums(lv int, s, dy, x, save []float32, rows, cols int, accumulate bool) {
	C.gorun_vec_ln_col_sums(C.int(lv), fp(s), fp(dy), fp(x), fp(save), C.long(rows), C.long(cols), cbool(accumulate))
}

// lnRowSums is for the tests: out[2r], out[2r+1] get row r's (mean, s2) of
// a as LayerNorm computes them, or with grad its (s0, s1) of dy = a, x and
// save as LayerNormGradInput does.
func lnRowSums(lv int, grad bool, out []float64, a, x, save, gamma []float32, rows, d int) {
	C.gorun_vec_ln_row_sums(C.int(lv), cbool(grad), fp(a), fp(x), fp(save), fp(gamma), C.long(rows), C.long(d), dp(out))
}
