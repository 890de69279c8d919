package datasets

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorun/datasets/torchrand"
)

// ImagesConfig says which images data.images reads and how it makes them
// samples.
type ImagesConfig struct {
	// Dir is the folder: one folder per class (torchvision's ImageFolder
	// layout: Dir/cat/1.jpg, Dir/dog/2.png), or train/ and test/ folders
	// that each hold the class folders.
	Dir string
	// Split is "train" or "test".
	Split string
	// Height and Width are the size every image is resized to (PIL's
	// bilinear filter, as torchvision's Resize: resample.go); 0 and 0
	// keep the images' own size,
	// which must then be the same for all.
	Height, Width int
	// Channels is 1 (grayscale) or 3 (RGB).
	Channels int
	// Mean and Std normalize channel c as (v/255 − Mean[c])/Std[c]; nil
	// leaves v/255.
	Mean, Std []float64
	// TestFraction and Seed split a folder without train/ and test/
	// folders: as torch.utils.data.random_split(ImageFolder(Dir),
	// [n − k, k], generator = torch.Generator().manual_seed(Seed)) with
	// k = ⌊n · TestFraction⌋. 0 keeps every image in the training split.
	TestFraction float64
	Seed         int64
	// Limit, when > 0, keeps Limit images of the split (see LimitImages).
	Limit int
	// MemoryLimit bounds the decoded images (uint8) held in memory, in
	// bytes; 0 is DefaultImageBudget(). A set whose decoded images are
	// larger is streamed from disk (stream.go): its samples are decoded as
	// the steps need them, and the first that fit what Prefetch leaves of
	// the budget are kept once decoded.
	MemoryLimit int64
	// Prefetch is the most samples a streamed set's prefetchers hold
	// decoded at once (every device's window, see Prefetch): the part of
	// the memory budget kept for them. 0 keeps none.
	Prefetch int
	// ReadFile reads an image file whole; nil is ReadImageFile. Tests
	// slow it down or count the reads.
	ReadFile func(path string) ([]byte, error)
	// Progress, when set, is called as the images are decoded (every
	// tenth of a second or so, and once at the end).
	Progress func(Progress)
}

// Progress is how far decoding a dataset has come.
type Progress struct {
	What        string // the dataset, e.g. "images/train"
	Done, Total int
	Elapsed     time.Duration
}

// imageFile is one image of a listing and its class index.
type imageFile struct {
	path  string
	class int32
}

// imageList is the images of one split, in sample order, and the class
// names (those of the training split).
type imageList struct {
	name    string
	classes []string
	files   []imageFile
	// folderOrder is set when the files are in folder order (class by
	// class), not in a random split's order.
	folderOrder   bool
	height, width int // the sample size
	channels      int
	// resize is set when the script gave the size: images of another
	// size are resized (else refused).
	resize bool
}

// DefaultImageBudget is the memory the decoded images of one data.images
// set may take when the cluster sets no memory_limit: half the memory the
// machine has available, or 4 GiB when that is unknown.
func DefaultImageBudget() int64 {
	if m := availableMemory(); m > 0 {
		return m / 2
	}
	return 4 << 30
}

