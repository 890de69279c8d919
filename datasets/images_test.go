package datasets

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"gorun/datasets/torchrand"
	"gorun/engine/spec"
)

// fashionFolders are Fashion-MNIST's class names (torchvision's
// FashionMNIST.classes) as folder names: sorted, they are not in label
// order, which the tests rely on.
var fashionFolders = []string{"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"}

// fashionPNGs writes the first perClass images of each class of
// Fashion-MNIST's training split (and, when testPerClass > 0, of its test
// split) as PNG files: dir/<class>/<index>.png, or dir/train/<class>/…
// and dir/test/<class>/… with a test split. It skips the test when
// Debian's dataset-fashion-mnist is not installed.
func fashionPNGs(t testing.TB, dir string, perClass, testPerClass int) string {
	t.Helper()
	train := realFashion(t, "train")
	root := dir
	if testPerClass > 0 {
		root = filepath.Join(dir, "train")
		if _, err := WriteImageFolder(realFashion(t, "test"), filepath.Join(dir, "test"), fashionFolders, testPerClass); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WriteImageFolder(train, root, fashionFolders, perClass); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sampleIndex is the Fashion-MNIST index in a file name written by
// WriteImageFolder.
func sampleIndex(t testing.TB, path string) int {
	i, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(path), ".png"))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestImagesFashionPNGsEqualIDX: Fashion-MNIST written out as PNGs and read
// back by data.images (one channel, its own 28×28) gives the IDX files'
// pixels exactly, the same floats as data.fashion_mnist, and labels that
// name the same classes; the samples come class by class in sorted
// folder order, files sorted within each, as ImageFolder lists them.
func TestImagesFashionPNGsEqualIDX(t *testing.T) {
	dir := fashionPNGs(t, t.TempDir(), 30, 5)
	idx := map[string]Dataset{"train": realFashion(t, "train"), "test": realFashion(t, "test")}
	sorted := slices.Sorted(slices.Values(fashionFolders))
	for _, split := range []string{"train", "test"} {
		c := ImagesConfig{Dir: dir, Split: split, Channels: 1, Mean: []float64{FashionMNISTMean}, Std: []float64{FashionMNISTStd}}
		l, err := listImages(c)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := Images(c)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{"train": 30, "test": 5}[split]
		if ds.Len() != 10*per || !slices.Equal(ds.SampleShape(), []int{1, 28, 28}) || ds.NumClasses() != 10 {
			t.Fatalf("%s: %d samples of %v in %d classes", split, ds.Len(), ds.SampleShape(), ds.NumClasses())
		}
		if names := ClassNames(ds); !slices.Equal(names, sorted) {
			t.Fatalf("%s: classes %v, want %v", split, names, sorted)
		}
		ref := idx[split]
		got := make([]float32, 784)
		want := make([]float32, 784)
		var y, wy [1]int32
		for i, f := range l.files {
			if i > 0 {
				prev := l.files[i-1]
				if f.class < prev.class || (f.class == prev.class && f.path < prev.path) {
					t.Fatalf("%s: %s comes after %s", split, f.path, prev.path)
				}
			}
			k := sampleIndex(t, f.path)
			ds.Fill([]int{i}, got, y[:])
			ref.Fill([]int{k}, want, wy[:])
			if !slices.Equal(got, want) {
				t.Fatalf("%s: sample %d (%s) differs from Fashion-MNIST's sample %d", split, i, f.path, k)
			}
			if sorted[y[0]] != fashionFolders[wy[0]] {
				t.Fatalf("%s: %s has class %q, Fashion-MNIST's label %d is %q", split, f.path, sorted[y[0]], wy[0], fashionFolders[wy[0]])
			}
		}
		if px := ds.(*imageSet).pixels; len(px) != 784*ds.Len() {
			t.Fatalf("%d bytes cached for %d samples", len(px), ds.Len())
		}
	}
}

// flatFolder writes n images (8×6 grey, each a different level) into
// each of the classes' folders, named 000.png, 001.png, ….
func flatFolder(t testing.TB, dir string, classes []string, n int) {
	t.Helper()
	for c, name := range classes {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			writeGray(t, filepath.Join(dir, name, fmtIndex(i)+".png"), 8, 6, byte(c*40+i))
		}
	}
}

