// Package script evaluates a gorun training script (Starlark) and turns what
// it declares into a spec.Spec. It owns the builtins (nn, optim, data, sync,
// train), load() resolution and command-line overrides (--set), and nothing
// after: it never compiles or runs anything.
//
// Errors from the script itself come back as *starlark.EvalError (with a
// Backtrace giving file:line:col of every frame) or syntax.Error; errors
// found while converting values carry the script position of the value.
package script

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"gorun/datasets/userfile"
	"gorun/engine/spec"
)

// FileReader reads script files. Tests use an in-memory implementation.
type FileReader interface {
	ReadFile(path string) ([]byte, error)
}

// osReader reads from the real file system.
type osReader struct{}

func (osReader) ReadFile(path string) ([]byte, error) {
	return userfile.ReadFile(path, MaxSourceBytes)
}

// Override is one --set NAME=VALUE. Name is a train() parameter, or
// PARAM.FIELD for a field of an optimizer, sync or data value
// (optimizer.lr=0.05). Value is a Starlark expression; a value that does not
// evaluate (such as nll) is taken as a string.
type Override struct {
	Name, Value string
}

// ParseOverride parses "NAME=VALUE". VALUE must parse as a Starlark
// expression, or be a plain word (letters, digits, _ - . /, starting with a
// letter), which stays a string when it does not evaluate.
func ParseOverride(s string) (Override, error) {
	name, value, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return Override{}, fmt.Errorf("--set %q: want NAME=VALUE", s)
	}
	value = strings.TrimSpace(value)
	if value == "" {
		return Override{}, fmt.Errorf("--set %s=: no value (quote an empty string: --set '%s=\"\"')", name, name)
	}
	if _, err := syntax.ParseExpr("--set "+name, value, 0); err != nil && !isPlainWord(value) {
		msg := err.Error()
		var se syntax.Error
		if errors.As(err, &se) {
			msg = fmt.Sprintf("column %d: %s", se.Pos.Col, se.Msg)
		}
		return Override{}, fmt.Errorf("--set %s=%s: the value is not a Starlark expression (%s); quote a string: --set '%s=\"...\"'", name, value, msg, name)
	}
	return Override{Name: name, Value: value}, nil
}

// isPlainWord reports whether v is a bare word such as cross_entropy or
// runs/a-1.5: a letter, then letters, digits, _ - . or /.
func isPlainWord(v string) bool {
	for i, r := range v {
		letter := r == '_' || unicode.IsLetter(r)
		if !letter && (i == 0 || !unicode.IsDigit(r) && !strings.ContainsRune("-./", r)) {
			return false
		}
	}
	return v != ""
}

type options struct {
	reader    FileReader
	overrides []Override
	path      []string // GORUN_PATH folders
	library   fs.FS    // the library shipped with gorun (may be nil)
	maxSteps  uint64
	maxMemory uint64
	extra     starlark.StringDict
	onThread  func(*starlark.Thread) // tests: called on every new thread
	ctx       context.Context        // cancels the script and its strategies
	abort     func(error)            // ends the process when they cannot be stopped
}

// Option configures Load.
type Option func(*options)

// WithFileReader reads the script and the files it loads through r.
func WithFileReader(r FileReader) Option { return func(o *options) { o.reader = r } }

// WithOverrides applies --set overrides to the train(...) call.
func WithOverrides(ov ...Override) Option {
	return func(o *options) { o.overrides = append(o.overrides, ov...) }
}

// WithSearchPath sets the folders load() searches after the loading
// script's own folder (GORUN_PATH).
func WithSearchPath(dirs ...string) Option {
	return func(o *options) { o.path = append(o.path, dirs...) }
}

// WithLibrary sets the library searched last by load(): the Starlark files
// shipped inside the gorun binary.
func WithLibrary(lib fs.FS) Option { return func(o *options) { o.library = lib } }

// WithPredeclared adds names every script sees (tests add assert).
func WithPredeclared(d starlark.StringDict) Option {
	return func(o *options) { o.extra = d }
}

// WithMaxSteps bounds the Starlark computation steps of the script (and of
// each call of a partition strategy). 0 means the default, 100 million.
// gorun's builtins count against it in proportion to their work.
func WithMaxSteps(n uint64) Option { return func(o *options) { o.maxSteps = n } }

// WithMaxMemory bounds how much memory (bytes of Go heap) the script, and
// each call of its partition strategy, may take. 0 means DefaultMaxMemory.
// The Starlark code is stopped when the heap has grown by a third of it,
// so that the operation under way, which Starlark does not interrupt, stays
// within it too (x + x takes twice what x takes); see WithAbort for an
// operation bigger than that.
func WithMaxMemory(n uint64) Option { return func(o *options) { o.maxMemory = n } }

