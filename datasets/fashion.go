package datasets

// The mean and standard deviation of Fashion-MNIST's training pixels scaled
// to [0, 1], as commonly passed to torchvision's Normalize.
const (
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

// FashionMNISTDir is where Debian's dataset-fashion-mnist package installs
// the four gzipped Fashion-MNIST IDX files.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// fashionPackage is the Debian package that ships Fashion-MNIST.
const fashionPackage = "dataset-fashion-mnist"

// FashionMNIST reads one split of Fashion-MNIST (Zalando's clothing images:
// "train": 60000 samples, "test": 10000, 10 classes) from dir, or from
// FashionMNISTDir when dir is "". The files have MNIST's names and IDX
// format, gzipped or not, and are read exactly as MNIST reads its own:
// samples [1 28 28], each pixel p written as (p/255 − mean)/std in float32
// (pass FashionMNISTMean and FashionMNISTStd for the usual normalization).
// When the folder or a file is missing, the error says which package to
// install.
func FashionMNIST(split, dir string, mean, std float64) (Dataset, error) {
	return openIDXSplit(idxSource{
		name:       "fashion-mnist",
		defaultDir: func() (string, error) { return FashionMNISTDir, nil },
		fix: "install Debian's " + fashionPackage + " package (`apt-get install " + fashionPackage +
			"`), which puts the files in " + FashionMNISTDir + ", or pass the folder that holds them",
	}, split, dir, mean, std)
}