// availableMemory is MemAvailable from /proc/meminfo, in bytes (0 when
// unknown).
func availableMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb int64
			if _, err := fmt.Sscan(rest, &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

func (c *ImagesConfig) check() error {
	switch {
	case c.Dir == "":
		return errors.New("no folder given")
	case c.Split != "train" && c.Split != "test":
		return fmt.Errorf("unknown split %q: want \"train\" or \"test\"", c.Split)
	case c.Channels != 1 && c.Channels != 3:
		return fmt.Errorf("channels must be 1 (grayscale) or 3 (RGB), got %d", c.Channels)
	case c.Height < 0 || c.Width < 0 || (c.Height == 0) != (c.Width == 0):
		return fmt.Errorf("size (%d, %d): want a positive height and width", c.Height, c.Width)
	case int64(c.Height)*int64(c.Width) > MaxImagePixels:
		return fmt.Errorf("size (%d, %d) is more than %d pixels", c.Height, c.Width, MaxImagePixels)
	case !(c.TestFraction >= 0 && c.TestFraction < 1):
		return fmt.Errorf("test_fraction must be from 0 up to 1 (not 1), got %v", c.TestFraction)
	case c.Limit < 0:
		return fmt.Errorf("limit must be ≥ 0, got %d", c.Limit)
	case c.Mean != nil && (len(c.Mean) != c.Channels || len(c.Std) != c.Channels):
		return fmt.Errorf("normalize: %d means and %d stds for %d channels", len(c.Mean), len(c.Std), c.Channels)
	}
	for i := range c.Mean {
		if math.IsNaN(c.Mean[i]) || math.IsInf(c.Mean[i], 0) || !(c.Std[i] > 0) || math.IsInf(c.Std[i], 0) {
			return fmt.Errorf("normalize: channel %d: mean %v and std %v: want a finite mean and a positive finite std", i, c.Mean[i], c.Std[i])
		}
	}
	return nil
}

// ImagesInfo lists the images data.images would read and gives their
// sample shape ([channels, height, width]) and class names, reading the
// folders and one image header only.
func ImagesInfo(c ImagesConfig) (shape []int, classes []string, err error) {
	l, err := listImages(c)
	if err != nil {
		return nil, nil, err
	}
	return []int{l.channels, l.height, l.width}, l.classes, nil
}

// Images reads the images of one split of an image folder (see
// ImagesConfig), decoding them on all the cores into memory as uint8 —
// or, when their decoded bytes exceed the memory budget (MemoryLimit),
// only listing them: such a set is streamed from disk, its samples
// decoded as they are filled, ahead of the steps by a Prefetcher when the
// order is known (Streamed, Prefetch). Samples have shape [channels,
// height, width]; Fill writes each value v as (v/255 − mean)/std in
// float32, as torchvision's ToTensor and Normalize. Labels are the class
// folders' indices in sorted order, as ImageFolder's; ClassNames gives
// the names.
func Images(c ImagesConfig) (Dataset, error) {
	l, err := listImages(c)
	if err != nil {
		return nil, err
	}
	readFile := c.ReadFile
	if readFile == nil {
		readFile = ReadImageFile
	}
	budget, what := c.MemoryLimit, "the cluster's memory_limit"
	if budget <= 0 {
		budget, what = DefaultImageBudget(), "half the memory this machine has available"
	}
	per := int64(l.channels) * int64(l.height) * int64(l.width)
	var pixels []byte
	if per*int64(len(l.files)) <= budget {
		if pixels, err = decodeImages(l, readFile, c.Progress); err != nil {
			return nil, err
		}
	}
	labels := make([]int32, len(l.files))
	for i, f := range l.files {
		labels[i] = f.class
	}
	mean, std := c.Mean, c.Std
	if mean == nil {
		mean, std = make([]float64, c.Channels), make([]float64, c.Channels)
		for i := range std {
			std[i] = 1
		}
	}
	d := newImageSetChannels(l.name, pixels, labels, []int{l.channels, l.height, l.width}, len(l.classes), mean, std)
	d.classNames = l.classes
	d.prep = &ImageMeta{Height: l.height, Width: l.width, Channels: l.channels, Mean: c.Mean, Std: c.Std, Resize: "bilinear"}
	if pixels == nil {
		d.stream = newImageStream(l, readFile, budget, what, c.Prefetch)
	}
	return d, nil
}

// listImages finds the images of c's split and the sample size.
func listImages(c ImagesConfig) (*imageList, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkFolder(c.Dir); err != nil {
		return nil, err
	}
	l := &imageList{name: "images:" + filepath.Base(c.Dir) + "/" + c.Split, channels: c.Channels}
	train, test := filepath.Join(c.Dir, "train"), filepath.Join(c.Dir, "test")
	trainOK, testOK := isFolder(train), isFolder(test)
	switch {
	case trainOK && testOK:
		// Split folders: the classes are the training folder's.
		classes, err := findClasses(train)
		if err != nil {
			return nil, err
		}
		l.classes, l.folderOrder = classes, true
		index := map[string]int32{}
		for i, name := range classes {
			index[name] = int32(i)
		}
		root := train
		if c.Split == "test" {
			root = test
			tc, err := findClasses(test)
			if err != nil {
				return nil, err
			}
			for _, name := range tc {
				if _, ok := index[name]; !ok {
					return nil, fmt.Errorf("%s: a class folder that %s does not have (its classes: %s); the model learns the training folder's classes",
						filepath.Join(test, name), train, QuoteList(classes, 12))
				}
			}
			classes = tc
		}
		files, err := classFiles(root, classes, index)
		if err != nil {
			return nil, err
		}
		l.files = files
	case trainOK != testOK:
		have, miss := train, test
		if testOK {
			have, miss = test, train
		}
		return nil, fmt.Errorf("%s has a %s folder but no %s folder: give both (each holding the class folders), or put the class folders in %s itself and split with test_fraction",
			c.Dir, filepath.Base(have), filepath.Base(miss), c.Dir)
	default:
		classes, err := findClasses(c.Dir)
		if err != nil {
			return nil, err
		}
		index := map[string]int32{}
		for i, name := range classes {
			index[name] = int32(i)
		}
		all, err := classFiles(c.Dir, classes, index)
		if err != nil {
			return nil, err
		}
		l.classes = classes
		n := len(all)
		k := int(math.Floor(float64(n) * c.TestFraction))
		switch {
		case c.TestFraction == 0 && c.Split == "test":
			return nil, fmt.Errorf("%s has no train/ and test/ folders and test_fraction is 0: there is no test split; give test_fraction (such as 0.1) to both data.images calls", c.Dir)
		case c.TestFraction == 0:
			l.files, l.folderOrder = all, true
		case k == 0 && c.Split == "test":
			return nil, fmt.Errorf("test_fraction %v of the %d images of %s is no image: raise it", c.TestFraction, n, c.Dir)
		default:
			// torch.utils.data.random_split(ds, [n-k, k], generator)
			perm := torchrand.RandPerm(n, uint64(c.Seed))
			part := perm[:n-k]
			if c.Split == "test" {
				part = perm[n-k:]
			}
			l.files = make([]imageFile, len(part))
			for i, j := range part {
				l.files[i] = all[j]
			}
		}
	}
	if c.Limit > 0 && c.Limit < len(l.files) {
		l.files = limitImages(l.files, c.Limit, l.folderOrder, len(l.classes))
	}
	if len(l.files) == 0 {
		return nil, fmt.Errorf("%s: no images in the %s split", c.Dir, c.Split)
	}
	l.height, l.width, l.resize = c.Height, c.Width, c.Height > 0
	if !l.resize {
		first := l.files[0].path
		b, err := ReadImageFile(first)
		if err != nil {
			return nil, err
		}
		_, w, h, err := ImageConfig(first, b)
		if err != nil {
			return nil, err
		}
		l.height, l.width = h, w
	}
	return l, nil
}

// limitImages keeps n of files: the first n of a random split's order, or,
// in folder order (class by class), n spread over the classes (the first
// file of each class in turn, then the second, …), kept in folder order,
// so that a limited set still holds every class.
func limitImages(files []imageFile, n int, folderOrder bool, classes int) []imageFile {
	if !folderOrder {
		return files[:n:n]
	}
	byClass := make([][]int, classes)
	for i, f := range files {
		byClass[f.class] = append(byClass[f.class], i)
	}
	keep := make([]int, 0, n)
	for round := 0; len(keep) < n; round++ {
		for _, idx := range byClass {
			if round < len(idx) && len(keep) < n {
				keep = append(keep, idx[round])
			}
		}
	}
	slices.Sort(keep)
	out := make([]imageFile, n)
	for i, j := range keep {
		out[i] = files[j]
	}
	return out
}

// checkFolder reports a folder that is missing or not a folder.
func checkFolder(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("image folder: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder: data.images wants a folder of class folders", dir)
	}
	return nil
}

