package datasets

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"io"
)

// A PNG decoder for the common PNG files of a data set — 8 bits per
// sample, not interlaced, grey, grey and alpha, RGB, RGBA or a palette —
// that keeps its zlib reader and buffers from one file to the next. Go's
// image/png makes a new inflater (some 40 KiB, cleared) and new images
// for every file, which is most of the time a small image takes. Anything
// else, and any file that is not well formed, goes to image/png, which
// then decodes it or gives its error: fastPNG only ever returns images
// image/png would return (FuzzFastPNG holds it to that).

// pngState is one decoding goroutine's reusable state.
type pngState struct {
	z        io.ReadCloser
	src      bytes.Reader
	idat     []byte
	raw      []byte // the inflated rows, each with its filter byte
	gray     image.Gray
	rgba     image.RGBA
	nrgba    image.NRGBA
	paletted image.Paletted
	palette  color.Palette
}

const pngSignature = "\x89PNG\r\n\x1a\n"

// decode returns the image in b, or ok false when b is not a PNG file it
// handles (image/png then decodes it, or says what is wrong with it).
// The image is valid until the next call.
func (s *pngState) decode(b []byte) (img image.Image, ok bool) {
	if len(b) < 8 || string(b[:8]) != pngSignature {
		return nil, false
	}
	p := b[8:]
	var w, h, ct int
	var plte, trns []byte
	s.idat = s.idat[:0]
	single := []byte(nil) // the data of a lone IDAT chunk, not copied
	idats := 0
	const (
		start = iota
		header
		data
		afterData
	)
	stage := start
	for {
		if len(p) < 12 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(p)
		if n > 0x7fffffff || int(n) > len(p)-12 {
			return nil, false
		}
		typ, body := string(p[4:8]), p[8:8+n]
		if crc32.ChecksumIEEE(p[4:8+n]) != binary.BigEndian.Uint32(p[8+n:]) {
			return nil, false
		}
		p = p[12+n:]
		switch {
		case typ == "IHDR":
			if stage != start || n != 13 {
				return nil, false
			}
			w, h = int(binary.BigEndian.Uint32(body)), int(binary.BigEndian.Uint32(body[4:]))
			depth, interlace := body[8], body[12]
			ct = int(body[9])
			if depth != 8 || interlace != 0 || body[10] != 0 || body[11] != 0 || w <= 0 || h <= 0 ||
				int64(w)*int64(h) > MaxImagePixels || (ct != 0 && ct != 2 && ct != 3 && ct != 4 && ct != 6) {
				return nil, false
			}
			stage = header
		case stage == start:
			return nil, false
		case typ == "PLTE":
			if stage != header || plte != nil || ct != 3 || n%3 != 0 || n == 0 || n > 3*256 {
				return nil, false
			}
			plte = body
		case typ == "tRNS":
			if stage != header || ct != 3 || plte == nil || trns != nil || int(n) > len(plte)/3 {
				return nil, false // tRNS of grey or RGB images changes image/png's image type
			}
			trns = body
		case typ == "IDAT":
			if stage == afterData || (ct == 3 && plte == nil) {
				return nil, false
			}
			stage = data
			if idats == 0 {
				single = body
			} else {
				if idats == 1 {
					s.idat = append(s.idat, single...)
				}
				s.idat = append(s.idat, body...)
			}
			idats++
		case typ == "IEND":
			if stage != data && stage != afterData {
				return nil, false
			}
			return s.pixels(w, h, ct, plte, trns, single, idats)
		case typ[0]&0x20 == 0:
			return nil, false // an unknown critical chunk
		default:
			if stage == data {
				stage = afterData
			}
		}
	}
}

