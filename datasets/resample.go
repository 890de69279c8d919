package datasets

import "math"

// Resizing as torchvision's Resize((h, w)) resizes the PIL image that
// ImageFolder opens: PIL's Image.resize with its BILINEAR filter
// (Pillow's Resample.c). That is a separable convolution with the
// triangle filter, widened by the scale when shrinking (antialiased, so
// every source pixel counts), in two passes — horizontal, then vertical
// — each rounding to 8 bits, with coefficients in 22-bit fixed point. The
// steps here are Pillow's, number for number, so the result is PIL's to
// the bit (TestImagesMatchTorchvision).

// pilPrecision is Pillow's PRECISION_BITS for 8-bit images.
const pilPrecision = 32 - 8 - 2

// pilCoeffs are one pass's filter: for output i, the first source index
// bounds[2i], the number of taps bounds[2i+1], and the taps'
// fixed-point weights k[i*size : i*size+bounds[2i+1]].
type pilCoeffs struct {
	bounds []int
	k      []int32
	size   int
}

// bilinearFilter is Pillow's bilinear_filter: the triangle on [−1, 1].
func bilinearFilter(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// newPILCoeffs is Pillow's precompute_coeffs then normalize_coeffs_8bpc
// for resizing inSize samples to outSize (box 0 … inSize). The explicit
// float64 conversions keep the compiler from fusing multiplies and adds,
// which would change the last bit of a weight.
func newPILCoeffs(inSize, outSize int) pilCoeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := 1 * filterscale // the bilinear filter's support is 1
	ksize := int(math.Ceil(support))*2 + 1
	c := pilCoeffs{bounds: make([]int, 2*outSize), k: make([]int32, outSize*ksize), size: ksize}
	w := make([]float64, ksize)
	for xx := range outSize {
		center := float64(float64(float64(xx)+0.5) * scale)
		ss := 1 / filterscale
		xmin := int(center - support + 0.5)
		xmin = max(xmin, 0)
		xmax := int(center + support + 0.5)
		xmax = min(xmax, inSize) - xmin
		ww := 0.0
		for x := range xmax {
			v := bilinearFilter(float64(float64(float64(x+xmin)-center+0.5) * ss))
			w[x] = v
			ww += v
		}
		for x := range xmax {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			if v < 0 {
				c.k[xx*ksize+x] = int32(-0.5 + float64(v*(1<<pilPrecision)))
			} else {
				c.k[xx*ksize+x] = int32(0.5 + float64(v*(1<<pilPrecision)))
			}
		}
		c.bounds[2*xx], c.bounds[2*xx+1] = xmin, xmax
	}
	return c
}

// pilClip8 is Pillow's clip8: a fixed-point sum to 0…255.
func pilClip8(v int32) byte {
	v >>= pilPrecision
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// pilResizer resizes planes of one size to another, keeping its
// coefficients and scratch plane for the next image of the same sizes.
type pilResizer struct {
	sw, sh, dw, dh int
	horiz, vert    pilCoeffs
	tmp            []byte
}

func newPILResizer(sw, sh, dw, dh int) *pilResizer {
	return &pilResizer{sw: sw, sh: sh, dw: dw, dh: dh, horiz: newPILCoeffs(sw, dw), vert: newPILCoeffs(sh, dh)}
}

// resize writes the dw × dh resized plane of src (sw × sh, dense rows)
// into dst, as Pillow's ImagingResampleInner: a horizontal pass over the
// source rows the vertical pass uses (when the width changes), then a
// vertical pass (when the height changes).
func (r *pilResizer) resize(dst, src []byte) {
	needH, needV := r.dw != r.sw, r.dh != r.sh
	in, w := src, r.sw
	first, rows := 0, r.sh
	if needH {
		last := r.vert.bounds[2*r.dh-2] + r.vert.bounds[2*r.dh-1]
		first = r.vert.bounds[0]
		rows = last - first
		out := dst
		if needV {
			if cap(r.tmp) < rows*r.dw {
				r.tmp = make([]byte, rows*r.dw)
			}
			out = r.tmp[:rows*r.dw]
		}
		hc := &r.horiz
		for y := range rows {
			row := src[(y+first)*r.sw : (y+first+1)*r.sw]
			o := out[y*r.dw : (y+1)*r.dw]
			for xx := range o {
				xmin, n := hc.bounds[2*xx], hc.bounds[2*xx+1]
				k := hc.k[xx*hc.size : xx*hc.size+n]
				ss := int32(1 << (pilPrecision - 1))
				for x, kv := range k {
					ss += int32(row[xmin+x]) * kv
				}
				o[xx] = pilClip8(ss)
			}
		}
		if !needV {
			return
		}
		in, w = out, r.dw
	}
	if !needV {
		copy(dst, src[:r.sw*r.sh])
		return
	}
	vc := &r.vert
	for yy := range r.dh {
		ymin, n := vc.bounds[2*yy]-first, vc.bounds[2*yy+1]
		k := vc.k[yy*vc.size : yy*vc.size+n]
		o := dst[yy*w : (yy+1)*w]
		for xx := range o {
			ss := int32(1 << (pilPrecision - 1))
			for y, kv := range k {
				ss += int32(in[(ymin+y)*w+xx]) * kv
			}
			o[xx] = pilClip8(ss)
		}
	}
}
