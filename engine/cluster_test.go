package engine

import (
	"strings"
	"testing"
	"time"
)

func TestParseCluster(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte(`
[cluster]
backend = "cpu"
devices = 2
weights = [1.0, 3.0]

[comm]
algorithm = "ring"
bucket_mb = 4
timeout = "2s"

[[node]]
host = "127.0.0.1"
slots = 2
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Devices != 2 || c.Algorithm != "ring" || c.BucketMB != 4 || c.Timeout != 2*time.Second ||
		len(c.Weights) != 2 || len(c.Nodes) != 1 || c.Nodes[0].Slots != 2 || c.Transport != "inproc" {
		t.Errorf("cluster = %+v", c)
	}
	// An empty file is the default cluster.
	c, err = ParseCluster("empty.toml", nil)
	if err != nil || c.Devices != 1 || c.Timeout != 60*time.Second || c.Algorithm != "auto" {
		t.Errorf("empty file: %+v, %v", c, err)
	}
}

func TestParseClusterErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"[cluster]\ndevices = 2\ndevice = 3\n", `c.toml:3:1: unknown key "cluster.device"`},
		{"[cluster]\n\n[comms]\nalgorithm = \"ring\"\n", `c.toml:3:2: unknown key "comms"`},
		{"[cluster]\ndevices = \"two\"\n", "c.toml:2:"},
		{"[cluster]\ndevices = 0\n", "devices must be ≥ 1, got 0"},
		{"[comm]\nalgorithm = \"star\"\n", `algorithm must be "auto", "ring", "tree" or "direct", got "star"`},
		{"[comm]\ntimeout = \"soon\"\n", `timeout "soon": want a duration`},
		{"[cluster]\ntransport = \"mpi\"\n", `transport "mpi" is not available in this build`},
		{"[cluster]\ndevices = 2\nweights = [1.0]\n", "1 weights for 2 devices"},
		{"[cluster\n", "c.toml:1:"},
	}
	for _, c := range cases {
		_, err := ParseCluster("c.toml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.src, err, c.want)
		}
	}
}
