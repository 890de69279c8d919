package engine

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseCluster(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte(`
[cluster]
backend = "cpu"
devices = 2
weights = [1.0, 3]

[comm]
algorithm = "ring"
bucket_mb = 4
timeout = "2s"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{Backend: "cpu", Transport: "inproc", Devices: 2, Algorithm: "ring", BucketMB: 4,
		Timeout: 2 * time.Second, Weights: []float64{1, 3}, File: "c.toml"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("cluster = %+v\nwant      %+v", c, want)
	}
	// An empty file is the default cluster.
	c, err = ParseCluster("empty.toml", nil)
	d := DefaultCluster()
	d.File = "empty.toml"
	if err != nil || !reflect.DeepEqual(c, d) {
		t.Errorf("empty file: %+v, %v", c, err)
	}
	if c.ProcessCount() != 1 || c.World() != 1 {
		t.Errorf("default: %d processes, world %d", c.ProcessCount(), c.World())
	}
}

func TestParseClusterNodes(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte(`
[cluster]
transport = "mpi"
devices = 2

[[node]]
host = "10.0.0.1"
slots = 2

[[node]]
host = "10.0.0.2"     # slots default to 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Host{{"10.0.0.1", 2}, {"10.0.0.2", 1}}; !reflect.DeepEqual(c.Nodes, want) {
		t.Errorf("nodes = %v, want %v", c.Nodes, want)
	}
	if c.ProcessCount() != 3 || c.World() != 6 {
		t.Errorf("%d processes, world %d; want 3, 6", c.ProcessCount(), c.World())
	}
	// Inline tables and dotted keys are the same thing in TOML.
	c, err = ParseCluster("c.toml", []byte(`cluster.transport = "mpi"
cluster.processes = 2
comm.timeout = "1m30s"
node = [{host = "a", slots = 4}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Processes != 2 || c.ProcessCount() != 2 || c.Timeout != 90*time.Second || len(c.Nodes) != 1 || c.Nodes[0].Slots != 4 {
		t.Errorf("cluster = %+v", c)
	}
}

// TestParseClusterErrors: every error names the file, the line and the key
// in full, and says what was wanted.
func TestParseClusterErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		// unknown keys
		{"unknown key", "[cluster]\ndevices = 2\ndevice = 3\n", `c.toml:3: cluster.device: unknown key; did you mean "cluster.devices"?`},
		{"unknown table", "[cluster]\n\n[comms]\nalgorithm = \"ring\"\n", `c.toml:3: comms: unknown key; did you mean "comm"?`},
		{"key in the wrong table", "[cluster]\nbucket_mb = 4\n", `c.toml:2: cluster.bucket_mb: unknown key; did you mean "comm.bucket_mb"?`},
		{"unknown, nothing close", "[comm]\nbucket_size = 4\n", "c.toml:2: comm.bucket_size: unknown key"},
		{"unknown top-level key", "devices = 2\n", `c.toml:1: devices: unknown key; did you mean "cluster.devices"?`},
		{"dotted unknown key", "comm.bucket_mbb = 4\n", `c.toml:1: comm.bucket_mbb: unknown key; did you mean "comm.bucket_mb"?`},
		{"wrong case", "[cluster]\nDevices = 2\n", `c.toml:2: cluster.Devices: unknown key; did you mean "cluster.devices"?`},
		{"quoted dotted key", "\"cluster.devices\" = 2\n", `c.toml:1: cluster.devices: unknown key: "cluster.devices" is quoted, so its dots are part of one name; write it without quotes`},
		{"unknown node key", "[[node]]\nhost = \"a\"\nslot = 2\n", `c.toml:3: node.slot: unknown key; did you mean "node.slots"?`},
		// syntax
		{"syntax", "[cluster\n", "c.toml:2:9: expected '.' or ']' to end table name"},
		{"syntax line", "[cluster]\ndevices = = 2\n", "c.toml:2:"},
		{"duplicate key", "[cluster]\ndevices = 2\ndevices = 3\n", "c.toml:3:"},
		// types
		{"string for integer", "[cluster]\ndevices = \"two\"\n", `c.toml:2: cluster.devices: want an integer, found string "two"`},
		{"float for integer", "[cluster]\n\ndevices = 2.5\n", "c.toml:3: cluster.devices: want an integer, found float 2.5"},
		{"number for string", "[cluster]\nbackend = 3\n", `c.toml:2: cluster.backend: want a string, "cpu" or "cuda", found integer 3`},
		{"number for timeout", "[comm]\ntimeout = 60\n", `c.toml:2: comm.timeout: want a duration string such as "60s" or "2m", found integer 60`},
		{"string for float", "[comm]\nbucket_mb = \"25\"\n", `c.toml:2: comm.bucket_mb: want a number of megabytes, found string "25"`},
		{"weights not an array", "[cluster]\nweights = 1.0\n", "c.toml:2: cluster.weights: want an array of numbers such as [1.0, 3.0], found float 1"},
		{"weights of strings", "[cluster]\ndevices = 2\nweights = [1.0, \"x\"]\n", `c.toml:3: cluster.weights: want an array of numbers, found string "x" at index 1`},
		{"table is a value", "cluster = 3\n", "c.toml:1: cluster: want a table [cluster], found integer 3"},
		{"table is an array", "[[comm]]\ntimeout = \"1s\"\n", "c.toml:1: comm: want a table [comm], found an array of tables"},
		{"node is a table", "[node]\nhost = \"a\"\n", "c.toml:1: node: want [[node]] tables, one a host, found a table"},
		{"node array of numbers", "node = [1, 2]\n", "c.toml:1: node: want [[node]] tables (or an array of {host = ..., slots = ...}), found an array holding integer 1"},
		{"node host type", "[[node]]\nhost = 1\n", "c.toml:2: node[1].host: want a host name or address, found integer 1"},
		// impossible values
		{"devices = 0", "[cluster]\ndevices = 0\n", "c.toml:2: cluster.devices: must be ≥ 1, got 0"},
		{"negative processes", "[cluster]\nprocesses = -1\n", "c.toml:2: cluster.processes: must be ≥ 0 (0: the sum of the [[node]] slots), got -1"},
		{"backend", "[cluster]\nbackend = \"gpu\"\n", `c.toml:2: cluster.backend: must be "cpu" or "cuda", got "gpu"`},
		{"transport typo", "[cluster]\ntransport = \"mip\"\n", `c.toml:2: cluster.transport: must be "inproc", "mpi" or "nccl", got "mip"; did you mean "mpi"?`},
		{"algorithm", "[comm]\nalgorithm = \"star\"\n", `c.toml:2: comm.algorithm: must be "auto", "ring", "tree" or "direct", got "star"`},
		{"timeout does not parse", "[comm]\ntimeout = \"soon\"\n", `c.toml:2: comm.timeout: "soon" is not a duration: want a number and a unit, such as "60s", "2m" or "1m30s"`},
		{"timeout without unit", "[comm]\ntimeout = \"60\"\n", `comm.timeout: "60" is not a duration`},
		{"zero timeout", "[comm]\ntimeout = \"0s\"\n", `c.toml:2: comm.timeout: must be positive, got "0s"`},
		{"zero bucket", "[comm]\nbucket_mb = 0\n", "c.toml:2: comm.bucket_mb: must be positive, got 0"},
		{"tcp_fragment word", "[comm]\ntcp_fragment = \"fast\"\n", `c.toml:2: comm.tcp_fragment: want "auto", "off" or a size such as "64KiB" or a number of bytes, found string "fast"`},
		{"tcp_fragment small", "[comm]\ntcp_fragment = \"1KiB\"\n", `c.toml:2: comm.tcp_fragment: 1024 bytes is too small: want at least 4096 (4KiB), or "auto"`},
		{"tcp_fragment large", "[comm]\ntcp_fragment = 4e9\n", `c.toml:2: comm.tcp_fragment: 4000000000 bytes is too large: want at most 1073741824 (1GiB), or "off" for Open MPI's own`},
		{"tcp_fragment bool", "[comm]\ntcp_fragment = true\n", `c.toml:2: comm.tcp_fragment: want "auto", "off" or a size such as "64KiB" or a number of bytes, found boolean true`},
		{"negative weight", "[cluster]\ndevices = 2\nweights = [1.0, -1.0]\n", "c.toml:3: cluster.weights: weight 1 must be a positive finite number, got -1"},
		{"weights count", "[cluster]\ndevices = 2\nweights = [1.0]\n", "c.toml:3: cluster.weights: 1 weights for 2 devices: give one per device"},
		{"weights count, processes", "[cluster]\ntransport = \"mpi\"\nprocesses = 2\nweights = [1.0, 2.0]\ndevices = 2\n",
			"c.toml:4: cluster.weights: 2 weights for 4 devices (2 processes × 2 devices): give one per device of the world"},
		{"slots < 1", "[cluster]\ntransport = \"mpi\"\n\n[[node]]\nhost = \"a\"\n\n[[node]]\nhost = \"b\"\nslots = 0\n", "c.toml:9: node[2].slots: must be ≥ 1, got 0"},
		{"node without host", "[[node]]\nslots = 2\n", "c.toml:1: node[1]: host is missing"},
		{"processes beyond slots", "[cluster]\ntransport = \"mpi\"\nprocesses = 3\n[[node]]\nhost = \"a\"\nslots = 2\n",
			"c.toml:3: cluster.processes: 3 processes but the [[node]] entries have only 2 slots"},
		{"inproc across processes", "[cluster]\nprocesses = 2\n", `c.toml:1: cluster.transport: "inproc" connects the devices of one process, but the cluster has 2 processes`},
		{"nccl on cpu", "[cluster]\ntransport = \"nccl\"\n", `c.toml:2: cluster.transport: "nccl" needs backend "cuda", got backend "cpu"`},
	}
	for _, c := range cases {
		_, err := ParseCluster("c.toml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q:\nerror %v\nwant it to contain %q", c.name, c.src, err, c.want)
			continue
		}
		// One mistake, one error: no unknown-key noise beside it.
		if n := strings.Count(err.Error(), "\n"); n > 0 {
			t.Errorf("%s: %q: %d errors for one mistake:\n%v", c.name, c.src, n+1, err)
		}
		if msg := err.Error(); strings.Contains(msg, "struct {") || strings.Contains(msg, "engine.") || strings.Contains(msg, "int64") {
			t.Errorf("%s: error shows Go types: %s", c.name, msg)
		}
	}
}

