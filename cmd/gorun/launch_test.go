package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorun/engine"
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

// launchMCA is what launch passes to mpirun for a cluster with the
// default ssh settings and a collective timeout of 60s (a heartbeat of 6s).
const launchMCA = "--mca plm_rsh_agent ssh --mca plm_rsh_args '-o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=12 -o ServerAliveCountMax=3' " +
	"--mca plm_rsh_no_tree_spawn 1 --mca orte_leave_session_attached 1 " +
	"--mca oob_tcp_keepalive_time 12 --mca oob_tcp_keepalive_intvl 6 --mca oob_tcp_keepalive_probes 3"

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
	root := ""
	if os.Geteuid() == 0 {
		root = " --allow-run-as-root"
	}
	hostfile := filepath.Join(out, "hostfile")
	want := "/opt/ompi/bin/mpirun --hostfile " + hostfile + " -np 5 --map-by slot --bind-to none" + root + " " + launchMCA + " " + self +
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

// TestLaunchClusterKeys: cluster.network, cluster.bind and the [ssh]
// table reach mpirun as its own parameters, the keepalives follow
// comm.timeout, and the printed command is one a shell runs as printed.
func TestLaunchClusterKeys(t *testing.T) {
	cluster := writeCluster(t, `[cluster]
transport = "mpi"
network = "10.77.0.0/24"
bind = "core"
devices = 2

[comm]
timeout = "10s"

[ssh]
user = "trainer"
port = 2222
key = "/keys/id_ed25519"
options = ["StrictHostKeyChecking=accept-new"]
connect_timeout = "4s"

[[node]]
host = "10.77.0.1"

[[node]]
host = "node-2.example"
slots = 2
`)
	code, stdout, stderr := gorun(t, "launch", "--cluster", cluster, "--dry-run", "--mpirun", "mpirun", "x.star")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		" -np 3 --map-by slot:PE=2 --bind-to core ",
		" --mca plm_rsh_agent ssh --mca plm_rsh_args '-l trainer -p 2222 -i /keys/id_ed25519 -o IdentitiesOnly=yes -o StrictHostKeyChecking=accept-new " +
			"-o BatchMode=yes -o ConnectTimeout=4 -o ServerAliveInterval=2 -o ServerAliveCountMax=3' ",
		" --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 ",
		" --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 ",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("printed %s\nwant it to hold %q", stdout, want)
		}
	}
	if strings.Contains(stdout, "btl_tcp_sndbuf") || strings.Contains(stdout, "frag_size") {
		t.Errorf("printed %s\nwant no TCP fragment without a host [[link]] table", stdout)
	}
	os.Remove(strings.Fields(stdout)[2])
	// [comm] tcp_fragment: auto sizes it from the host link (1 Gbit/s:
	// 32 KiB, 10 Gbit/s: 512 KiB), a size is passed as it is, off passes
	// none.
	for _, c := range []struct{ set, link, want string }{
		{"", "1Gbit/s", " --mca btl_tcp_sndbuf 32768 --mca btl_tcp_rdma_pipeline_frag_size 32768 "},
		{"", "10Gbit/s", " --mca btl_tcp_sndbuf 524288 --mca btl_tcp_rdma_pipeline_frag_size 524288 "},
		{"comm.tcp_fragment=64KiB", "", " --mca btl_tcp_sndbuf 65536 --mca btl_tcp_rdma_pipeline_frag_size 65536 "},
		{"comm.tcp_fragment=off", "1Gbit/s", ""},
	} {
		src := twoHosts
		if c.link != "" {
			src += "\n[[link]]\nclass = \"host\"\nbandwidth = \"" + c.link + "\"\n"
		}
		args := []string{"launch", "--cluster", writeCluster(t, src), "--dry-run", "--mpirun", "mpirun"}
		if c.set != "" {
			args = append(args, "--set", c.set)
		}
		code, stdout, stderr := gorun(t, append(args, "x.star")...)
		if code != 0 {
			t.Fatalf("%s %s: exit %d: %s", c.set, c.link, code, stderr)
		}
		os.Remove(strings.Fields(stdout)[2])
		if c.want == "" && strings.Contains(stdout, "btl_tcp_sndbuf") || c.want != "" && !strings.Contains(stdout, c.want) {
			t.Errorf("%s %s: printed %s\nwant %q", c.set, c.link, stdout, c.want)
		}
	}
	// The heartbeat: a tenth of comm.timeout, 1 to 10 s.
	for _, c := range []struct{ timeout, want time.Duration }{{time.Second, time.Second}, {10 * time.Second, time.Second},
		{60 * time.Second, 6 * time.Second}, {time.Hour, 10 * time.Second}} {
		if got := heartbeat(c.timeout); got != c.want {
			t.Errorf("heartbeat(%v) = %v, want %v", c.timeout, got, c.want)
		}
	}
}

