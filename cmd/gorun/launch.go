package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"gorun/engine"
)

// exitStatus is a child's exit status that gorun passes on as its own.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

// launchFlags are the flags of `gorun launch` that stay with launch; every
// other flag goes to the ranks.
var launchFlags = map[string]bool{"dry-run": true, "mpirun": true, "max-restarts": true, "min-processes": true}

// launchCmd is `gorun launch --cluster C.toml [--dry-run] [--mpirun PATH]
// SCRIPT.star [flags]`: it writes an mpirun hostfile from the cluster's
// [[node]] entries (into --out DIR when given, else a temporary file) and
// runs mpirun (launchArgv) with N the cluster's process count
// (cluster.processes, or the sum of the slots) and every flag but
// --dry-run and --mpirun, --cluster included, so every rank reads the same
// cluster. stdin, stdout, stderr and mpirun's exit status pass through.
// --dry-run prints the command instead (and keeps the hostfile), quoted
// for a POSIX shell.
//
// Hosts reach the hostfile only as the cluster file's decoding validated
// them (engine.CheckHost: a host name or IP address, nothing that adds
// hosts, slots or options). Before a real launch every host is looked up,
// and one that does not resolve is named with its node; then every host
// that is not this machine is checked over ssh, all at once (checkHosts):
// it answers within ssh.connect_timeout, has orted, the working folder,
// and this gorun and the script at the same paths with the same sha256;
// each host that fails is named with its node. --dry-run contacts nothing.
//
// When mpirun fails, launch reads what its output said (jobWatch) and ends
// with one line naming the rank and host the job lost and the collective
// the other ranks were waiting in.
//
// With --max-restarts N (elastic.go), a job that lost hosts or processes
// is started again, up to N times, on the hosts that still answer, from
// the run folder's newest checkpoint, while at least --min-processes
// processes are left.
func launchCmd(args []string, stdout, stderr io.Writer) error {
	if wantsProbeLinks(args) { // cmd/gorun/probelinks.go
		return probeLinksCmd(args, stdout, stderr)
	}
	var f flags
	fs := newFlagSet(&f, stderr)
	dryRun := fs.Bool("dry-run", false, "launch: print the mpirun command and exit")
	mpirunPath := fs.String("mpirun", "", "launch: the mpirun `program` (default: mpirun on PATH)")
	var el elastic
	el.flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun launch --cluster C.toml [--dry-run] [--mpirun PATH] [--max-restarts N [--min-processes M]] SCRIPT.star [flags for every rank]")
		fs.PrintDefaults()
	}
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Sprintf("launch needs exactly one SCRIPT.star, got %d arguments (%s)", len(pos), strings.Join(pos, " "))}
	}
	if f.cluster == "" {
		return &usageError{"launch needs --cluster C.toml, whose [[node]] entries say where the processes run"}
	}
	c, err := engine.LoadCluster(f.cluster)
	if err != nil {
		return err
	}
	for _, kv := range f.clusterSets {
		if err := c.Set(kv[0], kv[1]); err != nil {
			return &usageError{fmt.Sprintf("--set %s: %v", printableArg(kv[0]+"="+kv[1]), err)}
		}
	}
	if f.devices > 0 {
		c.Devices = f.devices
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Transport == "inproc" { // mpi, or one that comes with the backend (nccl), spans processes
		return fmt.Errorf("launch: %s: cluster.transport is %q, which connects the devices of one process; launch starts several processes: set transport = \"mpi\" (or run `gorun --cluster %s %s` directly)", f.cluster, c.Transport, f.cluster, pos[0])
	}
	if len(c.Nodes) == 0 {
		return fmt.Errorf("launch: %s has no [[node]] entries: add one per host, such as\n\n  [[node]]\n  host  = \"127.0.0.1\"\n  slots = 2", f.cluster)
	}
	runDir, err := el.check(&f, &c, fs)
	if err != nil {
		return err
	}

	mpirun := *mpirunPath
	if mpirun == "" {
		mpirun, err = exec.LookPath("mpirun")
		if err != nil && !*dryRun {
			return errors.New("launch: mpirun not found on PATH: install OpenMPI (Debian: apt-get install openmpi-bin) or give --mpirun PATH")
		}
		if err != nil {
			mpirun = "mpirun"
		}
	} else if _, err := exec.LookPath(mpirun); err != nil && !*dryRun {
		return fmt.Errorf("launch: --mpirun %s: %v (OpenMPI's mpirun comes in Debian's openmpi-bin)", mpirun, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("launch: finding this gorun binary: %w", err)
	}

	// mpirun reaches each host over ssh, whose message for a name that
	// does not resolve names neither the cluster file nor the node; a dry
	// run contacts nothing and prints a command meant for later, perhaps
	// elsewhere, so it looks nothing up.
	if !*dryRun {
		addrs, err := resolveHosts(context.Background(), net.DefaultResolver.LookupHost, c, f.cluster, hostLookupTimeout)
		if err != nil {
			return err
		}
		local := localAddrs()
		remote := make([]bool, len(c.Nodes))
		anyRemote := false
		for i := range c.Nodes {
			remote[i] = !isLocal(addrs[i], local)
			anyRemote = anyRemote || remote[i]
		}
		if anyRemote {
			files, err := launchFiles(self, pos[0])
			if err != nil {
				return err
			}
			wd, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("launch: %w", err)
			}
			if err := checkHosts(context.Background(), &c, f.cluster, remote, wd, files, hostCheckSlack); err != nil {
				return err
			}
		}
	}
	hostfile, err := writeHostfile(c, f.cluster, f.out)
	if err != nil {
		return err
	}
	if f.out == "" && !*dryRun {
		defer os.Remove(hostfile)
	}
	argv := launchArgv(c, mpirun, hostfile, self, pos[0], passThrough(fs, args), os.Geteuid() == 0)
	if *dryRun {
		fmt.Fprintln(stdout, shellJoin(argv))
		return nil
	}

	sig := watchLaunchSignals(stderr)
	defer sig.close()
	if el.maxRestarts > 0 {
		return el.run(&elasticJob{c: c, clusterFile: f.cluster, mpirun: mpirun, self: self, script: pos[0],
			flags: passThrough(fs, args), fs: fs, runDir: runDir, hostfile: hostfile, sig: sig, stdout: stdout, stderr: stderr})
	}
	if s := sig.interrupted(); s != nil { // before the job started
		return &exitStatus{code: signalStatus(s), msg: "launch: interrupted"}
	}
	end, err := runJob(argv, stdout, stderr, sig, &jobWatch{})
	if err != nil {
		return err
	}
	if end.code != 0 {
		if line := end.watch.summary(&c); line != "" {
			fmt.Fprintln(stderr, line)
		}
		return &exitStatus{code: end.code, msg: fmt.Sprintf("launch: mpirun exited with status %d", end.code)}
	}
	return nil
}