// TestParseClusterManyErrors: all unknown keys and bad values are reported
// at once, in line order.
func TestParseClusterManyErrors(t *testing.T) {
	_, err := ParseCluster("c.toml", []byte("[cluster]\ndevice = 2\nbackend = 1\n[comm]\ntimout = \"1s\"\n"))
	want := "c.toml:2: cluster.device: unknown key; did you mean \"cluster.devices\"?\n" +
		"c.toml:3: cluster.backend: want a string, \"cpu\" or \"cuda\", found integer 1\n" +
		"c.toml:5: comm.timout: unknown key; did you mean \"comm.timeout\"?"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant\n%s", err, want)
	}
}

// TestValidateAcceptsEveryBackend: Validate no longer asks for the build;
// CheckBuild does, and says how to get one.
func TestValidateAcceptsEveryBackend(t *testing.T) {
	for _, src := range []string{
		"[cluster]\nbackend = \"cuda\"\n",
		"[cluster]\ntransport = \"mpi\"\n",
		"[cluster]\nbackend = \"cuda\"\ntransport = \"nccl\"\n",
	} {
		if _, err := ParseCluster("c.toml", []byte(src)); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

func TestCheckBuild(t *testing.T) {
	cpu, inproc := []string{"cpu"}, []string{"inproc"}
	cases := []struct {
		backend, transport string
		want               []string
	}{
		{"cpu", "inproc", nil},
		{"cuda", "inproc", []string{`c.toml: cluster.backend "cuda" is not in this gorun build (it has cpu)`, "make build-cuda", "CUDA driver", "GPU"}},
		{"cpu", "mpi", []string{`cluster.transport "mpi" is not in this gorun build (it has inproc)`, "make build-mpi", "libopenmpi-dev", "openmpi-bin"}},
		{"cuda", "nccl", []string{"backend", "make build-cuda"}},
	}
	for _, c := range cases {
		cl := DefaultCluster()
		cl.File, cl.Backend, cl.Transport = "c.toml", c.backend, c.transport
		err := cl.CheckBuild(cpu, inproc)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s/%s: %v", c.backend, c.transport, err)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s/%s: error %v, want it to contain %q", c.backend, c.transport, err, w)
			}
		}
	}
	cl := DefaultCluster()
	cl.Backend, cl.Transport = "cuda", "nccl"
	if err := cl.CheckBuild([]string{"cpu", "cuda"}, inproc); err == nil || !strings.Contains(err.Error(), "nccl") || !strings.Contains(err.Error(), "NCCL") {
		t.Errorf("nccl: %v", err)
	}
	if err := cl.CheckBuild([]string{"cpu", "cuda"}, []string{"inproc", "nccl"}); err != nil {
		t.Error(err)
	}
}