// isFolder reports whether path is a folder (links followed).
func isFolder(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// findClasses is torchvision's find_classes: the sorted names of the
// folders in dir (links to folders count, as os.scandir's is_dir()).
func findClasses(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image folder: %w", err)
	}
	var classes []string
	for _, e := range entries {
		if e.IsDir() || (e.Type()&fs.ModeSymlink != 0 && isFolder(filepath.Join(dir, e.Name()))) {
			classes = append(classes, e.Name())
		}
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("%s holds no class folders: data.images wants one folder per class, such as %s and %s, as torchvision's ImageFolder",
			dir, filepath.Join(dir, "cat", "1.jpg"), filepath.Join(dir, "dog", "2.png"))
	}
	sort.Strings(classes) // byte order of UTF-8 is code point order: Python's sorted()
	return classes, nil
}

// classFiles is torchvision's make_dataset: for each class (sorted), the
// files under its folder whose names end in an image extension, from
// every folder below it (links followed, each folder once), folders in
// sorted order of their paths and files sorted within each.
func classFiles(root string, classes []string, index map[string]int32) ([]imageFile, error) {
	var out []imageFile
	for _, name := range classes {
		dir := filepath.Join(root, name)
		var folders []string
		seen := map[[2]uint64]bool{}
		if err := walkFolders(dir, seen, &folders, 0); err != nil {
			return nil, err
		}
		sort.Strings(folders)
		n := len(out)
		for _, f := range folders {
			entries, err := os.ReadDir(f)
			if err != nil {
				return nil, fmt.Errorf("class folder %s: %w", dir, err)
			}
			for _, e := range entries { // sorted by name
				p := filepath.Join(f, e.Name())
				if e.IsDir() || (e.Type()&fs.ModeSymlink != 0 && isFolder(p)) {
					continue
				}
				ok, netpbm := hasImageExtension(e.Name())
				if netpbm {
					return nil, fmt.Errorf("%s: a netpbm (PPM/PGM) image, which gorun does not decode (torchvision's ImageFolder would read it): convert it to PNG", p)
				}
				if ok {
					out = append(out, imageFile{path: p, class: index[name]})
				}
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("class folder %s holds no images (files ending in %s)", dir, strings.Join(imageExtensions, ", "))
		}
	}
	return out, nil
}

// maxFolderDepth bounds how deep below a class folder walkFolders goes.
const maxFolderDepth = 64

// walkFolders appends dir and every folder below it to out, following
// links to folders but visiting each folder (by device and inode) once.
func walkFolders(dir string, seen map[[2]uint64]bool, out *[]string, depth int) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("image folder: %w", err)
	}
	if key, ok := folderKey(st); ok {
		if seen[key] {
			return nil
		}
		seen[key] = true
	}
	if depth > maxFolderDepth {
		return fmt.Errorf("%s: folders nested more than %d deep in a class folder", dir, maxFolderDepth)
	}
	*out = append(*out, dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("image folder: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() || (e.Type()&fs.ModeSymlink != 0 && isFolder(p)) {
			if err := walkFolders(p, seen, out, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// QuoteList is names quoted and joined with commas, at most n of them
// (then how many there are in all): for messages that name columns,
// classes or files.
func QuoteList(names []string, n int) string {
	var b strings.Builder
	for i, s := range names {
		if i == n {
			fmt.Fprintf(&b, ", … (%d in all)", len(names))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", s)
	}
	return b.String()
}

// decodeImages decodes the files of l (read by readFile) into one uint8
// array (sample after sample, each channels × height × width) on a pool of
// goroutines, one per core, fed through a bounded queue. The first error
// (in file order among those met) stops it.
func decodeImages(l *imageList, readFile func(string) ([]byte, error), progress func(Progress)) ([]byte, error) {
	per := l.channels * l.height * l.width
	n := len(l.files)
	pixels := make([]byte, n*per)
	workers := min(runtime.GOMAXPROCS(0), n)
	jobs := make(chan int, 2*workers)
	var done atomic.Int64
	var failed atomic.Bool
	errs := make([]error, n) // by file: only the failing ones are set
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := l.prepper()
			for i := range jobs {
				if failed.Load() {
					continue
				}
				if err := l.prepare(ip, readFile, i, pixels[i*per:(i+1)*per]); err != nil {
					errs[i] = err
					failed.Store(true)
				}
				done.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	if progress != nil {
		ticker.Add(1)
		go func() {
			defer ticker.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(Progress{What: l.name, Done: int(done.Load()), Total: n, Elapsed: time.Since(start)})
				}
			}
		}()
	}
	for i := range n {
		if failed.Load() {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(stop)
	ticker.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if progress != nil {
		progress(Progress{What: l.name, Done: n, Total: n, Elapsed: time.Since(start)})
	}
	return pixels, nil
}

// prepper is an imagePrepper for l's samples (one per goroutine).
func (l *imageList) prepper() *imagePrepper {
	prep := ImagePrep{Channels: l.channels}
	if l.resize {
		prep.Height, prep.Width = l.height, l.width
	}
	return newImagePrepper(prep)
}

// prepare reads file i of l with readFile and decodes it into out (one
// sample's bytes) with ip.
func (l *imageList) prepare(ip *imagePrepper, readFile func(string) ([]byte, error), i int, out []byte) error {
	f := l.files[i]
	b, err := readFile(f.path)
	if err != nil {
		return err
	}
	err = ip.prepare(f.path, b, out, [2]int{l.height, l.width})
	var es errImageSize
	if errors.As(err, &es) {
		err = fmt.Errorf("%s is %d wide and %d high, but %s, the first image, is %d wide and %d high: give data.images a size = (height, width) to resize every image to",
			f.path, es.w, es.h, l.files[0].path, l.width, l.height)
	}
	return err
}
