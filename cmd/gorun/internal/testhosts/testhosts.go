// Package testhosts makes several hosts on one machine, for tests of
// `gorun launch` across a network: each host is a network namespace with
// its own address on a private bridge, its own host name and its own
// sshd (Debian's openssh-server) that takes a key generated for the test;
// one more namespace, without sshd, is where launch and mpirun run. The
// hosts share this machine's files and processes' view, but for one
// folder that each sees as its own (Options.Private), so that tests can
// give hosts copies of a file that differ.
//
// It belongs to the tests of cmd/gorun (make test-cluster) and needs
// root, ip (iproute2), sshd, ssh and ssh-keygen (openssh-server,
// openssh-client), unshare and taskset (util-linux), nft and tc: Missing
// says what is not there.
// Faults are made here too: a host's link cut (CutLink), all its packets
// dropped (Drop, nftables in its namespace), its processes stopped
// (Stop), its link slowed (RateLimit, tc's tbf); its processes kept on
// given CPUs (PinCPU, taskset).
//
// Everything Up makes — namespaces, veth pairs, the bridge, processes,
// keys — Close removes, and Up first removes what a killed earlier run
// left (every name begins with Options.Prefix). A lock file keeps two
// runs on one machine apart. Errors name the command that failed and its
// output.
package testhosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options say what Up makes.
type Options struct {
	// Prefix begins every name Up gives (namespaces, links); default
	// "grc". Up removes whatever has it first.
	Prefix string
	// Hosts is the number of hosts (default 3).
	Hosts int
	// Network is the private /24 of the bridge (default "10.77.0.0/24"):
	// host i (1-based) is .i, the launcher .100. It must not be in use
	// on this machine.
	Network string
	// Private, when set, is a folder (created if need be) that each host
	// sees as its own: in host i's namespace, Dir/private/hI is mounted
	// over it. Elsewhere it is an ordinary folder.
	Private string
	// TCPRetries2 is net.ipv4.tcp_retries2 inside every namespace
	// (default 5: a connection whose data go unacknowledged fails after
	// about 13 s rather than the kernel default's 15 minutes).
	TCPRetries2 int
	// Log, when set, receives a line per step.
	Log func(format string, args ...any)
}

// Hosts is a set of hosts made by Up.
type Hosts struct {
	opts Options
	// Dir holds the keys, sshd configurations and logs, the known_hosts
	// file and the hosts' private folders.
	Dir string
	// Addrs are the hosts' addresses, host 1 first.
	Addrs []string
	// Names are the hosts' namespaces, which are also their host names.
	Names []string
	// Launcher is the namespace launch runs in, with address LauncherAddr.
	Launcher, LauncherAddr string
	// Key and KnownHosts are the client's private key and a known_hosts
	// file naming every host's key.
	Key, KnownHosts string

	lock    *os.File
	madeRun bool // Up made /run/sshd
	sshds   []*exec.Cmd
	mu      sync.Mutex
	closed  bool
}

// Missing says what this machine lacks to make hosts: "" when nothing,
// else a sentence naming it (not root, a program not installed).
func Missing() string {
	if os.Geteuid() != 0 {
		return "not root (network namespaces, veth pairs and sshd need root; CI runs as root)"
	}
	var missing []string
	for _, p := range []struct{ prog, pkg string }{
		{"ip", "iproute2"}, {"tc", "iproute2"}, {"nft", "nftables"}, {"unshare", "util-linux"}, {"taskset", "util-linux"},
		{"/usr/sbin/sshd", "openssh-server"}, {"ssh", "openssh-client"}, {"ssh-keygen", "openssh-client"},
	} {
		if _, err := exec.LookPath(p.prog); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%s)", filepath.Base(p.prog), p.pkg))
		}
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ") + ": apt-get install openssh-server openssh-client iproute2 nftables"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "no network namespaces in this kernel (/proc/self/ns/net)"
	}
	return ""
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = "grc"
	}
	if o.Hosts == 0 {
		o.Hosts = 3
	}
	if o.Network == "" {
		o.Network = "10.77.0.0/24"
	}
	if o.TCPRetries2 == 0 {
		o.TCPRetries2 = 5
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
}

// lockPath keeps two runs apart.
func lockPath(prefix string) string {
	return filepath.Join(os.TempDir(), "gorun-testhosts-"+prefix+".lock")
}

