// Command gorun trains a model that a Starlark script declares.
//
//	gorun [flags] SCRIPT.star              train
//	gorun plan [flags] SCRIPT.star         print the compiled Plan
//	gorun plot [-o DIR] RUN_DIR...         draw loss and accuracy curves
//	gorun launch --cluster C.toml SCRIPT   start a multi-process run (needs -tags mpi)
//
// Flags may come before or after the script. Exit status: 0 on success, 1
// when the script or the run fails, 2 on a usage error, 130 when a signal
// (Ctrl-C, SIGTERM) stopped the run after saving a checkpoint.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"gorun/engine"
	"gorun/engine/plot"
	"gorun/engine/spec"
	"gorun/script"
	"gorun/scripts"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// interrupted is a run stopped by a signal (exit status 130).
type interrupted struct{ msg string }

func (e *interrupted) Error() string { return e.msg }

// usageError is a problem with the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// flags are the options every subcommand shares.
type flags struct {
	cluster string
	devices int
	sets    []script.Override
	out     string
	init    string
	resume  string
	quiet   bool
	verbose bool
	dot     string
}

const usage = `usage:
  gorun [flags] SCRIPT.star              train the model SCRIPT declares
  gorun plan [flags] SCRIPT.star         print the compiled Plan (--dot FILE: Graphviz too)
  gorun plot [-o DIR] RUN_DIR...         draw loss and accuracy curves of runs (PNG)
  gorun launch --cluster C.toml SCRIPT   start a multi-process run through mpirun

flags (before or after SCRIPT):
`

func newFlagSet(f *flags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.cluster, "cluster", "", "cluster TOML `file` (default: one CPU device)")
	fs.IntVar(&f.devices, "devices", 0, "devices in this process (default 1, or the cluster file's)")
	fs.Func("set", "override a train() argument: `NAME=VALUE` (repeatable; NAME may be optimizer.lr)", func(s string) error {
		o, err := script.ParseOverride(s)
		if err != nil {
			return err
		}
		f.sets = append(f.sets, o)
		return nil
	})
	fs.StringVar(&f.out, "out", "", "run `folder`: metrics.jsonl, checkpoints, plots")
	fs.StringVar(&f.init, "init", "", "start from the weights in this safetensors `file`")
	fs.StringVar(&f.resume, "resume", "", "continue the run saved in this `folder`")
	fs.BoolVar(&f.quiet, "q", false, "print nothing but errors")
	fs.BoolVar(&f.verbose, "v", false, "print a line per step")
	fs.StringVar(&f.dot, "dot", "", "plan: also write the Plan as Graphviz to this `file`")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags placed anywhere among the positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return 2
	}
	var ie *interrupted
	if errors.As(err, &ie) {
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return 130
	}
	reportError(stderr, err)
	return 1
}

