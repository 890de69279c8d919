package datasets

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzMNIST feeds arbitrary bytes as the images and labels IDX files of
// an MNIST split (plain or gzipped: the reader tells by the first bytes).
// Reading must fail with an error or give a dataset whose every sample
// can be filled; it must never panic or ask for memory the file does not
// back.
func FuzzMNIST(f *testing.F) {
	s := newSynth(3, 2, 2)
	f.Add(s.imagesFile(), s.labelsFile())
	f.Add(gzipBytes(f, s.imagesFile()), s.labelsFile())
	f.Add(idxBytes(2051, []uint32{1, 1, 1}, []byte{255}), idxBytes(2049, []uint32{1}, []byte{9}))
	f.Add(idxBytes(2051, []uint32{0, 28, 28}, nil), idxBytes(2049, []uint32{0}, nil))
	f.Add(idxBytes(2051, []uint32{1 << 31, 1 << 14, 1 << 14}, nil), idxBytes(2049, []uint32{1}, []byte{10}))
	f.Add(idxBytes(2049, []uint32{1}, []byte{1}), idxBytes(2051, []uint32{1, 1, 1}, []byte{1}))
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		dir := t.TempDir()
		in, ln := fileNames("train", false, false)
		writeFile(t, filepath.Join(dir, in), images)
		writeFile(t, filepath.Join(dir, ln), labels)
		d, err := MNIST("train", dir, 0.1307, 0.3081)
		if err != nil {
			return
		}
		n, shape := d.Len(), d.SampleShape()
		if len(shape) != 3 || shape[0] != 1 || shape[1] < 1 || shape[2] < 1 {
			t.Fatalf("sample shape %v", shape)
		}
		if len(d.Labels()) != n {
			t.Fatalf("%d labels for %d samples", len(d.Labels()), n)
		}
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		x := make([]float32, n*shape[1]*shape[2])
		y := make([]int32, n)
		d.Fill(idx, x, y)
		for i, c := range y {
			if c < 0 || int(c) >= d.NumClasses() {
				t.Fatalf("sample %d: label %d out of range", i, c)
			}
		}
	})
}

// FuzzNPY feeds arbitrary bytes as the samples and labels .npy files of
// data.tensors. Reading must fail with an error or give a dataset whose
// every sample can be filled; it must never panic.
func FuzzNPY(f *testing.F) {
	f.Add(npyBytes(1, "<f4", false, []int{2, 1}, f32Bytes(1, 2)), npyBytes(1, "<i8", false, []int{2}, i64Bytes(0, 1)))
	f.Add(npyBytes(2, "|u1", false, []int{1, 2, 2}, []byte{1, 2, 3, 4}), npyBytes(1, "|u1", false, []int{1}, []byte{3}))
	f.Add(npyBytes(1, "<f8", false, []int{1, 1}, f64Bytes(1)), npyBytes(3, "<i4", false, []int{1}, i32Bytes(-1)))
	f.Fuzz(func(t *testing.T, x, y []byte) {
		dir := t.TempDir()
		xp, yp := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
		writeFile(t, xp, x)
		writeFile(t, yp, y)
		d, err := Tensors(TensorsSource{X: xp, Y: yp}, "train", 0, 0, 1)
		if err != nil {
			return
		}
		idx := make([]int, d.Len())
		for i := range idx {
			idx[i] = i
		}
		fillAll(d, idx)
	})
}

