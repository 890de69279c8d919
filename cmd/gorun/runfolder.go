package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gorun/engine/runner"
)

// hostfileName is the mpirun hostfile `gorun launch` writes into the run
// folder before the ranks start: it does not make the folder a run.
const hostfileName = "hostfile"

// lockName is the advisory lock file of a run folder.
const lockName = "gorun.lock"

// prepareRunFolder readies the run folder out before training: it refuses a
// folder that holds a run already unless the run is resumed there or
// --overwrite is given, locks it against a second gorun (the lock is held
// until release is called), removes temporaries that an interrupted atomic
// write left behind, and with --overwrite removes the old run's files.
func prepareRunFolder(out string, f *flags, stderr io.Writer) (release func(), err error) {
	release = func() {}
	if out == "" {
		return release, nil
	}
	if f.resume != "" {
		if st, err := os.Stat(f.resume); err != nil || !st.IsDir() {
			return release, fmt.Errorf("--resume %s: no run folder there", f.resume)
		}
	}
	resuming := f.resume != "" && filepath.Clean(f.resume) == filepath.Clean(out)
	entries, err := os.ReadDir(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return release, fmt.Errorf("run folder: %w", err)
	}
	var held []string
	for _, e := range entries {
		// What a run that failed before its first step leaves (an empty
		// metrics.jsonl) or an interrupted write (temporaries) is no run.
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() &&
			(e.Name() == lockName || e.Name() == hostfileName || isTemporary(e.Name()) || e.Name() == "metrics.jsonl" && info.Size() == 0) {
			continue
		}
		held = append(held, e.Name())
	}
	if len(held) > 0 && !resuming && !f.overwrite {
		return release, &usageError{fmt.Sprintf("--out %s: the folder is not empty (%s); continue its run with --resume %s, replace it with --overwrite, or choose another folder",
			out, listSome(held, 4), out)}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return release, fmt.Errorf("run folder: %w", err)
	}
	unlock, err := lockRunFolder(out)
	if err != nil {
		return release, err
	}
	if n, names := removeTemporaries(out); n > 0 {
		fmt.Fprintf(stderr, "gorun: removed %d stale temporary file(s) left by an interrupted write: %s\n", n, listSome(names, 3))
	}
	// A checkpoint is written as a folder renamed into place: what an
	// interrupted write left goes (a replaced checkpoint comes back).
	done, err := runner.TidyCheckpoints(out)
	for _, d := range done {
		fmt.Fprintf(stderr, "gorun: %s\n", d)
	}
	if err != nil {
		unlock()
		return release, fmt.Errorf("run folder: %w", err)
	}
	if f.overwrite && len(held) > 0 {
		n, err := removeOldRun(out)
		if err != nil {
			unlock()
			return release, fmt.Errorf("--overwrite: %w", err)
		}
		if n > 0 {
			fmt.Fprintf(stderr, "gorun: --overwrite: removed %d file(s) of the previous run in %s\n", n, out)
		}
	}
	return unlock, nil
}

// listSome lists up to n names, then how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// isTemporary reports whether name is a temporary of an atomic write:
// metrics' x.tmp, safetensors' .x.tmp-NNN, plot's .x.NNN.tmp.
func isTemporary(name string) bool {
	return strings.HasSuffix(name, ".tmp") || strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// removeTemporaries removes the temporaries in out and out/checkpoints; it
// returns how many it removed and their paths.
func removeTemporaries(out string) (int, []string) {
	var removed []string
	for _, dir := range []string{out, filepath.Join(out, "checkpoints")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case e.Type().IsRegular() && isTemporary(e.Name()):
				if os.Remove(p) == nil {
					removed = append(removed, p)
				}
			case e.IsDir() && dir == out && strings.HasPrefix(e.Name(), "."+scriptCopyDir+".tmp-"):
				// The script's copy, cut short.
				if os.RemoveAll(p) == nil {
					removed = append(removed, p)
				}
			}
		}
	}
	return len(removed), removed
}

// removeOldRun removes the files of a run that gorun knows in out:
// metrics.jsonl, checkpoints/, the copies of its script (script/,
// script.N/), *.safetensors and *.png.
func removeOldRun(out string) (int, error) {
	n := 0
	entries, err := os.ReadDir(out)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		name, p := e.Name(), filepath.Join(out, e.Name())
		switch {
		case name == "checkpoints" && e.IsDir():
			cps, _ := os.ReadDir(p)
			if err := os.RemoveAll(p); err != nil {
				return n, err
			}
			n += len(cps)
		case isScriptCopy(name) && e.IsDir():
			if err := os.RemoveAll(p); err != nil {
				return n, err
			}
			n++
		case name == "metrics.jsonl", strings.HasSuffix(name, ".safetensors"), strings.HasSuffix(name, ".png"):
			if e.IsDir() {
				continue
			}
			if err := os.Remove(p); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// lockContent is what the lock file says about its holder.
func lockContent() string {
	return fmt.Sprintf("pid %d\nstarted %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339))
}

// holderOf describes the holder a lock file names.
func holderOf(content []byte) string {
	var pid int
	var started string
	for _, line := range strings.Split(string(content), "\n") {
		if v, ok := strings.CutPrefix(line, "pid "); ok {
			fmt.Sscan(v, &pid)
		}
		if v, ok := strings.CutPrefix(line, "started "); ok {
			started = v
		}
	}
	if pid == 0 {
		return "another gorun"
	}
	if started == "" {
		return fmt.Sprintf("another gorun (pid %d)", pid)
	}
	return fmt.Sprintf("another gorun (pid %d, started %s)", pid, started)
}
