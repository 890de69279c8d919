package main

import (
	"bytes"
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
	"syscall"
	"testing/fstest" // a map as the library's fs.FS (it imports no testing)

	"gorun/datasets/userfile"
	"gorun/engine/spec"
	"gorun/script"
	"gorun/scripts"
)

// The run folder keeps the text of the script that trained and of every
// file it load()ed, so that gorun sample rebuilds the model that ran
// however the files changed since:
//
//	script/manifest.json    what each copy is: the path it was read from, its SHA-256
//	script/train.star       the script
//	script/lib/blocks.star  a file it loaded from its own folder, where it lay
//	script/gorun_path-1/…   one loaded from the first GORUN_PATH folder
//	script/library/…        one of the library shipped with gorun
//	script/other/…          one loaded from anywhere else
//
// The copy is written as a run starts, as one unit (a temporary folder
// renamed into place). A resumed run trains with the script it is given
// (its plan must match the checkpoint's); when that script or a file it
// loads differs from the copy, the copy becomes the new one and the
// earlier is kept as script.1 (script.2, … on later resumes).
const (
	scriptCopyDir = "script"
	manifestFile  = "manifest.json"
)

// scriptManifest is script/manifest.json.
type scriptManifest struct {
	// Script is the script's absolute path when the run started.
	Script string `json:"script"`
	// SearchPath holds the GORUN_PATH folders (absolute) load() searched.
	SearchPath []string `json:"search_path"`
	// Files are the script, then each loaded file in the order loaded.
	Files []copiedFile `json:"files"`
}

// copiedFile is one file of the copy.
type copiedFile struct {
	// Path is where it was read: an absolute path, or <gorun>/NAME for
	// the library shipped with gorun.
	Path string `json:"path"`
	// Copy is the copy's path inside script/, slash-separated.
	Copy   string `json:"copy"`
	SHA256 string `json:"sha256"`
	data   []byte
}

// libraryPrefix marks load() paths of the library shipped with gorun (as
// spec.Spec.Loads names them).
const libraryPrefix = "<gorun>/"

