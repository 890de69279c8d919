package ops

import "gorun/ops/internal/vec"

// The lowering of a convolution to a matrix product and back (im2col,
// col2im; see conv.go), and the slice helpers its kernels share.

// span returns the range [lo, hi) of output positions i in [0, n) whose
// input position i·s+off lies in [0, size).
func span(off, s, size, n int) (lo, hi int) {
	if off < 0 {
		lo = (-off + s - 1) / s
	}
	if last := size - 1 - off; last >= 0 {
		hi = last/s + 1
	}
	hi = min(hi, n)
	lo = min(lo, hi)
	return lo, hi
}

// im2col unrolls x[N,C,H,W] into col[K×L], zero where
// the window reaches into the padding. With groups, x starts at the
// group's first channel and its samples are g.xs() apart.
//
// Most rows of col are shifted copies of rows already written, still in
// cache: output row oy of kernel row ki reads what output row oy+1 of kernel
// row ki-s read, and output column ox of kernel column kj reads what output
// column ox+1 of kernel column kj-s read. So such a row is one long copy of
// an earlier row, shifted by one output row (or one element), after which
// the positions the shift got wrong (each sample's last output row, or each
// output row's last column) are written from x. Only the first s×s kernel
// positions of each channel are built output row by output row.
func im2col[T Float](g *convGeom, x, col []T) {
	l, plane, hw, ow, oh, s := g.l(), g.oh*g.ow, g.h*g.w, g.ow, g.oh, g.s
	chw := g.xs()
	for ci := 0; ci < g.c; ci++ {
		for ki := 0; ki < g.kh; ki++ {
			r0 := (ci*g.kh + ki) * g.kw // the row of (ci, ki, 0)
			if shiftsRows(g, ki) {
				for r := r0; r < r0+g.kw; r++ {
					copy(col[r*l:][:l-ow], col[(r-s*g.kw)*l+ow:][:l-ow])
				}
				// Each sample's last output row reads input row iy, for
				// every kernel column: one pass over x.
				iy := (oh-1)*s - g.p + ki
				for n := 0; n < g.n; n++ {
					src := x[n*chw+ci*hw:][:hw]
					for kj := 0; kj < g.kw; kj++ {
						off := kj - g.p
						lo, hi := span(off, s, g.w, ow)
						im2colRow(g, src, col[(r0+kj)*l+n*plane+plane-ow:][:ow], iy, off, lo, hi)
					}
				}
				continue
			}
			for kj := 0; kj < g.kw; kj++ {
				r := r0 + kj
				row := col[r*l:][:l]
				off := kj - g.p // output column ox reads input column ox·s + off
				if !shiftsColumns(g, kj) {
					lo, hi := span(off, s, g.w, ow)
					for n := 0; n < g.n; n++ {
						src := x[n*chw+ci*hw:][:hw]
						dst := row[n*plane:][:plane]
						for oy := 0; oy < oh; oy++ {
							im2colRow(g, src, dst[oy*ow:][:ow], oy*s-g.p+ki, off, lo, hi)
						}
					}
					continue
				}
				copy(row[:l-1], col[(r-s)*l+1:][:l-1])
				// Output rows [ylo, yhi) of the last column read input
				// column ix; the others read padding.
				ix := (ow-1)*s + off
				ylo, yhi := span(ki-g.p, s, g.h, oh)
				if ix < 0 || ix >= g.w {
					ylo, yhi = 0, 0
				}
				for n := 0; n < g.n; n++ {
					d := row[n*plane+ow-1:][:plane-ow+1]
					for oy := 0; oy < ylo; oy++ {
						d[oy*ow] = 0
					}
					if ylo < yhi {
						src := x[n*chw+ci*hw:][:hw]
						iy := ylo*s - g.p + ki
						for oy := ylo; oy < yhi; oy++ {
							d[oy*ow] = src[iy*g.w+ix]
							iy += s
						}
					}
					for oy := max(yhi, ylo); oy < oh; oy++ {
						d[oy*ow] = 0
					}
				}
			}
		}
	}
}

// shiftsRows reports whether im2col builds the rows of kernel row ki by
// shifting those of kernel row ki-s.
func shiftsRows(g *convGeom, ki int) bool { return ki >= g.s && g.oh > 1 }

// shiftsColumns reports whether im2col builds the row of kernel column kj
// (in a kernel row that shiftsRows does not cover) by shifting that of
// kernel column kj-s.
func shiftsColumns(g *convGeom, kj int) bool { return kj >= g.s && g.ow > 1 }

// im2colRow fills d, one output row of a sample's part of a col row, from
// input row iy of the plane src; lo, hi is span(off, s, W, OW).
func im2colRow[T Float](g *convGeom, src, d []T, iy, off, lo, hi int) {
	if iy < 0 || iy >= g.h || lo == hi {
		clear(d)
		return
	}
	if lo > 0 {
		clear(d[:lo])
	}
	if hi < len(d) {
		clear(d[hi:])
	}
	srow := src[iy*g.w:][:g.w]
	if g.s == 1 {
		copyRun(d[lo:hi], srow[lo+off:])
	} else {
		gather(d[lo:hi], srow[lo*g.s+off:], g.s)
	}
}

