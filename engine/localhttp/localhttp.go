// Package localhttp is the HTTP plumbing gorun's own servers share
// (`gorun board`, `gorun serve`): opening the listening address with
// errors that say what to do, and the Host check that keeps a server
// bound to this machine from answering pages of other sites (DNS
// rebinding).
package localhttp

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// Listen opens the TCP address addr. Its errors name the address and say
// what to do: one in use (hint names what may hold it, such as "another
// gorun serve?"), one this machine does not have, a port that needs
// privileges.
func Listen(addr, hint string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s is in use (%s): stop it, or choose another port", addr, hint)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%s: this machine has no such address", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("%s: permission denied (ports below 1024 need privileges)", addr)
	}
	return nil, fmt.Errorf("%s: %w", addr, err)
}

// HostAllowed says whether a request's Host header names this server: an
// IP address, localhost, or one of hosts (compared without case). A page
// of another site whose name was made to resolve to this machine is
// refused.
func HostAllowed(host string, hosts []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, h := range hosts {
		if strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}
