// Command gorun trains a model that a Starlark script declares.
//
//	gorun [flags] SCRIPT.star              train
//	gorun plan [flags] SCRIPT.star         print the compiled Plan
//	gorun plot [-o DIR] RUN_DIR...         draw loss and accuracy curves
//	gorun launch --cluster C.toml SCRIPT   start a multi-process run through mpirun
//	gorun sample RUN_DIR --prompt TEXT     continue a text with a trained sequence model
//	gorun predict RUN_DIR FILE...          predict with a trained model
//	gorun board RUN_DIR...                 a live dashboard of runs, in a browser
//	gorun serve RUN_DIR                    answer a trained model's predictions over HTTP
//
// Flags may come before or after the script. Exit status: 0 on success, 1
// when the script or the run fails (an internal error too: one line, the Go
// stack only with -v), 2 on a usage error, 130 (SIGINT, Ctrl-C) or 143
// (SIGTERM) when a signal stopped the run (after saving a checkpoint when
// training) or cancelled the Starlark code under way.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"gorun/comm"
	"gorun/engine"
	"gorun/engine/plot"
	"gorun/engine/runner"
	"gorun/engine/spec"
	"gorun/script"
	"gorun/scripts"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// interrupted is a run stopped by a signal (exit status 128 + the signal's
// number: 130 for SIGINT, 143 for SIGTERM).
type interrupted struct {
	msg string
	sig os.Signal // nil: SIGINT
}

func (e *interrupted) Error() string { return e.msg }

// usageError is a problem with the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// flags are the options every subcommand shares.
type flags struct {
	cluster   string
	devices   int
	sets      []script.Override
	out       string
	init      string
	resume    string
	restart   string // --elastic-restart: set by gorun launch on a restart
	quiet     bool
	verbose   bool
	dot       string
	overwrite bool
	training  bool // the command trains (MPI is joined)
	// clusterSets are --set cluster.KEY=VALUE and comm.KEY=VALUE, in order;
	// rawSets the other --set arguments as given (run.json records them).
	clusterSets [][2]string
	rawSets     []string
	world       *world          // this process's place in the run
	given       map[string]bool // flags given on the command line
	sig         *sigWatch       // cancels the script on SIGINT and SIGTERM
	// release unlocks the run folder (rank 0's process); train calls it
	// before leaving MPI, as mpirun may kill this process once another
	// rank has exited with a signal's status.
	release func()
	// stderr is where abortScript writes (nil: Starlark code that cannot
	// be stopped runs to its end).
	stderr io.Writer
	// predict and stepTime are gorun plan's --predict and --step-time
	// (cmd/gorun/scaling.go).
	predict  bool
	stepTime time.Duration
}

const usage = `usage:
  gorun [flags] SCRIPT.star              train the model SCRIPT declares
  gorun plan [flags] SCRIPT.star         print the compiled Plan (--dot FILE: Graphviz too)
  gorun plot [-o DIR] RUN_DIR...         draw loss and accuracy curves of runs (PNG)
  gorun launch --cluster C.toml SCRIPT   start a multi-process run through mpirun
  gorun launch --cluster C.toml --probe-links
                                         measure the links between the hosts: [[link]] tables
  gorun sample RUN_DIR --prompt TEXT     continue a text with a trained sequence model
  gorun predict RUN_DIR FILE...          predict with a trained model (.npy, .safetensors arrays)
  gorun board [--addr HOST:PORT] RUN_DIR...
                                         a live dashboard of runs (default 127.0.0.1:6006)
  gorun serve [--addr HOST:PORT] RUN_DIR answer predictions over HTTP (default 127.0.0.1:8080)

flags (before or after SCRIPT):
`