// WithAbort gives Load the means to stop Starlark code that a cancel does
// not stop: once begun, one Starlark operation runs to its end, and one
// can be large (a repetition [0] * n of up to 2^30 elements, 16 GiB) or
// slow. abort is called, from another goroutine, when the heap passes the
// memory budget (WithMaxMemory) during such an operation, or when the code
// still runs a quarter of a second after the context ended (WithContext: a
// signal); err names the script or the strategy and says why. abort must
// end the process (cmd/gorun prints err and exits). Without it, the
// operation under way runs to its end.
func WithAbort(abort func(err error)) Option { return func(o *options) { o.abort = abort } }

// defaultMaxSteps is the step budget when WithMaxSteps gives none.
const defaultMaxSteps = 100_000_000

// WithContext cancels the script, and every later call of its partition
// strategy, when ctx ends (say, on SIGINT): the Starlark code under way
// fails with "Starlark computation cancelled: " and ctx's cause.
func WithContext(ctx context.Context) Option { return func(o *options) { o.ctx = ctx } }

// SearchPathFromEnv splits a GORUN_PATH value into folders.
func SearchPathFromEnv(v string) []string {
	var dirs []string
	for _, d := range filepath.SplitList(v) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Load evaluates the script at path and returns the Spec its train(...) call
// declares.
func Load(path string, opts ...Option) (*spec.Spec, error) {
	o := options{reader: osReader{}, maxSteps: defaultMaxSteps}
	for _, f := range opts {
		f(&o)
	}
	src, err := o.reader.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading script: %w", err)
	}
	l := &loader{opts: o, cache: map[string]*loadEntry{}}
	st := &state{overrides: o.overrides, loader: l}
	thread := l.newThread("main")
	thread.SetLocal(stateKey, st)
	defer watch(o.ctx, o.maxMemory, path, l.cancelAll, o.abort)()
	if _, err := starlark.ExecFileOptions(fileOptions, thread, path, withoutBOM(src), l.predeclared()); err != nil {
		return nil, err
	}
	if st.spec == nil {
		return nil, fmt.Errorf("%s: the script never called train(...)", path)
	}
	st.spec.Script = path
	st.spec.Loads = l.resolved
	return st.spec, nil
}

// fileOptions are the Starlark dialect options for gorun scripts: the
// features a configuration language benefits from. A name load() binds is
// one of the file's globals, like a name it defines, so that a --set
// expression sees it (--set model=net(...) after load("lib.star", "net")).
var fileOptions = &syntax.FileOptions{
	Set:               true,
	While:             true,
	TopLevelControl:   true,
	GlobalReassign:    true,
	Recursion:         true,
	LoadBindsGlobally: true,
}

const stateKey = "gorun.state"

// state is what one evaluation builds; it lives on the thread.
type state struct {
	overrides []Override
	spec      *spec.Spec
	loader    *loader
}

func stateOf(thread *starlark.Thread) *state {
	st, _ := thread.Local(stateKey).(*state)
	return st
}

// predeclared returns the builtins every script sees.
func predeclared() starlark.StringDict {
	d := starlark.StringDict{
		"nn":    nnModule,
		"optim": optimModule,
		"data":  dataModule,
		"sync":  syncModule,
		"sched": schedModule,
		"train": starlark.NewBuiltin("train", trainBuiltin),
		// Index helpers implemented in Go, for partition strategies.
		"shuffle": starlark.NewBuiltin("shuffle", shuffleBuiltin),
		"argsort": starlark.NewBuiltin("argsort", argsortBuiltin),
		"fail":    starlark.NewBuiltin("fail", failBuiltin),
	}
	for k, v := range boundedUniverse() {
		d[k] = v
	}
	return d
}

func (l *loader) predeclared() starlark.StringDict {
	d := predeclared()
	for k, v := range l.opts.extra {
		d[k] = v
	}
	return d
}

// loader resolves load() statements.
type loader struct {
	// trace records the model the script builds from tensors.
	trace    *trace
	opts     options
	cache    map[string]*loadEntry
	resolved []string
	mu       sync.Mutex
	threads  []*starlark.Thread // every thread of this evaluation
	stopped  string             // why cancelAll cancelled them ("" while it has not)
}

// cancelAll cancels every thread of the evaluation (the main script's and
// those of the files it loads), and those it makes later: a load() under
// way when the cancel came.
func (l *loader) cancelAll(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == "" {
		l.stopped = reason
	}
	for _, t := range l.threads {
		t.Cancel(reason)
	}
}