func fmtIndex(i int) string { return strconv.Itoa(1000 + i)[1:] }

// writeGray writes a w×h PNG of one grey level.
func writeGray(t testing.TB, path string, w, h int, v byte) {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = v
	}
	if err := writePNG(path, img); err != nil {
		t.Fatal(err)
	}
}

// TestImagesTestFraction: without train/ and test/ folders the split is
// torch.utils.data.random_split(ImageFolder(dir), [n − k, k],
// generator = torch.Generator().manual_seed(seed)), k = ⌊n·fraction⌋: the
// two splits are torch.randperm's order cut in two.
func TestImagesTestFraction(t *testing.T) {
	dir := t.TempDir()
	classes := []string{"b", "a", "c"}
	flatFolder(t, dir, classes, 7) // 21 images
	all, err := listImages(ImagesConfig{Dir: dir, Split: "train", Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.files) != 21 || !slices.Equal(all.classes, []string{"a", "b", "c"}) {
		t.Fatalf("%d files, classes %v", len(all.files), all.classes)
	}
	perm := torchrand.RandPerm(21, 7)
	k := 5 // ⌊21 × 0.25⌋
	for split, want := range map[string][]int{"train": perm[:21-k], "test": perm[21-k:]} {
		l, err := listImages(ImagesConfig{Dir: dir, Split: split, Channels: 1, TestFraction: 0.25, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.files) != len(want) {
			t.Fatalf("%s: %d files, want %d", split, len(l.files), len(want))
		}
		for i, j := range want {
			if l.files[i] != all.files[j] {
				t.Fatalf("%s: sample %d is %s, want %s (randperm position %d)", split, i, l.files[i].path, all.files[j].path, j)
			}
		}
		// A limit keeps the first samples of a random split.
		lim, err := listImages(ImagesConfig{Dir: dir, Split: split, Channels: 1, TestFraction: 0.25, Seed: 7, Limit: 3})
		if err != nil || !slices.Equal(lim.files, l.files[:3]) {
			t.Fatalf("%s limit 3: %v, %v", split, lim, err)
		}
	}
	other, _ := listImages(ImagesConfig{Dir: dir, Split: "test", Channels: 1, TestFraction: 0.25, Seed: 8})
	if slices.Equal(other.files, all.files[:5]) {
		t.Fatal("seed 8 gave seed 7's split")
	}
	// In folder order (no split), a limit takes every class in turn.
	lim, err := listImages(ImagesConfig{Dir: dir, Split: "train", Channels: 1, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range lim.files {
		got = append(got, filepath.Base(filepath.Dir(f.path))+"/"+filepath.Base(f.path))
	}
	if want := []string{"a/000.png", "a/001.png", "b/000.png", "b/001.png", "c/000.png"}; !slices.Equal(got, want) {
		t.Fatalf("limit 5 in folder order: %v, want %v", got, want)
	}
}

// TestImagesWalk: files in folders below a class folder count, folders
// in sorted order of their paths, files sorted within each (torchvision's
// make_dataset); other files are passed over; links to folders are
// followed, each folder once.
func TestImagesWalk(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"cat/z.png", "cat/a.PNG", "cat/sub/b.png", "cat/sub-x/c.png", "cat/notes.txt", "dog/1.png"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, ".txt") {
			os.WriteFile(filepath.Join(dir, p), []byte("hello"), 0o644)
			continue
		}
		writeGray(t, filepath.Join(dir, p), 4, 4, 9)
	}
	// A link back up: a loop that must be walked once.
	if err := os.Symlink(filepath.Join(dir, "cat"), filepath.Join(dir, "cat", "sub", "loop")); err != nil {
		t.Fatal(err)
	}
	l, err := listImages(ImagesConfig{Dir: dir, Split: "train", Channels: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range l.files {
		rel, _ := filepath.Rel(dir, f.path)
		got = append(got, rel+":"+strconv.Itoa(int(f.class)))
	}
	// "cat" < "cat/sub" < "cat/sub-x" in Python's sorted(os.walk(...)).
	want := []string{"cat/a.PNG:0", "cat/z.png:0", "cat/sub/b.png:0", "cat/sub-x/c.png:0", "dog/1.png:1"}
	if !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
}

// bombPNG is a valid PNG header (signature and IHDR chunk) that declares
// a w×h 8-bit grey image, with no pixel data after it.
func bombPNG(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 0 // bit depth 8, greyscale
	chunk := append([]byte("IHDR"), ihdr...)
	binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

// TestImagesHostile: what data.images says of folders and files it cannot
// use. Each case builds a folder (two classes of two 8×6 images) and
// changes it.
func TestImagesHostile(t *testing.T) {
	var realPNG bytes.Buffer
	png.Encode(&realPNG, image.NewGray(image.Rect(0, 0, 8, 6)))
	for _, tc := range []struct {
		name  string
		setup func(dir string) ImagesConfig
		want  string
	}{
		{"missing folder", func(dir string) ImagesConfig {
			return ImagesConfig{Dir: filepath.Join(dir, "nope")}
		}, "image folder: stat DIR/nope: no such file or directory"},
		{"a file, not a folder", func(dir string) ImagesConfig {
			return ImagesConfig{Dir: filepath.Join(dir, "a", "000.png")}
		}, "DIR/a/000.png is not a folder: data.images wants a folder of class folders"},
		{"no class folders", func(dir string) ImagesConfig {
			empty := filepath.Join(dir, "empty")
			os.Mkdir(empty, 0o755)
			return ImagesConfig{Dir: empty}
		}, "DIR/empty holds no class folders: data.images wants one folder per class, such as DIR/empty/cat/1.jpg and DIR/empty/dog/2.png, as torchvision's ImageFolder"},
		{"a class folder without images", func(dir string) ImagesConfig {
			os.Mkdir(filepath.Join(dir, "c"), 0o755)
			os.WriteFile(filepath.Join(dir, "c", "readme.txt"), []byte("x"), 0o644)
			return ImagesConfig{}
		}, "class folder DIR/c holds no images (files ending in .jpg, .jpeg, .png, .bmp, .gif, .tif, .tiff, .webp)"},
		{"not an image", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "001.png"), []byte("hello, world"), 0o644)
			return ImagesConfig{}
		}, "DIR/b/001.png: not an image gorun decodes (PNG, JPEG, GIF, BMP, TIFF, WebP): it begins with the bytes 68 65 6c 6c 6f 2c 20 77"},
		{"a truncated PNG", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "001.png"), realPNG.Bytes()[:realPNG.Len()-20], 0o644)
			return ImagesConfig{}
		}, "DIR/b/001.png: decoding it as PNG: png: invalid format: unexpected EOF"},
		{"a JPEG that is not", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "002.jpg"), []byte("\xff\xd8\xff\xe0garbage"), 0o644)
			return ImagesConfig{}
		}, "DIR/b/002.jpg: reading the JPEG header: unexpected EOF"},
		{"an empty file", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "001.png"), nil, 0o644)
			return ImagesConfig{}
		}, "DIR/b/001.png: empty file (0 bytes), not an image"},
		{"a decompression bomb", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "001.png"), bombPNG(10000, 10000), 0o644)
			return ImagesConfig{Height: 8, Width: 8}
		}, "DIR/b/001.png: the PNG header declares a 10000×10000 image (100000000 pixels), more than the 67108864 (8192×8192) data.images decodes; shrink the image"},
		{"a bomb as the first image", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "a", "000.png"), bombPNG(10000, 10000), 0o644)
			return ImagesConfig{}
		}, "DIR/a/000.png: the PNG header declares a 10000×10000 image (100000000 pixels), more than the 67108864 (8192×8192) data.images decodes; shrink the image"},
		{"mixed sizes without size", func(dir string) ImagesConfig {
			writeGray(t, filepath.Join(dir, "b", "001.png"), 30, 20, 1)
			return ImagesConfig{}
		}, "DIR/b/001.png is 30 wide and 20 high, but DIR/a/000.png, the first image, is 8 wide and 6 high: give data.images a size = (height, width) to resize every image to"},
		{"a named pipe", func(dir string) ImagesConfig {
			if err := syscall.Mkfifo(filepath.Join(dir, "b", "003.png"), 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			return ImagesConfig{}
		}, "DIR/b/003.png is a named pipe (FIFO), not a regular file"},
		{"a netpbm file", func(dir string) ImagesConfig {
			os.WriteFile(filepath.Join(dir, "b", "003.ppm"), []byte("P6\n1 1\n255\n\x00\x00\x00"), 0o644)
			return ImagesConfig{}
		}, "DIR/b/003.ppm: a netpbm (PPM/PGM) image, which gorun does not decode (torchvision's ImageFolder would read it): convert it to PNG"},
		{"a train folder alone", func(dir string) ImagesConfig {
			os.Mkdir(filepath.Join(dir, "train"), 0o755)
			return ImagesConfig{}
		}, "DIR has a train folder but no test folder: give both (each holding the class folders), or put the class folders in DIR itself and split with test_fraction"},
		{"a test class the training folder lacks", func(dir string) ImagesConfig {
			flatFolder(t, filepath.Join(dir, "s", "train"), []string{"cat", "dog"}, 1)
			flatFolder(t, filepath.Join(dir, "s", "test"), []string{"cat", "cow"}, 1)
			return ImagesConfig{Dir: filepath.Join(dir, "s"), Split: "test"}
		}, "DIR/s/test/cow: a class folder that DIR/s/train does not have (its classes: \"cat\", \"dog\"); the model learns the training folder's classes"},
		{"no test split", func(dir string) ImagesConfig {
			return ImagesConfig{Split: "test", TestFraction: -1}
		}, "DIR has no train/ and test/ folders and test_fraction is 0: there is no test split; give test_fraction (such as 0.1) to both data.images calls"},
		{"a test fraction of no image", func(dir string) ImagesConfig {
			return ImagesConfig{Split: "test", TestFraction: 0.1}
		}, "test_fraction 0.1 of the 4 images of DIR is no image: raise it"},
		{"channels 2", func(dir string) ImagesConfig {
			return ImagesConfig{Channels: 2}
		}, "channels must be 1 (grayscale) or 3 (RGB), got 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			flatFolder(t, dir, []string{"a", "b"}, 2)
			c := tc.setup(dir)
			if c.Dir == "" {
				c.Dir = dir
			}
			if c.Split == "" {
				c.Split = "train"
			}
			if c.Channels == 0 {
				c.Channels = 3
			}
			if c.TestFraction < 0 {
				c.TestFraction = 0
			}
			_, err := Images(c)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if err == nil || err.Error() != want {
				t.Fatalf("error\n%v\nwant\n%s", err, want)
			}
			t.Logf("%s", strings.ReplaceAll(err.Error(), dir, "DIR"))
		})
	}
	// Mixed sizes are fine with a size: each image is resized.
	dir := t.TempDir()
	flatFolder(t, dir, []string{"a", "b"}, 2)
	writeGray(t, filepath.Join(dir, "b", "001.png"), 30, 20, 1)
	ds, err := Images(ImagesConfig{Dir: dir, Split: "train", Channels: 1, Height: 5, Width: 7})
	if err != nil || !slices.Equal(ds.SampleShape(), []int{1, 5, 7}) {
		t.Fatalf("mixed sizes with a size: %v, %v", ds, err)
	}
}