func newFlagSet(f *flags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.cluster, "cluster", "", "cluster TOML `file` (default: one CPU device)")
	fs.IntVar(&f.devices, "devices", 0, "devices in this process (default 1, or the cluster file's)")
	fs.Func("set", "override a train() argument or a cluster key: `NAME=VALUE` (repeatable; NAME may be optimizer.lr, cluster.devices, comm.timeout)", func(s string) error {
		if name, value, ok := strings.Cut(s, "="); ok && engine.IsClusterKey(strings.TrimSpace(name)) {
			f.clusterSets = append(f.clusterSets, [2]string{strings.TrimSpace(name), value})
			return nil
		}
		o, err := script.ParseOverride(s)
		if err != nil {
			return err
		}
		f.sets = append(f.sets, o)
		f.rawSets = append(f.rawSets, s)
		return nil
	})
	fs.StringVar(&f.out, "out", "", "run `folder`: metrics.jsonl, checkpoints, plots")
	fs.StringVar(&f.init, "init", "", "start from the weights in this safetensors `file`")
	fs.StringVar(&f.resume, "resume", "", "continue the run saved in this `folder`")
	fs.StringVar(&f.restart, "elastic-restart", "", "set by gorun launch --max-restarts on the processes it restarts: the restart's `facts`, for metrics.jsonl")
	fs.BoolVar(&f.quiet, "q", false, "print nothing but errors")
	fs.BoolVar(&f.verbose, "v", false, "print a line per step")
	fs.StringVar(&f.dot, "dot", "", "plan: also write the Plan as Graphviz to this `file`")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace the run in a non-empty --out folder")
	fs.BoolVar(&f.predict, "predict", false, "plan: also predict the step time, samples/s and scaling efficiency on the cluster and on 2×, 4×, … its hosts (links: the cluster file's [[link]] tables)")
	fs.DurationVar(&f.stepTime, "step-time", 0, "plan --predict: one device's measured step `time` at the plan's per-device batch (default: measured here, a few steps)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseCmdArgs is parseArgs for a command line: a bad flag is a usage
// error (exit 2); -h is flag.ErrHelp.
func parseCmdArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return nil, &usageError{err.Error()}
	}
	return pos, err
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

func run(args []string, stdout, stderr io.Writer) (code int) {
	phase.Store(nil)
	defer func() {
		// No Go stack trace reaches a user without -v.
		if r := recover(); r != nil {
			code = reportPanic(stderr, r, debug.Stack(), wantsVerbose(args))
		}
	}()
	err := dispatch(args, stdout, stderr)
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var pe *runner.PanicError
	if errors.As(err, &pe) { // a panic on a rank's goroutine
		return reportPanic(stderr, pe.Value, pe.Stack, wantsVerbose(args))
	}
	var xs *exitStatus
	if errors.As(err, &xs) {
		return xs.code // mpirun's own status; it has said why
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return 2
	}
	var ie *interrupted
	if errors.As(err, &ie) {
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return signalStatus(ie.sig)
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
		// A deep recursion keeps its first and last frames.
		fmt.Fprintf(w, "gorun: %s\n", script.FormatBacktrace(ee, 10, 10))
	case errors.As(err, &se):
		fmt.Fprintf(w, "gorun: %s: %s\n", se.Pos, se.Msg)
	default:
		fmt.Fprintf(w, "gorun: %v\n", err)
	}
}

