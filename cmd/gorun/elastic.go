package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gorun/engine"
	"gorun/engine/runner"
)

// Elastic restarts (gorun launch --max-restarts N --min-processes M).
//
// When a job fails, launch restarts it only when the job lost processes
// or hosts: jobWatch saw OpenMPI name a lost daemon's host, a host that
// stopped answering ssh's keepalives or refused ssh, or a rank killed
// from outside (SIGKILL, SIGTERM, SIGHUP, SIGINT: an OOM killer, an
// operator). A failure with no lost process — the script's own error, a
// refused --resume, a rank that crashed on a signal of its own (SIGSEGV,
// SIGABRT) — would repeat, and is not retried; nor is a job that a user's
// SIGINT or SIGTERM stopped.
//
// The hosts that still answer are the failed job's, less the hosts the
// job lost (a killed rank's host too), less each that then fails launch's
// ssh host check (checkHosts). The run folder is rank 0's: it writes
// metrics.jsonl and the checkpoints on its host (node 1 of those left).
// When that host is lost, the new rank 0's host must see the run folder
// (a shared filesystem: it has its metrics.jsonl), or launch stops,
// naming the lost host. Every other host needs the newest checkpoint at
// the same path (each process reads its own copy); launch compares their
// copies' sha256 with rank 0's host's and copies the checkpoint folder
// (tar over the cluster's ssh) to each host whose copy differs or is
// missing. Then it starts mpirun again on those hosts, with
// --resume RUN_DIR and cluster.processes set to the processes left: the
// partition strategy shares out the samples for the new world, the
// script's global batch stays, and the sync strategy's Resumes decides
// whether its state goes over to the new world (allreduce, parameter
// server, sync.zero: yes; none, local SGD: refused, naming why, and not
// retried). Each restart is one line on stderr and, written by the
// resumed rank 0 (runner.Restart, --elastic-restart), one line in
// metrics.jsonl; the summary counts them.

// elastic is launch's restart policy, from its flags.
type elastic struct {
	maxRestarts, minProcs int
}

// flags adds --max-restarts and --min-processes to launch's flags.
func (el *elastic) flags(fs *flag.FlagSet) {
	fs.IntVar(&el.maxRestarts, "max-restarts", 0, "launch: restart a job that loses hosts or processes up to `N` times, from its newest checkpoint, on the hosts that still answer (0: never)")
	fs.IntVar(&el.minProcs, "min-processes", 0, "launch: restart only with at least `M` processes left (default 1)")
}

// check refuses restart settings that cannot work, before anything
// starts, and returns the run folder a restart resumes (--out, else
// --resume).
func (el *elastic) check(f *flags, c *engine.Cluster, fs *flag.FlagSet) (string, error) {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	runDir := f.out
	if runDir == "" {
		runDir = f.resume
	}
	procs := c.ProcessCount()
	switch {
	case el.maxRestarts < 0:
		return "", &usageError{fmt.Sprintf("--max-restarts %d: want 0 (no restart, the default) or more", el.maxRestarts)}
	case given["min-processes"] && el.maxRestarts == 0:
		return "", &usageError{"--min-processes says how few processes a restart may go on with: give --max-restarts N too"}
	case el.maxRestarts == 0:
		return runDir, nil
	case given["min-processes"] && (el.minProcs < 1 || el.minProcs > procs):
		return "", &usageError{fmt.Sprintf("--min-processes %d: want 1 to the cluster's %d processes", el.minProcs, procs)}
	case runDir == "":
		return "", &usageError{fmt.Sprintf("--max-restarts %d needs --out DIR (or --resume DIR): a restart resumes the run from the newest checkpoint there", el.maxRestarts)}
	case c.Weights != nil:
		return "", &usageError{fmt.Sprintf("--max-restarts %d: cluster.weights gives a speed for each of the %d devices, which a restart on fewer devices cannot use: leave it out of an elastic run", el.maxRestarts, c.World())}
	}
	if el.minProcs == 0 {
		el.minProcs = 1
	}
	if abs, err := filepath.Abs(runDir); err == nil {
		runDir = abs // the hosts are asked about it, from their own working folder (the same path)
	}
	return runDir, nil
}

