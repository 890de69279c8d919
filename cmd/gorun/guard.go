package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
)

// phase says what gorun is doing, for the one line a panic turns into.
var phase atomic.Pointer[string]

// phaseHook, when set (tests), is called with every new phase.
var phaseHook func(string)

// setPhase records what gorun is doing now ("compiling the plan of x.star").
func setPhase(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	phase.Store(&s)
	if phaseHook != nil {
		phaseHook(s)
	}
}

func currentPhase() string {
	if p := phase.Load(); p != nil {
		return *p
	}
	return "starting"
}

// wantsVerbose reports whether -v is among the command-line flags, read
// without the flag package so that it works however far parsing got.
func wantsVerbose(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-v", "--v", "-v=true", "--v=true", "-v=1", "--v=1":
			return true
		}
	}
	return false
}

// reportPanic turns a panic into one line naming what was running; the Go
// stack follows only with -v. It returns the exit status, 1.
func reportPanic(w io.Writer, r any, stack []byte, verbose bool) int {
	msg := strings.ReplaceAll(fmt.Sprint(r), "\n", " ")
	if verbose {
		fmt.Fprintf(w, "gorun: internal error while %s: %s\n%s", currentPhase(), msg, stack)
		return 1
	}
	fmt.Fprintf(w, "gorun: internal error while %s: %s (a bug in gorun: please report it; -v shows the Go stack)\n", currentPhase(), msg)
	return 1
}

// sigWatch turns the first SIGINT or SIGTERM (or SIGUSR2, gorun launch's
// stop) into a stop: Starlark code
// under way (the script, a partition strategy) is cancelled through ctx,
// and training stops after the step under way with a checkpoint (stop is
// the runner's Interrupt). A second signal kills as usual.
type sigWatch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   atomic.Bool
	got    atomic.Value // os.Signal
	ch     chan os.Signal
	done   chan struct{}
}

func watchSignals(stderr io.Writer) *sigWatch {
	w := &sigWatch{ch: make(chan os.Signal, 1), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancelCause(context.Background())
	// SIGUSR2 is gorun launch's stop, which mpirun passes on to the ranks
	// (it would kill them on SIGTERM): it counts as SIGTERM.
	signal.Notify(w.ch, os.Interrupt, syscall.SIGTERM, syscall.SIGUSR2)
	go func() {
		defer close(w.done)
		s, ok := <-w.ch
		if !ok {
			return
		}
		name := sigName(s)
		if s == syscall.SIGUSR2 {
			s, name = syscall.SIGTERM, "SIGUSR2 (gorun launch's stop)"
		}
		w.got.Store(s)
		w.stop.Store(true)
		w.cancel(fmt.Errorf("interrupted by %s", sigName(s)))
		fmt.Fprintf(stderr, "\ngorun: %s%s: stopping (a checkpoint is saved when training; %s again to kill)\n", whereSignalled(), name, sigName(s))
		signal.Reset(os.Interrupt, syscall.SIGTERM, syscall.SIGUSR2)
	}()
	return w
}

// whereSignalled names this rank of a run of several processes and the
// collective it waits in, before the signal's name: "rank 0 of 3 (host
// node1): " and `… SIGTERM while in allreduce "bucket 0" at step 45
// (waiting 4.2s)`. mpirun stops every rank with SIGTERM when it has lost
// one; the ranks waiting in a collective are waiting for the lost one, so
// their lines say where it was lost (gorun launch reports it).
func whereSignalled() string {
	m := mpiJoined.Load()
	if m == nil || m.Size() < 2 {
		return ""
	}
	call, waited, ok := m.Pending()
	if !ok {
		return m.Who() + ": "
	}
	return fmt.Sprintf("%s: in %s for %.1fs: ", m.Who(), call, waited.Seconds())
}

// close stops watching.
func (w *sigWatch) close() {
	signal.Stop(w.ch)
	close(w.ch)
	<-w.done
	w.cancel(nil)
}

// signal returns the signal received, or nil.
func (w *sigWatch) signal() os.Signal {
	s, _ := w.got.Load().(os.Signal)
	return s
}

func sigName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// signalStatus is the exit status the shell gives a process that signal s
// ended: 128 + its number (130 for SIGINT, 143 for SIGTERM).
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}

// untilSignalled runs a server subcommand (board, serve) with a context
// that ends at the first SIGINT or SIGTERM, so that it shuts down
// gracefully; a second signal ends gorun at once, as signals do by
// default.
func untilSignalled(run func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal ends gorun at once
	}()
	return run(ctx)
}
