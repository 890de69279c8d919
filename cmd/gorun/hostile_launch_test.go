package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorun/engine"
)

// gorunWithin is gorun, failing the test when the command has not
// returned after d: a hang fails instead of stalling the suite.
func gorunWithin(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		c, o, e := gorun(t, args...)
		done <- result{c, o, e}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(d):
		t.Fatalf("gorun %s: still running after %v", strings.Join(args, " "), d)
		return 0, "", ""
	}
}

// TestPlotHostileValues: `gorun plot` on losses of ±1e308 (it used to
// spin forever), on null losses (said on stderr) and on an empty metrics
// file (refused by name), each in bounded time.
func TestPlotHostileValues(t *testing.T) {
	for _, tc := range []struct {
		name, text   string
		code         int
		stdout, note string
	}{
		{"huge", `{"kind":"step","step":1,"loss":1e308}` + "\n" + `{"kind":"step","step":2,"loss":-1e308}` + "\n", 0, "loss_steps.png", ""},
		{"nulls", `{"kind":"step","step":1,"loss":2}` + "\n" + `{"kind":"step","step":2,"loss":null}` + "\n" + `{"kind":"step","step":3,"loss":1}` + "\n",
			0, "loss_steps.png", `gorun: plot: run "nulls" (`},
		{"empty", "", 1, "", `run "empty" (`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := gorunWithin(t, 30*time.Second, "plot", dir)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.note) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, %q on stdout and %q on stderr", code, stdout, stderr, tc.code, tc.stdout, tc.note)
			}
			if strings.Contains(stderr, "goroutine") {
				t.Errorf("a Go stack on stderr: %s", stderr)
			}
		})
	}
}

// hostileHosts try to add hosts, slots or ssh options to mpirun's hostfile
// through a [[node]] host, or are no host at all.
var hostileHosts = []string{
	"a\nevil slots=64",
	"evil slots=64",
	"slots=64",
	"a\tb",
	"-oProxyCommand=touch /tmp/gorun-pwned",
	"host#c",
	"héllo.example",
	"a\u202eb",
	"",
	strings.Repeat("a", 64),
	strings.Repeat("abcdefg.", 32) + "com",
}

