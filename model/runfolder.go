package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gorun/datasets/userfile"
	"gorun/script"
	"gorun/script/scriptcopy"
	"gorun/scripts"
)

// The files of a run folder this package reads (cmd/gorun writes them).
const (
	runInfoFile = "run.json"          // the script's path and its --set arguments
	modelFile   = "model.safetensors" // the final weights
)

// runScript is what rebuilds a run's model: the script to load, the
// script.Load options that find it and what it loads, and the --set
// arguments the run was trained with. It reads RUN/run.json ({"script":
// PATH, "sets": [...], "copy": "script"}) and evaluates the run's copy of
// its script (RUN/script/, package script/scriptcopy) as gorun sample
// does, so that the model is the one that trained however the files
// changed since; a run folder of an earlier gorun, which kept no copy,
// loads the script at its recorded path as it is now.
func runScript(dir string) (path string, opts []script.Option, sets []string, err error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, nil, fmt.Errorf("%s: no such run folder", dir)
	case err != nil:
		return "", nil, nil, fmt.Errorf("run folder: %w", err)
	case !st.IsDir():
		return "", nil, nil, fmt.Errorf("%s is a file, not a run folder", dir)
	}
	b, err := userfile.ReadFile(filepath.Join(dir, runInfoFile), 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil, fmt.Errorf("%s is not a run folder: it has no %s (gorun writes one when it trains with --out)", dir, runInfoFile)
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("run folder: %w", err)
	}
	var info struct {
		Script string   `json:"script"`
		Sets   []string `json:"sets"`
		Copy   string   `json:"copy"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return "", nil, nil, fmt.Errorf("%s: %v", filepath.Join(dir, runInfoFile), err)
	}
	copyDir := filepath.Join(dir, scriptcopy.Dir)
	m, merr := scriptcopy.Read(copyDir)
	if merr == nil {
		return m.Script, m.LoadOptions(), info.Sets, nil
	}
	if _, err := os.Stat(copyDir); err == nil || info.Copy != "" {
		return "", nil, nil, fmt.Errorf("%s: the copy of the run's script is unreadable: %v", dir, merr)
	}
	// A run folder of an earlier gorun: the script as it is now.
	if info.Script == "" {
		return "", nil, nil, fmt.Errorf("%s: no script recorded", filepath.Join(dir, runInfoFile))
	}
	if _, err := os.Stat(info.Script); err != nil {
		return "", nil, nil, fmt.Errorf("%s records the script %s, which cannot be read (%v), and the run folder keeps no copy of it (an earlier gorun made it)",
			filepath.Join(dir, runInfoFile), info.Script, err)
	}
	return info.Script, scriptOptions(), info.Sets, nil
}

// scriptOptions find what a script loads as gorun does: the script's
// folder, GORUN_PATH, the library shipped in package scripts.
func scriptOptions() []script.Option {
	return []script.Option{
		script.WithSearchPath(script.SearchPathFromEnv(os.Getenv("GORUN_PATH"))...),
		script.WithLibrary(scripts.Library),
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// weightsOf is the weights file of run folder dir: path when given, else
// RUN/model.safetensors, with an error that says what the folder holds
// instead when it has none.
func weightsOf(dir, path string) (string, error) {
	if path != "" {
		return path, nil
	}
	p := filepath.Join(dir, modelFile)
	if fileExists(p) {
		return p, nil
	}
	var other []string
	for _, name := range []string{"best.safetensors", "checkpoints"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			other = append(other, name)
		}
	}
	slices.Sort(other)
	if len(other) == 0 {
		return "", fmt.Errorf("%s has no %s: the run did not finish (nor save any weights)", dir, modelFile)
	}
	return "", fmt.Errorf("%s has no %s: the run did not finish; it holds %s, which WithWeights (gorun predict --weights) can name", dir, modelFile, strings.Join(other, " and "))
}
