// Package spec holds the Spec: the plain Go description of a training run
// that a script produces and the engine compiles. It is the boundary between
// script/ (which evaluates Starlark) and engine/ (which never does): every
// value here is a plain Go value, except Partition, a Go function the script
// package builds around a Starlark function.
//
// Nothing here validates deeply; the engine checks a Spec when it compiles
// it and reports errors with the Pos recorded on each value.
package spec

import (
	"fmt"

	"gorun/ops"
)

// Pos is a position in a script, "file:line:col", recorded where a value was
// declared so that errors found later can point back at it.
type Pos string

// LayerKind names a kind of layer.
type LayerKind string

// The layers of the script surface (nn.*).
const (
	Sequential LayerKind = "sequential"
	Conv2D     LayerKind = "conv2d"
	Linear     LayerKind = "linear"
	ReLU       LayerKind = "relu"
	MaxPool2D  LayerKind = "maxpool2d"
	Dropout    LayerKind = "dropout"
	Dropout2D  LayerKind = "dropout2d"
	Flatten    LayerKind = "flatten"
	LogSoftmax LayerKind = "log_softmax"
	Softmax    LayerKind = "softmax"
	Identity   LayerKind = "identity"
	Sigmoid    LayerKind = "sigmoid"
	Tanh       LayerKind = "tanh"
	LeakyReLU  LayerKind = "leaky_relu"
	AvgPool2D  LayerKind = "avgpool2d"
	// AdaptiveAvgPool2D is adaptive_avgpool2d(1): the mean of each channel.
	AdaptiveAvgPool2D LayerKind = "adaptive_avgpool2d"
	BatchNorm1D       LayerKind = "batchnorm1d"
	BatchNorm2D       LayerKind = "batchnorm2d"
	Embedding         LayerKind = "embedding"
	LayerNorm         LayerKind = "layernorm"
	GELU              LayerKind = "gelu"
	// MultiheadAttention is self-attention with PyTorch's parameter
	// layout (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias).
	MultiheadAttention LayerKind = "multihead_attention"

	// More functional layers: nn.matmul(a, b), x.transpose(d1, d2),
	// data.positions().
	MatMulOp    LayerKind = "matmul"
	TransposeOp LayerKind = "transpose"
	PositionsOp LayerKind = "positions"

	// Functional layers: what arithmetic on tensors and nn.cat, .reshape,
	// .flatten and .mean apply. They have no parameters and no name.
	AddOp     LayerKind = "add"
	SubOp     LayerKind = "sub"
	MulOp     LayerKind = "mul"
	CatOp     LayerKind = "cat"
	ReshapeOp LayerKind = "reshape"
	MeanOp    LayerKind = "mean"
)

// Layer is one declared layer. Fields not used by its Kind are zero. A
// layer applied twice is one *Layer: its parameters are shared.
type Layer struct {
	Kind LayerKind
	// Op, when set, makes the layer exactly that op applied to its input,
	// without parameters or attributes (nn.relu, nn.sigmoid, nn.silu, …):
	// the compiler needs nothing else to know about it, so such a layer
	// is declared by its script builtin alone.
	Op ops.Op
	// Name is the name given with name=, or "" for the PyTorch default (the
	// index within the enclosing sequential).
	Name string
	// Path is the layer's full name in PyTorch's state_dict ("layer1.0.conv1"),
	// resolved by the script when train(...) is called: the nn.module
	// scopes it was declared in, or its enclosing sequential's path, and
	// its name. The root sequential's path is "".
	Path string
	Pos  Pos

	In, Out         int  // conv2d channels, linear features; batchnorm: In features
	Kernel          int  // conv2d, maxpool2d, avgpool2d
	Stride, Padding int  // conv2d, maxpool2d (Stride), avgpool2d
	Groups          int  // conv2d (1: ungrouped)
	Bias            bool // conv2d, linear
	P               float64
	Slope           float64 // leaky_relu's negative slope
	// Heads (multihead_attention), Causal (multihead_attention, softmax:
	// position i attends to positions ≤ i), Approximate (gelu: "tanh").
	Heads       int
	Causal      bool
	Approximate bool
	// Unfused (multihead_attention, fused = False): build the attention
	// from batched products and a softmax that writes the T×T weights,
	// not the fused ops.Attention; for checking one against the other.
	Unfused bool
	// Tie (linear): the embedding whose weight this layer uses as its own
	// (weight tying: one parameter, one gradient from both uses).
	Tie *Layer

	// Batch normalisation (batchnorm1d, batchnorm2d): PyTorch's eps,
	// momentum, affine and track_running_stats; Sync computes the batch
	// statistics over every device (SyncBatchNorm).
	Eps, Momentum      float64
	Affine, TrackStats bool
	Sync               bool

	Dims []int // reshape: the sample shape; cat, mean: the dimension
	// Init is init=: how the weight starts (engine.InitNames); "" is
	// PyTorch's default for the layer.
	Init string

	Layers []*Layer // sequential
}

// Apply is one application of a layer to tensors, in script order. Tensor 0
// is the model's input; Apply i's output is tensor Out.
type Apply struct {
	Layer *Layer
	In    []int
	Out   int
	Pos   Pos // the call
}