// FuzzImage feeds arbitrary bytes as an image file. Preparing a sample
// (one and three channels, resized and at its own size) must fail with an
// error naming the file, or fill the sample; it must never panic, and a
// header that declares more than MaxImagePixels is refused before
// decoding.
func FuzzImage(f *testing.F) {
	for _, name := range []string{"fashion0.png", "photo.jpg", "odd.jpg", "palette.gif", "color.bmp", "color.tiff", "color.webp", "rgba.png"} {
		b, err := os.ReadFile(filepath.Join("testdata", "images", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(bombPNG(10000, 10000))
	f.Add([]byte("GIF89a\x10\x27\x10\x27"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []int{1, 3} {
			out := make([]byte, c*9*7)
			err := PrepareImage(ImagePrep{Height: 9, Width: 7, Channels: c}, "f.img", b, out)
			if err != nil && !strings.HasPrefix(err.Error(), "f.img") {
				t.Fatalf("error %q does not name the file", err)
			}
		}
	})
}

// FuzzCSV feeds arbitrary text as a table with columns a, b and y. Reading
// must fail with an error naming the file or give a dataset whose every
// sample can be filled; it must never panic.
func FuzzCSV(f *testing.F) {
	f.Add("a,b,y\n1,2,cat\n3,4,dog\n")
	f.Add("a,b,y\n1,2,0\n3,4,1\n5,6,1\n")
	f.Add("a,\"b\",y\r\n1,\"2\",\"c\"\"at\"\r\n3,4,dog\r\n")
	f.Add("\ufeffa,b,y\n1,,cat\n")
	f.Fuzz(func(t *testing.T, text string) {
		path := filepath.Join(t.TempDir(), "t.csv")
		writeFile(t, path, []byte(text))
		for _, regression := range []bool{false, true} {
			d, err := CSV(CSVConfig{Path: path, Y: "y", Regression: regression, Standardize: true, Split: "train", TestFraction: 0.5})
			if err != nil {
				if !strings.Contains(err.Error(), path) {
					t.Fatalf("error %q does not name the file", err)
				}
				continue
			}
			idx := make([]int, d.Len())
			for i := range idx {
				idx[i] = i
			}
			fillAll(d, idx)
		}
	})
}

// FuzzFastPNG holds the reusing PNG decoder (pngfast.go) to image/png:
// whatever it decodes, image/png decodes too, to the same size and the
// same colours (as toRGB reads them); it declines the rest.
func FuzzFastPNG(f *testing.F) {
	for _, name := range []string{"fashion0.png", "color.png", "rgba.png", "la.png", "pal.png"} {
		b, err := os.ReadFile(filepath.Join("testdata", "images", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(palettePNG())
	var s pngState
	f.Fuzz(func(t *testing.T, b []byte) {
		b = fixCRCs(b) // so that mutations reach past the checksums
		img, ok := s.decode(b)
		if !ok {
			return
		}
		std, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("decoded, but image/png says %v", err)
		}
		if img.Bounds() != std.Bounds() {
			t.Fatalf("bounds %v, image/png's %v", img.Bounds(), std.Bounds())
		}
		if a, b := toRGB(img, nil, false), toRGB(std, nil, false); !bytes.Equal(a.Pix, b.Pix) {
			t.Fatalf("colours differ from image/png's (%T and %T)", img, std)
		}
	})
}

// fixCRCs returns a copy of a PNG file with every chunk's CRC made right,
// as far as its chunks are whole.
func fixCRCs(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) < 8 {
		return b
	}
	for p := 8; p+12 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[p:]))
		if n < 0 || n > len(b)-p-12 {
			break
		}
		binary.BigEndian.PutUint32(b[p+8+n:], crc32.ChecksumIEEE(b[p+4:p+8+n]))
		p += 12 + n
	}
	return b
}

// TestFastPNG: the reusing decoder takes the PNG files of the tests (grey,
// RGB, RGBA, grey and alpha, a palette with transparency), one after the
// other on one state, and gives image/png's colours; it declines what it
// does not handle, such as a 16-bit file.
func TestFastPNG(t *testing.T) {
	var s pngState
	files := map[string][]byte{"palette8.png": palettePNG()}
	for _, name := range []string{"fashion0.png", "color.png", "rgba.png", "la.png", "fashion1.png"} {
		b, err := os.ReadFile(filepath.Join("testdata", "images", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	for round := range 2 {
		for name, b := range files {
			img, ok := s.decode(b)
			if !ok {
				t.Fatalf("round %d: %s declined", round, name)
			}
			std, _ := png.Decode(bytes.NewReader(b))
			if a, b := toRGB(img, nil, false), toRGB(std, nil, false); !bytes.Equal(a.Pix, b.Pix) || img.Bounds() != std.Bounds() {
				t.Fatalf("round %d: %s: colours differ from image/png's", round, name)
			}
		}
	}
	var b bytes.Buffer
	png.Encode(&b, image.NewGray16(image.Rect(0, 0, 3, 2)))
	if _, ok := s.decode(b.Bytes()); ok {
		t.Fatal("a 16-bit PNG was not declined")
	}
	// A corrupt checksum is declined: image/png then says what is wrong.
	good, _ := os.ReadFile(filepath.Join("testdata", "images", "fashion0.png"))
	bad := bytes.Clone(good)
	bad[len(bad)-20] ^= 1
	if _, ok := s.decode(bad); ok {
		t.Fatal("a PNG with a broken chunk was not declined")
	}
}

// palettePNG is an 8-bit palette PNG (40 colours, some transparent: a
// tRNS chunk), 7×5.
func palettePNG() []byte {
	var p color.Palette
	for i := range 40 {
		if i%7 == 3 {
			p = append(p, color.NRGBA{byte(6 * i), byte(255 - 6*i), 9, byte(5 * i)})
		} else {
			p = append(p, color.RGBA{byte(6 * i), byte(255 - 6*i), 9, 255})
		}
	}
	img := image.NewPaletted(image.Rect(0, 0, 7, 5), p)
	for i := range img.Pix {
		img.Pix[i] = byte(i * 3 % 40)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}
