package datasets

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// WriteImageFolder writes samples of an 8-bit image dataset (MNIST,
// Fashion-MNIST, uint8 data.tensors, data.images) as PNG files in
// torchvision's ImageFolder layout, dir/<names[label]>/<index>.png with
// index the sample's (five digits or more), so that data.images and
// ImageFolder read them back. perClass > 0 keeps the first perClass
// samples of each class; 0 writes every sample. Samples must have 1
// (grayscale) or 3 (RGB) channels, held in memory (not streamed). It
// returns the number of files written.
func WriteImageFolder(ds Dataset, dir string, names []string, perClass int) (int, error) {
	set, ok := base(ds).(*imageSet)
	if !ok || ds.Len() != set.Len() || set.stream != nil {
		return 0, fmt.Errorf("datasets: %s: WriteImageFolder writes whole 8-bit image datasets", ds.Name())
	}
	shape := set.SampleShape()
	if len(shape) != 3 || (shape[0] != 1 && shape[0] != 3) {
		return 0, fmt.Errorf("datasets: %s: samples of shape %v: want [1 or 3, height, width]", ds.Name(), shape)
	}
	if len(names) != set.NumClasses() {
		return 0, fmt.Errorf("datasets: %s: %d class names for %d classes", ds.Name(), len(names), set.NumClasses())
	}
	for _, n := range names {
		if n == "" || n == "." || n == ".." || filepath.Base(n) != n {
			return 0, fmt.Errorf("datasets: class name %q cannot be a folder name", n)
		}
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			return 0, err
		}
	}
	var keep []int
	count := make([]int, set.NumClasses())
	for i, l := range set.labels {
		if perClass == 0 || count[l] < perClass {
			count[l]++
			keep = append(keep, i)
		}
	}
	c, h, w := shape[0], shape[1], shape[2]
	jobs := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				px := set.pixels[i*set.size : (i+1)*set.size]
				var img image.Image
				if c == 1 {
					img = &image.Gray{Pix: px, Stride: w, Rect: image.Rect(0, 0, w, h)}
				} else {
					rgba := image.NewNRGBA(image.Rect(0, 0, w, h))
					for j := range h * w {
						rgba.Pix[4*j], rgba.Pix[4*j+1], rgba.Pix[4*j+2], rgba.Pix[4*j+3] = px[j], px[h*w+j], px[2*h*w+j], 0xff
					}
					img = rgba
				}
				err := writePNG(filepath.Join(dir, names[set.labels[i]], fmt.Sprintf("%05d.png", i)), img)
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, i := range keep {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return len(keep), nil
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
