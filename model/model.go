package model

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"gorun/datasets"
	"gorun/engine"
	"gorun/engine/backend"
	_ "gorun/engine/backend/cpu" // the default backend
	"gorun/engine/runner"
	"gorun/ops"
	"gorun/safetensors"
	"gorun/script"
)

// Model is a trained model ready to answer predictions: the Plan rebuilt
// from its script, its weights, and a pool of arenas that run its
// evaluation pass. It is safe for concurrent use; Close frees it.
type Model struct {
	plan    *engine.Plan
	weights string // the weights file, for messages
	file    *safetensors.File
	kind    Kind
	last    ops.Op // the op that makes the output (log_softmax, softmax, …)
	prep    *prep  // how the training data became inputs
	b       *batcher
}

// Kind says what a model's outputs are.
type Kind int

// The kinds of model.
const (
	// Classifier: one score per class for each sample (logits, or
	// log-probabilities after nn.log_softmax).
	Classifier Kind = iota
	// Regressor: values (nn.mse_loss), of OutputShape per sample.
	Regressor
	// Sequence: a sequence model of token windows ([N, T] ids in,
	// [N, T, V] logits out).
	Sequence
)

func (k Kind) String() string {
	switch k {
	case Classifier:
		return "classifier"
	case Regressor:
		return "regressor"
	}
	return "sequence model"
}

// options are what Option functions set.
type options struct {
	maxBatch int
	arenas   int
	delay    time.Duration
	backend  string
	weights  string
	sets     []string
}

// Option changes how Load and LoadScript build a Model.
type Option func(*options)

// DefaultMaxBatch is the largest batch an arena runs unless WithMaxBatch
// says otherwise.
const DefaultMaxBatch = 64

// WithMaxBatch sets the largest batch an arena runs (default 64): the
// batch the Plan is compiled for, which bounds how many requests are
// joined and how large a request runs in one piece.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// WithArenas sets how many arenas (devices of the backend, each holding
// the Plan's buffers and running one batch at a time) the Model may use
// (default: GOMAXPROCS on the cpu backend, whose devices compute on one
// core each; 1 on others). They are made when first needed.
func WithArenas(n int) Option { return func(o *options) { o.arenas = n } }

// WithMaxDelay sets how long a batch that is not full waits for more
// requests when the arena's previous batch joined several, that is while
// callers arrive together; a lone caller never waits. The default, 0,
// never waits: requests that arrive while the arenas are busy are joined
// anyway, and on the cpu backend a wait leaves a core idle
// (BenchmarkPredict: 32 concurrent callers of one MNIST sample get about
// a quarter of the throughput with a 1 ms wait). A wait may pay where a
// batch of 64 costs little more than a batch of 1 (a GPU).
func WithMaxDelay(d time.Duration) Option { return func(o *options) { o.delay = d } }

// WithBackend runs the model on the named backend ("cpu", "cuda"), which
// the program must have registered (default: cuda in a build that has
// it, else cpu).
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// WithWeights makes Load read this safetensors file instead of the run
// folder's model.safetensors (best.safetensors, a checkpoint).
func WithWeights(path string) Option { return func(o *options) { o.weights = path } }

// WithSet adds --set arguments (NAME=VALUE) to those the script is loaded
// with, after the run's own.
func WithSet(sets ...string) Option { return func(o *options) { o.sets = append(o.sets, sets...) } }