// elasticJob is what an elastic run restarts with.
type elasticJob struct {
	c              engine.Cluster // the cluster as launched
	clusterFile    string
	mpirun, self   string
	script         string
	flags          []string      // every rank's flags, as given
	fs             *flag.FlagSet // which of them take values
	runDir         string        // absolute
	hostfile       string        // the first job's
	sig            *launchSignals
	stdout, stderr io.Writer
	remote         []bool      // by node of c: not this machine (nil: worked out by run)
	files          []localFile // gorun and the script, for the host checks
	check          func(ctx context.Context, c *engine.Cluster, remote []bool) []hostProblem
	restarts       []restartDone
	tempFiles      []string
	wd             string
}

// restartDone is one restart, for launch's last line.
type restartDone struct {
	lost []string
	step int
}

// run runs the job and restarts it as el allows; its error is the last
// job's exit status, or why launch did not restart.
func (el *elastic) run(j *elasticJob) error {
	defer func() {
		for _, f := range j.tempFiles {
			os.Remove(f)
		}
	}()
	if err := j.prepare(); err != nil {
		return err
	}
	cur := j.c // the cluster of the job under way
	flags := j.flags
	hostfile := j.hostfile
	for {
		argv := launchArgv(cur, j.mpirun, hostfile, j.self, j.script, flags, os.Geteuid() == 0)
		if j.sig.interrupted() != nil {
			return &exitStatus{code: signalStatus(j.sig.interrupted()), msg: "launch: interrupted"}
		}
		end, err := runJob(argv, j.stdout, j.stderr, j.sig, &jobWatch{named: &j.c})
		if err != nil {
			return err
		}
		if end.code == 0 {
			if len(j.restarts) > 0 {
				fmt.Fprintf(j.stderr, "gorun: launch: finished after %s: %s (each has a restart line in %s)\n",
					plural(len(j.restarts), "restart"), j.restartList(), filepath.Join(j.runDir, runner.MetricsFile))
			}
			return nil
		}
		if line := end.watch.summary(&cur); line != "" {
			fmt.Fprintln(j.stderr, line)
		}
		fail := &exitStatus{code: end.code, msg: fmt.Sprintf("launch: mpirun exited with status %d", end.code)}
		d := decideRestart(&j.c, &cur, end, j.sig.interrupted(), len(j.restarts), el.maxRestarts)
		if !d.restart {
			fmt.Fprintf(j.stderr, "gorun: launch: not restarting: %s\n", d.why)
			return fail
		}
		next, err := j.regroup(&cur, d, el, end)
		if s := j.sig.interrupted(); s != nil {
			fmt.Fprintf(j.stderr, "gorun: launch: not restarting: %s stopped the run during the restart\n", sigName(s))
			return &exitStatus{code: signalStatus(s), msg: "launch: interrupted"}
		}
		if err != nil {
			fmt.Fprintf(j.stderr, "gorun: launch: not restarting: %v\n", err)
			return fail
		}
		cur, flags, hostfile = next.c, next.flags, next.hostfile
	}
}

// prepare works out which nodes are this machine and what the host
// checks compare, as launch's first check did.
func (j *elasticJob) prepare() error {
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	j.wd = wd
	if j.remote == nil {
		addrs, err := resolveHosts(context.Background(), net.DefaultResolver.LookupHost, j.c, j.clusterFile, hostLookupTimeout)
		if err != nil {
			return err
		}
		local := localAddrs()
		j.remote = make([]bool, len(j.c.Nodes))
		for i := range j.c.Nodes {
			j.remote[i] = !isLocal(addrs[i], local)
		}
	}
	if slices.Contains(j.remote, true) && j.files == nil {
		if j.files, err = launchFiles(j.self, j.script); err != nil {
			return err
		}
	}
	if j.check == nil {
		j.check = func(ctx context.Context, c *engine.Cluster, remote []bool) []hostProblem {
			return hostProblems(ctx, c, remote, j.wd, j.files, hostCheckSlack)
		}
	}
	return nil
}

