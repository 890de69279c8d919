package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"gorun/engine"
)

// What `gorun launch` checks on every host before it starts mpirun, so that
// a host that cannot run its ranks is named at once, with its node, rather
// than by OpenMPI's messages after a start that fails part-way (or, for a
// host whose gorun differs, by ranks that disagree). Hosts that are this
// machine (a loopback address, or an address of one of its interfaces, as
// mpirun decides which hosts need no ssh) read this machine's files and
// are not checked.

// hostCheckConcurrency is how many hosts launch checks at once.
const hostCheckConcurrency = 32

// hostCheckSlack is the time a host's check may take beyond ssh's connect
// timeout: logging in, hashing gorun there (tens of MB), the round trips.
const hostCheckSlack = 30 * time.Second

// localFile is a file every host needs at the same path, with the same
// contents: this gorun, the script.
type localFile struct {
	what string // "gorun", "the script"
	path string // absolute
	sum  string // sha256, hex
}

// hashFile returns the sha256 of a file's contents, in hex.
func hashFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// localAddrs are the addresses of this machine's interfaces.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}

// isLocal reports whether a host whose addresses are addrs is this machine:
// one of them is a loopback address or an address of this machine's
// interfaces.
func isLocal(addrs []string, local map[netip.Addr]bool) bool {
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if a.IsLoopback() || local[a] {
			return true
		}
	}
	return false
}

// shellQuote quotes s for a POSIX shell, always.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// remoteCheckScript is the shell script launch runs on a host: it prints
// the host's name, whether OpenMPI's orted is on the PATH a non-interactive
// ssh session gets (mpirun starts it there), whether the working folder
// exists (the ranks start in it), and for each file "missing", "unreadable"
// or its sha256.
func remoteCheckScript(wd string, files []localFile) string {
	var b strings.Builder
	b.WriteString("echo \"host $(uname -n)\"; command -v orted >/dev/null 2>&1 || echo no-orted; ")
	fmt.Fprintf(&b, "[ -d %s ] || echo no-wd; ", shellQuote(wd))
	b.WriteString("for f in")
	for _, f := range files {
		b.WriteString(" " + shellQuote(f.path))
	}
	b.WriteString(`; do if [ ! -f "$f" ]; then echo missing; elif [ ! -r "$f" ]; then echo unreadable; ` +
		`else s=$(sha256sum < "$f") || s=unreadable; echo "${s%% *}"; fi; done`)
	return b.String()
}