// jobEnd is how one mpirun job ended.
type jobEnd struct {
	code  int       // mpirun's exit status, 128 + the signal's number when one ended it; 0: success
	watch *jobWatch // what its output said
	at    time.Time // when launch saw it end
}

// runJob runs one mpirun job (argv) with stdin, stdout and stderr passed
// through, mpirun's stderr also read by a jobWatch. mpirun runs in a
// process group of its own: a Ctrl-C on the terminal reaches it only
// through sig (launchSignals), which passes the first SIGINT or SIGTERM
// on as SIGUSR2 and a second as SIGTERM.
func runJob(argv []string, stdout, stderr io.Writer, sig *launchSignals, watch *jobWatch) (jobEnd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, io.MultiWriter(stderr, watch)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return jobEnd{}, fmt.Errorf("launch: %w", err)
	}
	sig.setJob(cmd)
	err := cmd.Wait()
	sig.setJob(nil)
	end := jobEnd{watch: watch, at: time.Now()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		end.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			end.code = 128 + int(ws.Signal())
		}
		return end, nil
	}
	if err != nil {
		return end, fmt.Errorf("launch: %w", err)
	}
	return end, nil
}

// launchSignals is how gorun launch takes SIGINT and SIGTERM, from the
// first job to the last. mpirun takes SIGINT and SIGTERM as an order to
// kill the job (SIGTERM to the ranks, SIGKILL a second later), which
// leaves no time for a checkpoint; it passes SIGUSR2 on to every rank, on
// every host, and gorun's ranks take SIGUSR2 as their stop (watchSignals):
// after the step under way, with a checkpoint, exit 143. So the first
// signal reaches the job under way as SIGUSR2, a second as SIGTERM (which
// kills it). Between the jobs of an elastic run (--max-restarts: the
// host checks and checkpoint copies of a restart) the first signal
// cancels what runs (Context), and no job starts after it: a user's
// interrupt is never followed by a restart.
type launchSignals struct {
	mu     sync.Mutex
	n      int
	first  os.Signal
	job    *exec.Cmd
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan os.Signal
	done   chan struct{}
	stderr io.Writer
}

// watchLaunchSignals starts taking SIGINT and SIGTERM; close stops it.
func watchLaunchSignals(stderr io.Writer) *launchSignals {
	s := &launchSignals{ch: make(chan os.Signal, 2), done: make(chan struct{}), stderr: stderr}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		for {
			select {
			case sg := <-s.ch:
				s.take(sg)
			case <-s.done:
				return
			}
		}
	}()
	return s
}

