// Package target describes the backends to the compile half. Each backend
// has one Target: its name, the ops it runs (fusions included), the keys
// of its own table in the cluster file, whether its devices' memory is
// this host's memory, and the transports it brings. A backend registers
// its Target when it registers itself (backend.Register). A backend this
// build lacks may register a Target too, without Supports and with a Hint
// saying how to get a gorun that has it: cluster files that name it still
// parse and plan, and a run says how to get it.
//
// Package engine learns everything it needs of a backend here — the
// cluster file's backend names, transports and per-backend tables, the
// fusions the compiler may make, the ops a Plan must not hold, the memory
// check — so that a new backend registers a Target and edits nothing in
// engine. The package imports only ops and the standard library, so the
// compiler can ask it without importing any backend.
//
// Targets register from init functions; Register and the lookups are safe
// for concurrent use. A Target is not changed once registered.
package target

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"

	"gorun/ops"
)

// Target is what the compiler knows of one backend.
type Target struct {
	// Name is the cluster file's backend name ("cpu", "cuda") and the name
	// of the backend's own table there ([cuda]).
	Name string
	// Supports reports whether the backend runs op. The compiler fuses
	// into an op that not every backend has (engine.TargetFusions) only
	// when the target supports it, and refuses a Plan with any other op
	// the target does not support, naming the op and the layer. nil for a
	// backend this build lacks (Built reports false): the compiler then
	// makes no such fusion and checks no op.
	Supports func(op ops.Op) bool
	// Declines gives the ops the backend does not run, each with the
	// reason ("the conv2d+maxpool2d fusion has no CUDA kernel"): only ops
	// the compiler emits when the target supports them may be declined
	// (a test checks every registered backend).
	Declines map[ops.Op]string
	// Keys are the keys of the backend's table in the cluster file, in
	// the order of its documentation; the backend reads their values from
	// backend.Options.Settings.
	Keys []Key
	// HostMemory is set when the devices' memory is this host's memory:
	// a Plan's memory check then counts it against what the host has
	// available (a GPU's own memory is checked when a device allocates).
	HostMemory bool
	// HostCores is set when each device computes on one of this host's
	// cores: `gorun launch` binds a process of one such device to a core.
	HostCores bool
	// Transports are the transports that come with the backend (nccl
	// with cuda): a cluster may name them only with this backend.
	Transports []Transport
	// Hint says how to get a gorun that has the backend, for a Target
	// registered by a build that lacks it ("build gorun with `make
	// build-cuda` …").
	Hint string
	// AutocastFP32 are the ops that mixed precision runs in float32 on
	// this backend beyond their own ops.Def.Autocast (PyTorch 1.13's CPU
	// lists): torch.autocast's lists differ by device, and CUDA's keeps
	// softmax, log-softmax and layer norm in float32.
	AutocastFP32 []ops.Op
	// FusedBF16 are fused ops this backend runs with bfloat16 operands
	// (their kernels for Attrs.Precision = BF16), so that a plan of
	// precision "bf16" keeps them fused where PyTorch's GPU autocast
	// does: CUDA's ops.Attention and ops.AttentionGrad (FlashAttention
	// under autocast). Without them the compiler builds the op from its
	// parts under mixed precision, with autocast's casts between them.
	FusedBF16 []ops.Op
}

// Transport is a transport that comes with a backend.
type Transport struct {
	// Name is the cluster file's transport name ("nccl").
	Name string
	// Hint says how to get a gorun that has it and what it needs to run.
	Hint string
}

// Built reports whether this gorun has the backend (its Target has
// Supports).
func (t *Target) Built() bool { return t.Supports != nil }

// Key returns the key of the backend's table called name, or nil.
func (t *Target) Key(name string) *Key {
	for i := range t.Keys {
		if t.Keys[i].Name == name {
			return &t.Keys[i]
		}
	}
	return nil
}

// Key is one key of a backend's table in the cluster file ([cuda] eager).
type Key struct {
	// Name is the key inside the table: "eager".
	Name string
	// Doc says what the key does, in one line, for the cluster file's
	// documentation.
	Doc string
	// Default is the setting when the cluster file leaves the key out.
	Default any
	// Parse checks a value as the TOML decoder gives it (bool, int64,
	// float64, string, []any, map[string]any) and returns the setting;
	// msg says what is wrong with the value ("want true or false, found
	// integer 1"), "" when nothing.
	Parse func(v any) (setting any, msg string)
	// Text is set for keys whose value is a string, which --set takes
	// without quotes (--set cuda.cublas=/opt/lib/libcublas.so.12).
	Text bool
}

// Bool is a key that takes true or false.
func Bool(name string, def bool, doc string) Key {
	return Key{Name: name, Doc: doc, Default: def, Parse: func(v any) (any, string) {
		b, ok := v.(bool)
		if !ok {
			return nil, "want true or false, found " + Found(v)
		}
		return b, ""
	}}
}

// Path is a key that takes the path of a file (default "": none), such as
// example.
func Path(name, example, doc string) Key {
	return Key{Name: name, Doc: doc, Default: "", Text: true, Parse: func(v any) (any, string) {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, "want the path of a file, such as " + strconv.Quote(example) + ", found " + Found(v)
		}
		return s, ""
	}}
}

// Found names a decoded TOML value's type the way the TOML spec does,
// with the value when it is short: `string "two"`, `integer 3`, `a
// table`. Errors about values say "want …, found " + Found(v).
func Found(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return "string " + strconv.Quote(x)
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case float64:
		return "float " + strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case nil:
		return "nothing"
	}
	return "a date-time" // time.Time and toml.Local*
}

var (
	mu      sync.Mutex
	targets = map[string]*Target{}
)

// Register makes t known under its name; a second Target of the same name
// replaces the first (a backend's built Target replaces the one its
// package registers for builds without it). It panics on a Target that
// cannot be right: no name, a key without Parse, a declined op it
// supports, a transport another backend brings.
func Register(t *Target) {
	if t.Name == "" {
		panic("target: Register of a Target without a name")
	}
	for _, k := range t.Keys {
		if k.Name == "" || k.Parse == nil {
			panic(fmt.Sprintf("target %s: key %q has no name or no Parse", t.Name, k.Name))
		}
	}
	for op := range t.Declines {
		if t.Supports != nil && t.Supports(op) {
			panic(fmt.Sprintf("target %s declines op %s, which it supports", t.Name, op))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tr := range t.Transports {
		for _, o := range targets {
			if o.Name != t.Name && slices.ContainsFunc(o.Transports, func(x Transport) bool { return x.Name == tr.Name }) {
				panic(fmt.Sprintf("target %s: transport %q already comes with backend %s", t.Name, tr.Name, o.Name))
			}
		}
	}
	targets[t.Name] = t
}

// Lookup returns the Target of a backend name, or nil.
func Lookup(name string) *Target {
	mu.Lock()
	defer mu.Unlock()
	return targets[name]
}

// Names lists the registered Targets' names, sorted: the backends a
// cluster file may name, built or not.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All returns the registered Targets, by name.
func All() []*Target {
	var ts []*Target
	for _, n := range Names() {
		ts = append(ts, Lookup(n))
	}
	return ts
}

// TransportOwner returns the Target whose backend brings the transport
// name (nccl: cuda), or nil when no backend does.
func TransportOwner(name string) *Target {
	for _, t := range All() {
		for _, tr := range t.Transports {
			if tr.Name == name {
				return t
			}
		}
	}
	return nil
}
