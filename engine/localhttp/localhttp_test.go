package localhttp

import (
	"strings"
	"testing"
)

// TestHostAllowed: IP addresses (with or without a port, IPv6 in
// brackets), localhost and the listed names pass; other names and an
// empty Host do not.
func TestHostAllowed(t *testing.T) {
	hosts := []string{"box.lan"}
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:6006": true, "10.0.0.7": true, "localhost": true, "LOCALHOST:80": true,
		"box.lan:80": true, "BOX.LAN": true, "evil.example:8080": false, "": false, ":80": false, "localhost.evil": false,
	} {
		if got := HostAllowed(host, hosts); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestListenInUse: an address in use is named with the hint.
func TestListenInUse(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	if _, err := Listen(addr, "another gorun serve?"); err == nil || err.Error() != addr+" is in use (another gorun serve?): stop it, or choose another port" {
		t.Errorf("Listen on a busy address: %v", err)
	}
	if _, err := Listen("127.0.0.1:99999", "x"); err == nil || !strings.Contains(err.Error(), "127.0.0.1:99999") {
		t.Errorf("Listen on a bad port: %v", err)
	}
}