func TestClusterSet(t *testing.T) {
	c := DefaultCluster()
	for _, kv := range [][2]string{
		{"cluster.devices", "2"},
		{"cluster.backend", "cuda"},
		{"cluster.backend", `"cpu"`},
		{"cluster.transport", "mpi"},
		{"cluster.processes", "3"},
		{"cluster.weights", "1,2,3,4,5,6"},
		{"comm.algorithm", "tree"},
		{"comm.bucket_mb", "0.5"},
		{"comm.timeout", "30s"},
		{"comm.tcp_fragment", "64KiB"},
		{"node", "a:2,b"},
	} {
		if err := c.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
	}
	want := Cluster{Backend: "cpu", Transport: "mpi", Devices: 2, Processes: 3, Algorithm: "tree", BucketMB: 0.5,
		Timeout: 30 * time.Second, TCPFragment: 64 << 10, Weights: []float64{1, 2, 3, 4, 5, 6}, Nodes: []Host{{"a", 2}, {"b", 1}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("cluster = %+v\nwant      %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	// TOML forms work too.
	if err := c.Set("cluster.weights", "[1.5, 2.5]"); err != nil || len(c.Weights) != 2 || c.Weights[1] != 2.5 {
		t.Errorf("weights: %v %v", c.Weights, err)
	}
	if err := c.Set("node", `[{host = "h", slots = 4}]`); err != nil || len(c.Nodes) != 1 || c.Nodes[0] != (Host{"h", 4}) {
		t.Errorf("node: %v %v", c.Nodes, err)
	}
	// Validate checks the keys against each other after the last Set.
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.weights: 2 weights for 6 devices") {
		t.Errorf("Validate: %v", err)
	}
}

func TestClusterSetErrors(t *testing.T) {
	cases := []struct{ key, value, want string }{
		{"cluster.devices", "0", "cluster.devices: must be ≥ 1, got 0"},
		{"cluster.devices", "two", `cluster.devices: "two" is not a TOML value`},
		{"cluster.devices", `"2"`, `cluster.devices: want an integer, found string "2"`},
		{"cluster.device", "2", `cluster.device: unknown cluster key; did you mean "cluster.devices"?`},
		{"comm.bucket", "2", `comm.bucket: unknown cluster key; did you mean "comm.bucket_mb"?`},
		{"cluster.bucket_mb", "2", `did you mean "comm.bucket_mb"?`},
		{"cluster", "2", "cluster: is a table: set one of its keys, e.g. cluster.devices"},
		{"comm.timeout", "soon", `comm.timeout: "soon" is not a duration`},
		{"comm.timeout", "-1s", `comm.timeout: must be positive, got "-1s"`},
		{"comm.tcp_fragment", "100", "comm.tcp_fragment: 100 bytes is too small"},
		{"comm.tcp_fragment", "of", `comm.tcp_fragment: want "auto", "off" or a size such as "64KiB" or a number of bytes, found string "of"`},
		{"comm.algorithm", "rign", `comm.algorithm: must be "auto", "ring", "tree" or "direct", got "rign"; did you mean "ring"?`},
		{"cluster.backend", "tpu", `cluster.backend: must be "cpu" or "cuda", got "tpu"`},
		{"cluster.weights", "1,x", "cluster.weights: "},
		{"cluster.weights", "1,0", "cluster.weights: weight 1 must be a positive finite number, got 0"},
		{"node", "a:0", "node[1].slots: must be ≥ 1, got 0"},
		{"node", "a:x", `node: "a:x": want host:slots, such as 127.0.0.1:2`},
	}
	for _, c := range cases {
		cl := DefaultCluster()
		err := cl.Set(c.key, c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %s): error %v, want it to contain %q", c.key, c.value, err, c.want)
		}
		var ce *ClusterError
		if !errors.As(err, &ce) || (ce.Key != c.key && !strings.HasPrefix(ce.Key, c.key+"[")) {
			t.Errorf("Set(%s, %s): %#v does not name the key", c.key, c.value, err)
		}
		d := DefaultCluster()
		if !reflect.DeepEqual(cl, d) {
			t.Errorf("Set(%s, %s) failed but changed the cluster: %+v", c.key, c.value, cl)
		}
	}
	if !IsClusterKey("cluster.devices") || !IsClusterKey("comm.timeout") || !IsClusterKey("node") || IsClusterKey("optimizer.lr") || IsClusterKey("epochs") {
		t.Error("IsClusterKey")
	}
}

// TestShippedClusters parses every cluster file gorun ships.
func TestShippedClusters(t *testing.T) {
	files, err := filepath.Glob("../scripts/clusters/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped cluster files: %v", err)
	}
	got := map[string]Cluster{}
	for _, f := range files {
		c, err := LoadCluster(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		got[filepath.Base(f)] = c
	}
	check := func(name string, ok func(c Cluster) bool) {
		c, found := got[name]
		if !found {
			t.Errorf("scripts/clusters/%s is missing", name)
		} else if !ok(c) {
			t.Errorf("%s: %+v", name, c)
		}
	}
	check("local_2dev.toml", func(c Cluster) bool {
		return c.Backend == "cpu" && c.Transport == "inproc" && c.Devices == 2 && c.ProcessCount() == 1
	})
	check("mpi_2proc.toml", func(c Cluster) bool {
		return c.Backend == "cpu" && c.Transport == "mpi" && c.Devices == 1 && c.ProcessCount() == 2 &&
			reflect.DeepEqual(c.Nodes, []Host{{"127.0.0.1", 2}})
	})
	check("gpu_2x4.toml", func(c Cluster) bool {
		return c.Backend == "cuda" && c.Transport == "nccl" && c.World() == 8 && len(c.Nodes) == 2
	})
}

func TestLoadClusterMissing(t *testing.T) {
	_, err := LoadCluster(filepath.Join(t.TempDir(), "nope.toml"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"devices", "device", 1}, {"kitten", "sitting", 3}, {"comm", "comms", 1}, {"rign", "ring", 1}, {"mip", "mpi", 1}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// FuzzParseCluster: any input gives a Cluster that validates or an error,
// never a panic; a parsed cluster survives Set of its own values.
func FuzzParseCluster(f *testing.F) {
	for _, s := range []string{
		"",
		"[cluster]\ndevices = 2\nweights = [1.0, 3.0]\n",
		"[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"127.0.0.1\"\nslots = 2\n",
		"[comm]\nalgorithm = \"ring\"\nbucket_mb = 25\ntimeout = \"60s\"\n",
		"cluster.devices = 'x'\nnode = [{host = \"a\"}, 3]\n",
		"[cluster]\nbackend = \"cuda\"\ntransport = \"nccl\"\ndevices = 4\n[[node]]\nhost = \"a\"\n[[node]]\nhost = \"b\"\n",
		// Hostile input, round two (issue 29): bad node values, host
		// strings that would inject into the hostfile, values that are
		// not finite, timeouts too short to work.
		"[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"a\"\nslots = 0\n",
		"[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"\"\n",
		"[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"a\\nb slots=99\"\n",
		"[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"-oProxyCommand=touch /tmp/x\"\n",
		"[cluster]\ntransport = \"mpi\"\nnode = [{host = \"h\u00e9llo\"}, {host = \"fe80::1%eth0\"}]\n",
		"[node]\nhost = \"a\"\n",
		"[[comm]]\ntimeout = \"1s\"\n",
		"[cluster]\ndevices = 2\nweights = [1, inf]\n",
		"[cluster]\ndevices = 2\nweights = [nan, 1]\n",
		"[comm]\ntimeout = \"1ns\"\n",
		// gorun launch's keys (issue 28): values OpenMPI could not carry.
		"[cluster]\nnetwork = \"10.0.0.0/8,eth0\"\nbind = \"core\"\n[ssh]\nuser = \"u\"\nport = 2222\noptions = [\"A=b\"]\n",
		"[ssh]\nkey = \"/my keys/id\"\n",
		"[ssh]\noptions = [\"ProxyCommand=$(touch /tmp/x)\"]\nconnect_timeout = \"0s\"\n",
		"[cluster]\nnetwork = \"10.0.0.1/8;rm\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := ParseCluster("f.toml", src)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed cluster does not validate: %v", err)
		}
		if c.Devices < 1 || c.Timeout < MinTimeout || c.ProcessCount() < 1 {
			t.Fatalf("impossible cluster %+v", c)
		}
		for _, w := range c.Weights {
			if !(w > 0) || math.IsInf(w, 0) {
				t.Fatalf("weight %g", w)
			}
		}
		for _, h := range c.Nodes {
			if msg := CheckHost(h.Host); msg != "" || h.Slots < 1 {
				t.Fatalf("node %q slots %d: %s", h.Host, h.Slots, msg)
			}
		}
		for _, a := range c.SSH.Args(time.Second) {
			if _, ok := sshSafe(a); !ok {
				t.Fatalf("ssh argument %q would not survive OpenMPI", a)
			}
		}
		if msg := CheckNetwork(c.Network); msg != "" {
			t.Fatalf("network %q: %s", c.Network, msg)
		}
	})
}

