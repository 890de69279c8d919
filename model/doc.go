// Package model uses a model gorun trained, from Go: it loads a run
// folder (or a script and a safetensors file of weights) and answers
// predictions, for programs that serve a model rather than train one.
//
//	m, err := model.Load("runs/mnist")        // RUN/run.json + RUN/model.safetensors
//	defer m.Close()
//	out, err := m.Predict(ctx, x)              // x: *tensor.Dense [N, 1, 28, 28]
//	probs, err := m.Probabilities(out)         // [N, 10]
//
// It belongs to the run half, after training: Load rebuilds the run's
// Plan from its script (package script, then engine.Compile for one
// device of the chosen backend, at the batch WithMaxBatch sets), with the
// training data described by what the weights file's metadata record
// of them (datasets.Recorded: the sample shape, classes and their names,
// the vocabulary), so that no data file is read, and
// Predict runs the Plan's evaluation pass through runner.Evaluator: the
// very steps evaluation during training runs (dropout off, batch norm
// on its running statistics), so Predict's outputs are the training
// engine's evaluation outputs bit for bit.
//
// # Inputs and outputs
//
// Predict takes a gorgonia.org/tensor Dense of shape [N, ...sample] (a
// batch) or the sample shape alone (one sample, answered without the batch
// dimension, as PyTorch's layers answer unbatched inputs), where the
// sample shape is InputShape ([1 28 28] for MNIST):
//
//   - float32 values are the model's inputs as its first layer takes
//     them, that is after the training set's preprocessing (normalised
//     pixels, standardised CSV columns), as a PyTorch model(x) takes
//     them; float64 values are converted to float32 first.
//   - uint8 values are raw pixels of a model trained on images, converted
//     as the training set converted its pixels: v/255, then
//     (v − mean[c])/std[c] with channel c's own mean and std, in float32
//     as torchvision's ToTensor and Normalize do. A data.csv model
//     refuses them.
//   - token models (data.text, integer data.tensors) take int32, int64 or
//     int token ids, [N, T], each id in [0, Classes).
//
// Raw data become model inputs as training made them: FromImage for an
// image file (data.images, data.mnist and data.fashion_mnist models:
// decoded, converted to the model's channels, resized and normalised by
// the training's own code, datasets.ImageMeta.Sample), FromCSV for a
// table with a header (data.csv models: the columns found by name,
// standardised with the training split's statistics,
// datasets.CSVMeta.Sample), and Normalize for arrays in the training
// files' own form (each channel, column, or every value, with its own
// mean and std: Normalization). gorun predict and gorun serve use them.
//
// Predict returns float32 outputs, [N, ...OutputShape]: what the model's
// last layer computes (logits, or log-probabilities after
// nn.log_softmax; [N, T, V] logits for token models; the values of a
// regression model). Probabilities turns class scores into
// probabilities.
//
// Inputs that are refused, each with an error that names the problem: a
// nil tensor, a dtype the model does not take, a shape that is not the
// model's ("input has shape [3 28 28], the model takes [N 1 28 28] or one
// sample [1 28 28]"), an empty batch, a NaN or infinite value (naming the
// sample and the element: one caller's bad value never reaches a batch it
// shares with others), a token id outside the vocabulary, uint8 inputs to
// a data.csv model. FromImage and FromCSV name the file (or "the image",
// "the CSV"), the line and the column: a file that is not an image, a
// table without one of the model's columns, a missing value.
//
// # Concurrency
//
// A Model is safe for concurrent use. It holds a pool of arenas (devices
// of the backend, each with the whole Plan's buffers, made when first
// needed; WithArenas, by default one per CPU core the Go runtime uses on
// the cpu backend) and one goroutine per arena. Requests that arrive
// while every arena is busy are joined into one batch of up to
// WithMaxBatch samples (64); WithMaxDelay adds a wait for more while
// callers arrive together (none by default: on the cpu backend a waiting
// arena is an idle core). A request larger than WithMaxBatch is split
// across batches, on several arenas at once, and every caller gets its
// own samples' outputs back.
//
// For the same batches, Predict's outputs are the engine's evaluation
// outputs bit for bit. A sample's outputs may differ in the last bits
// between batches of different sizes, as in PyTorch: the CPU matrix
// multiply takes another path for the tiniest products (a layer's
// rows × columns × inputs ≤ 512, at a batch of 1 to 3 for small layers),
// which sums in another order. Models with batch norm that keeps no
// running statistics (track_running_stats = False) normalise with the
// batch's own statistics in evaluation too: for those every request runs
// alone, in batches of WithMaxBatch as evaluation during training does.
//
// Predict returns as soon as its context is done (ctx.Err()); samples of
// it already running on an arena finish there and are dropped.
//
// # Backends
//
// The cpu backend is linked in (this package imports it). A program
// built with -tags cuda links the cuda backend in as well (cuda.go) and
// Load uses it; WithBackend chooses any backend the program registered.
//
// Errors name the user's thing: the run folder and its files, the script
// line (compile errors), the tensor and its shape.
package model
