package datasets

import "image"

// libjpeg's colour conversion and "fancy" chroma upsampling, so that a
// JPEG decoded by Go's image/jpeg (whose YCbCr image keeps the chroma
// subsampled, and whose own conversion upsamples it by repeating samples)
// becomes the RGB image PIL's libjpeg(-turbo) gives: the same triangle
// filter (jdsample.c: h2v1_fancy_upsample, h2v2_fancy_upsample) and the
// same fixed-point YCbCr → RGB (jdcolor.c: ycc_rgb_convert).

// jpegFix is libjpeg's FIX(x): x in 16-bit fixed point.
func jpegFix(x float64) int32 { return int32(x*65536 + 0.5) }

var (
	fixCrR = jpegFix(1.40200)
	fixCbB = jpegFix(1.77200)
	fixCbG = jpegFix(0.34414)
	fixCrG = jpegFix(0.71414)
)

func clamp8(v int32) byte {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// jpegRGB converts a JPEG's YCbCr image into dst (opaque RGBA of its size)
// as libjpeg does. It returns false for subsampling ratios it does not
// handle (4:4:0, 4:1:1, 4:1:0), which the caller converts otherwise.
func jpegRGB(src *image.YCbCr, dst *image.RGBA) bool {
	r := src.Rect
	w, h := r.Dx(), r.Dy()
	var hs, vs int // horizontal and vertical chroma subsampling factors
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		hs, vs = 1, 1
	case image.YCbCrSubsampleRatio422:
		hs, vs = 2, 1
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	default:
		return false
	}
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs
	// Chroma sample (cx, cy), relative to the image's corner.
	c0 := src.COffset(r.Min.X, r.Min.Y)
	cb := func(cx, cy int) int32 { return int32(src.Cb[c0+cy*src.CStride+cx]) }
	cr := func(cx, cy int) int32 { return int32(src.Cr[c0+cy*src.CStride+cx]) }
	// One output row's upsampled chroma.
	cbRow, crRow := make([]byte, cw*hs), make([]byte, cw*hs)
	for y := range h {
		cy := y / vs
		if vs == 2 {
			// The nearer chroma row counts 3, the next one (above for an
			// even row, below for an odd one; the edge row repeated) 1.
			other := cy - 1
			if y%2 == 1 {
				other = cy + 1
			}
			other = min(max(other, 0), ch-1)
			upsample2v(cbRow, cw, func(cx int) int32 { return 3*cb(cx, cy) + cb(cx, other) })
			upsample2v(crRow, cw, func(cx int) int32 { return 3*cr(cx, cy) + cr(cx, other) })
		} else if hs == 2 {
			upsample2h(cbRow, cw, func(cx int) int32 { return cb(cx, cy) })
			upsample2h(crRow, cw, func(cx int) int32 { return cr(cx, cy) })
		} else {
			for cx := range cw {
				cbRow[cx], crRow[cx] = byte(cb(cx, cy)), byte(cr(cx, cy))
			}
		}
		yRow := src.Y[src.YOffset(r.Min.X, r.Min.Y+y):]
		d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
		for x := range w {
			yy := int32(yRow[x])
			b, c := int32(cbRow[x])-128, int32(crRow[x])-128
			d[4*x] = clamp8(yy + (fixCrR*c+1<<15)>>16)
			d[4*x+1] = clamp8(yy + (-fixCbG*b-fixCrG*c+1<<15)>>16)
			d[4*x+2] = clamp8(yy + (fixCbB*b+1<<15)>>16)
			d[4*x+3] = 0xff
		}
	}
	return true
}

// upsample2h is h2v1_fancy_upsample: n samples s(0…n−1) become 2n, each
// output 3/4 of the nearer sample and 1/4 of the next, rounding alternately
// down and up.
func upsample2h(out []byte, n int, s func(int) int32) {
	if n == 1 {
		v := byte(s(0))
		out[0], out[1] = v, v
		return
	}
	v := s(0)
	out[0] = byte(v)
	out[1] = byte((v*3 + s(1) + 2) >> 2)
	for i := 1; i < n-1; i++ {
		v := s(i) * 3
		out[2*i] = byte((v + s(i-1) + 1) >> 2)
		out[2*i+1] = byte((v + s(i+1) + 2) >> 2)
	}
	v = s(n - 1)
	out[2*n-2] = byte((v*3 + s(n-2) + 1) >> 2)
	out[2*n-1] = byte(v)
}

// upsample2v is h2v2_fancy_upsample's horizontal half: col(i) are column
// sums 3·near + far (the vertical triangle already applied), which become
// 2n outputs divided by 16.
func upsample2v(out []byte, n int, col func(int) int32) {
	if n == 1 {
		v := col(0)
		out[0], out[1] = byte((v*4+8)>>4), byte((v*4+7)>>4)
		return
	}
	this, next := col(0), col(1)
	out[0] = byte((this*4 + 8) >> 4)
	out[1] = byte((this*3 + next + 7) >> 4)
	last := this
	for i := 1; i < n-1; i++ {
		last, this, next = this, next, col(i+1)
		out[2*i] = byte((this*3 + last + 8) >> 4)
		out[2*i+1] = byte((this*3 + next + 7) >> 4)
	}
	last, this = this, next
	out[2*n-2] = byte((this*3 + last + 8) >> 4)
	out[2*n-1] = byte((this*4 + 7) >> 4)
}
