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
)

// The files of a run folder this package reads (cmd/gorun writes them).
const (
	runInfoFile = "run.json"          // the script and its --set arguments
	scriptDir   = "script"            // a copy of the script, when the run kept one
	modelFile   = "model.safetensors" // the final weights
)

// runScript is what rebuilds a run's model: the script to load and the
// --set arguments the run was trained with. It reads RUN/run.json
// ({"script": PATH, "sets": [...]}); when the run folder holds a copy of
// the script (RUN/script/), that copy is preferred over the recorded
// path, which may have changed since: RUN/script/ followed by the
// recorded script's base name, else the folder's only .star file.
func runScript(dir string) (script string, sets []string, err error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("%s: no such run folder", dir)
	case err != nil:
		return "", nil, fmt.Errorf("run folder: %w", err)
	case !st.IsDir():
		return "", nil, fmt.Errorf("%s is a file, not a run folder", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, runInfoFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("%s is not a run folder: it has no %s (gorun writes one when it trains with --out)", dir, runInfoFile)
	}
	if err != nil {
		return "", nil, fmt.Errorf("run folder: %w", err)
	}
	var info struct {
		Script string   `json:"script"`
		Sets   []string `json:"sets"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return "", nil, fmt.Errorf("%s: %v", filepath.Join(dir, runInfoFile), err)
	}
	if info.Script == "" {
		return "", nil, fmt.Errorf("%s: no script recorded", filepath.Join(dir, runInfoFile))
	}
	script = info.Script
	if kept, ok := keptScript(dir, info.Script); ok {
		script = kept
	} else if !filepath.IsAbs(script) {
		script = filepath.Join(dir, script)
	}
	if _, err := os.Stat(script); err != nil {
		return "", nil, fmt.Errorf("%s records the script %s, which cannot be read (%v): a copy of the script in %s/ is read instead when there is one",
			filepath.Join(dir, runInfoFile), script, err, filepath.Join(dir, scriptDir))
	}
	return script, info.Sets, nil
}

// keptScript is the run folder's copy of its script, if it kept one.
func keptScript(dir, recorded string) (string, bool) {
	sd := filepath.Join(dir, scriptDir)
	if st, err := os.Stat(sd); err != nil || !st.IsDir() {
		return "", false
	}
	if p := filepath.Join(sd, filepath.Base(recorded)); fileExists(p) {
		return p, true
	}
	entries, err := os.ReadDir(sd)
	if err != nil {
		return "", false
	}
	var stars []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".star") {
			stars = append(stars, filepath.Join(sd, e.Name()))
		}
	}
	if len(stars) == 1 {
		return stars[0], true
	}
	return "", false
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
