package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestParseClusterNodeErrors: a bad [[node]] value gets its own error,
// naming the entry's key with the file and line, and nothing else (it used
// to come after "node.host: unknown key; did you mean "node.host"?": the
// node's keys were left undecoded when its values failed).
func TestParseClusterNodeErrors(t *testing.T) {
	const mpi = "[cluster]\ntransport = \"mpi\"\n"
	for _, tc := range []struct{ name, src, want string }{
		{"slots = 0", mpi + "[[node]]\nhost = \"a\"\nslots = 0\n", "c.toml:5: node[1].slots: must be ≥ 1, got 0"},
		{"empty host", mpi + "[[node]]\nhost = \"\"\n", `c.toml:4: node[1].host: is empty: want a host name or IP address, such as "node1" or "10.0.0.7"`},
		{"second node", mpi + "[[node]]\nhost = \"a\"\n[[node]]\nslots = 2\nhost = \"b c\"\n",
			`c.toml:7: node[2].host: "b c" is not a host name or IP address: it holds ' ' at byte 1, where a host name holds only ASCII letters, digits, hyphens and dots (RFC 1123)`},
		{"node without host", "[[node]]\nslots = 2\n", "c.toml:1: node[1]: host is missing"},
		{"node is a table", "[node]\nhost = \"a\"\n", "c.toml:1: node: want [[node]] tables, one a host, found a table"},
		{"comm is an array", "[[comm]]\ntimeout = \"1s\"\n", "c.toml:1: comm: want a table [comm], found an array of tables"},
		{"bad value and an unknown key", mpi + "[[node]]\nhost = \"a\"\nslot = 2\n[[node]]\nhost = \"b\"\nslots = 0\n",
			"c.toml:5: node.slot: unknown key; did you mean \"node.slots\"?\nc.toml:8: node[2].slots: must be ≥ 1, got 0"},
		{"inline nodes", "node = [{host = \"a\"}, {host = \"-oProxyCommand=x\"}]\n" + mpi,
			`c.toml:1: node[2].host: "-oProxyCommand=x" is not a host name or IP address: label "-oProxyCommand=x" begins or ends with a hyphen`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCluster("c.toml", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

// TestDidYouMeanNotItself: a key is never offered as its own correction.
func TestDidYouMeanNotItself(t *testing.T) {
	for _, k := range knownKeys() {
		if s := didYouMean(k); strings.Contains(s, `"`+k+`"`) {
			t.Errorf("didYouMean(%q) = %q", k, s)
		}
	}
}

// hostileHosts are host strings that must never reach an mpirun hostfile,
// with what the error says about each.
var hostileHosts = []struct{ host, why string }{
	{"a\nb slots=99", `holds '\n' at byte 1`},
	{"evil slots=64", `holds ' ' at byte 4`},
	{"a\tb", `holds '\t' at byte 1`},
	{"slots=4", `holds '=' at byte 5`},
	{"-oProxyCommand=touch /tmp/pwned", "begins or ends with a hyphen"},
	{"-x", "begins or ends with a hyphen"},
	{"host#comment", "holds '#'"},
	{"host:22", "holds ':'"},
	{"[::1]", "holds '['"},
	{"a_b", "holds '_'"},
	{"héllo.example", "holds 'é' at byte 1, where a host name holds only ASCII letters, digits, hyphens and dots (RFC 1123); write an internationalised name in its xn-- form"},
	{"ехample.com", "holds 'е' at byte 0"}, // Cyrillic
	{"a\u202eb", `holds '\u202e'`},
	{"a\x00b", `holds '\x00'`},
	{"", "is empty"},
	{"a..b", "an empty label"},
	{".a", "an empty label"},
	{strings.Repeat("a", 64) + ".com", "is 64 bytes, where a label has at most 63"},
	{strings.Repeat("abcdefg.", 32) + "com", "259 bytes, where a host name has at most 253"},
	{"300.1.1.1", "looks like an IP address but is not one"},
	{"1.2.3", "looks like an IP address but is not one"},
	{"fe80::1%eth0", "with a zone (%eth0)"},
}

func TestCheckHost(t *testing.T) {
	for _, h := range []string{"a", "node-1", "gpu01.example.com", "example.com.", "xn--hllo-bpa.example",
		"127.0.0.1", "10.0.0.7", "::1", "fe80::1", "2001:db8::7", "::ffff:10.0.0.1",
		strings.Repeat("a", 63) + ".com", strings.Repeat("abcdefg.", 30) + "abcdefghijklm"} {
		if msg := CheckHost(h); msg != "" {
			t.Errorf("CheckHost(%q) = %q, want it accepted", h, msg)
		}
	}
	for _, tc := range hostileHosts {
		msg := CheckHost(tc.host)
		if !strings.Contains(msg, tc.why) {
			t.Errorf("CheckHost(%q) = %q, want it to say %q", tc.host, msg, tc.why)
		}
		if strings.ContainsAny(msg, "\n\t\x00\u202e") {
			t.Errorf("CheckHost(%q) = %q echoes a control character", tc.host, msg)
		}
	}
}

// TestHostileHostsRefused: every way a host reaches a Cluster (the file's
// [[node]] tables or inline array, Set's host:slots and TOML forms, a
// Cluster built in Go) refuses the hostile hosts, naming the key.
func TestHostileHostsRefused(t *testing.T) {
	for _, tc := range hostileHosts {
		q := tomlString(tc.host)
		_, err := ParseCluster("c.toml", []byte("[cluster]\ntransport = \"mpi\"\n[[node]]\nhost = \"10.0.0.1\"\n[[node]]\nslots = 2\nhost = "+q+"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), "c.toml:7: node[2].host: ") || !strings.Contains(err.Error(), tc.why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("file, host %q: error %v", tc.host, err)
		}
		_, err = ParseCluster("c.toml", []byte("node = [{host = "+q+"}]\n[cluster]\ntransport = \"mpi\"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), "c.toml:1: node[1].host: ") {
			t.Errorf("inline, host %q: error %v", tc.host, err)
		}
		c := DefaultCluster()
		var ce *ClusterError
		if !strings.ContainsAny(tc.host, ",:") && tc.host != "" { // the shorthand's separators
			err = c.Set("node", tc.host+":2")
			if !errors.As(err, &ce) || ce.Key != "node[1].host" || len(c.Nodes) != 0 {
				t.Errorf("Set(node, %q): error %v, nodes %v", tc.host+":2", err, c.Nodes)
			}
		}
		err = c.Set("node", "[{host = "+q+", slots = 2}]")
		if !errors.As(err, &ce) || ce.Key != "node[1].host" || len(c.Nodes) != 0 {
			t.Errorf("Set(node, TOML %s): error %v", q, err)
		}
		c.Transport, c.Nodes = "mpi", []Host{{tc.host, 1}}
		if err := c.Validate(); !errors.As(err, &ce) || ce.Key != "node[1].host" {
			t.Errorf("Validate, host %q: %v", tc.host, err)
		}
	}
	// The shorthand splits at commas: "a,b:99" is two valid hosts, as
	// written; a host cannot hide a slots count.
	c := DefaultCluster()
	if err := c.Set("node", "a slots=99:1"); err == nil {
		t.Errorf("Set(node, %q) accepted: %v", "a slots=99:1", c.Nodes)
	}
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestClusterValuesCarryTheLine: weights that are not finite and
// timeouts too short to work are refused where the file gives them.
func TestClusterValuesCarryTheLine(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[cluster]\ndevices = 2\nweights = [1, inf]\n", "c.toml:3: cluster.weights: weight 1 must be a positive finite number, got +Inf"},
		{"[cluster]\ndevices = 2\n\nweights = [nan, 1]\n", "c.toml:4: cluster.weights: weight 0 must be a positive finite number, got NaN"},
		{"[cluster]\nweights = [-inf]\n", "c.toml:2: cluster.weights: weight 0 must be a positive finite number, got -Inf"},
		{"[comm]\ntimeout = \"1ns\"\n", `c.toml:2: comm.timeout: "1ns" is too short: a collective that waits less than 100ms fails while its data are still on the way; want at least 100ms (the default is 1m0s)`},
		{"[comm]\n\ntimeout = \"99ms\"\n", `c.toml:3: comm.timeout: "99ms" is too short`},
		{"[comm]\nbucket_mb = inf\n", "c.toml:2: comm.bucket_mb: must be positive, got +Inf"},
		{"[cluster]\nmemory_limit = inf\n", "c.toml:2: cluster.memory_limit: must be a positive number of bytes, got +Inf"},
	} {
		_, err := ParseCluster("c.toml", []byte(tc.src))
		if err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error\n%v\nwant\n%s", tc.src, err, tc.want)
		}
	}
	if c, err := ParseCluster("c.toml", []byte("[comm]\ntimeout = \"100ms\"\n")); err != nil || c.Timeout != MinTimeout {
		t.Errorf("100ms: %v, %v", c.Timeout, err)
	}
	c := DefaultCluster()
	for key, value := range map[string]string{"comm.timeout": "1ns", "cluster.weights": "1,inf"} {
		if err := c.Set(key, value); err == nil {
			t.Errorf("Set(%s, %s) accepted", key, value)
		}
	}
}
