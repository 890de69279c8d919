package datasets

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
)

// Transform is a random transform of a training sample: RandomCrop or
// HFlip. Transforms see a sample of shape [..., height, width] (every
// leading dimension, such as channels, is carried along unchanged).
type Transform struct {
	kind          transformKind
	height, width int     // crop: the output size
	padding       int     // crop: values added on every side first
	p             float64 // flip: the probability of a flip
}

type transformKind int

const (
	cropTransform transformKind = iota + 1
	flipTransform
)

// RandomCrop is torchvision's RandomCrop((height, width), padding): the
// sample is padded with padding values on every side (the value a zero
// input takes after normalization, see Augment), then a height×width
// window is cut out at a uniformly random position.
func RandomCrop(height, width, padding int) (Transform, error) {
	if height < 1 || width < 1 {
		return Transform{}, fmt.Errorf("random_crop: size %d×%d: want a positive height and width", height, width)
	}
	if padding < 0 || padding > 1<<14 {
		return Transform{}, fmt.Errorf("random_crop: padding %d: want 0 to %d", padding, 1<<14)
	}
	return Transform{kind: cropTransform, height: height, width: width, padding: padding}, nil
}

// HFlip is torchvision's RandomHorizontalFlip(p): the sample is mirrored
// left to right (along its last dimension) with probability p.
func HFlip(p float64) (Transform, error) {
	if !(p >= 0 && p <= 1) {
		return Transform{}, fmt.Errorf("hflip: probability %v: want a number from 0 to 1", p)
	}
	return Transform{kind: flipTransform, p: p}, nil
}

// String is the transform as a script writes it, e.g.
// "random_crop(28, padding=4)".
func (t Transform) String() string {
	switch t.kind {
	case cropTransform:
		size := fmt.Sprint(t.height)
		if t.width != t.height {
			size = fmt.Sprintf("(%d, %d)", t.height, t.width)
		}
		return fmt.Sprintf("random_crop(%s, padding=%d)", size, t.padding)
	case flipTransform:
		return fmt.Sprintf("hflip(%g)", t.p)
	}
	return "invalid transform"
}

// outShape is the shape of a transformed sample of shape in.
func (t Transform) outShape(in []int) ([]int, error) {
	if len(in) < 2 {
		return nil, fmt.Errorf("%s needs samples of at least 2 dimensions ([..., height, width]), got shape %v", t, in)
	}
	out := append([]int(nil), in...)
	if t.kind == cropTransform {
		h, w := in[len(in)-2]+2*t.padding, in[len(in)-1]+2*t.padding
		if t.height > h || t.width > w {
			return nil, fmt.Errorf("%s: the %d×%d crop is larger than the padded %d×%d sample (shape %v)", t, t.height, t.width, h, w, in)
		}
		out[len(out)-2], out[len(out)-1] = t.height, t.width
	}
	return out, nil
}

// TransformedShape is the shape of a sample of shape in after the
// transforms ts, or an error when one of them does not apply.
func TransformedShape(in []int, ts []Transform) ([]int, error) {
	shape := in
	for _, t := range ts {
		var err error
		if shape, err = t.outShape(shape); err != nil {
			return nil, err
		}
	}
	return shape, nil
}

// EpochDataset is a Dataset whose training samples change from epoch to
// epoch: its samples are randomly transformed (Augment). Its own Fill
// gives the untransformed samples; the training loop fills each epoch's
// batches from Epoch(seed, epoch).
type EpochDataset interface {
	Dataset
	// Epoch returns the dataset as epoch epoch of a run seeded with seed
	// sees it. Sample i's transform depends on (seed, epoch, i) only, never
	// on which other samples a Fill call asks for or in which order, so
	// any number of devices, each filling its own part of a batch, see
	// exactly what one device would.
	Epoch(seed int64, epoch int) Dataset
}