// Up makes the hosts: it takes the lock (waiting up to lockWait for
// another run), removes what an earlier run left, then makes the bridge,
// the namespaces, their addresses and sshds, and waits until every host
// answers ssh. On error it removes what it made.
func Up(opts Options) (h *Hosts, err error) {
	opts.defaults()
	pfx, err := netip.ParsePrefix(opts.Network)
	if err != nil || pfx.Bits() != 24 || !pfx.Addr().Is4() || pfx.Masked() != pfx {
		return nil, fmt.Errorf("testhosts: Network %q: want an IPv4 /24 such as 10.77.0.0/24", opts.Network)
	}
	if opts.Hosts < 1 || opts.Hosts > 99 {
		return nil, fmt.Errorf("testhosts: %d hosts: want 1 to 99", opts.Hosts)
	}
	h = &Hosts{opts: opts, Launcher: opts.Prefix + "-l"}
	base := pfx.Addr().As4()
	addr := func(last int) string { return fmt.Sprintf("%d.%d.%d.%d", base[0], base[1], base[2], last) }
	for i := 1; i <= opts.Hosts; i++ {
		h.Addrs = append(h.Addrs, addr(i))
		h.Names = append(h.Names, fmt.Sprintf("%s-h%d", opts.Prefix, i))
	}
	h.LauncherAddr = addr(100)

	if h.lock, err = os.OpenFile(lockPath(opts.Prefix), os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return nil, fmt.Errorf("testhosts: %w", err)
	}
	if err := flockWithin(h.lock, lockWait); err != nil {
		h.lock.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
			h = nil
		}
	}()
	Cleanup(opts.Prefix)
	if err := checkFree(pfx); err != nil {
		return h, err
	}
	if h.Dir, err = os.MkdirTemp("", "gorun-testhosts-"); err != nil {
		return h, fmt.Errorf("testhosts: %w", err)
	}
	h.Key = filepath.Join(h.Dir, "id_ed25519")
	h.KnownHosts = filepath.Join(h.Dir, "known_hosts")
	hostKey := filepath.Join(h.Dir, "host_ed25519")
	for _, k := range []string{h.Key, hostKey} {
		if _, err := run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gorun-testhosts", "-f", k); err != nil {
			return h, err
		}
	}
	pub, err := os.ReadFile(h.Key + ".pub")
	if err != nil {
		return h, fmt.Errorf("testhosts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(h.Dir, "authorized_keys"), pub, 0o600); err != nil {
		return h, fmt.Errorf("testhosts: %w", err)
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		return h, fmt.Errorf("testhosts: %w", err)
	}
	var known strings.Builder
	f := strings.Fields(string(hostPub))
	for _, a := range h.Addrs {
		fmt.Fprintf(&known, "%s %s %s\n", a, f[0], f[1])
	}
	if err := os.WriteFile(h.KnownHosts, []byte(known.String()), 0o600); err != nil {
		return h, fmt.Errorf("testhosts: %w", err)
	}
	if _, err := os.Stat("/run/sshd"); os.IsNotExist(err) { // sshd's privilege separation folder
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return h, fmt.Errorf("testhosts: %w", err)
		}
		h.madeRun = true
	}

	br := opts.Prefix + "-br"
	steps := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "link", "set", br, "up"},
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return h, err
		}
	}
	// Bridged packets skip this machine's iptables (a FORWARD policy of
	// DROP, as Docker sets, would drop them); older kernels lack the key.
	run("ip", "link", "set", br, "type", "bridge", "nf_call_iptables", "0")
	nss := append(slices.Clone(h.Names), h.Launcher)
	addrs := append(slices.Clone(h.Addrs), h.LauncherAddr)
	for i, ns := range nss {
		veth := fmt.Sprintf("%s-v%d", opts.Prefix, i+1)
		for _, s := range [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"ip", "link", "set", veth, "master", br, "up"},
			{"ip", "-n", ns, "addr", "add", addrs[i] + "/24", "dev", "eth0"},
			{"ip", "-n", ns, "link", "set", "eth0", "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
			{"ip", "netns", "exec", ns, "sh", "-c", fmt.Sprintf("echo %d > /proc/sys/net/ipv4/tcp_retries2", opts.TCPRetries2)},
		} {
			if _, err := run(s...); err != nil {
				return h, err
			}
		}
	}
	if opts.Private != "" {
		if err := os.MkdirAll(opts.Private, 0o755); err != nil {
			return h, fmt.Errorf("testhosts: %w", err)
		}
	}
	for i, ns := range h.Names {
		if err := h.startSSHD(i, ns, hostKey); err != nil {
			return h, err
		}
	}
	if err := h.waitSSH(30 * time.Second); err != nil {
		return h, err
	}
	opts.Log("testhosts: %d hosts up: %s (launcher %s %s)", opts.Hosts, strings.Join(h.Addrs, ", "), h.Launcher, h.LauncherAddr)
	return h, nil
}