func dispatch(args []string, stdout, stderr io.Writer) (err error) {
	cmd := "train"
	if len(args) > 0 {
		switch args[0] {
		case "plan", "train":
			cmd, args = args[0], args[1:]
		case "plot":
			return plotCmd(args[1:], stdout, stderr)
		case "launch":
			return launchCmd(args[1:], stdout, stderr)
		case probeRankCmd: // started by gorun launch --probe-links
			return probeLinksRank(args[1:], stdout, stderr)
		case "sample":
			return sampleCmd(args[1:], stdout, stderr)
		case "predict":
			return predictCmd(args[1:], stdout, stderr)
		case "board":
			return boardCmd(args[1:], stdout, stderr)
		case "serve":
			return serveCmd(args[1:], stdout, stderr)
		case "help", "-h", "--help", "-help":
			fmt.Fprint(stdout, usage)
			newFlagSet(&flags{}, stdout).PrintDefaults()
			return nil
		}
	}
	f := flags{stderr: stderr}
	fs := newFlagSet(&f, stderr)
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Sprintf("%s needs exactly one SCRIPT.star, got %d arguments (%s)", cmd, len(pos), strings.Join(pos, " "))}
	}
	f.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.given[fl.Name] = true })
	if err := checkFlags(cmd, &f); err != nil {
		return err
	}
	if cmd == "plan" || cmd == "train" {
		f.sig = watchSignals(stderr)
		defer f.sig.close()
		defer func() {
			// A signal that cancelled the script or ended the run sets
			// the exit status.
			if s := f.sig.signal(); s != nil && err != nil {
				var ie *interrupted
				if errors.As(err, &ie) {
					ie.sig = s
				} else {
					err = &interrupted{msg: fmt.Sprintf("interrupted by %s while %s", sigName(s), currentPhase()), sig: s}
				}
			}
		}()
	}
	switch cmd {
	case "plan":
		plan, err := compile(pos[0], &f)
		if err != nil {
			return err
		}
		setPhase("describing the plan of %s", pos[0])
		if f.dot != "" {
			if err := writeDot(plan, f.dot); err != nil {
				return err
			}
		}
		if err := plan.Describe(stdout); err != nil || !f.predict {
			return err
		}
		return predictScaling(plan, &f, stdout)
	}
	out := f.out
	if out == "" {
		out = f.resume
	}
	// Only rank 0's process of a multi-process run writes (and locks) the
	// run folder.
	if rank, _, _, ok := comm.EnvWorld(); !ok || rank == 0 {
		release, err := prepareRunFolder(out, &f, stderr)
		if err != nil {
			return err
		}
		f.release = sync.OnceFunc(release)
		defer f.release()
	}
	return train(pos[0], &f, stdout, stderr)
}

// checkFlags refuses flags that make no sense together or for cmd.
func checkFlags(cmd string, f *flags) error {
	switch {
	case f.given["devices"] && f.devices < 1:
		return &usageError{fmt.Sprintf("--devices %d: want at least 1", f.devices)}
	case f.init != "" && f.resume != "":
		return &usageError{"--init and --resume conflict: a resumed run continues from its checkpoint's parameters; give one of them"}
	case f.overwrite && f.resume != "":
		return &usageError{"--overwrite and --resume conflict: --overwrite removes the run that --resume continues"}
	case f.overwrite && f.out == "":
		return &usageError{"--overwrite needs --out DIR (the run folder to replace)"}
	case f.restart != "" && f.resume == "":
		return &usageError{"--elastic-restart comes with --resume DIR (gorun launch --max-restarts sets both on the processes it restarts)"}
	case (f.predict || f.given["step-time"]) && cmd != "plan":
		return &usageError{fmt.Sprintf("--predict and --step-time predict a plan's scaling: use them with gorun plan, not %s", cmd)}
	case f.given["step-time"] && (!f.predict || f.stepTime <= 0):
		return &usageError{fmt.Sprintf("--step-time %v: want a positive duration, with --predict", f.stepTime)}
	case f.dot != "" && cmd != "plan":
		return &usageError{fmt.Sprintf("--dot writes the compiled Plan as Graphviz: use it with gorun plan, not %s", cmd)}
	}
	return nil
}

