// Package serve answers a trained model's predictions over HTTP: the
// server behind `gorun serve RUN_DIR` (cmd/gorun/serve.go). It belongs to
// the run half, after training, on top of package model: a Server wraps a
// *model.Model, turns each request's body into a tensor, calls
// Model.Predict (or Model.Generate) with the request's deadline, and
// writes the outputs as JSON.
//
// Routes:
//
//	POST /v1/predict    an image (PNG, JPEG, GIF, BMP, TIFF, WebP; image
//	                    models), a JSON array (one sample or a batch,
//	                    nested to the model's shape or flat rows; or
//	                    {"inputs": …} or {"pixels": …}), CSV rows of
//	                    numbers, or a table with a header (data.csv
//	                    models); answers {"predictions": [one object
//	                    per sample]}, with the class's name as "label"
//	                    when the classes have names
//	POST /v1/generate   a sequence model continues a prompt:
//	                    {"prompt", "tokens", "temperature", "seed"}
//	GET  /healthz       the model's kind and shapes (503 while stopping)
//	GET  /metrics       Prometheus metrics: requests by route and status
//	                    code, latency, samples per request, in-flight and
//	                    queued requests, the model's batches (Model.Stats)
//
// The files:
//
//	server.go   Server, Options, New: the routes, the Host check, panics
//	            recovered, the limit on requests at once and its queue
//	input.go    the body of /v1/predict: Content-Type or sniffing, JSON
//	            arrays (parsed without building Go values per number), CSV
//	image.go    images: the size checked from the header before
//	            decoding, then Model.FromImage (as training made its
//	            samples)
//	output.go   the answers, float32 written so that they round-trip
//	metrics.go  the Prometheus registry of one Server
//	listen.go   Listen, and Server.Serve: the HTTP server's timeouts and
//	            the graceful shutdown
//
// Inputs. JSON and CSV numbers are the model's inputs as Model.Predict
// takes float32 values (after the training set's normalisation), parsed
// as float32 directly so that a float32 written with the shortest
// representation arrives with the same bits; {"pixels": …} are raw
// uint8 pixels, normalised as in training; images and a data.csv model's
// tables with a header go through Model.FromImage and Model.FromCSV,
// which make samples exactly as training did. Outputs are float32
// written with strconv's shortest representation ('g', -1, 32), so that
// they parse back to Predict's bits.
//
// Safety. Every request is bounded: the body's size (Options.MaxBody,
// refused from Content-Length before it is read), the time to send it
// (Options.ReadTimeout, counted from when a request's turn comes), the
// time to answer (Options.Timeout: the context passed to Predict), the
// time to write the answer (Options.WriteTimeout); an image's pixels
// (Options.MaxPixels, read from its header by datasets.ImageConfig before
// any pixel is decoded). At most Options.MaxConcurrent requests are read
// and answered at once; up to Options.MaxQueue more wait for a turn, and
// the rest are refused with 503. Non-finite values are refused. A request
// whose Host is not an IP address, localhost or one of Options.Hosts is
// refused (a guard against DNS rebinding, as engine/board's), unless
// Options.AnyHost. A panic in a handler is recovered: the request gets a
// 500 and the log a line with the stack.
//
// Errors. Every refusal is a 4xx or 5xx with a JSON body {"error": "…"}
// that names the problem: what came and what the model takes ("the input
// has shape [3 28 28]; the model takes one sample [1 28 28] (or 784
// values in a row), or a batch [N 1 28 28] (or [N 784])").
package serve