// Augmented is a Dataset with random transforms (see Augment).
type Augmented struct {
	base     Dataset
	ts       []Transform
	fills    []float32 // the padding value of each plane (one: of all)
	name     string
	shape    []int // the transformed sample shape
	planes   int   // the product of the sample's leading dimensions
	h, w     int   // the base sample's height and width
	inSize   int
	outSize  int
	scratch  *sync.Pool // of *[]float32, two samples' room
	seed     int64
	epoch    int
	epochSet bool
}

var _ EpochDataset = (*Augmented)(nil)

// Augment returns d with the transforms ts applied, in order, to every
// sample it fills. pad is the value a crop's padding takes: the value a
// zero pixel has in d's samples (NormalizedZero(mean, std) for data
// normalized as (v − mean)/std), so that padding is black as in
// torchvision, where the crop comes before ToTensor and Normalize.
//
// The Augmented dataset itself gives the samples untransformed (a crop
// taken at the centre, flips never made): evaluation data are never
// transformed. Epoch binds it to a run's seed and epoch, and the dataset
// that returns transforms every sample. Augment returns an error when a
// transform does not fit d's samples.
func Augment(d Dataset, pad float32, ts []Transform) (*Augmented, error) {
	return AugmentChannels(d, []float32{pad}, ts)
}

// AugmentChannels is Augment with a padding value per channel (the
// samples' leading dimension): pads[c] is what a zero pixel is in channel
// c once normalized. A single value pads every channel.
func AugmentChannels(d Dataset, pads []float32, ts []Transform) (*Augmented, error) {
	shape, err := TransformedShape(d.SampleShape(), ts)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", d.Name(), err)
	}
	names := make([]string, len(ts))
	room := SampleSize(d)
	cur := d.SampleShape()
	for i, t := range ts {
		names[i] = t.String()
		cur, _ = t.outShape(cur)
		room = max(room, product(cur))
	}
	a := &Augmented{base: d, ts: append([]Transform(nil), ts...), fills: slices.Clone(pads),
		name: d.Name() + "+" + strings.Join(names, "+"), shape: shape,
		inSize: SampleSize(d), outSize: product(shape)}
	a.h, a.w, a.planes = 1, a.inSize, 1
	if in := d.SampleShape(); len(in) >= 2 { // always, unless ts is empty
		a.h, a.w = in[len(in)-2], in[len(in)-1]
		a.planes = a.inSize / (a.h * a.w)
	}
	if len(pads) != 1 && len(pads) != a.planes {
		return nil, fmt.Errorf("datasets: %s: %d padding values for %d channels", d.Name(), len(pads), a.planes)
	}
	a.scratch = &sync.Pool{New: func() any {
		b := make([]float32, 2*room)
		return &b
	}}
	return a, nil
}

// NormalizedZero is the value a zero pixel takes once normalized as
// (v − mean)/std in float32, as the readers compute it.
func NormalizedZero(mean, std float64) float32 {
	return (0 - float32(mean)) / float32(std)
}

