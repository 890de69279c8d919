package datasets

import "fmt"

// Regression is a dataset whose targets are float values of a fixed shape
// instead of class labels (what nn.mse_loss trains on). Its NumClasses is
// 0 and its Labels nil; Fill writes the samples and leaves y alone, and
// FillTargets writes samples and targets.
type Regression interface {
	Dataset
	// TargetShape is the shape of one sample's target ([1] for one value).
	TargetShape() []int
	// FillTargets writes sample idx[i] into x[i*S:(i+1)*S] and its target
	// into y[i*T:(i+1)*T] (S and T the products of SampleShape and
	// TargetShape). It never allocates and panics on a bad index or short
	// buffers, as Fill does.
	FillTargets(idx []int, x, y []float32)
}

// regressionSet is an in-memory Regression: float samples and targets.
type regressionSet struct {
	name          string
	shape, tshape []int
	size, tsize   int
	x, y          []float32
	n             int
	csv           *CSVMeta // how data.csv made the samples (nil for other data)
}

func (s *regressionSet) Name() string                           { return s.name }
func (s *regressionSet) Len() int                               { return s.n }
func (s *regressionSet) SampleShape() []int                     { return s.shape }
func (s *regressionSet) TargetShape() []int                     { return s.tshape }
func (s *regressionSet) NumClasses() int                        { return 0 }
func (s *regressionSet) Labels() []int32                        { return nil }
func (s *regressionSet) Fill(idx []int, x []float32, _ []int32) { s.fill(idx, x, nil) }

func (s *regressionSet) FillTargets(idx []int, x, y []float32) {
	if len(y) < len(idx)*s.tsize {
		panic(fmt.Sprintf("datasets: %s: FillTargets: %d samples need len(y) >= %d, got %d", s.name, len(idx), len(idx)*s.tsize, len(y)))
	}
	s.fill(idx, x, y)
}

func (s *regressionSet) fill(idx []int, x, y []float32) {
	if len(x) < len(idx)*s.size {
		panic(fmt.Sprintf("datasets: %s: Fill: %d samples need len(x) >= %d, got %d", s.name, len(idx), len(idx)*s.size, len(x)))
	}
	for i, j := range idx {
		if uint(j) >= uint(s.n) {
			panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", s.name, j, s.n))
		}
		copy(x[i*s.size:(i+1)*s.size], s.x[j*s.size:(j+1)*s.size])
		if y != nil {
			copy(y[i*s.tsize:(i+1)*s.tsize], s.y[j*s.tsize:(j+1)*s.tsize])
		}
	}
}

// subset is the first n samples.
func (s *regressionSet) subset(n int) Dataset {
	c := *s
	c.n = n
	c.name = fmt.Sprintf("%s[:%d]", s.name, n)
	return &c
}
