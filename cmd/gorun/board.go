package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"gorun/engine/board"
)

// defaultBoardAddr is where gorun board listens unless --addr says
// otherwise: this machine only, TensorBoard's port.
const defaultBoardAddr = "127.0.0.1:6006"

// boardCmd is `gorun board [--addr HOST:PORT] [--poll D] RUN_DIR...`: it
// serves the live dashboard of the runs until SIGINT or SIGTERM, then
// shuts down gracefully (exit status 0); a second signal kills it.
func boardCmd(args []string, stdout, stderr io.Writer) error {
	return untilSignalled(func(ctx context.Context) error { return serveBoard(ctx, args, stdout, stderr) })
}

// serveBoard is boardCmd until ctx ends.
func serveBoard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun board", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultBoardAddr, "listen on `HOST:PORT` (another host than 127.0.0.1 or localhost opens the board to other machines)")
	poll := fs.Duration("poll", 500*time.Millisecond, "how often each run's metrics.jsonl is looked at")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun board [--addr HOST:PORT] [--poll DURATION] RUN_DIR...  (a live dashboard of the runs, in a browser)")
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
		return &usageError{"board needs at least one run folder (the --out of a run)"}
	}
	if *poll < 10*time.Millisecond || *poll > time.Minute {
		return &usageError{fmt.Sprintf("--poll %v: want between 10ms and 1m", *poll)}
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return &usageError{fmt.Sprintf("--addr %s: want HOST:PORT, such as %s", *addr, defaultBoardAddr)}
	}
	runs, notes, err := board.Resolve(dirs)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "gorun board: %s\n", n)
	}
	opts := board.Options{Poll: *poll}
	ip := net.ParseIP(host)
	switch {
	case host == "" || ip != nil && ip.IsUnspecified():
		fmt.Fprintf(stderr, "gorun board: --addr %s listens on every network of this machine: whoever reaches it sees these runs' metrics and scripts\n", *addr)
	case ip == nil && !strings.EqualFold(host, "localhost"):
		opts.Hosts = []string{host} // requests name the board by it
		fmt.Fprintf(stderr, "gorun board: --addr %s may be reached from other machines: whoever does sees these runs' metrics and scripts\n", *addr)
	case ip != nil && !ip.IsLoopback():
		fmt.Fprintf(stderr, "gorun board: --addr %s may be reached from other machines: whoever does sees these runs' metrics and scripts\n", *addr)
	}
	ln, err := board.Listen(*addr)
	if err != nil {
		return fmt.Errorf("--addr %w", err)
	}
	names := make([]string, len(runs))
	for i, r := range runs {
		names[i] = r.Name
	}
	fmt.Fprintf(stdout, "gorun board: %s at http://%s/ (Ctrl-C stops)\n", listSome(names, 4), ln.Addr())
	if err := board.Serve(ctx, ln, board.New(runs, opts)); err != nil {
		return fmt.Errorf("board: %w", err)
	}
	fmt.Fprintln(stdout, "gorun board: stopped")
	return nil
}