// sshCommand is the command that runs remote (a shell command line) on
// host over the cluster's ssh, with ServerAlive keepalives every alive.
func sshCommand(ctx context.Context, c *engine.Cluster, host, remote string, alive time.Duration) *exec.Cmd {
	args := append(c.SSH.Args(alive), host, "sh -c "+shellQuote(remote))
	cmd := exec.CommandContext(ctx, c.SSH.ProgramName(), args...)
	cmd.Stdin = nil
	// Its own process group, killed whole at the deadline (ssh may have
	// started a ProxyCommand).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}

// hostProblem is what is wrong with one node.
type hostProblem struct {
	node int    // 0-based
	name string // the host's own name (uname -n), when it answered
	msg  string
}

// checkHosts checks every remote node of the cluster at once (at most
// hostCheckConcurrency at a time): that it answers ssh within the
// cluster's connect timeout, runs a shell, has orted, the working folder
// wd, and each of files at the same path with the same contents, all
// within the connect timeout and slack (hostCheckSlack). remote says which
// nodes to check. It returns one error listing every node that fails, by
// node and host, or nil.
func checkHosts(ctx context.Context, c *engine.Cluster, clusterFile string, remote []bool, wd string, files []localFile, slack time.Duration) error {
	problems := hostProblems(ctx, c, remote, wd, files, slack)
	if len(problems) == 0 {
		return nil
	}
	var lines []string
	for _, p := range problems {
		lines = append(lines, p.line(c, c))
	}
	if len(lines) == 1 {
		return fmt.Errorf("launch: %s: %s", clusterFile, lines[0])
	}
	return fmt.Errorf("launch: %s: %d of %d hosts cannot run their ranks:\n  %s", clusterFile, len(lines), len(c.Nodes), strings.Join(lines, "\n  "))
}

// line names the node (of c, by its number in named, the cluster file)
// and host and says what is wrong with it.
func (p hostProblem) line(c, named *engine.Cluster) string {
	who := nodeName(named, c.Nodes[p.node].Host)
	if p.name != "" {
		who += " (" + p.name + ")"
	}
	return who + ": " + p.msg
}

// hostProblems checks the nodes remote says, as checkHosts does, and
// returns what is wrong with each that fails, in the cluster's order.
func hostProblems(ctx context.Context, c *engine.Cluster, remote []bool, wd string, files []localFile, slack time.Duration) []hostProblem {
	var (
		mu       sync.Mutex
		problems []hostProblem
		wg       sync.WaitGroup
		sem      = make(chan struct{}, hostCheckConcurrency)
	)
	script := remoteCheckScript(wd, files)
	for i, n := range c.Nodes {
		if !remote[i] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if name, msg := checkHost(ctx, c, n.Host, script, wd, files, slack); msg != "" {
				mu.Lock()
				problems = append(problems, hostProblem{i, name, msg})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// In the cluster file's order.
	slices.SortFunc(problems, func(a, b hostProblem) int { return a.node - b.node })
	return problems
}

// checkHost checks one host; it returns what is wrong, or "", and the
// host's own name when it answered.
func checkHost(ctx context.Context, c *engine.Cluster, host, script, wd string, files []localFile, slack time.Duration) (name, problem string) {
	limit := c.SSH.Timeout() + slack
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := sshCommand(ctx, c, host, script, 0)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Sprintf("does not answer: %s gave no reply within %v (ssh.connect_timeout %v, and %v to log in and hash the files)",
			c.SSH.ProgramName(), limit, c.SSH.Timeout(), slack)
	}
	out := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if err != nil || len(out) == 0 || !strings.HasPrefix(out[0], "host ") {
		why := lastLine(stderr.String())
		if why == "" {
			why = lastLine(stdout.String())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 255 {
			return "", fmt.Sprintf("does not answer ssh: %s (check the host, the [ssh] table: user, port, key, and that its key is in the host's authorized_keys)", why)
		} else if err != nil {
			return "", fmt.Sprintf("the check over ssh failed (%v): %s", err, why)
		}
		return "", fmt.Sprintf("the check over ssh printed %q, not what a POSIX sh prints", why)
	}
	name = strings.TrimPrefix(out[0], "host ")
	var msgs []string
	rest := out[1:]
	if len(rest) > 0 && rest[0] == "no-orted" {
		msgs = append(msgs, "has no orted on the PATH a non-interactive ssh session gets: install OpenMPI there (Debian: openmpi-bin), the same version as here")
		rest = rest[1:]
	}
	if len(rest) > 0 && rest[0] == "no-wd" {
		msgs = append(msgs, fmt.Sprintf("has no folder %s, where the ranks start (mpirun starts them in the folder launch runs in): create it, or launch from a folder every host has", wd))
		rest = rest[1:]
	}
	if len(rest) != len(files) {
		return name, fmt.Sprintf("the check over ssh printed %d lines for %d files: %q", len(rest), len(files), stdout.String())
	}
	for i, f := range files {
		switch got := rest[i]; got {
		case "missing":
			msgs = append(msgs, fmt.Sprintf("has no %s %s: every host needs it at the same path as here (copy it there, or use a folder every host shares)", f.what, f.path))
		case "unreadable":
			msgs = append(msgs, fmt.Sprintf("cannot read %s %s", f.what, f.path))
		case f.sum:
		default:
			msgs = append(msgs, fmt.Sprintf("has another %s at %s (sha256 %s… there, %s… here): every host needs the same one", f.what, f.path, short(got), short(f.sum)))
		}
	}
	return name, strings.Join(msgs, "; ")
}

// short is the first 12 characters of a hash.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// lastLine is the last non-empty line of s, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// launchFiles are the files every host needs as here: this gorun and the
// script, with absolute paths and their hashes.
func launchFiles(self, script string) ([]localFile, error) {
	var files []localFile
	for _, f := range []struct{ what, path string }{{"gorun", self}, {"script", script}} {
		abs, err := filepath.Abs(f.path)
		if err != nil {
			return nil, fmt.Errorf("launch: %s %s: %w", f.what, f.path, err)
		}
		sum, err := hashFile(abs)
		if err != nil {
			return nil, fmt.Errorf("launch: %s: %w", f.what, err)
		}
		files = append(files, localFile{f.what, abs, sum})
	}
	return files, nil
}
