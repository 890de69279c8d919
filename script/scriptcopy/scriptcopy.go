// Package scriptcopy is the copy of its training script a run folder
// keeps (RUN/script/): the text of the script and of every file it
// load()ed as the run began, and a manifest saying where each was read
// and its SHA-256, so that gorun sample, gorun predict and package model
// rebuild the model that ran however the files changed since:
//
//	script/manifest.json    what each copy is: the path it was read from, its SHA-256
//	script/train.star       the script
//	script/lib/blocks.star  a file it loaded from its own folder, where it lay
//	script/gorun_path-1/…   one loaded from the first GORUN_PATH folder
//	script/library/…        one of the library shipped with gorun
//	script/other/…          one loaded from anywhere else
//
// It belongs to the run folder, after training: cmd/gorun writes the copy
// as a run starts; Read reads it back, checking every file against the
// manifest, and LoadOptions evaluates it with package script as the
// original was evaluated. Errors name the file.
package scriptcopy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing/fstest" // a map as the library's fs.FS (it imports no testing)

	"gorun/datasets/userfile"
	"gorun/script"
)

// The copy's folder in a run folder, and its manifest inside it.
const (
	Dir          = "script"
	ManifestFile = "manifest.json"
)

// LibraryPrefix marks load() paths of the library shipped with gorun (as
// spec.Spec.Loads names them).
const LibraryPrefix = "<gorun>/"

// Manifest is script/manifest.json.
type Manifest struct {
	// Script is the script's absolute path when the run started.
	Script string `json:"script"`
	// SearchPath holds the GORUN_PATH folders (absolute) load() searched.
	SearchPath []string `json:"search_path"`
	// Files are the script, then each loaded file in the order loaded.
	Files []File `json:"files"`
}

// File is one file of the copy.
type File struct {
	// Path is where it was read: an absolute path, or <gorun>/NAME for
	// the library shipped with gorun.
	Path string `json:"path"`
	// Copy is the copy's path inside script/, slash-separated.
	Copy   string `json:"copy"`
	SHA256 string `json:"sha256"`
	// Data is the file's text (not in the manifest).
	Data []byte `json:"-"`
}

// ReadSource reads a script file to copy it: a regular file of at most
// script.MaxSourceBytes, as script.Load reads it. It never waits (a FIFO
// in its place is refused, not opened).
func ReadSource(p string) ([]byte, error) {
	b, err := userfile.ReadFile(p, script.MaxSourceBytes)
	if err != nil {
		return nil, fmt.Errorf("copying the script: %w", err)
	}
	return b, nil
}

// Read reads the manifest of the copy in folder dir (RUN/script) and the
// files it names (checked against their SHA-256).
func Read(dir string) (*Manifest, error) {
	b, err := userfile.ReadFile(filepath.Join(dir, ManifestFile), 1<<20)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, ManifestFile), err)
	}
	if m.Script == "" || len(m.Files) == 0 || m.Files[0].Path != m.Script {
		return nil, fmt.Errorf("%s: no script in it", filepath.Join(dir, ManifestFile))
	}
	for i := range m.Files {
		f := &m.Files[i]
		p := filepath.Join(dir, filepath.FromSlash(f.Copy))
		if !filepath.IsLocal(filepath.FromSlash(f.Copy)) {
			return nil, fmt.Errorf("%s: copy %q is outside the folder", filepath.Join(dir, ManifestFile), f.Copy)
		}
		if f.Data, err = ReadSource(p); err != nil {
			return nil, err
		}
		if sum := sha256.Sum256(f.Data); hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, fmt.Errorf("%s: the copy was changed (its SHA-256 is not the manifest's)", p)
		}
	}
	return &m, nil
}

// LoadOptions are the script.Load options that evaluate the copy: the
// files it holds stand where they were read, load() searches as it did
// (nothing else is found), and the library is the copy's.
func (m *Manifest) LoadOptions() []script.Option {
	files := map[string][]byte{}
	lib := fstest.MapFS{}
	for _, f := range m.Files {
		if name, ok := strings.CutPrefix(f.Path, LibraryPrefix); ok {
			lib[name] = &fstest.MapFile{Data: f.Data, Mode: 0o444}
			continue
		}
		files[f.Path] = f.Data
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

// ChangedSince names the copied files that differ on disk now (or are
// gone), for a note: the copy is what ran.
func (m *Manifest) ChangedSince() []string {
	var out []string
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, LibraryPrefix) {
			continue
		}
		b, err := ReadSource(f.Path)
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