// Load loads the model of a run folder: the run's copy of its script
// (RUN/script/, with every file it loaded, as the run began) with the
// run's --set arguments, as gorun sample rebuilds it, and its
// model.safetensors (or WithWeights'). A run folder of an earlier gorun,
// which kept no copy, loads the script run.json records as it is now,
// its load()s resolved as gorun's are (the script's folder, GORUN_PATH,
// the library shipped in package scripts).
//
// The training data need not be there: the model's input shape, classes,
// vocabulary and preprocessing (an image's size, channels and
// normalisation; a table's columns and their statistics) come from the
// metadata of model.safetensors. A weights file of an earlier gorun that
// records too little of its data (data.tensors) has the data the script
// names described again (headers only), and Load then fails, naming
// what is missing, when they are gone.
func Load(dir string, opts ...Option) (*Model, error) {
	path, sopts, sets, err := runScript(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	o := newOptions(opts)
	weights, err := weightsOf(dir, o.weights)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return load(path, sopts, append(slices.Clone(sets), o.sets...), weights, o)
}

// LoadScript loads the model a training script declares (its load()s
// resolved as gorun's are), with the weights of a safetensors file (PyTorch state_dict names, as gorun writes them:
// every parameter and running statistic of the model, nothing else).
func LoadScript(scriptPath, weights string, opts ...Option) (*Model, error) {
	o := newOptions(opts)
	if o.weights != "" {
		weights = o.weights
	}
	return load(scriptPath, scriptOptions(), o.sets, weights, o)
}

func newOptions(opts []Option) *options {
	o := &options{maxBatch: DefaultMaxBatch}
	for _, f := range opts {
		f(o)
	}
	return o
}

func load(path string, sopts []script.Option, sets []string, weights string, o *options) (*Model, error) {
	if o.maxBatch < 1 {
		return nil, fmt.Errorf("model: WithMaxBatch(%d): want at least 1", o.maxBatch)
	}
	if o.arenas < 0 {
		return nil, fmt.Errorf("model: WithArenas(%d): want at least 1", o.arenas)
	}
	if o.delay < 0 {
		return nil, fmt.Errorf("model: WithMaxDelay(%v): want 0 or more", o.delay)
	}
	be := o.backend
	if be == "" {
		be = "cpu"
		if slices.Contains(backend.Names(), "cuda") {
			be = "cuda"
		}
	}
	if _, err := backend.Get(be); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if o.arenas == 0 {
		o.arenas = 1
		if be == "cpu" {
			o.arenas = runtime.GOMAXPROCS(0)
		}
	}
	if !fileExists(weights) {
		if _, err := os.Stat(weights); err != nil {
			return nil, fmt.Errorf("model: weights: %w", err)
		}
		return nil, fmt.Errorf("model: weights %s is not a file", weights)
	}
	f, err := safetensors.ReadFile(weights)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	plan, err := compile(path, sopts, sets, be, o.maxBatch, weights, f.Metadata)
	if err != nil {
		return nil, err
	}
	pr, err := newPrep(plan, f.Metadata, weights)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m := &Model{plan: plan, weights: weights, file: f, prep: pr}
	switch {
	case plan.Tokens:
		m.kind = Sequence
	case plan.Classes == 0:
		m.kind = Regressor
	}
	if p := plan.Graph.Output.Producer; p != nil {
		m.last = p.Op
	}
	// The first arena now: it checks the weights against the model.
	e, err := runner.NewEvaluator(plan, 0, weights, f)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m.b = newBatcher(m, e, o)
	return m, nil
}

// compile loads the script (with sopts, which find it and what it loads)
// with the run's --set arguments, the batch the arenas run and no eval
// set, and compiles it for one device of backend, its training data
// described by what the metadata of the weights file records
// (datasets.Recorded), or, when it records too little, by the data
// themselves.
func compile(path string, sopts []script.Option, sets []string, be string, maxBatch int, weights string, meta map[string]string) (*engine.Plan, error) {
	var ov []script.Override
	// Batch norm refuses to compile for a batch of 1 in training (PyTorch
	// would refuse to train on it): plan for 2 and run at most maxBatch.
	for _, s := range append(slices.Clone(sets), fmt.Sprintf("batch_size=%d", max(maxBatch, 2)), "eval=None") {
		v, err := script.ParseOverride(s)
		if err != nil {
			return nil, fmt.Errorf("model: --set %s: %v", s, err)
		}
		ov = append(ov, v)
	}
	s, err := script.Load(path, append(slices.Clone(sopts), script.WithOverrides(ov...))...)
	if err != nil {
		return nil, fmt.Errorf("model: loading %s: %w", path, err)
	}
	rec, err := datasets.Recorded(&s.Data, meta)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", weights, err)
	}
	if rec == nil {
		// A weights file of an earlier gorun: the data describe the model.
		info, err := datasets.Describe(&s.Data)
		if err != nil {
			return nil, fmt.Errorf("model: %s does not record the shape of its training data (an earlier gorun wrote it), so it is read from the data the script names, which failed: %w", weights, err)
		}
		rec = info.Record()
	}
	s.Data.Recorded = rec
	c := engine.DefaultCluster()
	c.Backend = be
	plan, err := engine.Compile(s, c)
	if err != nil {
		return nil, fmt.Errorf("model: compiling %s: %w", path, err)
	}
	return plan, nil
}