// pixels inflates and unfilters the image data.
func (s *pngState) pixels(w, h, ct int, plte, trns, single []byte, idats int) (image.Image, bool) {
	data := single
	if idats > 1 {
		data = s.idat
	}
	bpp := map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]
	row := 1 + w*bpp
	if int64(row)*int64(h) > 4*MaxImagePixels+MaxImagePixels/1024 {
		return nil, false
	}
	s.src.Reset(data)
	if s.z == nil {
		z, err := zlib.NewReader(&s.src)
		if err != nil {
			return nil, false
		}
		s.z = z
	} else if err := s.z.(zlib.Resetter).Reset(&s.src, nil); err != nil {
		return nil, false
	}
	if cap(s.raw) < row*h {
		s.raw = make([]byte, row*h)
	}
	raw := s.raw[:row*h]
	if _, err := io.ReadFull(s.z, raw); err != nil {
		return nil, false
	}
	// Nothing may follow the pixels, and the checksum must hold (read at
	// the end of the stream).
	var one [1]byte
	if n, err := s.z.Read(one[:]); n != 0 || err != io.EOF || s.src.Len() != 0 {
		return nil, false
	}
	// Unfilter in place: each row's filter byte, then its bytes.
	var prev []byte
	for y := range h {
		cur := raw[y*row+1 : (y+1)*row]
		switch raw[y*row] {
		case 0:
		case 1:
			for i := bpp; i < len(cur); i++ {
				cur[i] += cur[i-bpp]
			}
		case 2:
			if prev != nil {
				for i := range cur {
					cur[i] += prev[i]
				}
			}
		case 3:
			for i := range cur {
				var a, b int
				if i >= bpp {
					a = int(cur[i-bpp])
				}
				if prev != nil {
					b = int(prev[i])
				}
				cur[i] += byte((a + b) / 2)
			}
		case 4:
			for i := range cur {
				var a, b, c int
				if i >= bpp {
					a = int(cur[i-bpp])
				}
				if prev != nil {
					b = int(prev[i])
					if i >= bpp {
						c = int(prev[i-bpp])
					}
				}
				cur[i] += paeth(a, b, c)
			}
		default:
			return nil, false
		}
		prev = cur
	}
	rect := image.Rect(0, 0, w, h)
	switch ct {
	case 0:
		s.gray = image.Gray{Pix: grow(s.gray.Pix, w*h), Stride: w, Rect: rect}
		for y := range h {
			copy(s.gray.Pix[y*w:(y+1)*w], raw[y*row+1:(y+1)*row])
		}
		return &s.gray, true
	case 2:
		s.rgba = image.RGBA{Pix: grow(s.rgba.Pix, 4*w*h), Stride: 4 * w, Rect: rect}
		for y := range h {
			src, dst := raw[y*row+1:(y+1)*row], s.rgba.Pix[y*4*w:(y+1)*4*w]
			for x := range w {
				dst[4*x], dst[4*x+1], dst[4*x+2], dst[4*x+3] = src[3*x], src[3*x+1], src[3*x+2], 0xff
			}
		}
		return &s.rgba, true
	case 3:
		s.palette = s.palette[:0]
		for i := range len(plte) / 3 {
			c := color.NRGBA{plte[3*i], plte[3*i+1], plte[3*i+2], 0xff}
			if i < len(trns) {
				c.A = trns[i]
			}
			if c.A == 0xff {
				s.palette = append(s.palette, color.RGBA{c.R, c.G, c.B, 0xff})
			} else {
				s.palette = append(s.palette, c)
			}
		}
		s.paletted = image.Paletted{Pix: grow(s.paletted.Pix, w*h), Stride: w, Rect: rect, Palette: s.palette}
		for y := range h {
			src := raw[y*row+1 : (y+1)*row]
			for _, v := range src {
				if int(v) >= len(s.palette) {
					return nil, false
				}
			}
			copy(s.paletted.Pix[y*w:(y+1)*w], src)
		}
		return &s.paletted, true
	case 4:
		s.nrgba = image.NRGBA{Pix: grow(s.nrgba.Pix, 4*w*h), Stride: 4 * w, Rect: rect}
		for y := range h {
			src, dst := raw[y*row+1:(y+1)*row], s.nrgba.Pix[y*4*w:(y+1)*4*w]
			for x := range w {
				v := src[2*x]
				dst[4*x], dst[4*x+1], dst[4*x+2], dst[4*x+3] = v, v, v, src[2*x+1]
			}
		}
		return &s.nrgba, true
	default: // 6
		s.nrgba = image.NRGBA{Pix: grow(s.nrgba.Pix, 4*w*h), Stride: 4 * w, Rect: rect}
		for y := range h {
			copy(s.nrgba.Pix[y*4*w:(y+1)*4*w], raw[y*row+1:(y+1)*row])
		}
		return &s.nrgba, true
	}
}

// paeth is the PNG Paeth predictor.
func paeth(a, b, c int) byte {
	p := a + b - c
	pa, pb, pc := abs(p-a), abs(p-b), abs(p-c)
	switch {
	case pa <= pb && pa <= pc:
		return byte(a)
	case pb <= pc:
		return byte(b)
	}
	return byte(c)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// grow returns b resliced to n bytes, reallocated when too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