// TestImagesChannels: three channels normalized each with its own mean
// and std, a random crop's padding black in each, and the metadata a
// model keeps giving back the very sample from the file (ImageMeta.Sample).
func TestImagesChannels(t *testing.T) {
	dir := t.TempDir()
	for i, f := range []string{"color.png", "photo.jpg", "rgba.png", "palette.gif", "color.webp"} {
		cls := []string{"x", "y"}[i%2]
		os.MkdirAll(filepath.Join(dir, cls), 0o755)
		b, err := os.ReadFile(filepath.Join("testdata", "images", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, cls, f), b, 0o644)
	}
	mean, std := []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
	d := &spec.Data{Kind: "images", Dir: dir, Split: "train", ImageSize: [2]int{16, 12}, Channels: 3,
		ChannelMean: mean, ChannelStd: std, Pos: "t.star:1:1"}
	info, err := Describe(d)
	if err != nil || !slices.Equal(info.Sample, []int{3, 16, 12}) || info.Classes != 2 || !slices.Equal(info.ClassNames, []string{"x", "y"}) {
		t.Fatalf("Describe = %+v, %v", info, err)
	}
	ds, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := listImages(imagesConfig(d, options{}))
	meta := Metadata(ds)
	var im ImageMeta
	if err := json.Unmarshal([]byte(meta[MetaImage]), &im); err != nil {
		t.Fatal(err)
	}
	if meta[MetaClasses] != `["x","y"]` || im.Height != 16 || im.Width != 12 || im.Channels != 3 || !slices.Equal(im.Mean, mean) || im.Resize != "bilinear" {
		t.Fatalf("metadata %v", meta)
	}
	x := make([]float32, 3*16*12)
	var y [1]int32
	px := make([]byte, len(x))
	for i, f := range l.files {
		ds.Fill([]int{i}, x, y[:])
		b, _ := ReadImageFile(f.path)
		if err := PrepareImage(ImagePrep{Height: 16, Width: 12, Channels: 3}, f.path, b, px); err != nil {
			t.Fatal(err)
		}
		for j, v := range px {
			c := j / (16 * 12)
			if want := (float32(v)/255 - float32(mean[c])) / float32(std[c]); x[j] != want {
				t.Fatalf("%s value %d (channel %d) = %v, want %v", f.path, j, c, x[j], want)
			}
		}
		s, err := im.Sample(f.path, b)
		if err != nil || !slices.Equal(s, x) {
			t.Fatalf("%s: ImageMeta.Sample differs from the training sample (%v)", f.path, err)
		}
	}
	// A crop's padding is black in every channel: the normalized zero.
	d.Transforms = append(d.Transforms, transformSpec{Kind: "random_crop", Height: 16, Width: 12, Padding: 30})
	aug, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	e := aug.(EpochDataset).Epoch(1, 0)
	e.Fill([]int{0}, x, y[:])
	pads := map[float32]bool{}
	for c := range 3 {
		pads[NormalizedZero(mean[c], std[c])] = false
	}
	for j, v := range x {
		if v == NormalizedZero(mean[j/(16*12)], std[j/(16*12)]) {
			pads[v] = true
		}
	}
	for v, seen := range pads {
		if !seen {
			t.Errorf("no padding value %v in a sample cropped with padding 30", v)
		}
	}
}

