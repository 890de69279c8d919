// Command gorun trains a model that a Starlark script declares.
//
//	gorun [flags] SCRIPT.star              train
//	gorun plan [flags] SCRIPT.star         print the compiled Plan
//	gorun launch --cluster C.toml SCRIPT   start a multi-process run (needs -tags mpi)
//
// Flags may come before or after the script. Exit status: 0 on success, 1
// when the script or the run fails, 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"gorun/engine"
	"gorun/engine/spec"
	"gorun/script"
	"gorun/scripts"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

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
  gorun plan [flags] SCRIPT.star         print the compiled Plan
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
	reportError(stderr, err)
	return 1
}

// reportError prints err; a Starlark error comes with its backtrace.
func reportError(w io.Writer, err error) {
	var ee *starlark.EvalError
	var se syntax.Error
	switch {
	case errors.As(err, &ee):
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
	log := stdout
	if f.quiet {
		log = io.Discard
	}
	if f.init != "" || f.resume != "" {
		return &usageError{"--init and --resume are not supported by this build yet"}
	}
	res, err := plan.Run(engine.RunOptions{Out: f.out, Log: log, Verbose: f.verbose})
	if err != nil {
		return err
	}
	if !f.quiet {
		fmt.Fprintf(stdout, "done: %d steps, %.0f samples/s, test accuracy %.4f, %.1fs\n",
			res.Steps, res.TrainSamplesPerS, res.TestAccuracy, res.WallSeconds)
	}
	return nil
}