// restartDecision is what a failed job leads to.
type restartDecision struct {
	restart bool
	why     string // why not, when not
	lost    []int  // the nodes (of the job's cluster) it lost, 0-based
	ranks   []int  // the ranks it lost
}

// decideRestart says whether a failed job on c restarts: only when it
// lost hosts or ranks killed from outside, no signal stopped launch, and
// fewer than maxRestarts restarts were made. Nodes are named by their
// numbers in named, the cluster file.
func decideRestart(named, c *engine.Cluster, end jobEnd, interrupted os.Signal, restarts, maxRestarts int) restartDecision {
	if interrupted != nil {
		return restartDecision{why: fmt.Sprintf("%s stopped the run (a user's interrupt is never followed by a restart)", sigName(interrupted))}
	}
	lost, ranks, crash := end.watch.lostNodes(c)
	if crash != "" {
		return restartDecision{why: crash + ": a crash of gorun itself, which a restart would repeat"}
	}
	if len(lost) == 0 {
		return restartDecision{why: fmt.Sprintf("mpirun exited with status %d and no host or process was lost: the ranks' own error (above) would repeat", end.code)}
	}
	if restarts >= maxRestarts {
		return restartDecision{why: fmt.Sprintf("the job lost %s, and --max-restarts %d allows no more restarts (%s made)", nodeList(named, c, lost), maxRestarts, plural(restarts, "restart")), lost: lost, ranks: ranks}
	}
	return restartDecision{restart: true, lost: lost, ranks: ranks}
}

// outsideSignals are the signals that end a rank from outside (an OOM
// killer, an operator, mpirun): a rank they end is a lost process. Any
// other (SIGSEGV, SIGABRT, SIGBUS) is a crash of gorun itself.
var outsideSignals = map[string]bool{"9": true, "15": true, "1": true, "2": true}

// lostNodes are the nodes of c (0-based, in order) the job lost — those
// OpenMPI or ssh named as lost, and the hosts of ranks killed from
// outside — and those ranks; crash names a rank that died of a signal of
// its own ("" when none did).
func (w *jobWatch) lostNodes(c *engine.Cluster) (nodes, ranks []int, crash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.scan(string(w.partial))
		w.partial = nil
	}
	add := func(i int) {
		if i >= 0 && !slices.Contains(nodes, i) {
			nodes = append(nodes, i)
		}
	}
	nodeOf := func(host string) int {
		return slices.IndexFunc(c.Nodes, func(n engine.Host) bool { return n.Host == host })
	}
	for _, k := range w.killed {
		num, _, _ := strings.Cut(strings.TrimPrefix(k.signal, "signal "), " ")
		if !outsideSignals[num] {
			return nil, nil, fmt.Sprintf("rank %d on %s died of %s", k.rank, w.nodeName(c, k.host), k.signal)
		}
		ranks = append(ranks, k.rank)
		add(nodeOf(hostOf(c, k.rank)))
	}
	for _, h := range w.hosts {
		i := nodeOf(h.host)
		add(i)
		if i >= 0 {
			for _, r := range ranksOn(c, h.host) {
				if !slices.Contains(ranks, r) {
					ranks = append(ranks, r)
				}
			}
		}
	}
	slices.Sort(nodes)
	slices.Sort(ranks)
	return nodes, ranks, ""
}

// nodeList names nodes of c by the cluster file's numbers (named):
// "node[3] 10.77.0.3, node[4] 10.77.0.4".
func nodeList(named, c *engine.Cluster, nodes []int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = nodeName(named, c.Nodes[n].Host)
	}
	return strings.Join(s, ", ")
}