type loadEntry struct {
	globals starlark.StringDict
	err     error
	loading bool
}

func (l *loader) newThread(name string) *starlark.Thread {
	t := &starlark.Thread{
		Name: name,
		Load: l.load,
		Print: func(_ *starlark.Thread, msg string) {
			fmt.Fprintln(os.Stderr, msg)
		},
	}
	setupThread(t, l.opts.maxSteps)
	l.mu.Lock()
	l.threads = append(l.threads, t)
	if l.stopped != "" {
		t.Cancel(l.stopped)
	}
	l.mu.Unlock()
	if l.opts.onThread != nil {
		l.opts.onThread(t)
	}
	return t
}

// load resolves module in the loading file's folder, then each GORUN_PATH
// folder, then the library shipped with gorun.
func (l *loader) load(thread *starlark.Thread, module string) (starlark.StringDict, error) {
	from := thread.CallFrame(0).Pos.Filename()
	key, src, err := l.find(from, module)
	if err != nil {
		return nil, err
	}
	if e, ok := l.cache[key]; ok {
		if e.loading {
			return nil, fmt.Errorf("load cycle: %s loads itself", key)
		}
		return e.globals, e.err
	}
	e := &loadEntry{loading: true}
	l.cache[key] = e
	l.resolved = append(l.resolved, fmt.Sprintf("%s -> %s", module, key))
	child := l.newThread("load " + module)
	child.SetLocal(stateKey, &state{loader: l}) // train() is not allowed in a loaded file
	e.globals, e.err = starlark.ExecFileOptions(fileOptions, child, key, withoutBOM(src), l.predeclared())
	e.loading = false
	return e.globals, e.err
}

// loadRoots says where load() looks, for its errors.
const loadRoots = "load() reads .star files from the loading script's folder, the GORUN_PATH folders and the library shipped with gorun"

// checkModule refuses a load() path that could leave load()'s roots (an
// absolute path, one with a ".." element) or name a file that is not
// Starlark: a file that is not a script must never be read, since the
// errors of a file that does not parse as Starlark would show its content.
func checkModule(module string) error {
	switch {
	case module == "":
		return fmt.Errorf("load(%q): an empty path; %s", module, loadRoots)
	case filepath.IsAbs(module) || strings.HasPrefix(module, "/"):
		return fmt.Errorf("load(%q): an absolute path; %s: give the path from one of them", module, loadRoots)
	case !filepath.IsLocal(module):
		return fmt.Errorf("load(%q): the path leaves its folder (through \"..\"); %s", module, loadRoots)
	case !strings.HasSuffix(module, ".star"):
		return fmt.Errorf("load(%q): not a .star file; %s", module, loadRoots)
	}
	return nil
}

// libraryPrefix marks files that come from the library inside the binary.
const libraryPrefix = "<gorun>/"

func (l *loader) find(from, module string) (string, []byte, error) {
	if err := checkModule(module); err != nil {
		return "", nil, err
	}
	var tried []string
	var dirs []string
	if strings.HasPrefix(from, libraryPrefix) {
		// A library file loads from the library.
		dirs = nil
	} else if from != "" {
		dirs = append(dirs, filepath.Dir(from))
	}
	dirs = append(dirs, l.opts.path...)
	for _, d := range dirs {
		p := filepath.Join(d, module)
		src, err := l.opts.reader.ReadFile(p)
		if err == nil {
			return p, src, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", nil, fmt.Errorf("load(%q): %w", module, err)
		}
		tried = append(tried, p)
	}
	if l.opts.library != nil {
		name := filepath.ToSlash(filepath.Clean(module))
		src, err := fs.ReadFile(l.opts.library, name)
		if err == nil {
			return libraryPrefix + name, src, nil
		}
		tried = append(tried, libraryPrefix+name+" (shipped with gorun)")
	}
	return "", nil, fmt.Errorf("load(%q): not found; tried %s (set GORUN_PATH to add folders)", module, strings.Join(tried, ", "))
}

// position returns where the builtin being run was called from.
func position(thread *starlark.Thread) spec.Pos {
	if thread.CallStackDepth() < 2 {
		return ""
	}
	return spec.Pos(thread.CallFrame(1).Pos.String())
}

// withoutBOM drops a UTF-8 byte-order mark at the start of a source file,
// as Python does: editors on Windows write one, and Starlark's scanner
// would refuse it as "unexpected input character '\ufeff'".
func withoutBOM(src []byte) []byte {
	return bytes.TrimPrefix(src, []byte("\ufeff"))
}
