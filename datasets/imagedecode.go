package datasets

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	stddraw "image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"

	"gorun/datasets/userfile"
)

// MaxImagePixels is the most pixels (width × height) an image file may
// declare: a larger one is refused from its header, before it is decoded,
// so that a small file that declares a huge image (a decompression bomb)
// cannot take the memory. 8192 × 8192; PIL warns above 89,478,485 pixels
// and refuses above twice that.
const MaxImagePixels = 8192 * 8192

// MaxImageFileBytes is the largest image file read (256 MiB).
const MaxImageFileBytes = 256 << 20

// imageExtensions are the file name endings (compared in lower case) of
// the images data.images reads: those of torchvision's IMG_EXTENSIONS that
// Go decodes, and .gif. Other files in a class folder are passed over, as
// ImageFolder passes them over; the netpbm ones torchvision lists (.ppm,
// .pgm) are refused with an error rather than left out, so that a folder
// never gives gorun fewer samples than torchvision without a word.
var imageExtensions = []string{".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"}

// netpbmExtensions are in torchvision's IMG_EXTENSIONS, but gorun has no
// decoder for them.
var netpbmExtensions = []string{".ppm", ".pgm"}

// ImagePrep says how an image file becomes a sample: decoded, converted to
// Channels channels, resized to Height × Width, planar uint8 (channel,
// row, column), the layout of a tensor of torchvision's ToTensor before
// its division by 255.
type ImagePrep struct {
	// Height and Width are the sample's size; 0 keeps the image's own
	// (PrepareImage then refuses an image of another size than Want).
	Height, Width int
	// Channels is 1 (grayscale: PIL's convert("L"), ITU-R 601-2 luma
	// L = (19595 R + 38470 G + 7471 B + 2^15) >> 16) or 3 (RGB: PIL's
	// convert("RGB"); alpha is dropped, not composited).
	Channels int
}

// imageFormat is a decoder found from a file's first bytes.
type imageFormat struct {
	name   string
	magic  func(b []byte) bool
	config func(io.Reader) (image.Config, error)
	decode func(io.Reader) (image.Image, error)
}

// imageFormats are the decoders, chosen by the file's first bytes (never
// by its name, as PIL chooses).
var imageFormats = []imageFormat{
	{"PNG", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }, png.DecodeConfig, png.Decode},
	{"JPEG", func(b []byte) bool { return bytes.HasPrefix(b, []byte("\xff\xd8")) }, jpeg.DecodeConfig, jpeg.Decode},
	{"GIF", func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	}, gif.DecodeConfig, gif.Decode},
	{"BMP", func(b []byte) bool { return bytes.HasPrefix(b, []byte("BM")) }, bmp.DecodeConfig, bmp.Decode},
	{"WebP", func(b []byte) bool {
		return len(b) >= 12 && bytes.Equal(b[:4], []byte("RIFF")) && bytes.Equal(b[8:12], []byte("WEBP"))
	}, webp.DecodeConfig, webp.Decode},
	{"TIFF", func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("II*\x00")) || bytes.HasPrefix(b, []byte("MM\x00*"))
	}, tiff.DecodeConfig, tiff.Decode},
}

// ReadImageFile reads an image file whole, refusing what is not a regular
// file, an empty file and one over MaxImageFileBytes.
func ReadImageFile(path string) ([]byte, error) {
	b, err := userfile.ReadFile(path, MaxImageFileBytes)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: empty file (0 bytes), not an image", path)
	}
	return b, nil
}

// findFormat returns the decoder of an image file's bytes, or an error
// naming the file (name) and what its first bytes look like.
func findFormat(name string, b []byte) (*imageFormat, error) {
	for i := range imageFormats {
		if imageFormats[i].magic(b) {
			return &imageFormats[i], nil
		}
	}
	if len(b) >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' {
		return nil, fmt.Errorf("%s: a netpbm (PPM/PGM) image, which gorun does not decode: convert it to PNG", name)
	}
	head := b[:min(len(b), 8)]
	return nil, fmt.Errorf("%s: not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes % x", name, head)
}