// plural writes "1 restart", "2 restarts", "2 processes".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "s") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// restartList sums the restarts made: "node[3] 10.77.0.3 lost, resumed
// from step 40".
func (j *elasticJob) restartList() string {
	var s []string
	for _, r := range j.restarts {
		s = append(s, fmt.Sprintf("%s lost, resumed from step %d", strings.Join(r.lost, ", "), r.step))
	}
	return strings.Join(s, "; ")
}

// nextJob is a restart's job.
type nextJob struct {
	c        engine.Cluster
	flags    []string
	hostfile string
}

// regroup makes the restart's job after a failed one on cur: the hosts
// left, the newest checkpoint on each, the flags.
func (j *elasticJob) regroup(cur *engine.Cluster, d restartDecision, el *elastic, end jobEnd) (*nextJob, error) {
	ctx := j.sig.Context()
	lostHosts := make([]string, len(d.lost))
	for i, n := range d.lost {
		lostHosts[i] = cur.Nodes[n].Host
	}
	// The hosts left, checked again over ssh.
	var keep []int
	for i := range cur.Nodes {
		if !slices.Contains(d.lost, i) {
			keep = append(keep, i)
		}
	}
	left := *cur
	left.Nodes = nil
	var remote []bool
	for _, i := range keep {
		left.Nodes = append(left.Nodes, cur.Nodes[i])
		remote = append(remote, j.isRemote(cur.Nodes[i].Host))
	}
	var dropped []string
	if slices.Contains(remote, true) {
		problems := j.check(ctx, &left, remote)
		if ctx.Err() != nil {
			return nil, errors.New("interrupted while checking the hosts left")
		}
		var bad []int
		for _, p := range problems {
			fmt.Fprintf(j.stderr, "gorun: launch: leaving out %s\n", p.line(&left, &j.c))
			bad = append(bad, p.node)
			dropped = append(dropped, left.Nodes[p.node].Host)
		}
		var nodes []engine.Host
		var rem []bool
		for i, n := range left.Nodes {
			if !slices.Contains(bad, i) {
				nodes = append(nodes, n)
				rem = append(rem, remote[i])
			}
		}
		left.Nodes, remote = nodes, rem
	}
	procs := min(j.c.ProcessCount(), left.Slots())
	if procs < el.minProcs {
		return nil, fmt.Errorf("the job lost %s; %s left on the hosts that answer (%s), fewer than --min-processes %d; the checkpoints in %s are as the job left them: resume with gorun launch --resume %s once hosts are back",
			nodeList(&j.c, cur, d.lost), plural(procs, "process"), hostNames(left.Nodes), el.minProcs, j.runDir, j.runDir)
	}
	left.Processes = procs

	// The run folder: rank 0's host wrote it, and rank 0's host now is
	// the first of those left.
	lead := left.Nodes[0].Host
	probes := make([]checkpointProbe, len(left.Nodes))
	var wg sync.WaitGroup
	for i, n := range left.Nodes { // all at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = j.probe(ctx, &left, n.Host, remote[i])
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, errors.New("interrupted while looking for the newest checkpoint")
	}
	p0 := probes[0]
	oldLead := cur.Nodes[0].Host
	switch {
	case p0.err != "":
		return nil, fmt.Errorf("looking for the run folder %s on %s, rank 0's host now: %s", j.runDir, nodeName(&j.c, lead), p0.err)
	case !p0.metrics && oldLead != lead:
		return nil, fmt.Errorf("%s held the run folder %s (rank 0 writes its metrics.jsonl and checkpoints on its own host) and is lost; %s, rank 0's host now, does not see it (no shared filesystem): the newest checkpoint cannot be reached; once %s is back, resume with gorun launch --resume %s",
			nodeName(&j.c, oldLead), j.runDir, nodeName(&j.c, lead), oldLead, j.runDir)
	case p0.step == "":
		return nil, fmt.Errorf("%s has no complete checkpoint in %s yet (the job was lost before its first): start the run again", nodeName(&j.c, lead), filepath.Join(j.runDir, runner.CheckpointDir))
	}
	if oldLead != lead {
		// A shared run folder: the old rank 0, on the lost host, may
		// still hold its lock until its collectives time out.
		if err := j.waitUnlocked(ctx, &left, remote[0], oldLead); err != nil {
			return nil, err
		}
	}
	step, _ := strconv.Atoi(strings.TrimPrefix(p0.step, "step-"))
	// Every other host gets rank 0's copy of the checkpoint.
	for i := 1; i < len(left.Nodes); i++ {
		if probes[i].step == p0.step && maps.Equal(probes[i].sums, p0.sums) {
			continue
		}
		took := time.Now()
		if err := j.copyCheckpoint(ctx, &left, p0.step, 0, i, remote); err != nil {
			return nil, fmt.Errorf("copying checkpoint %s from %s to %s: %v", p0.step, nodeName(&j.c, lead), nodeName(&j.c, left.Nodes[i].Host), err)
		}
		fmt.Fprintf(j.stderr, "gorun: launch: copied checkpoint %s from %s to %s (%.1fs)\n", p0.step, nodeName(&j.c, lead), nodeName(&j.c, left.Nodes[i].Host), time.Since(took).Seconds())
	}

	n := len(j.restarts) + 1
	info := restartInfo(&runner.Restart{Number: n, LostHosts: lostHosts, Dropped: dropped, FromProcesses: cur.ProcessCount(), FailedAt: end.at})
	flags := append(withoutFlags(j.fs, j.flags, "resume", "init", "overwrite", "elastic-restart"),
		"--resume", j.runDir, "--set", "cluster.processes="+strconv.Itoa(procs), "--elastic-restart", info)
	hostfile, err := writeHostfile(left, j.clusterFile, "")
	if err != nil {
		return nil, err
	}
	j.tempFiles = append(j.tempFiles, hostfile)
	lostWhat := nodeList(&j.c, cur, d.lost)
	if len(d.ranks) > 0 {
		lostWhat += " (" + rankList(d.ranks) + ")"
	}
	fmt.Fprintf(j.stderr, "gorun: launch: restart %d of %d: lost %s; resuming from step %d (%s) on %s: %s; %.1fs since the job ended\n",
		n, el.maxRestarts, lostWhat, step, filepath.Join(j.runDir, runner.CheckpointDir, p0.step), plural(procs, "process"), hostNames(left.Nodes), time.Since(end.at).Seconds())
	j.restarts = append(j.restarts, restartDone{lost: lostHosts, step: step})
	if j.sig.interrupted() != nil {
		return nil, errors.New("interrupted")
	}
	return &nextJob{c: left, flags: flags, hostfile: hostfile}, nil
}