// snapshotScript reads the script s was loaded from and every file it
// load()ed (s.Loads), for the run folder's copy; searchPath is GORUN_PATH
// as load() searched it.
func snapshotScript(s *spec.Spec, searchPath []string) (*scriptManifest, error) {
	main, err := filepath.Abs(s.Script)
	if err != nil {
		return nil, err
	}
	m := &scriptManifest{Script: main, SearchPath: []string{}}
	for _, d := range searchPath {
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		m.SearchPath = append(m.SearchPath, d)
	}
	taken := map[string]bool{manifestFile: true}
	add := func(p, copyPath string, data []byte) {
		if taken[copyPath] || copyPath == "" {
			copyPath = fmt.Sprintf("other/%d-%s", len(m.Files), path.Base(filepath.ToSlash(p)))
		}
		taken[copyPath] = true
		sum := sha256.Sum256(data)
		m.Files = append(m.Files, copiedFile{Path: p, Copy: copyPath, SHA256: hex.EncodeToString(sum[:]), data: data})
	}
	data, err := readScriptFile(main)
	if err != nil {
		return nil, err
	}
	add(main, filepath.Base(main), data)
	for _, l := range s.Loads {
		_, key, ok := strings.Cut(l, " -> ")
		if !ok {
			continue
		}
		if name, ok := strings.CutPrefix(key, libraryPrefix); ok {
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
		data, err := readScriptFile(p)
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

// readScriptFile reads a script file to copy it: a regular file of at
// most script.MaxSourceBytes, as script.Load reads it. It never waits (a
// FIFO in its place is refused, not opened).
func readScriptFile(p string) ([]byte, error) {
	b, err := userfile.ReadFile(p, script.MaxSourceBytes)
	if err != nil {
		return nil, fmt.Errorf("copying the script: %w", err)
	}
	return b, nil
}

// sameFiles reports whether two manifests copy the same files with the
// same contents; otherwise it names those that differ.
func (m *scriptManifest) sameFiles(old *scriptManifest) (bool, []string) {
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
func writeScriptCopy(out string, m *scriptManifest, stderr io.Writer) (err error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	final := filepath.Join(out, scriptCopyDir)
	if old, err := readManifest(final); err == nil {
		if same, _ := m.sameFiles(old); same {
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
		if err := writeSynced(p, f.data); err != nil {
			return fmt.Errorf("copying the script into %s: %w", out, err)
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(tmp, manifestFile), append(b, '\n')); err != nil {
		return fmt.Errorf("copying the script into %s: %w", out, err)
	}
	if err := syncFolder(tmp); err != nil {
		return err
	}
	if _, err := os.Lstat(final); err == nil {
		kept, err := keepAside(out, final)
		if err != nil {
			return fmt.Errorf("copying the script into %s: %w", out, err)
		}
		what := "a file it loads"
		if old, err := readManifest(kept); err == nil {
			_, changed := m.sameFiles(old)
			what = listSome(changed, 3)
		}
		fmt.Fprintf(stderr, "gorun: the script differs from the copy in %s (changed: %s): the copy is now this one, the earlier kept in %s\n", final, what, kept)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("copying the script into %s: %w", out, err)
	}
	return syncFolder(out)
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

// writeSynced writes a file and syncs it.
func writeSynced(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncFolder fsyncs a folder; file systems that cannot sync folders pass.
func syncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	d.Close()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	return err
}

// readManifest reads the manifest of the copy in folder dir and the files
// it names (checked against their SHA-256).
func readManifest(dir string) (*scriptManifest, error) {
	b, err := userfile.ReadFile(filepath.Join(dir, manifestFile), 1<<20)
	if err != nil {
		return nil, err
	}
	var m scriptManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, manifestFile), err)
	}
	if m.Script == "" || len(m.Files) == 0 || m.Files[0].Path != m.Script {
		return nil, fmt.Errorf("%s: no script in it", filepath.Join(dir, manifestFile))
	}
	for i := range m.Files {
		f := &m.Files[i]
		p := filepath.Join(dir, filepath.FromSlash(f.Copy))
		if !filepath.IsLocal(filepath.FromSlash(f.Copy)) {
			return nil, fmt.Errorf("%s: copy %q is outside the folder", filepath.Join(dir, manifestFile), f.Copy)
		}
		if f.data, err = readScriptFile(p); err != nil {
			return nil, err
		}
		if sum := sha256.Sum256(f.data); hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, fmt.Errorf("%s: the copy was changed (its SHA-256 is not the manifest's)", p)
		}
	}
	return &m, nil
}

// loadOptions are the script.Load options that evaluate the copy: the
// files it holds stand where they were read, load() searches as it did
// (nothing else is found), and the library is the copy's.
func (m *scriptManifest) loadOptions() []script.Option {
	files := map[string][]byte{}
	lib := fstest.MapFS{}
	for _, f := range m.Files {
		if name, ok := strings.CutPrefix(f.Path, libraryPrefix); ok {
			lib[name] = &fstest.MapFile{Data: f.data, Mode: 0o444}
			continue
		}
		files[f.Path] = f.data
	}
	return []script.Option{
		script.WithFileReader(copyReader(files)),
		script.WithSearchPath(m.SearchPath...),
		script.WithLibrary(lib),
	}
}

// copyReader serves the copied files under the paths they were read from.
type copyReader map[string][]byte

// ReadFile implements script.FileReader.
func (r copyReader) ReadFile(p string) ([]byte, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	if b, ok := r[abs]; ok {
		return bytes.Clone(b), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

// changedSince names the copied files that differ on disk now (or are
// gone), for a note: the copy is what ran.
func (m *scriptManifest) changedSince() []string {
	var out []string
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, libraryPrefix) {
			continue
		}
		b, err := readScriptFile(f.Path)
		switch sum := sha256.Sum256(b); {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, f.Path+" (removed)")
		case err != nil:
			out = append(out, f.Path+" (not a regular file)")
		case hex.EncodeToString(sum[:]) != f.SHA256:
			out = append(out, f.Path)
		}
	}
	return out
}