// ImageConfig returns an image file's format and size from its header,
// refusing an image over MaxImagePixels.
func ImageConfig(name string, b []byte) (format string, width, height int, err error) {
	f, err := findFormat(name, b)
	if err != nil {
		return "", 0, 0, err
	}
	c, err := f.config(bytes.NewReader(b))
	if err != nil {
		return "", 0, 0, fmt.Errorf("%s: reading the %s header: %v", name, f.name, err)
	}
	if err := checkPixels(name, f.name, c.Width, c.Height); err != nil {
		return "", 0, 0, err
	}
	return f.name, c.Width, c.Height, nil
}

func checkPixels(name, format string, w, h int) error {
	if w <= 0 || h <= 0 || int64(w)*int64(h) > MaxImagePixels {
		return &ImagePixelsError{Name: name, Format: format, Width: w, Height: h}
	}
	return nil
}

// ImagePixelsError is an image whose header declares no pixels, or more
// than MaxImagePixels.
type ImagePixelsError struct {
	Name, Format  string // the file, its format
	Width, Height int    // the size the header declares
}

func (e *ImagePixelsError) Error() string {
	if e.Width <= 0 || e.Height <= 0 {
		return fmt.Sprintf("%s: the %s header declares a %d×%d image", e.Name, e.Format, e.Width, e.Height)
	}
	return fmt.Sprintf("%s: the %s header declares a %d×%d image (%d pixels), more than the %d (8192×8192) data.images decodes; shrink the image",
		e.Name, e.Format, e.Width, e.Height, int64(e.Width)*int64(e.Height), MaxImagePixels)
}

// DecodeImage decodes an image file's bytes (name is the file, for
// errors), after checking from the header that it declares at most
// MaxImagePixels pixels.
func DecodeImage(name string, b []byte) (image.Image, error) {
	img, _, err := decodeImage(name, b)
	return img, err
}

// decodeImage is DecodeImage that also gives the format's name.
func decodeImage(name string, b []byte) (image.Image, string, error) {
	f, err := findFormat(name, b)
	if err != nil {
		return nil, "", err
	}
	c, err := f.config(bytes.NewReader(b))
	if err != nil {
		return nil, "", fmt.Errorf("%s: reading the %s header: %v", name, f.name, err)
	}
	if err := checkPixels(name, f.name, c.Width, c.Height); err != nil {
		return nil, "", err
	}
	img, err := f.decode(bytes.NewReader(b))
	if err != nil {
		return nil, "", fmt.Errorf("%s: decoding it as %s: %v", name, f.name, err)
	}
	if r := img.Bounds(); checkPixels(name, f.name, r.Dx(), r.Dy()) != nil {
		return nil, "", fmt.Errorf("%s: the %s image decoded to %d×%d pixels", name, f.name, r.Dx(), r.Dy())
	}
	return img, f.name, nil
}

// errImageSize is an image whose size is not the one wanted, when no
// resize was asked for.
type errImageSize struct{ w, h int }

func (e errImageSize) Error() string { return fmt.Sprintf("%d×%d", e.w, e.h) }

// imagePrepper turns decoded images into samples. It keeps its scratch
// images and the resizers of the sizes it has seen, so it is not safe for
// concurrent use: each decoding goroutine has its own.
type imagePrepper struct {
	prep     ImagePrep
	rgb      *image.RGBA
	gray     *image.Gray
	planes   []byte
	resizers map[[4]int]*pilResizer
	png      pngState
}

func newImagePrepper(p ImagePrep) *imagePrepper {
	return &imagePrepper{prep: p, resizers: map[[4]int]*pilResizer{}}
}

// PrepareImage decodes an image file's bytes into a sample as p says,
// writing Channels × Height × Width bytes into out (planar: channel, row,
// column). With Height and Width 0 the image keeps its own size, which
// out must have room for.
func PrepareImage(p ImagePrep, name string, b []byte, out []byte) error {
	ip := newImagePrepper(p)
	size := [2]int{p.Height, p.Width}
	if p.Height == 0 || p.Width == 0 {
		_, w, h, err := ImageConfig(name, b)
		if err != nil {
			return err
		}
		size = [2]int{h, w}
	}
	return ip.prepare(name, b, out, size)
}

