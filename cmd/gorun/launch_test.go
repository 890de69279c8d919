package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeCluster writes a cluster file into a temporary folder.
func writeCluster(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const twoHosts = `[cluster]
transport = "mpi"

[[node]]
host  = "127.0.0.1"
slots = 2

[[node]]
host  = "10.0.0.7"
slots = 3
`

// TestLaunchDryRun: --dry-run prints the exact mpirun command and writes
// the hostfile into --out.
func TestLaunchDryRun(t *testing.T) {
	cluster := writeCluster(t, twoHosts)
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := gorun(t, "launch", "--cluster", cluster, "--dry-run", "--mpirun", "/opt/ompi/bin/mpirun",
		"train.star", "--out", out, "--set", "epochs=1", "-q", "--set=optimizer.lr=0.5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bind := "core"
	if runtime.NumCPU() < 3 {
		bind = "none" // a host has more slots than this machine has cores
	}
	root := ""
	if os.Geteuid() == 0 {
		root = " --allow-run-as-root"
	}
	hostfile := filepath.Join(out, "hostfile")
	want := "/opt/ompi/bin/mpirun --hostfile " + hostfile + " -np 5 --bind-to " + bind + root + " " + self +
		" train.star --cluster " + cluster + " --out " + out + " --set epochs=1 -q --set=optimizer.lr=0.5\n"
	if stdout != want {
		t.Errorf("printed\n%s\nwant\n%s", stdout, want)
	}
	hf, err := os.ReadFile(hostfile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "127.0.0.1 slots=2\n10.0.0.7 slots=3\n"; !strings.HasSuffix(string(hf), want) || !strings.HasPrefix(string(hf), "# ") {
		t.Errorf("hostfile:\n%s\nwant a comment line, then\n%s", hf, want)
	}
}

// TestLaunchProcesses: cluster.processes sets -np; one CPU device on hosts
// with few slots binds to a core.
func TestLaunchProcesses(t *testing.T) {
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\nprocesses = 1\n[[node]]\nhost = \"127.0.0.1\"\nslots = 1\n")
	code, stdout, stderr := gorun(t, "launch", "--dry-run", "--mpirun", "mpirun", "--cluster", cluster, "a b.star")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, " -np 1 --bind-to core ") || !strings.Contains(stdout, " 'a b.star' --cluster ") {
		t.Errorf("printed %s", stdout)
	}
	// The temporary hostfile of a dry run is kept, for the printed command.
	f := strings.Fields(stdout)[2]
	if _, err := os.Stat(f); err != nil {
		t.Errorf("hostfile: %v", err)
	}
	os.Remove(f)
	// Two devices a process: not bound.
	code, stdout, _ = gorun(t, "launch", "--dry-run", "--mpirun", "mpirun", "--cluster", cluster, "--devices", "2", "x.star")
	if code != 0 || !strings.Contains(stdout, " --bind-to none ") || !strings.HasSuffix(stdout, " x.star --cluster "+cluster+" --devices 2\n") {
		t.Errorf("exit %d, printed %s", code, stdout)
	}
	os.Remove(strings.Fields(stdout)[2])
	// --set changes the cluster for launch and, passed on, for the ranks.
	cluster = writeCluster(t, twoHosts)
	code, stdout, stderr = gorun(t, "launch", "--dry-run", "--mpirun", "mpirun", "--cluster", cluster, "--set", "cluster.processes=4", "--set", "comm.timeout=30s", "x.star")
	if code != 0 || !strings.Contains(stdout, " -np 4 ") || !strings.HasSuffix(stdout, " --set cluster.processes=4 --set comm.timeout=30s\n") {
		t.Errorf("exit %d, printed %s %s", code, stdout, stderr)
	}
	os.Remove(strings.Fields(stdout)[2])
}

// TestLaunchRuns: launch runs mpirun with its stdout, stderr and exit
// status passed through.
func TestLaunchRuns(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"fake mpirun $*\"\necho oops >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cluster := writeCluster(t, twoHosts)
	code, stdout, stderr := gorun(t, "launch", "--cluster", cluster, "--mpirun", fake, "train.star", "--set", "epochs=2")
	if code != 3 {
		t.Errorf("exit %d, want mpirun's 3 (stderr %q)", code, stderr)
	}
	if !strings.HasPrefix(stdout, "fake mpirun --hostfile ") || !strings.Contains(stdout, " -np 5 ") || !strings.HasSuffix(stdout, " train.star --cluster "+cluster+" --set epochs=2\n") {
		t.Errorf("stdout %q", stdout)
	}
	if stderr != "oops\n" {
		t.Errorf("stderr %q, want only mpirun's", stderr)
	}
	// The temporary hostfile is removed after the run.
	hf := strings.Fields(stdout)[3]
	if _, err := os.Stat(hf); !os.IsNotExist(err) {
		t.Errorf("hostfile %s left behind: %v", hf, err)
	}
}

func TestLaunchErrors(t *testing.T) {
	mpi := writeCluster(t, twoHosts)
	cases := []struct {
		name   string
		args   []string
		path   string // PATH, when set
		code   int
		stderr string
	}{
		{"no cluster", []string{"train.star"}, "", 2, "launch needs --cluster C.toml"},
		{"two scripts", []string{"--cluster", mpi, "a.star", "b.star"}, "", 2, "launch needs exactly one SCRIPT.star, got 2"},
		{"no nodes", []string{"--cluster", writeCluster(t, "[cluster]\ntransport = \"mpi\"\n"), "--dry-run", "x.star"}, "", 1, "has no [[node]] entries"},
		{"inproc", []string{"--cluster", writeCluster(t, "[cluster]\ndevices = 2\n"), "--dry-run", "x.star"}, "", 1,
			`cluster.transport is "inproc", which connects the devices of one process`},
		{"inproc, two processes", []string{"--cluster", writeCluster(t, "[[node]]\nhost = \"a\"\nslots = 2\n"), "--dry-run", "x.star"}, "", 1,
			`cluster.transport: "inproc" connects the devices of one process, but the cluster has 2 processes: use "mpi"`},
		{"inproc, one node", []string{"--cluster", writeCluster(t, "[[node]]\nhost = \"a\"\n"), "--dry-run", "x.star"}, "", 1,
			`cluster.transport is "inproc", which connects the devices of one process; launch starts several processes: set transport = "mpi"`},
		{"no mpirun", []string{"--cluster", mpi, "x.star"}, t.TempDir(), 1, "mpirun not found on PATH: install OpenMPI (Debian: apt-get install openmpi-bin)"},
		{"bad --mpirun", []string{"--cluster", mpi, "--mpirun", "/nonexistent/mpirun", "x.star"}, "", 1, "--mpirun /nonexistent/mpirun"},
		{"bad cluster", []string{"--cluster", writeCluster(t, "[cluster]\ndevice = 2\n"), "x.star"}, "", 1, `cluster.device: unknown key; did you mean "cluster.devices"?`},
		{"bad cluster --set", []string{"--cluster", mpi, "--set", "cluster.devices=0", "x.star"}, "", 2, "--set cluster.devices=0: cluster.devices: must be ≥ 1, got 0"},
	}
	for _, c := range cases {
		if c.path != "" {
			t.Setenv("PATH", c.path)
		}
		code, _, stderr := gorun(t, append([]string{"launch"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", c.name, code, stderr, c.code, c.stderr)
		}
	}
}