// TestClusterMemoryAndCUDAKeys: memory_limit takes sizes with units, the
// [cuda] table its three keys, and mistakes name the key.
func TestClusterMemoryAndCUDAKeys(t *testing.T) {
	c, err := ParseCluster("c.toml", []byte("[cluster]\nmemory_limit = \"1.5GiB\"\n\n[cuda]\neager = true\ncublas = \"/opt/cuda/libcublas.so.12\"\nnccl = \"/opt/nccl/libnccl.so.2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.MemoryLimit != 3<<29 || c.Settings["cuda.eager"] != true || c.Settings["cuda.cublas"] != "/opt/cuda/libcublas.so.12" || c.Settings["cuda.nccl"] != "/opt/nccl/libnccl.so.2" {
		t.Errorf("cluster %+v", c)
	}
	for src, want := range map[string]string{
		"[cluster]\nmemory_limit = \"lots\"\n": `c.toml:2: cluster.memory_limit: "lots" is not a size`,
		"[cuda]\neager = 1\n":                  "c.toml:2: cuda.eager: want true or false, found integer",
		"[cuda]\neagr = true\n":                `cuda.eagr: unknown key; did you mean "cuda.eager"?`,
	} {
		if _, err := ParseCluster("c.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", src, err, want)
		}
	}
	c = DefaultCluster()
	if err := c.Set("cluster.memory_limit", "512MiB"); err != nil || c.MemoryLimit != 512<<20 {
		t.Errorf("Set memory_limit: %v, %d", err, c.MemoryLimit)
	}
	if err := c.Set("cuda.eager", "true"); err != nil || c.Settings["cuda.eager"] != true {
		t.Errorf("Set cuda.eager: %v", err)
	}
}

