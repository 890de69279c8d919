package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"gorun/engine/localhttp"
)

// Listen opens the TCP address addr for a Server. Its errors name the
// address and say what to do: one in use, one this machine does not
// have, a port that needs privileges.
func Listen(addr string) (net.Listener, error) {
	return localhttp.Listen(addr, "another gorun serve?")
}

// readHeaderTimeout bounds the reading of a request's headers.
const readHeaderTimeout = 5 * time.Second

// idleTimeout is how long a kept-alive connection may wait for its next
// request.
const idleTimeout = 60 * time.Second

// ShutdownTimeout is how long Serve waits, once its context ends, for the
// requests under way: the longest one request may take (its turn and
// answer, Timeout; its body, ReadTimeout; writing, WriteTimeout) and a
// second more.
func (s *Server) ShutdownTimeout() time.Duration {
	return s.opts.Timeout + s.opts.ReadTimeout + s.opts.WriteTimeout + time.Second
}

// Serve serves s on ln until ctx ends, then shuts down gracefully: it
// stops accepting connections, /healthz answers 503, and the requests
// under way (those waiting for a turn included) finish with their
// answers, for up to ShutdownTimeout; connections still open then are
// closed. The requests' contexts do not derive from ctx: a shutdown does
// not cancel them. Serve returns nil after such a shutdown, or the error
// that stopped the server.
//
// The server reads a request's headers within 5s, keeps idle
// connections 60s, and moves each request's read and write deadlines as
// it goes (Options.ReadTimeout, Timeout, WriteTimeout).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          s.opts.Log,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	s.stopping.Store(true)
	if s.opts.OnStop != nil {
		s.opts.OnStop(s.InFlight())
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout())
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
		err = fmt.Errorf("requests still under way after %v were cut off: %w", s.ShutdownTimeout(), err)
	}
	<-done
	return err
}

// InFlight is how many /v1/ requests are being read or answered now.
func (s *Server) InFlight() int { return len(s.slots) }
