package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// clusterFile is the TOML layout of a cluster file. Every key has its
// default written in DefaultCluster.
type clusterFile struct {
	Cluster struct {
		Backend   *string   `toml:"backend"`
		Transport *string   `toml:"transport"`
		Devices   *int      `toml:"devices"`
		Weights   []float64 `toml:"weights"`
	} `toml:"cluster"`
	Comm struct {
		Algorithm *string  `toml:"algorithm"`
		BucketMB  *float64 `toml:"bucket_mb"`
		Timeout   *string  `toml:"timeout"`
	} `toml:"comm"`
	Node []struct {
		Host  string `toml:"host"`
		Slots int    `toml:"slots"`
	} `toml:"node"`
}

// LoadCluster reads a cluster TOML file:
//
//	[cluster]
//	backend   = "cpu"      # cpu | cuda
//	transport = "inproc"   # inproc | mpi | nccl
//	devices   = 2          # devices per process
//	weights   = [1.0, 2.0] # optional: relative device speeds (weighted partition)
//
//	[comm]
//	algorithm = "ring"     # ring | tree | direct | auto
//	bucket_mb = 25         # overrides the script's bucket size
//	timeout   = "60s"
//
//	[[node]]               # used by `gorun launch`
//	host  = "127.0.0.1"
//	slots = 2
//
// Keys left out keep DefaultCluster's values. Unknown keys and values of
// the wrong type are errors that give the file and line.
func LoadCluster(path string) (Cluster, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Cluster{}, fmt.Errorf("cluster file: %w", err)
	}
	return ParseCluster(path, src)
}

// ParseCluster parses a cluster file's contents; path names it in errors.
func ParseCluster(path string, src []byte) (Cluster, error) {
	var f clusterFile
	dec := toml.NewDecoder(bytes.NewReader(src)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var strict *toml.StrictMissingError
		var de *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			var msgs []string
			for _, e := range strict.Errors {
				row, col := e.Position()
				msgs = append(msgs, fmt.Sprintf("%s:%d:%d: unknown key %q", path, row, col, strings.Join(e.Key(), ".")))
			}
			return Cluster{}, errors.New(strings.Join(msgs, "\n"))
		case errors.As(err, &de):
			row, col := de.Position()
			return Cluster{}, fmt.Errorf("%s:%d:%d: %s", path, row, col, de.Error())
		}
		return Cluster{}, fmt.Errorf("%s: %w", path, err)
	}
	c := DefaultCluster()
	c.File = path
	if v := f.Cluster.Backend; v != nil {
		c.Backend = *v
	}
	if v := f.Cluster.Transport; v != nil {
		c.Transport = *v
	}
	if v := f.Cluster.Devices; v != nil {
		c.Devices = *v
	}
	c.Weights = f.Cluster.Weights
	if v := f.Comm.Algorithm; v != nil {
		c.Algorithm = *v
	}
	if v := f.Comm.BucketMB; v != nil {
		if *v <= 0 {
			return Cluster{}, fmt.Errorf("%s: [comm] bucket_mb must be positive, got %g", path, *v)
		}
		c.BucketMB = *v
	}
	if v := f.Comm.Timeout; v != nil {
		d, err := time.ParseDuration(*v)
		if err != nil {
			return Cluster{}, fmt.Errorf("%s: [comm] timeout %q: want a duration such as \"60s\" or \"2m\"", path, *v)
		}
		c.Timeout = d
	}
	for i, n := range f.Node {
		if n.Host == "" || n.Slots < 1 {
			return Cluster{}, fmt.Errorf("%s: node %d: want a host and slots ≥ 1, got host %q slots %d", path, i+1, n.Host, n.Slots)
		}
		c.Nodes = append(c.Nodes, Host{Host: n.Host, Slots: n.Slots})
	}
	if err := c.Validate(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}