// col2im adds col[K×L] into dx[N,C,H,W] (laid out as im2col's x): the
// adjoint of im2col, which it mirrors in reverse order. A shifted row first sends the
// positions im2col wrote from x to dx, then adds the rest into the row it
// was copied from. col is used as scratch and left changed. dx must be
// cleared first.
func col2im[T Float](g *convGeom, col, dx []T) {
	l, plane, hw, ow, oh, s := g.l(), g.oh*g.ow, g.h*g.w, g.ow, g.oh, g.s
	chw := g.xs()
	for ci := g.c - 1; ci >= 0; ci-- {
		for ki := g.kh - 1; ki >= 0; ki-- {
			r0 := (ci*g.kh + ki) * g.kw
			if shiftsRows(g, ki) {
				iy := (oh-1)*s - g.p + ki
				for n := 0; n < g.n; n++ {
					dst := dx[n*chw+ci*hw:][:hw]
					for kj := 0; kj < g.kw; kj++ {
						off := kj - g.p
						lo, hi := span(off, s, g.w, ow)
						last := col[(r0+kj)*l+n*plane+plane-ow:][:ow]
						col2imRow(g, last, dst, iy, off, lo, hi)
						clear(last)
					}
				}
				for r := r0; r < r0+g.kw; r++ {
					addLong(col[(r-s*g.kw)*l+ow:][:l-ow], col[r*l:][:l-ow])
				}
				continue
			}
			for kj := g.kw - 1; kj >= 0; kj-- {
				r := r0 + kj
				row := col[r*l:][:l]
				off := kj - g.p
				if !shiftsColumns(g, kj) {
					lo, hi := span(off, s, g.w, ow)
					for n := 0; n < g.n; n++ {
						dst := dx[n*chw+ci*hw:][:hw]
						src := row[n*plane:][:plane]
						for oy := 0; oy < oh; oy++ {
							col2imRow(g, src[oy*ow:][:ow], dst, oy*s-g.p+ki, off, lo, hi)
						}
					}
					continue
				}
				ix := (ow-1)*s + off
				ylo, yhi := span(ki-g.p, s, g.h, oh)
				if ix < 0 || ix >= g.w {
					ylo, yhi = 0, 0
				}
				for n := 0; n < g.n; n++ {
					d := row[n*plane+ow-1:][:plane-ow+1]
					if ylo < yhi {
						dst := dx[n*chw+ci*hw:][:hw]
						iy := ylo*s - g.p + ki
						for oy := ylo; oy < yhi; oy++ {
							dst[iy*g.w+ix] += d[oy*ow]
							iy += s
						}
					}
					for oy := 0; oy < oh; oy++ {
						d[oy*ow] = 0
					}
				}
				addLong(col[(r-s)*l+1:][:l-1], row[:l-1])
			}
		}
	}
}

// col2imRow adds d, one output row of a sample's part of a col row, into
// input row iy of the plane dst.
func col2imRow[T Float](g *convGeom, d, dst []T, iy, off, lo, hi int) {
	if iy < 0 || iy >= g.h || lo == hi {
		return
	}
	drow := dst[iy*g.w:][:g.w]
	if g.s == 1 {
		addRun(drow[lo+off:], d[lo:hi])
	} else {
		scatterAdd(drow[lo*g.s+off:], d[lo:hi], g.s)
	}
}

// copyRun copies s into d, which is short (one output row): a plain loop
// beats copy's call for such runs.
func copyRun[T Float](d, s []T) {
	s = s[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		dd, ss := d[i:i+4:i+4], s[i:i+4:i+4]
		dd[0], dd[1], dd[2], dd[3] = ss[0], ss[1], ss[2], ss[3]
	}
	for ; i < len(d); i++ {
		d[i] = s[i]
	}
}

// gather sets d[i] = s[i·stride].
func gather[T Float](d, s []T, stride int) {
	_ = s[(len(d)-1)*stride]
	for i := range d {
		d[i] = s[i*stride]
	}
}

// addRun adds s into d.
func addRun[T Float](d, s []T) {
	d = d[:len(s)]
	i := 0
	for ; i+4 <= len(s); i += 4 {
		dd, ss := d[i:i+4:i+4], s[i:i+4:i+4]
		dd[0] += ss[0]
		dd[1] += ss[1]
		dd[2] += ss[2]
		dd[3] += ss[3]
	}
	for ; i < len(s); i++ {
		d[i] += s[i]
	}
}

// addLong adds s into d, a long run: vectorised for float32.
func addLong[T Float](d, s []T) {
	if is32[T]() {
		vec.Add(view[float32](d), view[float32](d), view[float32](s))
		return
	}
	addRun(d, s)
}

// scatterAdd adds s[i] into d[i·stride].
func scatterAdd[T Float](d, s []T, stride int) {
	_ = d[(len(s)-1)*stride]
	for i, v := range s {
		d[i*stride] += v
	}
}

// sum adds up s in T with four accumulators (float64's bias gradient;
// float32's is vec.BiasGrad).
func sum[T Float](s []T) T {
	var a0, a1, a2, a3 T
	i := 0
	for ; i+4 <= len(s); i += 4 {
		a0 += s[i]
		a1 += s[i+1]
		a2 += s[i+2]
		a3 += s[i+3]
	}
	for ; i < len(s); i++ {
		a0 += s[i]
	}
	return (a0 + a1) + (a2 + a3)
}

// addScalar adds v to every element of s.
func addScalar[T Float](s []T, v T) {
	for i := range s {
		s[i] += v
	}
}