// TestTCPFragmentBytes checks [comm] tcp_fragment's three forms and auto's
// sizes from the host link: TCPFragmentTime of its one-way rate (else its
// bandwidth), at least 32 KiB, rounded up to a power of two.
func TestTCPFragmentBytes(t *testing.T) {
	parse := func(src string) Cluster {
		t.Helper()
		c, err := ParseCluster("c.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	host := func(extra string) string {
		return "[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\n" + extra
	}
	cases := []struct {
		name, src string
		want      int64
	}{
		{"no host link", "", 0},
		{"only an inproc link", "[[link]]\nclass = \"inproc\"\nbandwidth = \"100Gbit/s\"\n", 0},
		{"off", "[comm]\ntcp_fragment = \"off\"\n" + host(""), 0},
		{"a size", "[comm]\ntcp_fragment = \"64KiB\"\n", 64 << 10},
		{"bytes", "[comm]\ntcp_fragment = 5000\n", 5000},
		{"a size over auto's", "[comm]\ntcp_fragment = \"1MiB\"\n" + host(""), 1 << 20},
		{"auto, 1 Gbit/s", host(""), 32 << 10},
		{"auto said", "[comm]\ntcp_fragment = \"auto\"\n" + host(""), 32 << 10},
		{"auto, 200 Mbit/s", "[[link]]\nclass = \"host\"\nbandwidth = \"200Mbit/s\"\n", 32 << 10},
		{"auto, 8 Gbit/s", "[[link]]\nclass = \"host\"\nbandwidth = \"8Gbit/s\"\n", 256 << 10},
		{"auto, 10 Gbit/s", "[[link]]\nclass = \"host\"\nbandwidth = \"10Gbit/s\"\n", 512 << 10},
		{"auto, 100 Gbit/s", "[[link]]\nclass = \"host\"\nbandwidth = \"100Gbit/s\"\n", 4 << 20},
		{"auto, one_way first", host("one_way = \"10Gbit/s\"\n"), 512 << 10},
	}
	for _, tc := range cases {
		if c := parse(tc.src); c.TCPFragmentBytes() != tc.want {
			t.Errorf("%s: TCPFragmentBytes = %d, want %d", tc.name, c.TCPFragmentBytes(), tc.want)
		}
	}
}