// Kind says what the model's outputs are.
func (m *Model) Kind() Kind { return m.kind }

// InputShape is the shape of one sample ([1 28 28] for MNIST, [T] for a
// sequence model).
func (m *Model) InputShape() []int { return slices.Clone(m.plan.Sample) }

// OutputShape is the shape of one sample's output ([10] for MNIST's
// classes, [T V] for a sequence model).
func (m *Model) OutputShape() []int { return slices.Clone(m.plan.Devices[0].Output.Max[1:]) }

// Classes is the number of classes (the vocabulary's size for a sequence
// model), 0 for a regressor.
func (m *Model) Classes() int { return m.plan.Classes }

// MaxBatch is the largest batch an arena runs (WithMaxBatch).
func (m *Model) MaxBatch() int { return m.b.maxBatch }

// Normalization is the training set's normalisation, one mean and std
// per channel of an image model (data.images' normalize, each channel
// after scaling to [0, 1]), per input column of a data.csv model (the
// training split's statistics when it standardised them), or one of each
// for every value (data.mnist's, data.tensors' normalize): value v of
// channel or column c becomes (v − mean[c])/std[c] (see Normalize). An
// unnormalised model gives means of 0 and stds of 1.
func (m *Model) Normalization() (mean, std []float64) {
	return slices.Clone(m.prep.mean), slices.Clone(m.prep.std)
}

// ClassNames are the names of the classes in label order, as the
// training data named them (data.images' class folders, data.csv's
// labels), or nil when they have none (data.mnist).
func (m *Model) ClassNames() []string { return slices.Clone(m.prep.names) }

// DataKind is the data.* kind the model was trained on ("mnist",
// "images", "csv", "tensors", …).
func (m *Model) DataKind() string { return m.prep.data }

// ImageMeta is how an image file becomes one of the model's samples
// (FromImage), for a model trained on images: data.images' (its
// channels, size and normalisation, as the weights file records them),
// or 28×28 grayscale with data.mnist's or data.fashion_mnist's normalize;
// ok is false for other models.
func (m *Model) ImageMeta() (meta datasets.ImageMeta, ok bool) {
	if m.prep.image == nil {
		return datasets.ImageMeta{}, false
	}
	im := *m.prep.image
	im.Mean, im.Std = slices.Clone(im.Mean), slices.Clone(im.Std)
	return im, true
}

// CSVMeta is how a table row becomes one of the model's samples
// (FromCSV), for a model trained on data.csv: its input columns in
// order and their statistics; ok is false for other models.
func (m *Model) CSVMeta() (meta datasets.CSVMeta, ok bool) {
	if m.prep.csv == nil {
		return datasets.CSVMeta{}, false
	}
	c := *m.prep.csv
	c.X, c.Mean, c.Std = slices.Clone(c.X), slices.Clone(c.Mean), slices.Clone(c.Std)
	return c, true
}

// Plan is the compiled Plan the model runs (for gorun plan's printing,
// and tests). It must not be changed.
func (m *Model) Plan() *engine.Plan { return m.plan }

// Stats counts the requests and batches the model has run.
func (m *Model) Stats() Stats {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	return m.b.stats
}

// Close stops the model's goroutines and frees its arenas, once every
// batch under way has finished. Requests waiting in the queue, and those
// made after Close, fail.
func (m *Model) Close() error { return m.b.close() }