// hostNames lists nodes' hosts: "10.77.0.1, 10.77.0.2".
func hostNames(nodes []engine.Host) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = n.Host
	}
	return strings.Join(s, ", ")
}

// isRemote says whether host is not this machine, as the first check
// found.
func (j *elasticJob) isRemote(host string) bool {
	for i, n := range j.c.Nodes {
		if n.Host == host {
			return j.remote[i]
		}
	}
	return true
}

// checkpointProbe is what a host has of the run folder.
type checkpointProbe struct {
	metrics bool              // it sees the run's metrics.jsonl
	step    string            // its newest complete checkpoint ("step-40"), "" when none
	sums    map[string]string // that checkpoint's files' sha256, by name
	err     string            // the probe failed
}

// probeScript prints, for run folder dir: "metrics" when it has
// metrics.jsonl, then the newest complete checkpoint folder (one with
// model.safetensors and state.safetensors, as the runner looks for) and
// each of its files' sha256 and name.
func probeScript(dir string) string {
	return `cd ` + shellQuote(dir) + ` 2>/dev/null || exit 0; [ -f metrics.jsonl ] && echo metrics; ` +
		`cd checkpoints 2>/dev/null || exit 0; best=; n0=-1; for d in step-*; do n=${d#step-}; case $n in ''|*[!0-9]*) continue;; esac; ` +
		`[ -f "$d/model.safetensors" ] && [ -f "$d/state.safetensors" ] || continue; [ "$n" -gt "$n0" ] && { n0=$n; best=$d; }; done; ` +
		`[ -n "$best" ] || exit 0; echo "ckpt $best"; for f in "$best"/*; do [ -f "$f" ] && echo "sum $(sha256sum < "$f" | cut -d' ' -f1) ${f#"$best"/}"; done`
}

