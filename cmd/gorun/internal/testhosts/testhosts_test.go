package testhosts

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterFlag runs TestUpClose, which sets up network namespaces and sshd
// as root: make test-cluster gives it.
var clusterFlag = flag.Bool("cluster", false, "set up and tear down test hosts (root; make test-cluster)")

// TestUpClose: hosts come up with their own addresses, names and private
// folders, answer ssh, and leave nothing behind once closed, also when an
// earlier run's set-up was left (Up removes it first). It runs under
// make test-cluster (go test -cluster), as root.
func TestUpClose(t *testing.T) {
	if !*clusterFlag {
		t.Skip("SKIP: run by make test-cluster (as root)")
	}
	if m := Missing(); m != "" {
		t.Skip("SKIP: " + m)
	}
	private := filepath.Join(t.TempDir(), "local")
	start := time.Now()
	h, err := Up(Options{Prefix: "grt", Hosts: 2, Network: "10.78.0.0/24", Private: private, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	t.Logf("up in %v", time.Since(start))
	// Each host has its own name and its own copy of the private folder.
	for i := range 2 {
		os.WriteFile(filepath.Join(h.PrivateDir(i), "who"), []byte(h.Names[i]), 0o644)
	}
	for i, a := range h.Addrs {
		out, err := h.runIn(h.Launcher, 20*time.Second, append([]string{"ssh"}, append(h.SSHArgs(), a, "hostname; cat "+filepath.Join(private, "who"))...)...)
		if want := h.Names[i] + "\n" + h.Names[i]; err != nil || strings.TrimSpace(out) != want {
			t.Errorf("host %d: %q, %v; want %q", i+1, out, err, want)
		}
	}
	// Pinned, what host 2 starts through its sshd runs on CPU 0 only;
	// unpinned, on every CPU again.
	allowed := func() string {
		out, err := h.runIn(h.Launcher, 20*time.Second, append([]string{"ssh"}, append(h.SSHArgs(), h.Addrs[1], "grep Cpus_allowed_list /proc/self/status")...)...)
		if err != nil {
			t.Fatalf("host 2: %v %s", err, out)
		}
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Cpus_allowed_list:"))
	}
	if err := h.PinCPU(1, "0"); err != nil {
		t.Fatal(err)
	}
	if got := allowed(); got != "0" {
		t.Errorf("host 2 pinned to CPU 0: a command it starts may run on %q", got)
	}
	if err := h.PinCPU(1, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := allowed(), fmt.Sprintf("0-%d", runtime.NumCPU()-1); runtime.NumCPU() > 1 && got != want {
		t.Errorf("host 2 unpinned: a command it starts may run on %q, want %q", got, want)
	}
	// A cut link: host 2 no longer answers; back up, it does.
	if err := h.CutLink(1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.runIn(h.Launcher, 20*time.Second, append([]string{"ssh"}, append(h.SSHArgs(), "-o", "ConnectTimeout=1", h.Addrs[1], "true")...)...); err == nil {
		t.Error("host 2 answers with its link cut")
	}
	h.CutLink(1, false)
	// Dropped packets, then stopped processes (which a kill still ends).
	if err := h.Drop(0, true); err != nil {
		t.Fatal(err)
	}
	if err := h.Drop(0, false); err != nil {
		t.Fatal(err)
	}
	h.Signal(0, syscall.SIGSTOP)
	if err := h.RateLimit(0, "10mbit"); err != nil {
		t.Fatal(err)
	}
	// A killed run's set-up is removed by the next Up.
	h.lock.Close() // as if this run had been killed: the lock goes, the rest stays
	h.closed, h.lock = true, nil
	if h.madeRun { // the next Up finds sshd's folder there; this run made it
		defer os.Remove("/run/sshd")
	}
	h2, err := Up(Options{Prefix: "grt", Hosts: 1, Network: "10.78.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Close(); err != nil {
		t.Error(err)
	}
	if left := Leftovers("grt"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	os.RemoveAll(h.Dir)
}

// TestTBFBurst: RateLimit's bucket is 2 ms of the rate, at least 32 KiB;
// a rate without tc's unit is refused.
func TestTBFBurst(t *testing.T) {
	for rate, want := range map[string]string{"1gbit": "250000b", "200mbit": "50000b", "50mbit": "32768b", "4mbit": "32768b", "10gbit": "2500000b", "1.5gbps": "3000000b"} {
		if got, err := TBFBurst(rate); err != nil || got != want {
			t.Errorf("TBFBurst(%q) = %q, %v; want %q", rate, got, err, want)
		}
	}
	for _, rate := range []string{"", "1g", "gbit", "-1mbit", "0mbit"} {
		if _, err := TBFBurst(rate); err == nil || !strings.Contains(err.Error(), "tc's") {
			t.Errorf("TBFBurst(%q): %v, want an error naming tc's units", rate, err)
		}
	}
}