// compile loads the script and the cluster and compiles the Plan.
func compile(path string, f *flags) (*engine.Plan, error) {
	setPhase("loading %s", path)
	s, err := loadSpec(path, f)
	if err != nil {
		return nil, err
	}
	setPhase("compiling the plan of %s", path)
	c := engine.DefaultCluster()
	if f.cluster != "" {
		if c, err = engine.LoadCluster(f.cluster); err != nil {
			return nil, err
		}
	}
	for _, kv := range f.clusterSets {
		if err := c.Set(kv[0], kv[1]); err != nil {
			return nil, &usageError{fmt.Sprintf("--set %s=%s: %v", kv[0], kv[1], err)}
		}
	}
	if f.devices != 0 {
		c.Devices = f.devices
		if c.Weights != nil && len(c.Weights) != c.Devices {
			return nil, &usageError{fmt.Sprintf("--devices %d: the cluster file gives weights for %d devices", f.devices, len(c.Weights))}
		}
	}
	detectLauncher(&c)
	if f.training { // a plan needs no MPI nor GPU
		if err := checkBuild(&c); err != nil {
			return nil, err
		}
	}
	w, err := placeProcess(&c, f.training)
	if err != nil {
		return nil, err
	}
	f.world = w
	return engine.CompileProcess(s, c, w.proc)
}

func loadSpec(path string, f *flags) (*spec.Spec, error) {
	opts := []script.Option{
		script.WithOverrides(f.sets...),
		script.WithSearchPath(script.SearchPathFromEnv(os.Getenv("GORUN_PATH"))...),
		script.WithLibrary(scripts.Library),
	}
	if f.sig != nil {
		opts = append(opts, script.WithContext(f.sig.ctx))
	}
	if f.stderr != nil {
		opts = append(opts, script.WithAbort(f.abortScript))
	}
	return script.Load(path, opts...)
}

// abortScript ends gorun when Starlark code (the script, a partition
// strategy) cannot be stopped (script.WithAbort): one operation under way
// has passed the memory budget, or has not ended a quarter of a second
// after a signal. It says so, unlocks the run folder and exits with the
// signal's status (143 for SIGTERM), or 1.
func (f *flags) abortScript(err error) {
	code := 1
	if f.sig != nil {
		if s := f.sig.signal(); s != nil {
			code = signalStatus(s)
		}
	}
	fmt.Fprintf(f.stderr, "gorun: %v\n", err)
	if f.release != nil {
		f.release()
	}
	os.Exit(code)
}