// take acts on one signal.
func (s *launchSignals) take(sg os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n == 1 {
		s.first = sg
		s.cancel()
	}
	switch {
	case s.job != nil && s.n == 1:
		fmt.Fprintf(s.stderr, "\ngorun: launch: %s: every rank stops after the step under way, with a checkpoint (%s again to kill)\n", sigName(sg), sigName(sg))
		s.job.Process.Signal(syscall.SIGUSR2)
	case s.job != nil:
		s.job.Process.Signal(syscall.SIGTERM)
	case s.n == 1:
		fmt.Fprintf(s.stderr, "\ngorun: launch: %s: stopping; no job starts after an interrupt\n", sigName(sg))
	}
}

// setJob says which job runs (nil: none).
func (s *launchSignals) setJob(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.job = cmd
	if cmd != nil && s.n > 0 { // a signal came as it started
		cmd.Process.Signal(syscall.SIGUSR2)
	}
}

// interrupted is the first signal taken, or nil.
func (s *launchSignals) interrupted() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// Context ends at the first signal.
func (s *launchSignals) Context() context.Context { return s.ctx }

// close stops taking signals.
func (s *launchSignals) close() {
	signal.Stop(s.ch)
	close(s.done)
	s.cancel()
}

// hostLookupTimeout bounds the look-up of every [[node]] host before a
// launch (they are looked up at once).
const hostLookupTimeout = 5 * time.Second

// resolveHosts looks up every node's host with lookup (the system's
// resolver: net.DefaultResolver.LookupHost), all at once and within
// timeout, and returns each node's addresses, or names the first node, in
// the cluster's order, whose host does not resolve. An IP address
// resolves to itself.
func resolveHosts(ctx context.Context, lookup func(context.Context, string) ([]string, error), c engine.Cluster, clusterFile string, timeout time.Duration) ([][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(c.Nodes))
	addrs := make([][]string, len(c.Nodes))
	var wg sync.WaitGroup
	for i, h := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addrs[i], errs[i] = lookup(ctx, h.Host)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		why := err.Error()
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			why = fmt.Sprintf("no answer within %v", timeout)
		}
		return nil, fmt.Errorf("launch: %s: node[%d].host: %q does not resolve on this machine (%s): mpirun could not reach it; fix the name, or add it to /etc/hosts or DNS",
			clusterFile, i+1, c.Nodes[i].Host, why)
	}
	return addrs, nil
}

// writeHostfile writes the cluster's nodes as an mpirun hostfile
// ("host slots=N" a line), into outDir when given, else a temporary file,
// and returns its path. It writes only hosts that engine.CheckHost
// accepts (a host name or IP address, which cannot add hosts, slots or
// options of its own) and slots ≥ 1, and refuses a cluster that has
// others, whatever built it.
func writeHostfile(c engine.Cluster, clusterFile, outDir string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# mpirun hostfile written by gorun launch from %s\n", strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return '?'
		}
		return r
	}, clusterFile))
	for i, h := range c.Nodes {
		if msg := engine.CheckHost(h.Host); msg != "" {
			return "", fmt.Errorf("launch: %s: node[%d].host: %s", clusterFile, i+1, msg)
		}
		if h.Slots < 1 {
			return "", fmt.Errorf("launch: %s: node[%d].slots: must be ≥ 1, got %d", clusterFile, i+1, h.Slots)
		}
		fmt.Fprintf(&b, "%s slots=%d\n", h.Host, h.Slots)
	}
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return "", fmt.Errorf("launch: %w", err)
		}
		path := filepath.Join(outDir, hostfileName)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return "", fmt.Errorf("launch: %w", err)
		}
		return path, nil
	}
	fh, err := os.CreateTemp("", "gorun-hostfile-*")
	if err != nil {
		return "", fmt.Errorf("launch: %w", err)
	}
	if _, err := fh.WriteString(b.String()); err != nil {
		fh.Close()
		return "", fmt.Errorf("launch: %w", err)
	}
	return fh.Name(), fh.Close()
}

