package datasets

import (
	"fmt"
	"math/rand/v2"
)

// Synthetic returns n generated samples of the given shape in `classes`
// classes: every class has a fixed random template (drawn from seed), and
// a sample is its class's template plus Gaussian noise of standard
// deviation noise. Different splits share templates but not samples, so a
// model trained on "train" can be evaluated on "test". It needs no files:
// quick to learn, for smoke tests and examples.
func Synthetic(split string, n int, shape []int, classes int, noise float64, seed uint64) (Dataset, error) {
	size := 1
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("datasets: synthetic: shape %v has a non-positive dimension", shape)
		}
		size *= d
	}
	if n <= 0 || classes < 2 || len(shape) == 0 || noise < 0 {
		return nil, fmt.Errorf("datasets: synthetic: want size > 0, classes ≥ 2, a shape and noise ≥ 0; got size %d, classes %d, shape %v, noise %g", n, classes, shape, noise)
	}
	var stream uint64
	switch split {
	case "train":
		stream = 1
	case "test":
		stream = 2
	default:
		return nil, fmt.Errorf("datasets: synthetic: unknown split %q: want \"train\" or \"test\"", split)
	}
	tr := rand.New(rand.NewPCG(seed, 0))
	templates := make([]float32, classes*size)
	for i := range templates {
		templates[i] = float32(tr.NormFloat64())
	}
	r := rand.New(rand.NewPCG(seed, stream))
	s := &floatSet{name: fmt.Sprintf("synthetic/%s", split), shape: append([]int(nil), shape...), classes: classes,
		size: size, x: make([]float32, n*size), labels: make([]int32, n)}
	for i := 0; i < n; i++ {
		c := r.IntN(classes)
		s.labels[i] = int32(c)
		t := templates[c*size : (c+1)*size]
		x := s.x[i*size : (i+1)*size]
		for j := range x {
			x[j] = t[j] + float32(r.NormFloat64()*noise)
		}
	}
	return s, nil
}

// floatSet is a dataset held as float32 samples, ready to copy.
type floatSet struct {
	name    string
	shape   []int
	classes int
	size    int
	x       []float32
	labels  []int32
	// classNames and csv are data.csv's class names and how its rows
	// became samples (nil for other data).
	classNames []string
	csv        *CSVMeta
}

func (s *floatSet) Name() string       { return s.name }
func (s *floatSet) Len() int           { return len(s.labels) }
func (s *floatSet) SampleShape() []int { return s.shape }
func (s *floatSet) NumClasses() int    { return s.classes }
func (s *floatSet) Labels() []int32    { return s.labels[:len(s.labels):len(s.labels)] }

func (s *floatSet) Fill(idx []int, x []float32, y []int32) {
	if len(x) < len(idx)*s.size || len(y) < len(idx) {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d and len(y) >= %d, got %d and %d",
			s.name, len(idx), len(idx)*s.size, len(idx), len(x), len(y)))
	}
	for i, j := range idx {
		if uint(j) >= uint(len(s.labels)) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", s.name, j, len(s.labels)))
		}
		copy(x[i*s.size:(i+1)*s.size], s.x[j*s.size:(j+1)*s.size])
		y[i] = s.labels[j]
	}
}
