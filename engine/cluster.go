package engine

import (
	"fmt"
	"time"
)

// Cluster is where a run executes: how many devices, of which kind, and
// how they talk. It comes from a cluster TOML file (see LoadCluster) or
// from flags; DefaultCluster gives one CPU device.
type Cluster struct {
	Backend   string // "cpu" (default) or "cuda"
	Transport string // "inproc" (default), "mpi" or "nccl"
	Devices   int    // devices in this process (default 1)
	// Algorithm is the collective algorithm: "auto" (default), "ring",
	// "tree" or "direct".
	Algorithm string
	// BucketMB overrides the script's all-reduce bucket size when > 0.
	BucketMB float64
	// Timeout bounds every collective (default 60s).
	Timeout time.Duration
	// Weights are per-device speeds for the weighted partition strategy
	// (nil: equal).
	Weights []float64
	// Nodes lists hosts for `gorun launch`.
	Nodes []Host
	// File is the TOML file the cluster came from, for errors.
	File string
}

// Host is one host of a multi-process run.
type Host struct {
	Host  string
	Slots int
}

// DefaultCluster is one CPU device in this process.
func DefaultCluster() Cluster {
	return Cluster{Backend: "cpu", Transport: "inproc", Devices: 1, Algorithm: "auto", Timeout: 60 * time.Second}
}

// Validate checks the cluster's values.
func (c *Cluster) Validate() error {
	where := "cluster"
	if c.File != "" {
		where = c.File
	}
	switch {
	case c.Devices < 1:
		return fmt.Errorf("%s: devices must be ≥ 1, got %d", where, c.Devices)
	case c.Backend != "cpu" && c.Backend != "cuda":
		return fmt.Errorf("%s: backend must be \"cpu\" or \"cuda\", got %q", where, c.Backend)
	case c.Backend == "cuda":
		return fmt.Errorf("%s: backend \"cuda\" needs a gorun built with -tags cuda", where)
	case c.Transport != "inproc":
		return fmt.Errorf("%s: transport %q is not available in this build (inproc only)", where, c.Transport)
	case c.Algorithm != "auto" && c.Algorithm != "ring" && c.Algorithm != "tree" && c.Algorithm != "direct":
		return fmt.Errorf("%s: [comm] algorithm must be \"auto\", \"ring\", \"tree\" or \"direct\", got %q", where, c.Algorithm)
	case c.Timeout <= 0:
		return fmt.Errorf("%s: timeout must be positive, got %v", where, c.Timeout)
	case c.Weights != nil && len(c.Weights) != c.Devices:
		return fmt.Errorf("%s: %d weights for %d devices", where, len(c.Weights), c.Devices)
	}
	for i, w := range c.Weights {
		if w <= 0 {
			return fmt.Errorf("%s: weight of device %d must be positive, got %g", where, i, w)
		}
	}
	return nil
}