// TestDecodePool: decoding on several goroutines gives what one gives.
func TestDecodePool(t *testing.T) {
	dir := t.TempDir()
	for c := range 2 {
		os.MkdirAll(filepath.Join(dir, strconv.Itoa(c)), 0o755)
		for i := range 40 {
			img := image.NewNRGBA(image.Rect(0, 0, 9+i%3, 7+i%4))
			for j := range img.Pix {
				img.Pix[j] = byte(j*7 + i*13 + c)
			}
			if err := writePNG(filepath.Join(dir, strconv.Itoa(c), fmtIndex(i)+".png"), img); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	var reports []Progress
	ds, err := Images(ImagesConfig{Dir: dir, Split: "train", Channels: 3, Height: 6, Width: 5,
		Progress: func(p Progress) { mu.Lock(); reports = append(reports, p); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	got := ds.(*imageSet).pixels
	l, _ := listImages(ImagesConfig{Dir: dir, Split: "train", Channels: 3, Height: 6, Width: 5})
	one := newImagePrepper(ImagePrep{Height: 6, Width: 5, Channels: 3})
	want := make([]byte, 90)
	for i, f := range l.files {
		b, _ := ReadImageFile(f.path)
		if err := one.prepare(f.path, b, want, [2]int{6, 5}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[i*90:(i+1)*90], want) {
			t.Fatalf("%s decoded by the pool differs", f.path)
		}
	}
	if last := reports[len(reports)-1]; last.Done != 80 || last.Total != 80 || !strings.HasPrefix(last.What, "images:") {
		t.Fatalf("last progress %+v", last)
	}
}

// TestLuma: grayscale is PIL's convert("L") of the RGB image.
func TestLuma(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 4, 1))
	cols := []color.NRGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 9}, {200, 100, 50, 0}}
	for i, c := range cols {
		img.SetNRGBA(i, 0, c)
	}
	var rgb *image.RGBA
	g := toGray(img, nil, &rgb, false)
	// PIL: Image.new("RGB", …) with these colours, .convert("L").
	if want := []byte{76, 150, 29, 124}; !slices.Equal(g.Pix, want) {
		t.Fatalf("luma %v, want %v", g.Pix, want)
	}
}
