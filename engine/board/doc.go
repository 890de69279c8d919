// Package board is gorun's live dashboard: an HTTP server that follows the
// metrics.jsonl of one or several run folders as they grow and draws their
// curves — loss, accuracy, learning rate, samples/s, communication time —
// in one page, as TensorBoard does for PyTorch. `gorun board RUNS…`
// (cmd/gorun/board.go) serves it. It belongs to no phase of a run: it only
// reads what the run half (engine/runner) writes.
//
// The files:
//
//	tail.go     Tail: one metrics.jsonl followed by offset (appends, a
//	            partial last line, truncation and replacement on --resume,
//	            a file that appears late or disappears)
//	runs.go     Run and Resolve: the RUNS of the command line, their names
//	server.go   Board: the page, the run list, a run's settings and script
//	            copy, the event stream (server-sent events); Serve and Listen
//	static/     the page: HTML, CSS and the charts in plain JavaScript and
//	            SVG, embedded in the binary (no CDN, no chart library)
//
// Safety. A request names a run by its index in the RUNS list and a file
// of its script copy by its index in script/manifest.json, never by a
// path; the server reads only metrics.jsonl, run.json and the files of
// that manifest, regular files only (datasets/userfile), the script copy
// confined to the run's script/ folder (os.Root). It answers GET and HEAD
// only, to a Host that is an IP address or localhost (a guard against DNS
// rebinding), with a Content-Security-Policy that allows nothing outside
// the board. Serve sets read, header and idle timeouts, a deadline on
// every write, and shuts down gracefully when its context ends.
//
// Errors name the run folder or the file and say what to do; an error of
// one run (an unreadable file, a folder that went away) is that run's
// state on the page, and the others go on.
package board