// TestLaunchHostileHosts: a host that is not a host name or IP address
// stops launch before a hostfile is written or mpirun runs, naming the
// file, line and node, whether it comes from the cluster file or --set.
func TestLaunchHostileHosts(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "mpirun-ran")
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, host := range hostileHosts {
		q := strings.NewReplacer("\\", "\\\\", `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(host)
		cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n\n[[node]]\nhost = \"127.0.0.1\"\n\n[[node]]\nhost = \""+q+"\"\nslots = 2\n")
		for _, dry := range []bool{true, false} {
			out := filepath.Join(t.TempDir(), "run")
			args := []string{"launch", "--cluster", cluster, "--mpirun", fake, "x.star", "--out", out}
			if dry {
				args = append(args, "--dry-run")
			}
			code, stdout, stderr := gorunWithin(t, 30*time.Second, args...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, cluster+":8: node[2].host: ") {
				t.Errorf("host %q, dry run %v: exit %d, stdout %q, stderr %q; want exit 1 naming %s:8: node[2].host", host, dry, code, stdout, stderr, cluster)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("host %q: stderr is not one line: %q", host, stderr)
			}
			if _, err := os.Stat(filepath.Join(out, "hostfile")); !os.IsNotExist(err) {
				t.Errorf("host %q: a hostfile was written (%v)", host, err)
			}
		}
		// The same host from the command line.
		if host == "" || strings.ContainsAny(host, ",:") {
			continue
		}
		code, stdout, stderr := gorunWithin(t, 30*time.Second, "launch", "--cluster", writeCluster(t, twoHosts), "--mpirun", fake,
			"--set", "node=127.0.0.1:1,"+host+":2", "--dry-run", "x.star")
		if code != 2 || stdout != "" || !strings.Contains(stderr, "node[2].host: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("--set node with host %q: exit %d, stdout %q, stderr %q", host, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("mpirun ran")
	}
}

// TestWriteHostfileValidates: the hostfile is written from validated
// hosts only, whoever built the Cluster.
func TestWriteHostfileValidates(t *testing.T) {
	out := t.TempDir()
	for _, host := range hostileHosts {
		c := engine.Cluster{Nodes: []engine.Host{{Host: "10.0.0.1", Slots: 1}, {Host: host, Slots: 1}}}
		if _, err := writeHostfile(c, "c.toml", out); err == nil || !strings.Contains(err.Error(), "c.toml: node[2].host: ") {
			t.Errorf("host %q: %v", host, err)
		}
	}
	c := engine.Cluster{Nodes: []engine.Host{{Host: "a", Slots: 0}}}
	if _, err := writeHostfile(c, "c.toml", out); err == nil || !strings.Contains(err.Error(), "node[1].slots: must be ≥ 1, got 0") {
		t.Errorf("slots 0: %v", err)
	}
	// A cluster file's path cannot add a line either.
	c = engine.Cluster{Nodes: []engine.Host{{Host: "a", Slots: 1}}}
	path, err := writeHostfile(c, "x\nevil slots=64", out)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 2 || lines[1] != "a slots=1" {
		t.Errorf("hostfile:\n%s", b)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("%d files written, want only the good hostfile", len(entries))
	}
}

// TestLaunchUnresolvableHost: a host that does not resolve (RFC 2606's
// .invalid never does) is named, with its node, before mpirun runs; a
// dry run looks nothing up and prints the command.
func TestLaunchUnresolvableHost(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "mpirun-ran")
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"localhost\"\n[[node]]\nhost = \"nosuch-gorun-node.invalid\"\n")
	code, stdout, stderr := gorunWithin(t, 30*time.Second, "launch", "--cluster", cluster, "--mpirun", fake, "x.star")
	want := cluster + `: node[2].host: "nosuch-gorun-node.invalid" does not resolve on this machine (`
	if code != 1 || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout, stderr, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("mpirun ran")
	}
	code, stdout, _ = gorunWithin(t, 30*time.Second, "launch", "--cluster", cluster, "--mpirun", fake, "--dry-run", "x.star")
	if code != 0 || !strings.Contains(stdout, fake+" --hostfile ") {
		t.Errorf("dry run: exit %d, stdout %q", code, stdout)
	}
	os.Remove(strings.Fields(stdout)[2])
	// Hosts that resolve (a name and addresses) launch.
	cluster = writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"localhost\"\n[[node]]\nhost = \"127.0.0.1\"\n[[node]]\nhost = \"::1\"\n")
	if code, _, stderr := gorunWithin(t, 30*time.Second, "launch", "--cluster", cluster, "--mpirun", fake, "x.star"); code != 0 {
		t.Errorf("resolvable hosts: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("mpirun did not run for hosts that resolve")
	}
}

// TestResolveHostsTimeout: a resolver that does not answer is cut off at
// the timeout and named as such.
func TestResolveHostsTimeout(t *testing.T) {
	slow := func(ctx context.Context, host string) ([]string, error) {
		if host == "10.0.0.1" {
			return []string{host}, nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := engine.Cluster{Nodes: []engine.Host{{Host: "10.0.0.1", Slots: 1}, {Host: "slow.example", Slots: 1}}}
	start := time.Now()
	_, err := resolveHosts(context.Background(), slow, c, "c.toml", 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `c.toml: node[2].host: "slow.example" does not resolve on this machine (no answer within 50ms)`) {
		t.Errorf("err = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	if _, err := resolveHosts(context.Background(), func(context.Context, string) ([]string, error) { return nil, errors.New("x") }, engine.Cluster{}, "c.toml", time.Second); err != nil {
		t.Errorf("no nodes: %v", err)
	}
}