// reportError prints err; a Starlark error comes with its backtrace.
func reportError(w io.Writer, err error) {
	var ee *starlark.EvalError
	var se syntax.Error
	switch {
	case errors.As(err, &ee):
		// What the error was wrapped in (say, the partition strategy and
		// epoch) comes first, then the Starlark backtrace.
		if outer := strings.TrimSuffix(err.Error(), ee.Error()); outer != err.Error() && outer != "" {
			fmt.Fprintf(w, "gorun: %s\n", strings.TrimSuffix(outer, ": "))
		}
		fmt.Fprintf(w, "gorun: %s\n", ee.Backtrace())
	case errors.As(err, &se):
		fmt.Fprintf(w, "gorun: %s: %s\n", se.Pos, se.Msg)
	default:
		fmt.Fprintf(w, "gorun: %v\n", err)
	}
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	cmd := "train"
	if len(args) > 0 {
		switch args[0] {
		case "plan", "launch", "train":
			cmd, args = args[0], args[1:]
		case "plot":
			return plotCmd(args[1:], stdout, stderr)
		case "help", "-h", "--help", "-help":
			fmt.Fprint(stdout, usage)
			newFlagSet(&flags{}, stdout).PrintDefaults()
			return nil
		}
	}
	var f flags
	fs := newFlagSet(&f, stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if len(pos) != 1 {
		return &usageError{fmt.Sprintf("%s needs exactly one SCRIPT.star, got %d arguments (%s)", cmd, len(pos), strings.Join(pos, " "))}
	}
	switch cmd {
	case "launch":
		return fmt.Errorf("launch: this gorun was built without MPI support (build with -tags mpi)")
	case "plan":
		plan, err := compile(pos[0], &f)
		if err != nil {
			return err
		}
		if f.dot != "" {
			if err := writeDot(plan, f.dot); err != nil {
				return err
			}
		}
		return plan.Describe(stdout)
	}
	return train(pos[0], &f, stdout, stderr)
}

// compile loads the script and the cluster and compiles the Plan.
func compile(path string, f *flags) (*engine.Plan, error) {
	s, err := loadSpec(path, f)
	if err != nil {
		return nil, err
	}
	c := engine.DefaultCluster()
	if f.cluster != "" {
		if c, err = engine.LoadCluster(f.cluster); err != nil {
			return nil, err
		}
	}
	if f.devices != 0 {
		c.Devices = f.devices
		if c.Weights != nil && len(c.Weights) != c.Devices {
			return nil, &usageError{fmt.Sprintf("--devices %d: the cluster file gives weights for %d devices", f.devices, len(c.Weights))}
		}
	}
	return engine.Compile(s, c)
}

func loadSpec(path string, f *flags) (*spec.Spec, error) {
	opts := []script.Option{
		script.WithOverrides(f.sets...),
		script.WithSearchPath(script.SearchPathFromEnv(os.Getenv("GORUN_PATH"))...),
		script.WithLibrary(scripts.Library),
	}
	return script.Load(path, opts...)
}

func train(path string, f *flags, stdout, stderr io.Writer) error {
	plan, err := compile(path, f)
	if err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = f.resume
	}
	opts := engine.RunOptions{Out: out, Log: stdout, Verbose: f.verbose, Init: f.init, Resume: f.resume}
	if f.quiet {
		opts.Log = io.Discard
	} else if isTerminal(stdout) && !f.verbose {
		bar := newProgress(stdout)
		opts.OnEpoch, opts.OnStep, opts.OnEpochEnd = bar.epoch, bar.step, bar.epochEnd
	}
	// Ctrl-C (or SIGTERM) stops after the step under way with a
	// checkpoint; a second one kills as usual.
	var stop atomic.Bool
	opts.Interrupt = &stop
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			stop.Store(true)
			fmt.Fprintln(stderr, "\ngorun: stopping after this step (interrupt again to kill)")
			signal.Reset(os.Interrupt, syscall.SIGTERM)
		}
	}()
	res, err := plan.Run(opts)
	signal.Stop(sigs)
	close(sigs)
	if err != nil {
		return err
	}
	if res.Interrupted {
		msg := fmt.Sprintf("interrupted after step %d", res.Steps)
		if out != "" {
			msg += fmt.Sprintf("; checkpoint saved: continue with --resume %s", out)
		}
		return &interrupted{msg}
	}
	if out != "" {
		if files, err := drawRuns([]string{out}, out); err != nil {
			fmt.Fprintf(stderr, "gorun: plots: %v\n", err)
		} else if !f.quiet {
			fmt.Fprintf(stdout, "plots: %s\n", strings.Join(files, ", "))
		}
	}
	if !f.quiet {
		acc := "no eval set"
		if !math.IsNaN(res.TestAccuracy) {
			acc = fmt.Sprintf("test accuracy %.4f", res.TestAccuracy)
		}
		fmt.Fprintf(stdout, "done: %d steps, %.0f samples/s, %s, %.1fs wall\n",
			res.Steps, res.TrainSamplesPerS, acc, res.WallSeconds)
	}
	return nil
}

// writeDot writes the Plan as Graphviz to path.
func writeDot(plan *engine.Plan, path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--dot: %w", err)
	}
	if err := plan.Dot(fh); err != nil {
		fh.Close()
		return fmt.Errorf("--dot: %w", err)
	}
	return fh.Close()
}

// plotCmd is `gorun plot [-o DIR] RUN_DIR...`.
func plotCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outDir := fs.String("o", "", "folder for the PNG files (default: the first RUN_DIR)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun plot [-o DIR] RUN_DIR...  (several runs are drawn on one figure)")
		fs.PrintDefaults()
	}
	dirs, err := parseArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if len(dirs) == 0 {
		return &usageError{"plot needs at least one run folder (the --out of a run)"}
	}
	if *outDir == "" {
		*outDir = dirs[0]
	}
	files, err := drawRuns(dirs, *outDir)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

// drawRuns reads the runs' metrics and writes their plots into outDir.
func drawRuns(dirs []string, outDir string) ([]string, error) {
	var runs []*plot.Run
	for _, d := range dirs {
		r, err := plot.ReadRun(d)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return plot.Write(runs, outDir)
}