// Model is the model as the script traced it: layer applications in an
// order where every input is computed before it is used, and the tensor
// the model outputs (before the loss).
type Model struct {
	Nodes  []Apply
	Output int
}

// SequentialModel is the model that applies layer l to the input: what
// train(model = nn.sequential(...)) means.
func SequentialModel(l *Layer) Model {
	return Model{Nodes: []Apply{{Layer: l, In: []int{0}, Out: 1, Pos: l.Pos}}, Output: 1}
}

// Label is how errors name the layer: its path (or name), or its kind.
func (l *Layer) Label() string {
	switch {
	case l.Path != "":
		return fmt.Sprintf("%s %q", l.Kind, l.Path)
	case l.Name != "":
		return fmt.Sprintf("%s %q", l.Kind, l.Name)
	}
	return string(l.Kind)
}

// Data describes a dataset.
type Data struct {
	Kind      string // "mnist", "fashion_mnist", "tensors", "text", "images", "csv" or "synthetic"
	Split     string // "train" or "test"
	Dir       string // mnist: "" for the copy that ships with the GoMNIST module; fashion_mnist: "" for Debian's
	Normalize [2]float64
	// Limit keeps only the first Limit samples when > 0.
	Limit int

	// Tensors: File is the .safetensors file that holds the samples under
	// the key X and the labels under the key Y; when File is "", X and Y
	// are the paths of two .npy files. Classes, when > 0, is the number of
	// classes (else the largest label + 1).
	File string
	X, Y string

	// Text (data.text): File is a text file or a folder of them, cut into
	// windows of SeqLen tokens ("bytes" or "chars" Vocab); the last
	// TestFraction of the windows are the test split.
	SeqLen       int
	Vocab        string
	TestFraction float64

	// Transforms are random transforms of the training samples, applied
	// in order whenever a batch is filled, drawn from the run's seed, the
	// epoch and the sample index only. Evaluation data are never
	// transformed.
	Transforms []struct {
		Kind          string  // "random_crop" or "hflip"
		Height, Width int     // random_crop: the size of the crop
		Padding       int     // random_crop: values added on every side first
		P             float64 // hflip: the probability of a flip
	}

	// Images (data.images): Dir is a folder of class folders (torchvision's
	// ImageFolder layout), or of train/ and test/ folders that each hold
	// them. ImageSize is the (height, width) every image is resized to
	// ({0, 0}: the images' own, which must then all be alike); Channels is
	// 1 (grayscale) or 3 (RGB); ChannelMean and ChannelStd (one value per
	// channel, nil for none) normalize each channel after scaling to
	// [0, 1]. Without train/ and test/ folders, the TestFraction of each
	// class's images drawn with Seed are the test split.
	ImageSize               [2]int
	Channels                int
	ChannelMean, ChannelStd []float64

	// CSV (data.csv): File is the table (a header line, then one sample a
	// row); Columns are the input columns (nil: every column but the
	// targets); Y names the target column; Regression makes it a float
	// target (else class labels: integers 0..K-1, or names mapped to their
	// sorted order); Standardize scales every input column by the training
	// split's mean and standard deviation. The test split is TestFile when
	// given, else the TestFraction of the rows drawn with Seed.
	Columns     []string
	Regression  bool
	Standardize bool
	TestFile    string

	// Synthetic data: Size samples of Shape in Classes classes, template
	// plus Gaussian noise of std Noise, drawn from Seed.
	Size    int
	Shape   []int
	Classes int
	Noise   float64
	Seed    int64

	// Recorded, when set, is what a trained model recorded of this data
	// (the metadata of its model.safetensors): datasets.Describe returns
	// it instead of reading the data, so that the model loads where its
	// training data are not (package model sets it).
	Recorded *DataRecord

	Pos Pos
}

// DataRecord is what a trained model keeps of its training data's
// description (datasets.Info): enough to compile the model again without
// reading the data.
type DataRecord struct {
	Sample     []int    // one sample's shape, after the transforms
	Classes    int      // the number of classes (token data: the vocabulary's size)
	Target     []int    // a regression target's shape; nil for class labels
	Tokens     bool     // token data: token ids in, a class per position out
	ClassNames []string // the classes' names in label order; nil when they have none
	Vocab      string   // token data's vocabulary (datasets.Vocab.String); "" for others
}

// ParamGroup gives the parameters whose names match one of the glob
// patterns (path.Match) their own weight decay or learning rate (nil:
// the optimizer's), as PyTorch's parameter groups.
type ParamGroup struct {
	Match           []string
	WeightDecay, LR *float64
	Pos             Pos
}

// Optimizer describes the optimizer: PyTorch's torch.optim rules.
type Optimizer struct {
	Kind string // "sgd", "adam" or "adamw"
	// Groups override settings for some parameters; the first matching
	// group applies.
	Groups              []ParamGroup
	LR                  float64
	Momentum, Dampening float64 // sgd
	WeightDecay         float64
	Nesterov            bool    // sgd
	Beta1, Beta2, Eps   float64 // adam
	Pos                 Pos
}