// prepare decodes one file into out (planar, Channels × h × w with (h, w)
// = size): decoded, converted to the channels at the image's own size,
// then resized as PIL resizes (pilResizer) when its size is not size.
func (ip *imagePrepper) prepare(name string, b []byte, out []byte, size [2]int) error {
	img, ok := ip.png.decode(b)
	format := "PNG"
	if !ok {
		var err error
		if img, format, err = decodeImage(name, b); err != nil {
			return err
		}
	}
	r := img.Bounds()
	sw, sh := r.Dx(), r.Dy()
	h, w := size[0], size[1]
	resize := sh != h || sw != w
	if resize && (ip.prep.Height == 0 || ip.prep.Width == 0) {
		return errImageSize{sw, sh}
	}
	plane := h * w
	ch := ip.prep.Channels
	if len(out) < ch*plane {
		panic(fmt.Sprintf("datasets: prepare %s: %d bytes for a %d×%d×%d sample", name, len(out), ch, h, w))
	}
	// The channels at the image's own size, planar: straight into out
	// when no resize follows.
	src := out[:ch*plane]
	if resize {
		if cap(ip.planes) < ch*sw*sh {
			ip.planes = make([]byte, ch*sw*sh)
		}
		src = ip.planes[:ch*sw*sh]
	}
	if ch == 1 {
		ip.gray = toGray(img, ip.gray, &ip.rgb, format == "JPEG")
		copyRows(src, ip.gray.Pix, ip.gray.Stride, sw, sh, 1)
	} else {
		ip.rgb = toRGB(img, ip.rgb, format == "JPEG")
		for c := range 3 {
			copyRows(src[c*sw*sh:(c+1)*sw*sh], ip.rgb.Pix[c:], ip.rgb.Stride, sw, sh, 4)
		}
	}
	if !resize {
		return nil
	}
	key := [4]int{sw, sh, w, h}
	rs, ok := ip.resizers[key]
	if !ok {
		if len(ip.resizers) > 64 {
			clear(ip.resizers) // many sizes: keep the map small
		}
		rs = newPILResizer(sw, sh, w, h)
		ip.resizers[key] = rs
	}
	for c := range ch {
		rs.resize(out[c*plane:(c+1)*plane], src[c*sw*sh:(c+1)*sw*sh])
	}
	return nil
}

// copyRows copies an h × w plane whose values are step bytes apart in
// rows stride bytes apart (from src) into dst, densely.
func copyRows(dst, src []byte, stride, w, h, step int) {
	if step == 1 {
		for y := range h {
			copy(dst[y*w:(y+1)*w], src[y*stride:y*stride+w])
		}
		return
	}
	for y := range h {
		row := src[y*stride:]
		d := dst[y*w : (y+1)*w]
		for x := range d {
			d[x] = row[x*step]
		}
	}
}

