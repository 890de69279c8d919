package serve

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"gorgonia.org/tensor"

	"gorun/datasets"
	"gorun/model"
)

// takesImages says whether m was trained on images (data.images,
// data.mnist, data.fashion_mnist): image bodies become its samples
// through Model.FromImage.
func takesImages(m *model.Model) bool {
	_, ok := m.ImageMeta()
	return ok && m.Kind() != model.Sequence
}

// imageInput makes an image body one sample, [1, C, H, W] float32,
// through Model.FromImage: decoded, converted and resized exactly as
// training made its samples, and normalised. The image's size is read
// from its header first: one of more than MaxPixels pixels, or under half
// the model's size on a side, is refused before any pixel is decoded.
func (s *Server) imageInput(body []byte, kind bodyKind) (*tensor.Dense, error) {
	if !s.images {
		return nil, errorf(http.StatusUnsupportedMediaType, "a %s image: this model does not take images (its data were %s, samples of %v): send JSON or CSV", kind, s.m.DataKind(), s.sample)
	}
	const name = "the image"
	_, iw, ih, err := datasets.ImageConfig(name, body)
	var pe *datasets.ImagePixelsError
	if errors.As(err, &pe) && pe.Width > 0 && pe.Height > 0 {
		iw, ih, err = pe.Width, pe.Height, nil // too large: refused below
	}
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "the body is not a %s image: %s", kind, strings.TrimPrefix(err.Error(), name+": "))
	}
	im, _ := s.m.ImageMeta()
	c, h, w := im.Channels, im.Height, im.Width
	limit := min(s.opts.MaxPixels, datasets.MaxImagePixels)
	if px := int64(iw) * int64(ih); px > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, "the image is %d×%d pixels: more than the %d this server decodes; the model takes %d×%d", iw, ih, limit, w, h)
	}
	if 2*iw < w || 2*ih < h {
		return nil, errorf(http.StatusBadRequest, "the image is %d×%d pixels; the model takes %d×%d (images are resized, but not from under half that: %d×%d)", iw, ih, w, h, (w+1)/2, (h+1)/2)
	}
	x, err := s.m.FromImage(bytes.NewReader(body))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%s", strings.TrimPrefix(err.Error(), "model: "))
	}
	if err := x.Reshape(1, c, h, w); err != nil {
		return nil, errorf(http.StatusInternalServerError, "%v", err)
	}
	return x, nil
}