func train(path string, f *flags, stdout, stderr io.Writer) (err error) {
	f.training = true
	defer func() {
		// Unlock first: once every rank has left MPI, the first to exit
		// with an interrupt's status makes mpirun kill the others.
		if f.release != nil {
			f.release()
		}
		if v := recover(); v != nil {
			// The other ranks must not wait in MPI_Finalize for this one.
			leaveMPI(fmt.Errorf("internal error: %v", v))
			panic(v)
		}
		leaveMPI(err)
	}()
	plan, err := compile(path, f)
	if err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = f.resume
	}
	opts := runner.RunOptions{Out: out, Log: stdout, Verbose: f.verbose, Init: f.init, Resume: f.resume, Flags: runFlags(f)}
	if f.restart != "" {
		if opts.Restart, err = parseRestartInfo(f.restart); err != nil {
			return err
		}
	}
	if f.world != nil && f.world.cross != nil {
		opts.Cross = f.world.cross
		// Each host reads its own copy of the data and the checkpoint.
		setPhase("comparing the hosts' copies of the data of %s", path)
		host, _ := os.Hostname()
		if err := checkCopies(f.world.cross, host, hostCopies(plan.Spec, f.resume)); err != nil {
			return err
		}
	}
	_, launched, hostRank, underLauncher := comm.EnvWorld()
	if underLauncher {
		opts.HostRank = hostRank
	}
	if f.world != nil && f.world.hostRankSet { // the launcher did not say: from the host names (world.go)
		opts.HostRank = f.world.hostRank
	}
	if !f.quiet && (isTerminal(f.stderr) || f.verbose) {
		opts.DataProgress = dataProgress(f.stderr, isTerminal(f.stderr))
	}
	if !f.quiet {
		opts.Notices = f.stderr // a dataset streamed from disk
	}
	if f.quiet {
		opts.Log = io.Discard
	} else if isTerminal(stdout) && !f.verbose && !(underLauncher && launched > 1) { // mpirun gives ranks a pty, but several bars would garble it
		bar := newProgress(stdout)
		opts.OnEpoch, opts.OnStep, opts.OnEpochEnd = bar.epoch, bar.step, bar.epochEnd
	}
	// Ctrl-C (or SIGTERM) stops after the step under way with a
	// checkpoint; a second one kills as usual (see watchSignals).
	if f.sig != nil {
		opts.Interrupt = &f.sig.stop
	}
	if out != "" && (f.world == nil || f.world.proc == 0) {
		// The script and what it loaded, as they are now: what trains.
		// Read now, written once the run is accepted (a refused --resume
		// leaves the folder as it was).
		m, err := snapshotScript(plan.Spec, script.SearchPathFromEnv(os.Getenv("GORUN_PATH")))
		if err != nil {
			return err
		}
		opts.Started = func() error {
			if err := writeScriptCopy(out, m, stderr); err != nil {
				return err
			}
			return writeRunInfo(out, path, f.rawSets)
		}
	}
	setPhase("training %s", path)
	res, err := runner.Run(plan, opts)
	if err != nil {
		return err
	}
	if res.Interrupted {
		msg := fmt.Sprintf("interrupted after step %d", res.Steps)
		if out != "" {
			msg += fmt.Sprintf("; checkpoint saved: continue with --resume %s", out)
		}
		return &interrupted{msg: msg}
	}
	lead := f.world == nil || f.world.proc == 0 // rank 0's process writes the run folder
	if out != "" && lead {
		setPhase("drawing the plots of %s", out)
		if files, err := drawRuns([]string{out}, out, stderr); err != nil {
			fmt.Fprintf(stderr, "gorun: plots: %v\n", err)
		} else if !f.quiet {
			fmt.Fprintf(stdout, "plots: %s\n", strings.Join(files, ", "))
		}
	}
	if !f.quiet && lead {
		acc := "no eval set"
		if !math.IsNaN(res.TestAccuracy) {
			acc = fmt.Sprintf("test accuracy %.4f", res.TestAccuracy)
		}
		fmt.Fprintf(stdout, "done: %d steps, %.0f samples/s, %s, %.1fs wall, peak memory %.0f MB\n",
			res.Steps, res.TrainSamplesPerS, acc, res.WallSeconds, float64(res.PeakRSSBytes)/1e6)
	}
	return nil
}

// runFlags are the flags that shape a run, as given: the processes of a
// multi-process run must agree on them (runner.RunOptions.Flags). Only
// rank 0's process reads --init and writes --out, so a rank given
// another --init or --out would be silently overruled, and --resume and
// --set decide what each process runs.
func runFlags(f *flags) []engine.PlanStep {
	sets := append([]string(nil), f.rawSets...)
	for _, kv := range f.clusterSets {
		sets = append(sets, kv[0]+"="+kv[1])
	}
	return []engine.PlanStep{
		{Label: "--init", Text: f.init},
		{Label: "--resume", Text: f.resume},
		{Label: "--out", Text: f.out},
		{Label: "--set", Text: strings.Join(sets, " --set ")},
	}
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
	files, err := drawRuns(dirs, *outDir, stderr)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return nil
}

// drawRuns reads the runs' metrics and writes their plots into outDir,
// noting on stderr the values it leaves out for not being finite.
func drawRuns(dirs []string, outDir string, stderr io.Writer) ([]string, error) {
	var runs []*plot.Run
	for _, d := range dirs {
		r, err := plot.ReadRun(d)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	for _, n := range plot.Notes(runs) {
		fmt.Fprintf(stderr, "gorun: plot: %s\n", n)
	}
	return plot.Write(runs, outDir)
}