// launchArgv is the mpirun command line:
//
//	mpirun --hostfile F -np N --map-by slot[:PE=D] --bind-to none|core|socket
//	  [--allow-run-as-root]
//	  --mca plm_rsh_agent SSH --mca plm_rsh_args "SSH ARGS"
//	  --mca plm_rsh_no_tree_spawn 1 --mca orte_leave_session_attached 1
//	  --mca oob_tcp_keepalive_time 2H --mca oob_tcp_keepalive_intvl H
//	  --mca oob_tcp_keepalive_probes 3
//	  [--mca btl_tcp_if_include NET --mca oob_tcp_if_include NET]
//	  [--mca btl_tcp_sndbuf F --mca btl_tcp_rdma_pipeline_frag_size F]
//	  [--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 …]
//	  GORUN SCRIPT FLAGS
//
// Ranks fill each node's slots in the cluster file's order (--map-by
// slot), so rank r's host follows from the slots (ranksOn). With bind
// "core", a process of D CPU devices gets D cores (PE=D). mpirun starts
// its daemons (orted) over the cluster's ssh (engine.SSH.Args), from this
// machine only (no tree spawn: the hosts need no ssh keys to each other),
// and keeps each ssh session open for the job (leave_session_attached),
// with ServerAlive keepalives every 2H: a host that stops answering (a
// frozen machine, whose kernel still acknowledges TCP) ends its session
// within 6H, and mpirun then ends the job. OpenMPI's own connections (OOB)
// send TCP keepalives after 2H idle, every H, 3 probes: a cut link or a
// host that is gone ends the job within 5H instead of TCP's default
// (hours). H is heartbeat(comm.timeout). NET is cluster.network, for
// OpenMPI's daemons and the ranks' TCP data alike. F is
// engine.Cluster.TCPFragmentBytes ([comm] tcp_fragment; auto sizes it
// from the host [[link]] table, none without one): how much of a message
// the TCP transport puts on a connection at a time, so that a
// rendezvous's go-ahead does not wait behind the other direction's
// whole message. A [comm] algorithm
// other than "auto" with transport "mpi" forces Open MPI's collectives
// to match (mpiForced), so that `gorun plan --predict` knows which run.
func launchArgv(c engine.Cluster, mpirun, hostfile, self, script string, flags []string, root bool) []string {
	mapBy := "slot"
	if t := c.Target(); c.BindPolicy() == "core" && t != nil && t.HostCores && c.Devices > 1 {
		mapBy = "slot:PE=" + strconv.Itoa(c.Devices)
	}
	argv := []string{mpirun, "--hostfile", hostfile, "-np", strconv.Itoa(c.ProcessCount()), "--map-by", mapBy, "--bind-to", c.BindPolicy()}
	if root {
		argv = append(argv, "--allow-run-as-root")
	}
	h := heartbeat(c.Timeout)
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	mca := func(name, value string) { argv = append(argv, "--mca", name, value) }
	mca("plm_rsh_agent", c.SSH.ProgramName())
	mca("plm_rsh_args", strings.Join(c.SSH.Args(2*h), " "))
	mca("plm_rsh_no_tree_spawn", "1")
	mca("orte_leave_session_attached", "1")
	mca("oob_tcp_keepalive_time", secs(2*h))
	mca("oob_tcp_keepalive_intvl", secs(h))
	mca("oob_tcp_keepalive_probes", "3")
	if c.Network != "" {
		mca("btl_tcp_if_include", c.Network)
		mca("oob_tcp_if_include", c.Network)
	}
	if n := c.TCPFragmentBytes(); n > 0 {
		mca("btl_tcp_sndbuf", strconv.FormatInt(n, 10))
		mca("btl_tcp_rdma_pipeline_frag_size", strconv.FormatInt(n, 10))
	}
	for i, f := range mpiForced(c) {
		if i == 0 {
			mca("coll_tuned_use_dynamic_rules", "1")
		}
		mca(f.Param, strconv.Itoa(f.Alg))
	}
	argv = append(argv, self, script)
	return append(argv, flags...)
}

// heartbeat is the interval of launch's keepalives for a collective
// timeout: a tenth of it, in whole seconds from 1 to 10, so that a lost
// host ends the job within about half of comm.timeout (at most a minute).
func heartbeat(timeout time.Duration) time.Duration {
	h := (timeout / 10).Round(time.Second)
	return min(max(h, time.Second), 10*time.Second)
}

// passThrough returns args without the positional arguments and launch's
// own flags: the flags every rank gets. fs knows which flags take a value.
func passThrough(fs *flag.FlagSet, args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue // the script
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue := false
		if fl := fs.Lookup(name); fl != nil {
			bf, isBool := fl.Value.(interface{ IsBoolFlag() bool })
			takesValue = !(isBool && bf.IsBoolFlag())
		}
		keep := !launchFlags[name]
		if keep {
			out = append(out, a)
		}
		if takesValue && !hasValue && i+1 < len(args) {
			i++
			if keep {
				out = append(out, args[i])
			}
		}
	}
	return out
}

// printableArg is a command-line argument as an error may show it: as
// given, or quoted with Go's escapes when it holds a character that is
// not printable (a newline), so that an error never carries one.
func printableArg(a string) string {
	if strings.IndexFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(a)
	}
	return a
}

// shellJoin quotes argv for a POSIX shell where needed.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