// TestLaunchProcesses: cluster.processes sets -np; processes are not
// bound unless the cluster says so.
func TestLaunchProcesses(t *testing.T) {
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\nprocesses = 1\n[[node]]\nhost = \"127.0.0.1\"\nslots = 1\n")
	code, stdout, stderr := gorun(t, "launch", "--dry-run", "--mpirun", "mpirun", "--cluster", cluster, "a b.star")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, " -np 1 --map-by slot --bind-to none ") || !strings.Contains(stdout, " 'a b.star' --cluster ") {
		t.Errorf("printed %s", stdout)
	}
	// The temporary hostfile of a dry run is kept, for the printed command.
	f := strings.Fields(stdout)[2]
	if _, err := os.Stat(f); err != nil {
		t.Errorf("hostfile: %v", err)
	}
	os.Remove(f)
	// Bound to cores: one core a process of one device.
	code, stdout, _ = gorun(t, "launch", "--dry-run", "--mpirun", "mpirun", "--cluster", cluster, "--set", "cluster.bind=core", "x.star")
	if code != 0 || !strings.Contains(stdout, " --map-by slot --bind-to core ") || !strings.HasSuffix(stdout, " x.star --cluster "+cluster+" --set cluster.bind=core\n") {
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

// fakeSSH writes an ssh client for tests that runs the remote command
// here, as a host sharing this machine's files would, but for the hosts
// in fail: 10.0.0.8 does not answer, 10.0.0.9 has another gorun (the
// path to replace is given), 10.0.0.10 lacks orted, 10.0.0.11 hangs.
func fakeSSH(t *testing.T, self, other string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ssh")
	src := `#!/bin/sh
# the last two arguments: the host and the remote command
for a; do host=$cmd; cmd=$a; done
case "$host" in
10.0.0.8) echo "ssh: connect to host 10.0.0.8 port 22: Connection timed out" >&2; exit 255;;
10.0.0.9) cmd=$(printf '%s' "$cmd" | sed "s|'` + self + `'|'` + other + `'|");;
10.0.0.10) cmd=$(printf '%s' "$cmd" | sed "s|command -v orted|command -v no-such-orted|");;
10.0.0.11) exec sleep 60;;
esac
exec sh -c "$cmd"
`
	if err := os.WriteFile(path, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLaunchRuns: launch checks the remote host over ssh, then runs
// mpirun with its stdout, stderr and exit status passed through.
func TestLaunchRuns(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"fake mpirun $*\"\necho oops >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, small)
	cluster := writeCluster(t, twoHosts+"\n[ssh]\nprogram = \""+fakeSSH(t, self, script)+"\"\n")
	code, stdout, stderr := gorun(t, "launch", "--cluster", cluster, "--mpirun", fake, script, "--set", "epochs=2")
	if code != 3 {
		t.Errorf("exit %d, want mpirun's 3 (stderr %q)", code, stderr)
	}
	if !strings.HasPrefix(stdout, "fake mpirun --hostfile ") || !strings.Contains(stdout, " -np 5 ") || !strings.HasSuffix(stdout, " "+script+" --cluster "+cluster+" --set epochs=2\n") {
		t.Errorf("stdout %q", stdout)
	}
	if stderr != "oops\n" {
		t.Errorf("stderr %q, want only mpirun's", stderr)
	}
	// The temporary hostfile is removed after the run.
	if f := strings.Fields(stdout); len(f) > 3 {
		if _, err := os.Stat(f[3]); !os.IsNotExist(err) {
			t.Errorf("hostfile %s left behind: %v", f[3], err)
		}
	}
}

// TestLaunchChecksHosts: before mpirun runs, every remote host is checked
// at once over ssh, and each that cannot run its ranks is named with its
// node and why: it does not answer, has another gorun, lacks orted, hangs.
func TestLaunchChecksHosts(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "mpirun-ran")
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, small)
	ssh := fakeSSH(t, self, script)
	nodes := "[[node]]\nhost = \"10.0.0.7\"\n[[node]]\nhost = \"10.0.0.8\"\n[[node]]\nhost = \"10.0.0.9\"\n[[node]]\nhost = \"10.0.0.10\"\n"
	cluster := writeCluster(t, "[cluster]\ntransport = \"mpi\"\n[ssh]\nprogram = \""+ssh+"\"\n"+nodes)
	start := time.Now()
	code, stdout, stderr := gorunWithin(t, time.Minute, "launch", "--cluster", cluster, "--mpirun", fake, script)
	if code != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want exit 1 and nothing", code, stdout)
	}
	for _, want := range []string{
		cluster + ": 3 of 4 hosts cannot run their ranks:\n",
		"\n  node[2] 10.0.0.8: does not answer ssh: ssh: connect to host 10.0.0.8 port 22: Connection timed out (check the host, the [ssh] table",
		"\n  node[3] 10.0.0.9 (" + hostname(t) + "): has another gorun at " + self + " (sha256 ",
		"… there, ",
		"\n  node[4] 10.0.0.10 (" + hostname(t) + "): has no orted on the PATH a non-interactive ssh session gets: install OpenMPI there",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "node[1]") {
		t.Errorf("the good host is named:\n%s", stderr)
	}
	t.Logf("checked 4 hosts in %v:\n%s", time.Since(start), stderr)
	// A missing script and a missing working folder.
	c, err := engine.ParseCluster("c.toml", []byte("[cluster]\ntransport = \"mpi\"\n[ssh]\nprogram = \""+ssh+"\"\nconnect_timeout = \"1s\"\n"+
		"[[node]]\nhost = \"10.0.0.7\"\n[[node]]\nhost = \"10.0.0.11\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	files := []localFile{{"gorun", self, "0"}, {"script", filepath.Join(dir, "gone.star"), "0"}}
	start = time.Now()
	err = checkHosts(context.Background(), &c, "c.toml", []bool{true, true}, filepath.Join(dir, "nowhere"), files, time.Second)
	for _, want := range []string{
		"has no folder " + filepath.Join(dir, "nowhere") + ", where the ranks start",
		"has another gorun at " + self,
		"has no script " + filepath.Join(dir, "gone.star") + ": every host needs it at the same path as here",
		"node[2] 10.0.0.11: does not answer: " + ssh + " gave no reply within 2s",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a hung host took %v to be named (limit 2s)", took)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("mpirun ran")
	}
}

// hostname is this machine's name, as uname -n prints it.
func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
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
