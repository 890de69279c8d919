package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gorun/datasets/userfile"
	"gorun/engine/spec"
	"gorun/script/scriptcopy"
	"gorun/scripts"
)

// The run folder keeps the text of the script that trained and of every
// file it load()ed (package script/scriptcopy: the layout, reading it
// back), so that gorun sample rebuilds the model that ran however the
// files changed since.
//
// The copy is written as a run starts, as one unit (a temporary folder
// renamed into place). A resumed run trains with the script it is given
// (its plan must match the checkpoint's); when that script or a file it
// loads differs from the copy, the copy becomes the new one and the
// earlier is kept as script.1 (script.2, … on later resumes). This file
// writes the copy; package script/scriptcopy reads it.

// scriptCopyDir is the copy's folder in a run folder.
const scriptCopyDir = scriptcopy.Dir

// snapshotScript reads the script s was loaded from and every file it
// load()ed (s.Loads), for the run folder's copy; searchPath is GORUN_PATH
// as load() searched it.
func snapshotScript(s *spec.Spec, searchPath []string) (*scriptcopy.Manifest, error) {
	main, err := filepath.Abs(s.Script)
	if err != nil {
		return nil, err
	}
	m := &scriptcopy.Manifest{Script: main, SearchPath: []string{}}
	for _, d := range searchPath {
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		m.SearchPath = append(m.SearchPath, d)
	}
	taken := map[string]bool{scriptcopy.ManifestFile: true}
	add := func(p, copyPath string, data []byte) {
		if taken[copyPath] || copyPath == "" {
			copyPath = fmt.Sprintf("other/%d-%s", len(m.Files), path.Base(filepath.ToSlash(p)))
		}
		taken[copyPath] = true
		sum := sha256.Sum256(data)
		m.Files = append(m.Files, scriptcopy.File{Path: p, Copy: copyPath, SHA256: hex.EncodeToString(sum[:]), Data: data})
	}
	data, err := scriptcopy.ReadSource(main)
	if err != nil {
		return nil, err
	}
	add(main, filepath.Base(main), data)
	for _, l := range s.Loads {
		_, key, ok := strings.Cut(l, " -> ")
		if !ok {
			continue
		}
		if name, ok := strings.CutPrefix(key, scriptcopy.LibraryPrefix); ok {
			data, err := fs.ReadFile(scripts.Library, name)
			if err != nil {
				return nil, fmt.Errorf("copying the script: %s: %w", key, err)
			}
			add(key, "library/"+name, data)
			continue
		}
		p, err := filepath.Abs(key)
		if err != nil {
			return nil, err
		}
		data, err := scriptcopy.ReadSource(p)
		if err != nil {
			return nil, err
		}
		add(p, copyPlace(p, filepath.Dir(main), m.SearchPath), data)
	}
	return m, nil
}

// copyPlace is where the copy of a loaded file p goes inside script/:
// where it lay relative to the script's folder, or to the GORUN_PATH
// folder it came from; "" when neither.
func copyPlace(p, scriptDir string, searchPath []string) string {
	if rel, err := filepath.Rel(scriptDir, p); err == nil && filepath.IsLocal(rel) {
		return filepath.ToSlash(rel)
	}
	for i, d := range searchPath {
		if rel, err := filepath.Rel(d, p); err == nil && filepath.IsLocal(rel) {
			return fmt.Sprintf("gorun_path-%d/%s", i+1, filepath.ToSlash(rel))
		}
	}
	return ""
}

// sameFiles reports whether two manifests copy the same files with the
// same contents; otherwise it names those that differ.
func sameFiles(m, old *scriptcopy.Manifest) (bool, []string) {
	was := map[string]string{}
	for _, f := range old.Files {
		was[f.Path] = f.SHA256
	}
	var changed []string
	for _, f := range m.Files {
		moved := m.Script != old.Script && f.Path == m.Script // another script: said once, below
		if sum, ok := was[f.Path]; (!ok || sum != f.SHA256) && !moved {
			changed = append(changed, f.Path)
		}
		delete(was, f.Path)
	}
	for p := range was {
		if m.Script == old.Script || p != old.Script {
			changed = append(changed, p+" (no longer loaded)")
		}
	}
	sort.Strings(changed)
	if m.Script != old.Script {
		changed = append([]string{fmt.Sprintf("the script is %s, was %s", m.Script, old.Script)}, changed...)
	}
	return len(changed) == 0, changed
}

// writeScriptCopy writes m's copy into the run folder out as script/, as
// one unit: a temporary folder, synced, renamed into place. A copy already
// there (a resumed run) stays when it holds the same files; otherwise it
// is kept as script.N, saying so on stderr.
func writeScriptCopy(out string, m *scriptcopy.Manifest, stderr io.Writer) (err error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	final := filepath.Join(out, scriptCopyDir)
	if old, err := scriptcopy.Read(final); err == nil {
		if same, _ := sameFiles(m, old); same {
			return nil
		}
	}
	tmp, err := os.MkdirTemp(out, "."+scriptCopyDir+".tmp-*")
	if err != nil {
		return fmt.Errorf("copying the script into %s: %w", out, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	for _, f := range m.Files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Copy))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := userfile.WriteNew(p, f.Data); err != nil {
			return fmt.Errorf("copying the script into %s: %w", out, err)
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := userfile.WriteNew(filepath.Join(tmp, scriptcopy.ManifestFile), append(b, '\n')); err != nil {
		return fmt.Errorf("copying the script into %s: %w", out, err)
	}
	if err := userfile.SyncDir(tmp); err != nil {
		return err
	}
	if _, err := os.Lstat(final); err == nil {
		kept, err := keepAside(out, final)
		if err != nil {
			return fmt.Errorf("copying the script into %s: %w", out, err)
		}
		what := "a file it loads"
		if old, err := scriptcopy.Read(kept); err == nil {
			_, changed := sameFiles(m, old)
			what = listSome(changed, 3)
		}
		fmt.Fprintf(stderr, "gorun: the script differs from the copy in %s (changed: %s): the copy is now this one, the earlier kept in %s\n", final, what, kept)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("copying the script into %s: %w", out, err)
	}
	return userfile.SyncDir(out)
}

// keepAside renames the copy at final to the first free script.N beside
// it and returns that name.
func keepAside(out, final string) (string, error) {
	for n := 1; ; n++ {
		p := filepath.Join(out, scriptCopyDir+"."+strconv.Itoa(n))
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p, os.Rename(final, p)
		}
	}
}

// isScriptCopy reports whether name is a script copy of a run folder:
// script or script.N.
func isScriptCopy(name string) bool {
	if name == scriptCopyDir {
		return true
	}
	n, ok := strings.CutPrefix(name, scriptCopyDir+".")
	_, err := strconv.Atoi(n)
	return ok && err == nil
}
