package serve

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"

	"golang.org/x/image/draw"
	"gorgonia.org/tensor"

	"gorun/model"
)

// imageData are the data kinds (spec.Data.Kind) whose samples are
// images: a model trained on them takes image bodies.
var imageData = map[string]bool{"mnist": true, "fashion_mnist": true, "images": true}

// takesImages says whether m's data were images of [C, H, W] with 1 or
// 3 channels.
func takesImages(m *model.Model) bool {
	s := m.InputShape()
	return m.Kind() != model.Sequence && imageData[m.Plan().Spec.Data.Kind] &&
		len(s) == 3 && (s[0] == 1 || s[0] == 3)
}

// imageInput decodes a PNG or JPEG body into one sample of raw pixels,
// [1, C, H, W] uint8, that Predict normalises as the training set's
// pixels were. The image's size is read from its header first: one of
// more than MaxPixels pixels is refused before any is decoded.
func (s *Server) imageInput(body []byte, kind bodyKind) (*tensor.Dense, error) {
	if !s.images {
		return nil, errorf(http.StatusUnsupportedMediaType, "a %s image: this model does not take images (its data were %s, samples of %v): send JSON or CSV", kind, s.m.Plan().Spec.Data.Kind, s.sample)
	}
	decodeConfig, decode := png.DecodeConfig, png.Decode
	if kind == bodyJPEG {
		decodeConfig, decode = jpeg.DecodeConfig, jpeg.Decode
	}
	cfg, err := decodeConfig(bytes.NewReader(body))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "the body is not a %s image: %v", kind, err)
	}
	c, h, w := s.sample[0], s.sample[1], s.sample[2]
	if px := int64(cfg.Width) * int64(cfg.Height); px > s.opts.MaxPixels {
		return nil, errorf(http.StatusRequestEntityTooLarge, "the image is %d×%d pixels: more than the %d this server decodes; the model takes %d×%d", cfg.Width, cfg.Height, s.opts.MaxPixels, w, h)
	}
	if 2*cfg.Width < w || 2*cfg.Height < h {
		return nil, errorf(http.StatusBadRequest, "the image is %d×%d pixels; the model takes %d×%d (images are resized, but not from under half that: %d×%d)", cfg.Width, cfg.Height, w, h, (w+1)/2, (h+1)/2)
	}
	img, err := decode(bytes.NewReader(body))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "the body is not a %s image: %v", kind, err)
	}
	px := imagePixels(img, c, h, w)
	return tensor.New(tensor.WithShape(1, c, h, w), tensor.WithBacking(px)), nil
}

// imagePixels converts an image to raw pixels of [c, h, w] (c is 1 or
// 3), row-major, as torchvision reads an image file before ToTensor:
// resized to w×h with a bilinear filter (antialiased when it shrinks)
// when its size differs, then grey levels (ITU-R 601 luma, as PIL's
// convert("L") and color.GrayModel) for c = 1, or R, G, B planes for
// c = 3. Transparent pixels count as black.
func imagePixels(img image.Image, c, h, w int) []uint8 {
	b := img.Bounds()
	if b.Dx() != w || b.Dy() != h {
		dst := image.NewRGBA(image.Rect(0, 0, w, h))
		draw.BiLinear.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
		img, b = dst, dst.Bounds()
	}
	out := make([]uint8, c*h*w)
	if g, ok := img.(*image.Gray); ok && c == 1 {
		for y := range h {
			copy(out[y*w:(y+1)*w], g.Pix[(y)*g.Stride:])
		}
		return out
	}
	plane := h * w
	for y := range h {
		for x := range w {
			p := img.At(b.Min.X+x, b.Min.Y+y)
			i := y*w + x
			if c == 1 {
				out[i] = color.GrayModel.Convert(p).(color.Gray).Y
				continue
			}
			r, g, bl, _ := p.RGBA()
			out[i], out[plane+i], out[2*plane+i] = uint8(r>>8), uint8(g>>8), uint8(bl>>8)
		}
	}
	return out
}
