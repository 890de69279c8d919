package script

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"gorun/engine/spec"
)

// quiet keeps print() in fuzzed scripts off the test output.
func quiet() Option {
	return func(o *options) {
		o.onThread = func(th *starlark.Thread) { th.Print = func(*starlark.Thread, string) {} }
	}
}

// FuzzLoad evaluates arbitrary source as a training script: it must end
// with a Spec or an error, never a panic, a hang (the step budget) or a
// runaway allocation (the builtins' limits).
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.star")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(string(b))
		}
	}
	f.Add(netScript)
	f.Add(strategyScript)
	f.Fuzz(func(t *testing.T, src string) {
		if repeatBomb(src) {
			t.Skip("one repetition of up to 2^30 elements (Starlark's own cap) would take gigabytes")
		}
		fs := memFS{"/w/train.star": src, "/w/lib.star": "x = 1\ndef f(ctx):\n    return [list(range(ctx.size))]\n"}
		s, err := Load("/w/train.star", WithFileReader(fs), WithMaxSteps(200_000), WithMaxMemory(64<<20), quiet())
		if err != nil {
			return
		}
		if s == nil {
			t.Fatal("no Spec and no error")
		}
		if s.Partition != nil {
			// Strategies run too, on a small dataset.
			s.Partition.Fn(spec.PartitionContext{Size: 10, World: 2, Labels: []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}})
		}
	})
}

// FuzzOverride parses arbitrary --set flags and applies those that parse
// to a script: errors, never panics.
func FuzzOverride(f *testing.F) {
	for _, s := range []string{
		"epochs=3", "optimizer.lr=0.5", "loss=cross_entropy", "loss=cross-entropy", "epochs=1+",
		"optimizer=optim.adam(lr=0.002)", "eval=data.mnist(split='test')", "data.dir=mnist",
		"partition=halves", "batch_size=batch * 2", "sync=sync.local_sgd(every=4)", "=", "x", "epochs=",
		"optimizer.lr=float('nan')", "data.limit=1<<40", "model.name=x", "eval=None",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, set string) {
		if repeatBomb(set) {
			t.Skip("a huge repetition")
		}
		o, err := ParseOverride(set)
		if err != nil {
			return
		}
		Load("/w/train.star", WithFileReader(memFS{"/w/train.star": netScript}), WithOverrides(o), WithMaxSteps(200_000), WithMaxMemory(64<<20), quiet())
	})
}

var numberRE = regexp.MustCompile(`0[xXoObB][0-9a-fA-F_]+|[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?`)

// repeatBomb reports whether src may ask for a huge repetition (x * n) in
// one step, which neither the step budget nor the memory watch can stop
// part way: it holds a * and a shift, or numbers whose product passes
// 2^24.
func repeatBomb(src string) bool {
	if !strings.Contains(src, "*") {
		return false
	}
	if strings.Contains(src, "<<") {
		return true
	}
	product := 1.0
	for _, lit := range numberRE.FindAllString(src, -1) {
		v, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			i, err := strconv.ParseInt(lit, 0, 64)
			if err != nil {
				return true
			}
			v = float64(i)
		}
		if v > 1 {
			product *= v
		}
	}
	return product > 1<<24
}