// lockWait is how long Up waits for another run's hosts to go.
const lockWait = 5 * time.Minute

// flockWithin takes an exclusive lock on f, waiting at most d.
func flockWithin(f *os.File, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("testhosts: locking %s: %w", f.Name(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testhosts: another run holds %s (its hosts are up) after %v", f.Name(), d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkFree fails when this machine (its own namespace) has an address
// in the network already: the hosts' addresses must exist only on the
// bridge.
func checkFree(pfx netip.Prefix) error {
	out, err := run("ip", "-o", "addr", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet" {
				continue
			}
			if p, err := netip.ParsePrefix(f[i+1]); err == nil && pfx.Contains(p.Addr()) {
				return fmt.Errorf("testhosts: this machine already has %s, in the test network %s: choose another Network", f[i+1], pfx)
			}
		}
	}
	return nil
}

// startSSHD starts host i's sshd in its namespace, with its own host name
// and, when Private is set, its own copy of that folder.
func (h *Hosts) startSSHD(i int, ns, hostKey string) error {
	conf := filepath.Join(h.Dir, fmt.Sprintf("sshd%d.conf", i+1))
	text := fmt.Sprintf(`ListenAddress %s
HostKey %s
PidFile none
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
LogLevel ERROR
`, h.Addrs[i], hostKey, filepath.Join(h.Dir, "authorized_keys"))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return fmt.Errorf("testhosts: %w", err)
	}
	setup := "hostname " + ns
	if h.opts.Private != "" {
		own := filepath.Join(h.Dir, "private", fmt.Sprintf("h%d", i+1))
		if err := os.MkdirAll(own, 0o755); err != nil {
			return fmt.Errorf("testhosts: %w", err)
		}
		// ip netns exec runs in a mount namespace of its own whose
		// mounts stay in it.
		setup += fmt.Sprintf(" && mount --bind %s %s", shq(own), shq(h.opts.Private))
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
		setup+" && exec /usr/sbin/sshd -D -f "+shq(conf)+" -E "+shq(filepath.Join(h.Dir, fmt.Sprintf("sshd%d.log", i+1))))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testhosts: starting sshd in %s: %w", ns, err)
	}
	h.sshds = append(h.sshds, cmd)
	go cmd.Wait()
	return nil
}

// PrivateDir is the folder that host i (0-based) sees at Options.Private.
func (h *Hosts) PrivateDir(i int) string {
	return filepath.Join(h.Dir, "private", fmt.Sprintf("h%d", i+1))
}

// waitSSH waits until every host runs a command over ssh from the
// launcher's namespace.
func (h *Hosts) waitSSH(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for i, a := range h.Addrs {
		for {
			out, err := h.runIn(h.Launcher, 10*time.Second, append([]string{"ssh"}, append(h.SSHArgs(), a, "hostname")...)...)
			if err == nil && strings.TrimSpace(out) == h.Names[i] {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(h.Dir, fmt.Sprintf("sshd%d.log", i+1)))
				return fmt.Errorf("testhosts: host %s (%s) does not answer ssh after %v: %v %s; its sshd log: %s", h.Names[i], a, limit, err, out, log)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// SSHArgs are ssh's arguments that reach the hosts (before the host).
func (h *Hosts) SSHArgs() []string {
	return []string{"-i", h.Key, "-o", "IdentitiesOnly=yes", "-o", "UserKnownHostsFile=" + h.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-l", "root"}
}

// ClusterTables is the [ssh] table and the [[node]] tables of a cluster
// file for the hosts, slots processes each, with cluster.network: append
// it to a [cluster] and [comm] of your own (it begins with the network
// key, inside [cluster]).
func (h *Hosts) ClusterTables(slots int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "network = %q\n\n[ssh]\nuser = \"root\"\nkey = %q\noptions = [\"UserKnownHostsFile=%s\", \"StrictHostKeyChecking=yes\"]\nconnect_timeout = \"5s\"\n",
		h.opts.Network, h.Key, h.KnownHosts)
	for _, a := range h.Addrs {
		fmt.Fprintf(&b, "\n[[node]]\nhost = %q\nslots = %d\n", a, slots)
	}
	return b.String()
}

// Command is a command run in the launcher's namespace.
func (h *Hosts) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Launcher, name}, args...)...)
}