// waitUnlocked waits, on rank 0's new host (node 1 of c), until the run
// folder's lock (gorun.lock) is free: a lost host's rank 0 whose peers
// are gone ends within comm.timeout (its collectives' watchdog), and
// its lock with it. It waits at most comm.timeout and 10 s.
func (j *elasticJob) waitUnlocked(ctx context.Context, c *engine.Cluster, remote bool, oldLead string) error {
	lock := filepath.Join(j.runDir, lockName)
	limit := c.Timeout + 10*time.Second
	deadline := time.Now().Add(limit)
	script := "[ -e " + shellQuote(lock) + " ] || exit 0; flock -n " + shellQuote(lock) + " true && exit 0; echo held"
	said := false
	for {
		cmd := onHost(ctx, c, c.Nodes[0].Host, remote, script)
		out, err := cmd.Output()
		if err == nil && !strings.Contains(string(out), "held") {
			return nil
		}
		if ctx.Err() != nil {
			return errors.New("interrupted while waiting for the run folder's lock")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the run folder %s is still locked (%s) after %v, by rank 0's process on the lost %s: resume with gorun launch --resume %s once it has ended",
				j.runDir, lock, limit, nodeName(&j.c, oldLead), j.runDir)
		}
		if !said {
			fmt.Fprintf(j.stderr, "gorun: launch: waiting for rank 0's process on the lost %s to release the run folder %s (at most %v)\n", nodeName(&j.c, oldLead), j.runDir, limit)
			said = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// onHost is the command that runs the shell script on host: over the
// cluster's ssh, or here when the host is this machine.
func onHost(ctx context.Context, c *engine.Cluster, host string, remote bool, script string) *exec.Cmd {
	if remote {
		return sshCommand(ctx, c, host, script, 0)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}

// probe asks host what it has of the run folder.
func (j *elasticJob) probe(ctx context.Context, c *engine.Cluster, host string, remote bool) checkpointProbe {
	limit := c.SSH.Timeout() + hostCheckSlack
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := onHost(ctx, c, host, remote, probeScript(j.runDir))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		why := lastLine(stderr.String())
		if ctx.Err() != nil {
			why = fmt.Sprintf("no reply within %v", limit)
		}
		return checkpointProbe{err: fmt.Sprintf("%v: %s", err, why)}
	}
	p := checkpointProbe{sums: map[string]string{}}
	for _, line := range strings.Split(stdout.String(), "\n") {
		switch f := strings.SplitN(line, " ", 3); {
		case line == "metrics":
			p.metrics = true
		case len(f) == 2 && f[0] == "ckpt":
			p.step = f[1]
		case len(f) == 3 && f[0] == "sum":
			p.sums[f[2]] = f[1]
		}
	}
	return p
}

// copyCheckpoint copies checkpoint folder step of the run folder from
// node from to node to (of c), over the cluster's ssh: tar on one end,
// tar on the other, into a temporary folder beside the checkpoints that
// is then renamed into place (the runner never takes a half-copied
// checkpoint for a complete one).
func (j *elasticJob) copyCheckpoint(ctx context.Context, c *engine.Cluster, step string, from, to int, remote []bool) error {
	ckpts := filepath.Join(j.runDir, runner.CheckpointDir)
	send := onHost(ctx, c, c.Nodes[from].Host, remote[from], "cd "+shellQuote(ckpts)+" && tar -cf - "+shellQuote(step))
	recv := onHost(ctx, c, c.Nodes[to].Host, remote[to], "mkdir -p "+shellQuote(ckpts)+" && cd "+shellQuote(ckpts)+
		" && t=$(mktemp -d .copy-XXXXXX) && tar -C \"$t\" -xf - && rm -rf "+shellQuote(step)+" && mv \"$t\"/"+shellQuote(step)+" . && rmdir \"$t\"")
	pipe, err := send.StdoutPipe()
	if err != nil {
		return err
	}
	recv.Stdin = pipe
	var sendErr, recvErr bytes.Buffer
	send.Stderr, recv.Stderr = &sendErr, &recvErr
	if err := send.Start(); err != nil {
		return err
	}
	if err := recv.Run(); err != nil {
		send.Process.Kill()
		send.Wait()
		return fmt.Errorf("receiving: %v: %s", err, lastLine(recvErr.String()))
	}
	if err := send.Wait(); err != nil {
		return fmt.Errorf("sending: %v: %s", err, lastLine(sendErr.String()))
	}
	return nil
}

// withoutFlags is flags (as passThrough returns them) without the named
// flags and their values.
func withoutFlags(fs *flag.FlagSet, flags []string, names ...string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		a := flags[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue := false
		if fl := fs.Lookup(name); fl != nil && len(a) > 1 && a[0] == '-' {
			bf, isBool := fl.Value.(interface{ IsBoolFlag() bool })
			takesValue = !(isBool && bf.IsBoolFlag())
		}
		drop := slices.Contains(names, name) && len(a) > 1 && a[0] == '-'
		if !drop {
			out = append(out, a)
		}
		if takesValue && !hasValue && i+1 < len(flags) {
			i++
			if !drop {
				out = append(out, flags[i])
			}
		}
	}
	return out
}

// restartInfo encodes a restart for the ranks' --elastic-restart flag
// (URL query syntax: hosts are names or addresses, which it keeps as
// they are).
func restartInfo(r *runner.Restart) string {
	v := url.Values{}
	v.Set("n", strconv.Itoa(r.Number))
	v.Set("from", strconv.Itoa(r.FromProcesses))
	v.Set("at", strconv.FormatFloat(float64(r.FailedAt.UnixNano())/1e9, 'f', 3, 64))
	v["lost"] = r.LostHosts
	v["dropped"] = r.Dropped
	return v.Encode()
}

// parseRestartInfo decodes --elastic-restart.
func parseRestartInfo(s string) (*runner.Restart, error) {
	v, err := url.ParseQuery(s)
	bad := func(what string) error {
		return &usageError{fmt.Sprintf("--elastic-restart %s: %s (gorun launch --max-restarts sets this flag on the processes it restarts; leave it out)", printableArg(s), what)}
	}
	if err != nil {
		return nil, bad(err.Error())
	}
	n, err1 := strconv.Atoi(v.Get("n"))
	from, err2 := strconv.Atoi(v.Get("from"))
	at, err3 := strconv.ParseFloat(v.Get("at"), 64)
	if err1 != nil || err2 != nil || err3 != nil || n < 1 || from < 1 {
		return nil, bad("want n=RESTART&from=PROCESSES&at=UNIX_SECONDS[&lost=HOST...]")
	}
	sec := int64(at)
	return &runner.Restart{Number: n, FromProcesses: from, LostHosts: v["lost"], Dropped: v["dropped"],
		FailedAt: time.Unix(sec, int64((at-float64(sec))*1e9))}, nil
}