func product(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// Name is the base dataset's name followed by the transforms, e.g.
// "mnist/train+random_crop(28, padding=4)+hflip(0.5)".
func (a *Augmented) Name() string { return a.name }

// Len is the number of samples.
func (a *Augmented) Len() int { return a.base.Len() }

// SampleShape is the shape of a transformed sample.
func (a *Augmented) SampleShape() []int { return a.shape }

// NumClasses is the base dataset's number of classes.
func (a *Augmented) NumClasses() int { return a.base.NumClasses() }

// Labels are the base dataset's labels: transforms do not change them.
func (a *Augmented) Labels() []int32 { return a.base.Labels() }

// Epoch returns the dataset that transforms every sample as epoch epoch of
// a run seeded with seed does (see EpochDataset).
func (a *Augmented) Epoch(seed int64, epoch int) Dataset {
	b := *a
	b.seed, b.epoch, b.epochSet = seed, epoch, true
	return &b
}

// Fill writes the samples idx, transformed (untransformed before Epoch),
// into x and their labels into y, as Dataset's Fill does.
func (a *Augmented) Fill(idx []int, x []float32, y []int32) {
	s := a.outSize
	if len(x) < len(idx)*s || len(y) < len(idx) {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d and len(y) >= %d, got %d and %d",
			a.name, len(idx), len(idx)*s, len(idx), len(x), len(y)))
	}
	bp := a.scratch.Get().(*[]float32)
	buf := *bp
	half := len(buf) / 2
	for i, k := range idx {
		// Two halves of the scratch buffer: the sample, and room for
		// the next crop.
		cur, other := buf[:a.inSize:half], buf[half:]
		a.base.Fill(idx[i:i+1], cur, y[i:i+1])
		h, w := a.h, a.w // the current sample's height and width
		rng := sampleRNG(a.seed, a.epoch, k)
		for _, t := range a.ts {
			switch t.kind {
			case cropTransform:
				top, left := (h+2*t.padding-t.height)/2, (w+2*t.padding-t.width)/2
				// Draw both offsets whatever happens, so that every
				// transform consumes the same numbers.
				rt, rl := rng.intn(h+2*t.padding-t.height+1), rng.intn(w+2*t.padding-t.width+1)
				if a.epochSet {
					top, left = rt, rl
				}
				dst := other[:a.planes*t.height*t.width]
				crop(cur, dst, a.planes, h, w, t.height, t.width, top-t.padding, left-t.padding, a.fills)
				cur, other = dst, cur[:cap(cur)] // cur's half: cap(cur) is the end of its half
				h, w = t.height, t.width
			case flipTransform:
				if u := rng.float64(); a.epochSet && u < t.p {
					hflip(cur, w)
				}
			}
		}
		copy(x[i*s:(i+1)*s], cur)
	}
	a.scratch.Put(bp)
}

// crop writes the h×w window of every one of planes H×W planes of src whose
// top-left corner is at row top, column left (either may be negative or
// reach past the plane: those values are pads[p], or pads[0] for every
// plane when there is one) into dst.
func crop(src, dst []float32, planes, H, W, h, w, top, left int, pads []float32) {
	// The columns of the window that fall inside the source.
	c0, c1 := max(0, -left), min(w, W-left)
	for p := range planes {
		pad := pads[0]
		if len(pads) > 1 {
			pad = pads[p]
		}
		in := src[p*H*W : (p+1)*H*W]
		out := dst[p*h*w : (p+1)*h*w]
		for r := range h {
			row := out[r*w : (r+1)*w]
			sr := top + r
			if sr < 0 || sr >= H || c0 >= c1 {
				for j := range row {
					row[j] = pad
				}
				continue
			}
			for j := 0; j < c0; j++ {
				row[j] = pad
			}
			copy(row[c0:c1], in[sr*W+left+c0:sr*W+left+c1])
			for j := c1; j < w; j++ {
				row[j] = pad
			}
		}
	}
}

// hflip mirrors every row (of width w) of v.
func hflip(v []float32, w int) {
	for lo := 0; lo+w <= len(v); lo += w {
		row := v[lo : lo+w]
		for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
			row[i], row[j] = row[j], row[i]
		}
	}
}

// augRNG is a sample's random numbers: SplitMix64 from a state that mixes
// the run's seed, the epoch and the sample index, and nothing else.
type augRNG struct{ s uint64 }

// augDomain keeps these streams apart from other uses of the run's seed.
const augDomain = 0x6175676d656e7431 // "augment1"

func sampleRNG(seed int64, epoch, index int) augRNG {
	s := mix64(uint64(seed) ^ augDomain)
	s = mix64(s ^ uint64(int64(epoch)))
	s = mix64(s ^ uint64(int64(index)))
	return augRNG{s}
}

// mix64 is SplitMix64's output function applied to z plus its increment.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *augRNG) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn is uniform in [0, n) (Lemire's multiply-shift; the bias, below
// n/2^64, does not matter here).
func (r *augRNG) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// float64 is uniform in [0, 1).
func (r *augRNG) float64() float64 {
	return float64(r.next()>>11) / (1 << 53)
}
