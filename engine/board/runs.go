package board

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MetricsFile is the metrics log of a run folder, which the engine writes
// (engine/runner.MetricsFile); repeated here, as engine/plot does, so that
// the board needs nothing of the engine.
const MetricsFile = "metrics.jsonl"

// Run is one run folder the board follows.
type Run struct {
	// Name names the run on the page: its folder's base name, or as many
	// of its last path elements as tell it from the other runs.
	Name string
	// Dir is the folder as the command line gave it.
	Dir string
}

// Resolve makes the Runs of the folders given on the command line, in
// order. A path to a metrics.jsonl stands for its folder. A folder that
// does not exist yet is accepted when its parent does (a run about to
// start there): notes says so, one line per such folder. It is an error
// when a path is a file, when neither it nor its parent exists, or when a
// folder is given twice; the error names it.
func Resolve(dirs []string) (runs []Run, notes []string, err error) {
	if len(dirs) == 0 {
		return nil, nil, errors.New("no run folder given: name at least one (the --out folder of a run)")
	}
	seen := map[string]string{}
	for _, d := range dirs {
		if d == "" {
			return nil, nil, errors.New("an empty run folder name")
		}
		dir := d
		if filepath.Base(d) == MetricsFile {
			if st, err := os.Stat(d); err == nil && st.Mode().IsRegular() {
				dir = filepath.Dir(d)
			}
		}
		st, err := os.Stat(dir)
		switch {
		case err == nil && !st.IsDir():
			return nil, nil, fmt.Errorf("%s is a file, not a run folder (give the --out folder of a run)", d)
		case errors.Is(err, fs.ErrNotExist):
			parent := filepath.Dir(filepath.Clean(dir))
			if pst, perr := os.Stat(parent); perr != nil || !pst.IsDir() {
				return nil, nil, fmt.Errorf("run folder %s: no such folder, nor its parent %s", d, parent)
			}
			notes = append(notes, fmt.Sprintf("%s does not exist yet: the board shows its run once one writes there", d))
		case err != nil:
			return nil, nil, fmt.Errorf("run folder %s: %w", d, err)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("run folder %s: %w", d, err)
		}
		if first, ok := seen[abs]; ok {
			return nil, nil, fmt.Errorf("run folder %s is given twice (as %s and %s)", abs, first, d)
		}
		seen[abs] = d
		runs = append(runs, Run{Dir: dir})
	}
	names := runNames(runs)
	for i := range runs {
		runs[i].Name = names[i]
	}
	return runs, notes, nil
}

// runNames names each run by the fewest last elements of its absolute
// path that no other run shares: "b1" for runs/b1 and runs/b2, "a/run"
// and "b/run" for a/run and b/run.
func runNames(runs []Run) []string {
	parts := make([][]string, len(runs))
	for i, r := range runs {
		abs, err := filepath.Abs(r.Dir)
		if err != nil {
			abs = r.Dir
		}
		parts[i] = strings.Split(filepath.ToSlash(filepath.Clean(abs)), "/")
	}
	suffix := func(i, k int) string {
		p := parts[i]
		if k > len(p) {
			k = len(p)
		}
		return strings.Join(p[len(p)-k:], "/")
	}
	names := make([]string, len(runs))
	for i := range runs {
		for k := 1; ; k++ {
			names[i] = suffix(i, k)
			if k >= len(parts[i]) {
				break
			}
			unique := true
			for j := range runs {
				if j != i && suffix(j, k) == names[i] {
					unique = false
					break
				}
			}
			if unique {
				break
			}
		}
		if names[i] == "" {
			names[i] = "/"
		}
	}
	return names
}