// toRGB returns img as opaque RGBA holding its straight (not
// premultiplied) colours, as PIL's convert("RGB") gives them: the alpha
// channel is dropped. scratch is reused when it has img's size. jpeg says
// the image is a decoded JPEG: its chroma is then upsampled and converted
// as libjpeg does (jpegRGB).
func toRGB(img image.Image, scratch *image.RGBA, jpeg bool) *image.RGBA {
	r := img.Bounds()
	w, h := r.Dx(), r.Dy()
	dst := scratch
	if dst == nil || dst.Rect.Dx() != w || dst.Rect.Dy() != h {
		dst = image.NewRGBA(image.Rect(0, 0, w, h))
	}
	switch s := img.(type) {
	case *image.YCbCr:
		// A JPEG's colours as libjpeg makes them; else (WebP, rare
		// JPEG subsamplings) the standard library's JFIF conversion.
		if jpeg && jpegRGB(s, dst) {
			return dst
		}
		stddraw.Draw(dst, dst.Rect, s, r.Min, stddraw.Src)
		return dst
	case *image.Gray:
		for y := range h {
			src := s.Pix[(y+r.Min.Y-s.Rect.Min.Y)*s.Stride+r.Min.X-s.Rect.Min.X:]
			d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
			for x := range w {
				v := src[x]
				d[4*x], d[4*x+1], d[4*x+2], d[4*x+3] = v, v, v, 0xff
			}
		}
		return dst
	case *image.NRGBA:
		for y := range h {
			src := s.Pix[(y+r.Min.Y-s.Rect.Min.Y)*s.Stride+4*(r.Min.X-s.Rect.Min.X):]
			d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
			for x := range w {
				d[4*x], d[4*x+1], d[4*x+2], d[4*x+3] = src[4*x], src[4*x+1], src[4*x+2], 0xff
			}
		}
		return dst
	case *image.RGBA:
		for y := range h {
			src := s.Pix[(y+r.Min.Y-s.Rect.Min.Y)*s.Stride+4*(r.Min.X-s.Rect.Min.X):]
			d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
			for x := range w {
				p := src[4*x : 4*x+4 : 4*x+4]
				if p[3] == 0xff {
					d[4*x], d[4*x+1], d[4*x+2] = p[0], p[1], p[2]
				} else {
					c := color.NRGBAModel.Convert(color.RGBA{p[0], p[1], p[2], p[3]}).(color.NRGBA)
					d[4*x], d[4*x+1], d[4*x+2] = c.R, c.G, c.B
				}
				d[4*x+3] = 0xff
			}
		}
		return dst
	case *image.Paletted:
		var pal [256][3]byte
		for i, c := range s.Palette {
			if i < len(pal) {
				n := color.NRGBAModel.Convert(c).(color.NRGBA)
				pal[i] = [3]byte{n.R, n.G, n.B}
			}
		}
		for y := range h {
			src := s.Pix[(y+r.Min.Y-s.Rect.Min.Y)*s.Stride+r.Min.X-s.Rect.Min.X:]
			d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
			for x := range w {
				c := pal[src[x]]
				d[4*x], d[4*x+1], d[4*x+2], d[4*x+3] = c[0], c[1], c[2], 0xff
			}
		}
		return dst
	case *image.NYCbCrA:
		stddraw.Draw(dst, dst.Rect, &s.YCbCr, r.Min, stddraw.Src)
		return dst
	}
	// Anything else (16-bit images, CMYK): Go's colour models, 16 bits cut
	// to their high 8.
	for y := range h {
		d := dst.Pix[y*dst.Stride : y*dst.Stride+4*w]
		for x := range w {
			c := color.NRGBA64Model.Convert(img.At(r.Min.X+x, r.Min.Y+y)).(color.NRGBA64)
			d[4*x], d[4*x+1], d[4*x+2], d[4*x+3] = byte(c.R>>8), byte(c.G>>8), byte(c.B>>8), 0xff
		}
	}
	return dst
}

// toGray returns img in grayscale as PIL's convert("L") makes it from the
// RGB image ImageFolder opens: L = (19595 R + 38470 G + 7471 B + 2^15)
// >> 16 (ITU-R 601-2 luma, PIL's fixed point). A grayscale image is kept
// as it is (the formula gives it back unchanged). scratch, and *rgb for
// the RGB image on the way, are reused when they have img's size.
func toGray(img image.Image, scratch *image.Gray, rgb **image.RGBA, jpeg bool) *image.Gray {
	r := img.Bounds()
	w, h := r.Dx(), r.Dy()
	dst := scratch
	if dst == nil || dst.Rect.Dx() != w || dst.Rect.Dy() != h {
		dst = image.NewGray(image.Rect(0, 0, w, h))
	}
	if s, ok := img.(*image.Gray); ok {
		for y := range h {
			src := s.Pix[(y+r.Min.Y-s.Rect.Min.Y)*s.Stride+r.Min.X-s.Rect.Min.X:]
			copy(dst.Pix[y*dst.Stride:y*dst.Stride+w], src[:w])
		}
		return dst
	}
	c := toRGB(img, *rgb, jpeg)
	*rgb = c
	for y := range h {
		src := c.Pix[y*c.Stride:]
		d := dst.Pix[y*dst.Stride : y*dst.Stride+w]
		for x := range d {
			d[x] = luma(src[4*x], src[4*x+1], src[4*x+2])
		}
	}
	return dst
}

// luma is PIL's L24: ITU-R 601-2 in 16-bit fixed point, rounded.
func luma(r, g, b byte) byte {
	return byte((uint32(r)*19595 + uint32(g)*38470 + uint32(b)*7471 + 0x8000) >> 16)
}

// hasImageExtension reports whether a file name ends (in lower case) with
// one of imageExtensions; netpbm reports a netpbm name torchvision would
// read.
func hasImageExtension(name string) (ok, netpbm bool) {
	lower := strings.ToLower(name)
	for _, e := range imageExtensions {
		if strings.HasSuffix(lower, e) {
			return true, false
		}
	}
	for _, e := range netpbmExtensions {
		if strings.HasSuffix(lower, e) {
			return false, true
		}
	}
	return false, false
}
