package script

import (
	"fmt"
	"path/filepath"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"gorun/engine/spec"
)

var mnistMaker = &configMaker{
	name:   "data.mnist",
	params: []string{"split?", "dir?", "normalize?", "limit?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		split := "train"
		dir := starlark.Value(starlark.None)
		normalize := starlark.Value(starlark.Tuple{starlark.Float(0.1307), starlark.Float(0.3081)})
		limit := 0
		if err := unpack(name, kwargs, "split?", &split, "dir?", &dir, "normalize?", &normalize, "limit?", &limit); err != nil {
			return nil, err
		}
		if split != "train" && split != "test" {
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		}
		d := spec.Data{Kind: "mnist", Split: split, Normalize: [2]float64{0, 1}, Limit: limit, Pos: position(thread)}
		if dir != starlark.None {
			s, ok := starlark.AsString(dir)
			if !ok {
				return nil, fmt.Errorf("%s: dir: got %s, want string or None", name, dir.Type())
			}
			if s == "" {
				return nil, fmt.Errorf("%s: dir: empty; give a folder or None", name)
			}
			d.Dir = resolveDir(thread, s)
			for i, kv := range kwargs {
				if kv[0] == starlark.String("dir") {
					// Rebuilding this value (--set data.limit=...) from
					// another file must not resolve the path again.
					kwargs[i] = starlark.Tuple{kv[0], starlark.String(d.Dir)}
				}
			}
		}
		if normalize != starlark.None {
			p, err := floatPair(normalize)
			if err != nil {
				return nil, fmt.Errorf("%s: normalize: %v (mean, std)", name, err)
			}
			if p[1] <= 0 {
				return nil, fmt.Errorf("%s: normalize: std must be positive, got %g", name, p[1])
			}
			d.Normalize = p
		}
		if limit < 0 {
			return nil, fmt.Errorf("%s: limit must be ≥ 0, got %d", name, limit)
		}
		return d, nil
	},
}

var syntheticMaker = &configMaker{
	name:   "data.synthetic",
	params: []string{"size?", "shape?", "classes?", "noise?", "seed?", "split?"},
	build: func(thread *starlark.Thread, name string, kwargs []starlark.Tuple) (any, error) {
		size, classes := 1024, 10
		noise := number(1)
		var seed int64
		split := "train"
		shape := starlark.Value(starlark.Tuple{starlark.MakeInt(1), starlark.MakeInt(28), starlark.MakeInt(28)})
		if err := unpack(name, kwargs, "size?", &size, "shape?", &shape, "classes?", &classes, "noise?", &noise,
			"seed?", &seed, "split?", &split); err != nil {
			return nil, err
		}
		seq, ok := shape.(starlark.Indexable)
		if !ok || seq.Len() == 0 {
			return nil, fmt.Errorf("%s: shape: got %s, want a tuple of sizes such as (1, 28, 28)", name, shape.String())
		}
		d := spec.Data{Kind: "synthetic", Split: split, Size: size, Classes: classes, Noise: float64(noise), Seed: seed, Pos: position(thread)}
		for i := 0; i < seq.Len(); i++ {
			var n int
			if err := starlark.AsInt(seq.Index(i), &n); err != nil || n <= 0 {
				return nil, fmt.Errorf("%s: shape: got %s, want positive sizes", name, shape.String())
			}
			d.Shape = append(d.Shape, n)
		}
		switch {
		case split != "train" && split != "test":
			return nil, fmt.Errorf("%s: split must be \"train\" or \"test\", got %q", name, split)
		case size < 1:
			return nil, fmt.Errorf("%s: size must be ≥ 1, got %d", name, size)
		case classes < 2:
			return nil, fmt.Errorf("%s: classes must be ≥ 2, got %d", name, classes)
		case noise < 0:
			return nil, fmt.Errorf("%s: noise must be ≥ 0, got %g", name, float64(noise))
		}
		return d, nil
	},
}

var dataModule = &starlarkstruct.Module{
	Name: "data",
	Members: starlark.StringDict{
		"mnist":     mnistMaker.builtin(),
		"synthetic": syntheticMaker.builtin(),
	},
}

// resolveDir resolves a relative dir= against the folder of the script that
// called the builtin, as load() does, and makes it absolute. A path given on
// the command line (--set) or in the library shipped with gorun is taken
// relative to the working folder.
func resolveDir(thread *starlark.Thread, dir string) string {
	if !filepath.IsAbs(dir) && thread.CallStackDepth() >= 2 {
		from := thread.CallFrame(1).Pos.Filename()
		if from != "" && !strings.HasPrefix(from, libraryPrefix) && !strings.HasPrefix(from, "--set ") {
			dir = filepath.Join(filepath.Dir(from), dir)
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