// CutLink takes host i's (0-based) link down, in its namespace, or back
// up.
func (h *Hosts) CutLink(i int, down bool) error {
	state := "up"
	if down {
		state = "down"
	}
	_, err := run("ip", "-n", h.Names[i], "link", "set", "eth0", state)
	return err
}

// Drop makes host i drop every packet it sends or receives (nftables,
// in its namespace), or stop dropping them.
func (h *Hosts) Drop(i int, drop bool) error {
	if !drop {
		_, err := h.runIn(h.Names[i], 10*time.Second, "nft", "delete", "table", "inet", h.opts.Prefix+"drop")
		return err
	}
	rules := fmt.Sprintf("table inet %sdrop {\n  chain in { type filter hook input priority 0; policy drop; }\n  chain out { type filter hook output priority 0; policy drop; }\n}\n", h.opts.Prefix)
	cmd := exec.Command("ip", "netns", "exec", h.Names[i], "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testhosts: nft in %s: %v: %s", h.Names[i], err, out)
	}
	return nil
}

// RateLimit limits host i's link to rate (tc's units: "1mbit", "1gbit")
// both ways, with tc's token bucket filter; "" removes the limit. The
// bucket holds TBFBurst(rate) bytes and the queue TBFLatency of sending,
// so that the link behaves as one of that rate: a bucket much smaller
// than what the rate sends between two timer ticks (tc-tbf(8): burst ≥
// rate/HZ), as a fixed 16 KB at 1 Gbit/s, holds TCP well below the rate.
func (h *Hosts) RateLimit(i int, rate string) error {
	if rate == "" {
		return h.RateLimitTBF(i, "", "", "")
	}
	burst, err := TBFBurst(rate)
	if err != nil {
		return err
	}
	return h.RateLimitTBF(i, rate, burst, TBFLatency)
}

// TBFLatency is the longest a packet waits in RateLimit's queue.
const TBFLatency = "50ms"

// TBFBurst is RateLimit's bucket for rate (tc's units): 2 ms of sending
// at the rate, at least 32 KiB, in bytes ("250000b" for "1gbit").
func TBFBurst(rate string) (string, error) {
	bps, err := ParseRate(rate)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%db", max(int64(bps/8*0.002), 32<<10)), nil
}

// ParseRate reads a rate in tc's units (bit, kbit, mbit, gbit, tbit and
// bps, kbps, mbps, gbps, tbps for bytes; tc's k is 1000) as bits/s.
func ParseRate(rate string) (float64, error) {
	i := strings.IndexFunc(rate, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("testhosts: rate %q: want a number and a unit of tc's (1gbit, 200mbit)", rate)
	}
	v, err := strconv.ParseFloat(rate[:i], 64)
	unit := strings.ToLower(rate[i:])
	mult := map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
		"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}[unit]
	if err != nil || mult == 0 || v <= 0 {
		return 0, fmt.Errorf("testhosts: rate %q: want a number and a unit of tc's (1gbit, 200mbit)", rate)
	}
	return v * mult, nil
}

