package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gorun/datasets"
	"gorun/datasets/userfile"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/safetensors"
	"gorun/script"
)

// runInfo is RUN/run.json: what gorun sample needs to rebuild the model of
// a run — the script (absolute path) and the --set arguments it ran with.
type runInfo struct {
	Script string   `json:"script"`
	Sets   []string `json:"sets"`
}

const runInfoFile = "run.json"

// writeRunInfo records the script and its --set arguments in the run
// folder (atomically: a temporary file renamed).
func writeRunInfo(out, scriptPath string, sets []string) error {
	abs, err := filepath.Abs(scriptPath)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(runInfo{Script: abs, Sets: sets}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(out, runInfoFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(out, runInfoFile))
}

// sampleCmd is `gorun sample RUN_DIR --prompt TEXT --tokens N
// --temperature T`: it rebuilds the run's model from run.json, loads its
// model.safetensors (or --params) and prints the prompt and its
// continuation.
func sampleCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prompt := fs.String("prompt", "", "the `text` to continue")
	tokens := fs.Int("tokens", 200, "how many tokens to add")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature; 0 picks the likeliest token (greedy)")
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	params := fs.String("params", "", "weights `file` (default RUN_DIR/model.safetensors)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun sample RUN_DIR --prompt TEXT [--tokens N] [--temperature T] [--seed S] [--params FILE]")
		fs.PrintDefaults()
	}
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return &usageError{fmt.Sprintf("sample needs exactly one RUN_DIR, got %d arguments", len(pos))}
	case *tokens < 1:
		return &usageError{fmt.Sprintf("--tokens %d: want at least 1", *tokens)}
	case *temperature < 0:
		return &usageError{fmt.Sprintf("--temperature %g: want 0 (greedy) or more", *temperature)}
	case *prompt == "":
		return &usageError{"--prompt: give the text to continue"}
	}
	dir := pos[0]
	b, err := userfile.ReadFile(filepath.Join(dir, runInfoFile), 1<<20)
	if err != nil {
		return fmt.Errorf("%s: not a run folder of a training that recorded its script (%v)", dir, err)
	}
	var info runInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return fmt.Errorf("%s: %v", filepath.Join(dir, runInfoFile), err)
	}
	if *params == "" {
		*params = filepath.Join(dir, "model.safetensors")
	}
	f, err := safetensors.ReadFile(*params)
	if err != nil {
		return err
	}
	vs, ok := f.Metadata["vocab"]
	if !ok {
		return fmt.Errorf("%s: no vocabulary in its metadata: was the model trained on data.text?", *params)
	}
	vocab, err := datasets.ParseVocab(vs)
	if err != nil {
		return fmt.Errorf("%s: %v", *params, err)
	}
	ids, err := vocab.Encode(*prompt)
	if err != nil {
		return fmt.Errorf("--prompt: %v", err)
	}
	var sets []script.Override
	for _, s := range append(append([]string(nil), info.Sets...), "batch_size=1", "eval=None") {
		o, err := script.ParseOverride(s)
		if err != nil {
			return fmt.Errorf("%s: --set %s: %v", filepath.Join(dir, runInfoFile), s, err)
		}
		sets = append(sets, o)
	}
	var fl flags
	fl.sets = sets
	spec, err := loadSpec(info.Script, &fl)
	if err != nil {
		return fmt.Errorf("rebuilding the model of %s from %s: %w", dir, info.Script, err)
	}
	plan, err := engine.Compile(spec, engine.DefaultCluster())
	if err != nil {
		return fmt.Errorf("rebuilding the model of %s: %w", dir, err)
	}
	out, err := runner.Generate(plan, *params, ids, runner.SampleOptions{Tokens: *tokens, Temperature: *temperature, Seed: *seed})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s%s\n", *prompt, vocab.Decode(out))
	return nil
}