// Schedule is a learning-rate schedule, PyTorch's lr_scheduler stepped
// once per optimizer step. Kind is "step" (StepLR: ×Gamma every Every
// epochs), "cosine" (CosineAnnealingLR from the optimizer's lr down to
// MinLR over the run, or over Steps steps), "warmup" (LinearLR from
// StartFactor·lr up to lr over Steps steps, then Then, as SequentialLR)
// or "onecycle" (OneCycleLR to MaxLR with PctStart, DivFactor,
// FinalDivFactor, cosine annealing, cycle_momentum=False).
type Schedule struct {
	Kind                                       string
	Every                                      int
	Gamma                                      float64
	MinLR                                      float64
	Steps                                      int
	StartFactor                                float64
	Then                                       *Schedule
	MaxLR, PctStart, DivFactor, FinalDivFactor float64
	Pos                                        Pos
}

// SyncKind names a gradient synchronisation strategy.
type SyncKind string

// The sync strategies (sync.*).
const (
	SyncAllReduce       SyncKind = "allreduce"
	SyncParameterServer SyncKind = "parameter_server"
	SyncLocalSGD        SyncKind = "local_sgd"
	SyncNone            SyncKind = "none"
	// SyncZero is sync.zero and sync.fsdp: sharded data parallelism
	// (ZeRO stages 1–3, Stage).
	SyncZero SyncKind = "zero"
)

// Sync describes how replicas are kept in step.
type Sync struct {
	Kind     SyncKind
	Op       string  // allreduce: "mean" or "sum"
	BucketMB float64 // allreduce: bucket size
	Overlap  bool    // allreduce: start each bucket as soon as it is ready
	// BroadcastBuffers (allreduce) sends rank 0's running statistics to
	// every device before each forward pass, as DDP does.
	BroadcastBuffers bool
	Root             int // parameter_server
	Every            int // local_sgd
	// Stage (zero) is what the ranks shard: 1 the optimizer state, 2 also
	// the gradients, 3 also the parameters (sync.fsdp).
	Stage int
	// Prefetch (zero, stage 3) is how many layers ahead the parameters
	// are gathered: 0 gathers each layer's just before it runs.
	Prefetch int
	Pos      Pos
}

// PartitionContext is what a partition strategy is told.
type PartitionContext struct {
	Size   int     // samples in the dataset
	World  int     // number of ranks
	Epoch  int     // 0-based epoch
	Seed   int64   // the run's seed
	Labels []int32 // the dataset's labels (when the strategy asks for them)
	// Weights holds per-rank weights from the cluster file, when set.
	Weights []float64
}

// Partition is a strategy: Fn returns one list of sample indices per rank,
// and whether indices repeat across ranks on purpose (padding).
type Partition struct {
	Name string // for errors: "strided (partition.star:12:5)"
	Fn   func(ctx PartitionContext) (shards [][]int, pad bool, err error)
	Pos  Pos
}

// Spec is a whole training run as a script declares it.
type Spec struct {
	Script string // path of the script
	Model  Model
	Loss   string // "nll" or "cross_entropy"
	// LabelSmoothing is cross-entropy's label smoothing ε (0: none).
	LabelSmoothing float64
	// IgnoreIndex, when set, is a target value the class losses skip: it
	// adds nothing and the mean is over the other targets (PyTorch's
	// ignore_index).
	IgnoreIndex *int
	Data        Data
	Eval        *Data // nil when no evaluation set

	Partition *Partition // nil: the engine's default (each rank a strided shard)
	Sync      Sync
	Optimizer Optimizer
	// Schedule changes the learning rate every optimizer step (nil: the
	// optimizer's lr throughout).
	Schedule *Schedule
	// ClipGradNorm, when > 0, scales the gradients so that their global
	// 2-norm is at most it, after they are combined across devices and
	// before the update (torch.nn.utils.clip_grad_norm_).
	ClipGradNorm float64

	BatchSize  int // global: each of N devices takes about BatchSize/N
	Epochs     int
	Seed       int64
	MaxSteps   int    // stop after this many optimizer steps; 0: no limit
	Shuffle    bool   // a new sample order every epoch
	Accumulate int    // micro-batches per optimizer step (≥ 1)
	Uneven     string // unequal shards: "pad", "drop" or "zero"
	// Keep is how many checkpoints a run folder keeps (0: all).
	Keep int
	// OnNonFinite is what a step whose loss or gradients are not finite
	// does: "stop" (the default: the run ends with an error naming the op
	// that produced the first non-finite value, parameters not updated) or
	// "skip" (the update is skipped and training goes on, as AMP's scaler
	// does).
	OnNonFinite string
	// Precision is train(precision = ...): ops.FP32 (the default),
	// ops.BF16 (torch.autocast's mixed precision: matrix products and
	// convolutions on bfloat16 operands with float32 accumulation, float32
	// master weights and losses) or ops.FP16 (the same in float16, with
	// GradScaler's dynamic loss scaling).
	Precision ops.Precision

	// Loads lists the files load() statements resolved to, in order.
	Loads []string
	// Pos is where train(...) was called.
	Pos Pos
}