// RateLimitTBF limits host i's link both ways with tc's token bucket
// filter of rate, burst and latency (tc's units); rate "" removes it.
func (h *Hosts) RateLimitTBF(i int, rate, burst, latency string) error {
	veth := fmt.Sprintf("%s-v%d", h.opts.Prefix, i+1)
	if rate == "" {
		run("tc", "-n", h.Names[i], "qdisc", "del", "dev", "eth0", "root")
		run("tc", "qdisc", "del", "dev", veth, "root")
		return nil
	}
	for _, s := range [][]string{
		{"tc", "-n", h.Names[i], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", burst, "latency", latency},
		{"tc", "qdisc", "replace", "dev", veth, "root", "tbf", "rate", rate, "burst", burst, "latency", latency},
	} {
		if _, err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// PinCPU keeps host i's (0-based) processes, and those it starts later
// through its sshd (they inherit it), on the CPUs listed (taskset's
// list, "0" or "0,2-3"); "" lets them run on every CPU again. Hosts that
// outnumber the machine's cores then share them in a fixed way rather
// than as the scheduler moves them.
func (h *Hosts) PinCPU(i int, cpus string) error {
	if cpus == "" {
		cpus = fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	}
	for _, pid := range nsPids(h.Names[i]) {
		if out, err := run("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)); err != nil {
			if _, gone := os.Stat(fmt.Sprintf("/proc/%d", pid)); gone != nil {
				continue // it ended meanwhile
			}
			return fmt.Errorf("testhosts: pinning host %s's process %d to CPUs %s: %w %s", h.Names[i], pid, cpus, err, out)
		}
	}
	return nil
}

// Proc is a process of a host.
type Proc struct {
	Pid int
	Cmd string // its command line, arguments joined by spaces
}

// Procs are the processes in host i's namespace (i = -1: the launcher's),
// but its sshd listener.
func (h *Hosts) Procs(i int) []Proc {
	ns := h.Launcher
	if i >= 0 {
		ns = h.Names[i]
	}
	var out []Proc
	for _, pid := range nsPids(ns) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if strings.Contains(cmd, "sshd -D -f ") && strings.Contains(cmd, "[listener]") || strings.HasPrefix(cmd, "/usr/sbin/sshd -D -f ") {
			continue
		}
		out = append(out, Proc{pid, cmd})
	}
	return out
}

// Signal sends sig to every process of host i (its sshd listener too):
// SIGSTOP makes a host that stops answering, SIGCONT resumes it.
func (h *Hosts) Signal(i int, sig syscall.Signal) {
	for _, pid := range nsPids(h.Names[i]) {
		syscall.Kill(pid, sig)
	}
}

// nsPids are the processes in namespace ns.
func nsPids(ns string) []int {
	out, err := run("ip", "netns", "pids", ns)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if p, err := strconv.Atoi(f); err == nil && p != os.Getpid() {
			pids = append(pids, p)
		}
	}
	return pids
}

// Close removes everything Up made: it kills every process of the
// namespaces (stopped ones too), deletes the namespaces (their veth pairs
// and nftables go with them), the bridge and Dir, and releases the lock.
// It may be called more than once.
func (h *Hosts) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	err := cleanup(h.opts.Prefix)
	if h.Dir != "" {
		// The private folders were mounted only inside the namespaces,
		// now gone; Options.Private itself is the caller's.
		os.RemoveAll(h.Dir)
	}
	if h.madeRun {
		os.Remove("/run/sshd")
	}
	if h.lock != nil {
		h.lock.Close() // releases the flock
		os.Remove(h.lock.Name())
	}
	return err
}

// Cleanup removes what Up made with prefix and left behind (a run that
// was killed): processes in its namespaces, the namespaces, its links.
// Call it only while holding the lock (Up does).
func Cleanup(prefix string) { cleanup(prefix) }

func cleanup(prefix string) error {
	var errs []error
	out, _ := run("ip", "netns", "list")
	var nss []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			nss = append(nss, f[0])
		}
	}
	// Kill until none is left: a process may fork while we kill.
	for round := 0; round < 50; round++ {
		left := 0
		for _, ns := range nss {
			for _, pid := range nsPids(ns) {
				syscall.Kill(pid, syscall.SIGKILL)
				left++
			}
		}
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, ns := range nss {
		if _, err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	links, _ := run("ip", "-o", "link", "show")
	for _, line := range strings.Split(links, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		name, _, _ = strings.Cut(name, "@")
		if strings.HasPrefix(name, prefix+"-") {
			// A veth goes with its namespace's end, perhaps meanwhile.
			if out, err := run("ip", "link", "del", name); err != nil && !strings.Contains(out, "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Leftovers names what of prefix's set-up is still on this machine
// (namespaces, links), for tests that check the teardown.
func Leftovers(prefix string) []string {
	var left []string
	out, _ := run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left = append(left, "namespace "+f[0])
		}
	}
	links, _ := run("ip", "-o", "link", "show")
	for _, line := range strings.Split(links, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if strings.HasPrefix(name, prefix+"-") {
				left = append(left, "link "+name)
			}
		}
	}
	return left
}

// runIn runs a command in namespace ns within limit.
func (h *Hosts) runIn(ns string, limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("testhosts: %s in %s: %v: %s", strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// run runs a command (at most a minute) and returns its output; the error
// names it and holds its output.
func run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("testhosts: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
