package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"gorun/datasets"
	"gorun/datasets/userfile"
	"gorun/engine"
	"gorun/engine/runner"
	"gorun/engine/spec"
	"gorun/safetensors"
	"gorun/script"
	"gorun/script/scriptcopy"
)

// runInfo is RUN/run.json: what gorun sample needs to rebuild the model of
// a run — the script (absolute path) and the --set arguments it ran with;
// the text of the script and of the files it loaded is in RUN/script/
// (scriptcopy.go), which sample evaluates.
type runInfo struct {
	Script string   `json:"script"`
	Sets   []string `json:"sets"`
	// Copy is the folder, in the run folder, holding the copy of the
	// script and the files it loaded ("" in run folders of earlier gorun
	// versions).
	Copy string `json:"copy,omitempty"`
}

const runInfoFile = "run.json"

// writeRunInfo records the script and its --set arguments in the run
// folder (atomically: a temporary file renamed).
func writeRunInfo(out, scriptPath string, sets []string) error {
	abs, err := filepath.Abs(scriptPath)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(runInfo{Script: abs, Sets: sets, Copy: scriptCopyDir}, "", "  ")
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
// --temperature T`: it rebuilds the run's model from the copy of its
// script in the run folder (run.json's --sets applied), loads its
// model.safetensors (or --params) and prints the prompt, then each token
// as it is drawn. SIGINT or SIGTERM stops it after the token under way
// (exit 130 or 143), what was printed staying printed.
func sampleCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("gorun sample", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prompt := fs.String("prompt", "", "the `text` to continue")
	tokens := fs.Int("tokens", 200, fmt.Sprintf("how many tokens to add (at most %d)", runner.MaxSampleTokens))
	temperature := fs.Float64("temperature", 0.8, "sampling temperature, finite; 0 picks the likeliest token (greedy)")
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
	switch t := *temperature; {
	case len(pos) != 1:
		return &usageError{fmt.Sprintf("sample needs exactly one RUN_DIR, got %d arguments", len(pos))}
	case *tokens < 1 || *tokens > runner.MaxSampleTokens:
		return &usageError{fmt.Sprintf("--tokens %d: want 1 to %d (a model sees only its last window: go on from the end of one sample with another's --prompt)", *tokens, runner.MaxSampleTokens)}
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return &usageError{fmt.Sprintf("--temperature %g: want a finite number, 0 (greedy: the likeliest token) or more", t)}
	case *prompt == "":
		return &usageError{"--prompt: give the text to continue"}
	}
	dir := pos[0]
	sig := watchSignals(stderr)
	defer sig.close()
	defer func() {
		if s := sig.signal(); s != nil && err != nil {
			var ie *interrupted
			if errors.As(err, &ie) {
				ie.sig = s
			} else {
				err = &interrupted{msg: fmt.Sprintf("interrupted by %s while %s", sigName(s), currentPhase()), sig: s}
			}
		}
	}()
	setPhase("reading the run folder %s", dir)
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
	setPhase("rebuilding the model of %s", dir)
	plan, err := sampleModel(dir, &info, f.Metadata, sig, stderr)
	if err != nil {
		return err
	}
	setPhase("sampling from %s", dir)
	if _, err := io.WriteString(stdout, *prompt); err != nil {
		return err
	}
	dec := streamDecoder{vocab: vocab, w: stdout}
	made := 0
	_, err = runner.Generate(plan, *params, ids, runner.SampleOptions{Tokens: *tokens, Temperature: *temperature, Seed: *seed,
		Interrupt: &sig.stop,
		Emit: func(tok int32) error {
			made++
			return dec.write(tok)
		}})
	if ferr := dec.end(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	if s := sig.signal(); s != nil {
		return &interrupted{msg: fmt.Sprintf("interrupted by %s after %d of %d tokens", sigName(s), made, *tokens)}
	}
	return nil
}

// sampleModel compiles the model of run folder dir for sampling (batch 1,
// no eval set): from the copy of its script in the folder, or, in a run
// folder of an earlier gorun that kept none, from the script run.json
// names, once its plan is found to be the one the newest checkpoint
// recorded (otherwise the script changed since the run, and the model it
// builds is not the one trained: refused, naming what differs). The
// training data are described by what the weights file's metadata (meta)
// record of them, as model.Load does, so that the text need not be there.
func sampleModel(dir string, info *runInfo, meta map[string]string, sig *sigWatch, stderr io.Writer) (*engine.Plan, error) {
	compile := func(s *spec.Spec, c engine.Cluster) (*engine.Plan, error) {
		rec, err := datasets.Recorded(&s.Data, meta)
		if err != nil {
			return nil, err
		}
		s.Data.Recorded = rec // nil: the data are read
		return engine.Compile(s, c)
	}
	withSets := func(extra ...string) ([]script.Override, error) {
		var sets []script.Override
		for _, s := range append(append([]string(nil), info.Sets...), extra...) {
			o, err := script.ParseOverride(s)
			if err != nil {
				return nil, fmt.Errorf("%s: --set %s: %v", filepath.Join(dir, runInfoFile), s, err)
			}
			sets = append(sets, o)
		}
		return sets, nil
	}
	sampling, err := withSets("batch_size=1", "eval=None")
	if err != nil {
		return nil, err
	}
	copyDir := filepath.Join(dir, scriptCopyDir)
	m, merr := scriptcopy.Read(copyDir)
	if merr == nil {
		if changed := m.ChangedSince(); len(changed) > 0 {
			fmt.Fprintf(stderr, "gorun: sampling with the script as the run trained it (%s); changed since: %s\n", copyDir, listSome(changed, 3))
		}
		opts := append(m.LoadOptions(), script.WithOverrides(sampling...), script.WithContext(sig.ctx))
		s, err := script.Load(m.Script, opts...)
		if err != nil {
			return nil, fmt.Errorf("rebuilding the model of %s from its copy of %s: %w", dir, m.Script, err)
		}
		plan, err := compile(s, engine.DefaultCluster())
		if err != nil {
			return nil, fmt.Errorf("rebuilding the model of %s: %w", dir, err)
		}
		return plan, nil
	}
	if _, err := os.Stat(copyDir); err == nil || info.Copy != "" {
		return nil, fmt.Errorf("%s: the copy of the run's script is unreadable: %v", dir, merr)
	}
	// A run folder of an earlier gorun: the script as it is now must
	// build the model the checkpoint recorded.
	var fl flags
	fl.sig = sig
	if fl.sets, err = withSets(); err != nil {
		return nil, err
	}
	ck, err := runner.NewestRunCheckpoint(dir)
	if err == nil && ck.Keyed {
		trained, err := loadSpec(info.Script, &fl)
		if err != nil {
			return nil, fmt.Errorf("rebuilding the model of %s from %s (the run folder keeps no copy of it: it was made by an earlier gorun): %w", dir, info.Script, err)
		}
		c := engine.DefaultCluster()
		c.Devices = ck.Devices
		p, err := compile(trained, c)
		if err == nil {
			err = ck.CheckPlan(p)
		}
		if err != nil {
			why := strings.TrimSuffix(err.Error(), ": resume with the script and --set that made it")
			return nil, fmt.Errorf("%s: %s has changed since the run: it no longer builds the model of %s (%s); the run folder keeps no copy of the script (it was made by an earlier gorun): restore the script as it was to sample from this run", dir, info.Script, ck.Name, why)
		}
	} else {
		fmt.Fprintf(stderr, "gorun: %s keeps no copy of its script (an earlier gorun made it) and no checkpoint to check %s against: sampling from the script as it is now\n", dir, info.Script)
	}
	fl.sets = sampling
	s, err := loadSpec(info.Script, &fl)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the model of %s from %s: %w", dir, info.Script, err)
	}
	plan, err := compile(s, engine.DefaultCluster())
	if err != nil {
		return nil, fmt.Errorf("rebuilding the model of %s: %w", dir, err)
	}
	return plan, nil
}

// streamDecoder writes tokens as text as they come: a byte vocabulary's
// bytes are held until they complete a UTF-8 character, and each run of
// bytes that is not UTF-8 is written as one U+FFFD, as Vocab.Decode does
// for the whole text.
type streamDecoder struct {
	vocab   datasets.Vocab
	w       io.Writer
	pending []byte
	invalid bool // the last thing written was U+FFFD for invalid bytes
}

func (s *streamDecoder) write(tok int32) error {
	if s.vocab.Kind != "bytes" {
		_, err := io.WriteString(s.w, s.vocab.Decode([]int32{tok}))
		return err
	}
	s.pending = append(s.pending, byte(tok))
	return s.drain(false)
}

// drain writes the pending bytes that form whole characters (all of them
// at the end).
func (s *streamDecoder) drain(end bool) error {
	var out []byte
	for len(s.pending) > 0 && (end || utf8.FullRune(s.pending)) {
		r, n := utf8.DecodeRune(s.pending)
		if r == utf8.RuneError && n <= 1 {
			if !s.invalid {
				out = append(out, "\uFFFD"...)
			}
			s.invalid, n = true, 1
		} else {
			out = append(out, s.pending[:n]...)
			s.invalid = false
		}
		s.pending = s.pending[n:]
	}
	if len(out) == 0 {
		return nil
	}
	_, err := s.w.Write(out)
	return err
}

// end writes what is pending and ends the line.
func (s *streamDecoder) end() error {
	if err := s.drain(true); err != nil {
		return err
	}
	_, err := io.WriteString(s.w, "\n")
	return err
}
